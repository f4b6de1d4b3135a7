"""MMLU from the original header-less CSV release.

Files ``<subject>_<split>.csv`` with rows ``question, A, B, C, D, answer`` (quoted fields may
contain newlines). Prompts follow lm-eval: F1/F3 start with ``The following are multiple choice
questions (with answers) about {subject}.`` and show the bare question; F2 (lm-eval's MMLU
continuation tasks) starts with ``The following are questions (with answers) about {subject}.``
"""

from __future__ import annotations

import csv
from pathlib import Path

from .base import Question, Task, TaskError, need_path

__all__ = ["MMLU", "load_mmlu", "mmlu_subject"]


def _mmlu_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(path.glob("*.csv"))
        if not files:
            raise TaskError(f"{path}: no MMLU *.csv files")
        return files
    return [path]


def mmlu_subject(path: Path) -> tuple[str, str]:
    """``(subject, split)`` from an MMLU file name ``<subject>_<split>.csv``."""
    stem = path.stem
    subject, _, split = stem.rpartition("_")
    if not subject:
        return stem, ""
    return subject, split


def load_mmlu(path: str | Path, *, task: str = "mmlu") -> list[Question]:
    """Read MMLU questions from one header-less CSV file or a directory of them.

    Question ids are ``<subject>/<split>/<row>`` (0-based row within the file).

    Raises
    ------
    TaskError
        naming ``file:row`` for a row without exactly 6 fields or whose answer is not A-D.
    """
    path = need_path(Path(path))
    out: list[Question] = []
    for f in _mmlu_files(path):
        subject, split = mmlu_subject(f)
        try:
            with f.open(encoding="utf-8", newline="") as fh:
                rows = list(csv.reader(fh))
        except (UnicodeDecodeError, csv.Error) as exc:
            raise TaskError(f"{f}: not a readable CSV file ({exc})") from None
        for i, row in enumerate(rows):
            where = f"{f}:row {i + 1}"
            if len(row) != 6:
                raise TaskError(f"{where}: expected 6 fields (question, A, B, C, D, answer), got {len(row)}")
            answer = row[5].strip()
            if answer not in ("A", "B", "C", "D"):
                raise TaskError(f"{where}: answer {answer!r} is not one of A, B, C, D")
            out.append(
                Question(
                    id=f"{subject}/{split}/{i}",
                    task=task,
                    subject=subject,
                    stem=row[0],
                    choices=tuple(row[1:5]),
                    choice_labels=("A", "B", "C", "D"),
                    answer="ABCD".index(answer),
                )
            )
    if not out:
        raise TaskError(f"{path}: no questions")
    return out




class MMLU(Task):
    """MMLU, header-less CSV files (``depthtraj.tasks`` entry point ``mmlu``)."""

    name = "mmlu"
    source = "hendrycks/test MMLU (header-less CSV release)"
    license = "MIT"
    default_split = "test"
    data_help = "an MMLU CSV file <subject>_<split>.csv, or a directory of them"
    question_prefix = ""

    def description(self, q: Question, *, options: bool) -> str:
        """MMLU's subject line before the question, followed by a blank line (the subject's
        underscores as spaces): "The following are multiple choice questions (with answers) about
        {subject}." with ``options``, the same without "multiple choice" otherwise."""
        subject = q.subject.replace("_", " ")
        if options:
            return f"The following are multiple choice questions (with answers) about {subject}.\n\n"
        return f"The following are questions (with answers) about {subject}.\n\n"

    def load(self, path: str | Path) -> list[Question]:
        """The questions of an MMLU CSV file or a directory of them (:func:`load_mmlu`: ids
        ``<subject>/<split>/<row>``; raises :class:`TaskError` naming ``file:row`` for a malformed
        row)."""
        return load_mmlu(path, task=self.name)
