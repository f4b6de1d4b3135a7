"""ARC-Challenge (and ARC-Easy) from the original AI2 JSON Lines release.

One question per line, ``{"id", "question": {"stem", "choices": [{"text", "label"}]},
"answerKey"}``; labels are ``A``-``E`` or ``1``-``5``, 3 to 5 choices; ``answerKey`` is mapped by
label, not position. Prompts are the project's templates with ``Question: `` (lm-eval's
``arc_challenge``: ``Question: {stem}\nAnswer:``, continuation ``' ' + text``).
"""

from __future__ import annotations

import json
from pathlib import Path

from .base import LETTERS, Question, Task, TaskError, need_path

__all__ = ["ARCChallenge", "load_arc"]


def load_arc(path: str | Path, *, task: str = "arc_challenge") -> list[Question]:
    """Read ARC questions from an AI2 JSON Lines file.

    Raises
    ------
    TaskError
        naming ``file:line`` for a line that is not a JSON object of the AI2 layout, has
        fewer than 2 choices, duplicate labels, or an ``answerKey`` that is not a choice label.
    """
    path = need_path(Path(path))
    if path.is_dir():
        raise TaskError(f"{path}: is a directory; arc_challenge needs a JSON Lines file")
    out: list[Question] = []
    seen: set[str] = set()
    try:
        lines = path.read_text(encoding="utf-8").split("\n")  # not splitlines: U+2028 may sit in a JSON string
    except UnicodeDecodeError as exc:
        raise TaskError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            rec = json.loads(line)
            qid = str(rec["id"])
            stem = rec["question"]["stem"]
            choices = rec["question"]["choices"]
            texts = tuple(str(c["text"]) for c in choices)
            labels = tuple(str(c["label"]) for c in choices)
            key = str(rec["answerKey"])
        except json.JSONDecodeError as exc:
            raise TaskError(f"{where}: not valid JSON ({exc.msg})") from None
        except (KeyError, TypeError) as exc:
            raise TaskError(f"{where}: not an AI2 ARC record (missing {exc})") from None
        if not isinstance(stem, str) or len(texts) < 2:
            raise TaskError(f"{where}: a question needs a text stem and at least 2 choices")
        if len(texts) > len(LETTERS):
            raise TaskError(f"{where}: {len(texts)} choices; at most {len(LETTERS)} are supported")
        if len(set(labels)) != len(labels):
            raise TaskError(f"{where}: duplicate choice labels {list(labels)}")
        if key not in labels:
            raise TaskError(f"{where}: answerKey {key!r} is not one of the labels {list(labels)}")
        if qid in seen:
            raise TaskError(f"{where}: duplicate id {qid!r}")
        seen.add(qid)
        out.append(Question(qid, task, "", stem, texts, labels, labels.index(key)))
    if not out:
        raise TaskError(f"{path}: no questions")
    return out



class ARCChallenge(Task):
    """ARC-Challenge, AI2 JSON Lines (``depthtraj.tasks`` entry point ``arc_challenge``)."""

    name = "arc_challenge"
    source = "allenai/ai2_arc ARC-Challenge (AI2 JSON Lines release)"
    license = "CC-BY-SA-4.0"
    default_split = "test"
    data_help = "an AI2 ARC JSON Lines file (e.g. ARC-Challenge-Test.jsonl)"

    def load(self, path: str | Path) -> list[Question]:
        """The questions of an AI2 ARC JSON Lines file, in file order (:func:`load_arc`, which
        raises :class:`TaskError` naming ``file:line`` for a malformed line)."""
        return load_arc(path, task=self.name)
