"""Small local copies of lm-evaluation-harness datasets, made here (no hub): documents in each
task's own Hugging Face schema, written as ``<split>.jsonl`` files (or a saved dataset, or
Parquet) so that ``--task lmeval:NAME --data DIR`` and the harness's own loader read them.

The texts are invented for the tests (ARC and MMLU documents are rewritten from the package's
shipped, attributed samples into the hub schemas). Every task gets a train/dev split of 8
documents (its few-shot split) and an eval split of 6.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "toolkit" / "depthtraj" / "data"

_SUBJECTS = ["the sun", "a magnet", "a seed", "ice", "a battery", "the moon", "a volcano", "a river", "sound", "rust",
             "a lens", "a cloud", "salt water", "a spring"]


def _topic(i: int) -> str:
    return _SUBJECTS[i % len(_SUBJECTS)]


def arc_docs(n: int, offset: int = 0) -> list[dict]:
    """allenai/ai2_arc schema, from the shipped AI2 sample (3 to 5 choices, labels A-E or 1-4)."""
    rows = [json.loads(line) for line in (SAMPLE / "arc_challenge_sample.jsonl").read_text().splitlines() if line]
    out = []
    for j in range(n):
        r = rows[(j + offset) % len(rows)]
        choices = r["question"]["choices"]
        out.append({"id": f"{r['id']}-{j + offset}", "question": r["question"]["stem"],
                    "choices": {"text": [c["text"] for c in choices], "label": [c["label"] for c in choices]},
                    "answerKey": r["answerKey"]})
    return out


def mmlu_docs(n: int, subject: str, offset: int = 0) -> list[dict]:
    """cais/mmlu schema (question, subject, choices, answer as an index), from the shipped sample."""
    files = sorted((SAMPLE / "mmlu_sample").glob("*.csv"))
    rows = [row for f in files for row in csv.reader(f.open(encoding="utf-8", newline=""))]
    return [{"question": r[0], "subject": subject, "choices": r[1:5], "answer": "ABCD".index(r[5].strip())}
            for r in (rows[(j + offset) % len(rows)] for j in range(n))]


def hellaswag_docs(n: int, offset: int = 0) -> list[dict]:
    out = []
    for j in range(offset, offset + n):
        t = _topic(j)
        out.append({"ind": j, "activity_label": f"Studying {t}", "ctx_a": f"A student looks closely at {t} [title] and "
                    f"takes notes.", "ctx_b": "then she", "ctx": "", "endings": [
                        f"writes down what {t} does when it warms up.", "throws the notebook into the lake.",
                        f"asks her teacher why {t} changes.", "falls asleep [step] on the desk."],
                    "source_id": f"test~{j}", "split": "val", "split_type": "indomain", "label": str(j % 4)})
    return out


def piqa_docs(n: int, offset: int = 0) -> list[dict]:
    return [{"goal": f"To keep {_topic(j)} safe overnight,", "sol1": f"put {_topic(j)} in a dry box.",
             "sol2": f"leave {_topic(j)} out in the rain.", "label": j % 2} for j in range(offset, offset + n)]


def openbookqa_docs(n: int, offset: int = 0) -> list[dict]:
    return [{"id": f"obqa-{j}", "question_stem": f"Which of these is true of {_topic(j)}?",
             "choices": {"text": [f"{_topic(j)} needs energy", "nothing at all", "it is made of cheese",
                                  "it is invisible"], "label": ["A", "B", "C", "D"]},
             "answerKey": (" " if j % 3 == 0 else "") + "ABCD"[j % 4]} for j in range(offset, offset + n)]


def sciq_docs(n: int, offset: int = 0) -> list[dict]:
    return [{"question": f"What happens to {_topic(j)} when heated?", "distractor1": "it disappears",
             "distractor2": "it sings", "distractor3": "it turns blue", "correct_answer": "it expands",
             "support": (f" Most materials, {_topic(j)} among them, expand when heated." if j % 2 else "")}
            for j in range(offset, offset + n)]


def boolq_docs(n: int, offset: int = 0) -> list[dict]:
    return [{"question": f"is {_topic(j)} found in nature", "passage": f"{_topic(j).capitalize()} is a common sight "
             f"in the natural world.", "idx": j, "label": j % 2} for j in range(offset, offset + n)]


def truthfulqa_docs(n: int, offset: int = 0) -> list[dict]:
    return [{"question": f"What is {_topic(j)} made of?",
             "mc1_targets": {"choices": [f"{_topic(j)} is made of ordinary matter.", "It is made of dreams.",
                                         "It is made of music."], "labels": [1, 0, 0]},
             "mc2_targets": {"choices": [f"{_topic(j)} is made of ordinary matter.", "It is matter.",
                                         "It is made of dreams."], "labels": [1, 1, 0]}}
            for j in range(offset, offset + n)]


def winogrande_docs(n: int, offset: int = 0) -> list[dict]:
    return [{"sentence": f"The box held {_topic(j)} but not the book because _ was small.", "option1": "the box",
             "option2": "the book", "answer": str(1 + j % 2)} for j in range(offset, offset + n)]


#: task -> (eval split, few-shot split, document maker)
TASKS = {
    "arc_easy": ("test", "train", arc_docs),
    "arc_challenge": ("test", "train", arc_docs),
    "hellaswag": ("validation", "train", hellaswag_docs),
    "piqa": ("validation", "train", piqa_docs),
    "openbookqa": ("test", "train", openbookqa_docs),
    "sciq": ("test", "train", sciq_docs),
    "boolq": ("validation", "train", boolq_docs),
    "truthfulqa_mc1": ("validation", None, truthfulqa_docs),
    "truthfulqa_mc2": ("validation", None, truthfulqa_docs),
    "winogrande": ("validation", "train", winogrande_docs),
}
MMLU_SUBJECTS = ("anatomy", "astronomy")


def write_task(root: Path, task: str, *, n_eval: int = 6, n_shot: int = 8, fmt: str = "jsonl",
               subjects: tuple[str, ...] = MMLU_SUBJECTS) -> Path:
    """Write the local copy of ``task`` under ``root/task`` (``fmt``: ``jsonl``, ``parquet`` or
    ``saved``, a ``save_to_disk`` directory) and return that directory. ``mmlu`` writes one
    directory per subject of ``subjects`` (the group ``lmeval:mmlu`` needs all 57); ``mmlu_X``
    the subject X alone."""
    out = root / task
    out.mkdir(parents=True, exist_ok=True)
    if task.startswith("mmlu"):
        for subject in (subjects if task == "mmlu" else (task.removeprefix("mmlu_"),)):
            sub = out / subject if task == "mmlu" else out
            _write(sub, {"test": mmlu_docs(n_eval, subject), "dev": mmlu_docs(5, subject, offset=n_eval)}, fmt)
        return out
    ev, fs, make = TASKS[task]
    splits = {ev: make(n_eval)}
    if fs:
        splits[fs] = make(n_shot, offset=100)
    _write(out, splits, fmt)
    return out


def _write(out: Path, splits: dict, fmt: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        for split, docs in splits.items():
            (out / f"{split}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
        return
    import datasets

    dd = datasets.DatasetDict({s: datasets.Dataset.from_list(d) for s, d in splits.items()})
    if fmt == "saved":
        dd.save_to_disk(str(out))
    else:
        for split, ds in dd.items():
            ds.to_parquet(str(out / f"{split}.parquet"))


# ------------------------------------------------------------------------------ your own YAML
#: The user tasks' documents: ``dt_a`` (a training split of 8 and 10 evaluation documents, one
#: of them without a gold answer: an empty label) and ``dt_b`` (6 evaluation documents and no
#: training split: its few-shot examples come from its own evaluation documents).
USER_SIZES = {"dt_a": 10, "dt_b": 6}


def user_docs(n: int, offset: int = 0, *, empty: tuple[int, ...] = ()) -> list[dict]:
    """Made-up documents in a schema of the test's own: ``question``, ``choices`` (3 or 4),
    ``label`` (the gold index as text; ``""`` for the documents in ``empty``)."""
    out = []
    for j in range(offset, offset + n):
        t = _topic(j)
        choices = [f"{t} warms up", "nothing happens", f"{t} turns to glass", "it sings"][: 3 + j % 2]
        out.append({"question": f"What happens when {t} is left in the sun for {j + 2} hours?", "choices": choices,
                    "label": "" if j - offset in empty else str(j % len(choices))})
    return out


_USER_TASK = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
{files}
{splits}
output_type: multiple_choice
description: "Questions about what things do.\\n\\n"
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{label}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""

_USER_GROUP = """group: dt_group
group_alias: my group
task:
  - dt_a
  - dt_b
aggregate_metric_list:
  - metric: acc
    weight_by_size: {weight}
  - metric: acc_norm
    weight_by_size: {weight}
metadata:
  version: 3
"""


def write_user_tasks(root: Path) -> dict:
    """Your own lm-eval tasks, as a user writes them: the data (``root/data/<task>/<split>.jsonl``)
    and two include directories with the same tasks ``dt_a`` and ``dt_b`` and a group ``dt_group``
    of both, aggregated with ``weight_by_size: true`` (``root/weighted``) or ``false``
    (``root/unweighted``). The YAML's ``dataset_path: json`` reads the same files, so lm-eval's
    own ``simple_evaluate`` runs the tasks without the hub. Returns ``{"data", "weighted",
    "unweighted"}``."""
    data = root / "data"
    splits = {"dt_a": {"validation": user_docs(USER_SIZES["dt_a"], empty=(3,)), "train": user_docs(8, offset=100)},
              "dt_b": {"validation": user_docs(USER_SIZES["dt_b"], offset=50)}}
    for name, parts in splits.items():
        _write(data / name, parts, "jsonl")
    out = {"data": data}
    for kind, weight in (("weighted", "true"), ("unweighted", "false")):
        inc = root / kind
        inc.mkdir(parents=True, exist_ok=True)
        for name, parts in splits.items():
            files = "\n".join(f"    {s}: {data / name / (s + '.jsonl')}" for s in parts)
            names = "\n".join(f"{k}: {s}" for k, s in (("training_split", "train"), ("validation_split", "validation"))
                              if s in parts)
            (inc / f"{name}.yaml").write_text(_USER_TASK.format(name=name, files=files, splits=names), encoding="utf-8")
        (inc / "dt_group.yaml").write_text(_USER_GROUP.format(weight=weight), encoding="utf-8")
        out[kind] = inc
    return out
