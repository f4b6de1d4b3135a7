"""Task loaders on the real release files and on malformed input."""

import json

import numpy as np
import pytest

from depthtraj.tasks import TaskError, load_task, render_label_prompt


def test_arc_shipped_sample(arc_sample):
    # the first 21 questions of the real test split, with 3-, 4- and 5-choice and numeric labels
    qs = load_task("arc_challenge", arc_sample)
    assert len(qs) == 21 and {len(q.choices) for q in qs} == {3, 4, 5}
    numeric = [q for q in qs if q.choice_labels[0] == "1"]
    assert numeric and all(0 <= q.answer < len(q.choices) for q in numeric)
    assert qs[0].id == "Mercury_7175875" and qs[0].answer == 2  # answerKey "C"


def test_mmlu_shipped_sample(mmlu_sample):
    qs = load_task("mmlu", mmlu_sample)
    assert len(qs) == 21 and len({q.subject for q in qs}) == 3
    assert all(len(q.choices) == 4 and 0 <= q.answer < 4 for q in qs)


@pytest.mark.shared_data
def test_arc_real_file(shared_data):
    qs = load_task("arc_challenge", shared_data / "arc_challenge" / "test.jsonl")
    assert len(qs) == 1172  # shared/data/README.md
    ks = {len(q.choices) for q in qs}
    assert ks == {3, 4, 5}
    numeric = [q for q in qs if q.choice_labels[0] == "1"]
    assert numeric and all(0 <= q.answer < len(q.choices) for q in numeric)
    q = qs[0]
    assert q.id == "Mercury_7175875" and q.answer == 2  # answerKey "C"


@pytest.mark.shared_data
def test_mmlu_real_dir(shared_data):
    qs = load_task("mmlu", shared_data / "mmlu" / "test")
    assert len(qs) == 14042  # shared/data/README.md
    assert len({q.subject for q in qs}) == 57
    multiline = [q for q in qs if "\n" in q.stem]
    assert multiline  # quoted newlines survive
    assert all(len(q.choices) == 4 for q in qs)


def test_mmlu_single_file_and_limit(mmlu_sample):
    qs = load_task("mmlu", mmlu_sample / "world_religions_test.csv", limit=3)
    assert [q.id for q in qs] == ["world_religions/test/0", "world_religions/test/1", "world_religions/test/2"]


@pytest.mark.shared_data
def test_mmlu_staged_dev_file(shared_data):
    qs = load_task("mmlu", shared_data / "mmlu" / "dev" / "anatomy_dev.csv", limit=3)
    assert [q.id for q in qs] == ["anatomy/dev/0", "anatomy/dev/1", "anatomy/dev/2"]


def test_prompts_follow_lm_eval_conventions(arc_sample, mmlu_sample):
    arc = load_task("arc_challenge", arc_sample, limit=1)[0]
    text = render_label_prompt(arc)
    assert text.startswith("Question: An astronomer")
    assert "\nA. Planetary density will decrease.\n" in text and text.endswith("\nAnswer:")
    mm = load_task("mmlu", mmlu_sample / "high_school_physics_test.csv", limit=1)[0]
    text = render_label_prompt(mm)
    assert text.startswith("The following are multiple choice questions (with answers) about high school physics.\n\n")
    assert text.endswith(f"\nD. {mm.choices[3]}\nAnswer:") and f"\nA. {mm.choices[0]}\n" in text


def test_arrangement_order_in_prompt():
    from depthtraj.tasks import Question

    q = Question("x", "arc_challenge", "", "Stem?", ("a", "b", "c"), ("A", "B", "C"), 0)
    assert render_label_prompt(q, order=[2, 0, 1]).splitlines()[1:4] == ["A. c", "B. a", "C. b"]


@pytest.mark.parametrize(
    "line, match",
    [
        ("{not json", r"arc.jsonl:2: not valid JSON"),
        (json.dumps({"id": "x"}), r"arc.jsonl:2: not an AI2 ARC record"),
        (json.dumps({"id": "y", "question": {"stem": "s", "choices": [{"text": "a", "label": "A"}, {"text": "b", "label": "B"}]}, "answerKey": "E"}), "answerKey 'E'"),
    ],
)
def test_malformed_arc_line(tmp_path, line, match):
    good = json.dumps({"id": "ok", "question": {"stem": "s", "choices": [{"text": "a", "label": "A"}, {"text": "b", "label": "B"}]}, "answerKey": "A"})
    p = tmp_path / "arc.jsonl"
    p.write_text(good + "\n" + line + "\n")
    with pytest.raises(TaskError, match=match):
        load_task("arc_challenge", p)


def test_malformed_mmlu_row(tmp_path):
    p = tmp_path / "x_test.csv"
    p.write_text('q,a,b,c,d,A\n"q2",a,b,c,d\n')
    with pytest.raises(TaskError, match="row 2: expected 6 fields"):
        load_task("mmlu", p)
    p.write_text("q,a,b,c,d,F\n")
    with pytest.raises(TaskError, match="answer 'F'"):
        load_task("mmlu", p)


def test_unknown_task_and_missing_file(tmp_path):
    with pytest.raises(TaskError, match="unknown task 'hellaswag'"):
        load_task("hellaswag", tmp_path)
    with pytest.raises(TaskError, match="no such file"):
        load_task("arc_challenge", tmp_path / "nope.jsonl")


def test_arc_directory_and_binary_file(tmp_path):
    with pytest.raises(TaskError, match="is a directory"):
        load_task("arc_challenge", tmp_path)
    p = tmp_path / "x.jsonl"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TaskError, match="not UTF-8"):
        load_task("arc_challenge", p)


def test_arc_line_separator_inside_a_string(tmp_path):
    rec = {"id": "u", "question": {"stem": "a\u2028b", "choices": [{"text": "x", "label": "A"}, {"text": "y", "label": "B"}]}, "answerKey": "B"}
    p = tmp_path / "u.jsonl"
    p.write_text(json.dumps(rec, ensure_ascii=False) + "\n", encoding="utf-8")
    (q,) = load_task("arc_challenge", p)
    assert q.stem == "a\u2028b" and q.answer == 1


# -- answer-text prompts and arrangements ------------------------------------------------------
def test_text_prompts_follow_lm_eval_conventions(arc_sample, mmlu_sample):
    from depthtraj.tasks import continuation_text, render_text_prompt

    arc = load_task("arc_challenge", arc_sample, limit=1)[0]
    f2 = render_text_prompt(arc, options=False)  # lm-eval arc_challenge: "Question: {q}\nAnswer:"
    assert f2 == f"Question: {arc.stem.strip()}\nAnswer:"
    assert render_text_prompt(arc, [1, 0, 2, 3], options=True) == render_label_prompt(arc, [1, 0, 2, 3])
    assert continuation_text(arc, 2) == " " + arc.choices[2]
    mm = load_task("mmlu", mmlu_sample / "world_religions_test.csv", limit=1)[0]
    f2 = render_text_prompt(mm, options=False)
    assert f2.startswith("The following are questions (with answers) about world religions.\n\nQuestion: ")
    assert f2.endswith("\nAnswer:") and "\nA. " not in f2
    with pytest.raises(ValueError, match="options"):
        render_text_prompt(arc, [0, 1, 2, 3], options=False)


def test_paper_arrangements_for_four_candidates():
    from depthtraj.tasks import PAPER_K4, balanced_arrangements

    # pd:sec:observation prints them 1-based: (1,2,3,4), (2,4,1,3), (4,3,2,1), (3,1,4,2)
    assert (balanced_arrangements(4) + 1).tolist() == [list(r) for r in PAPER_K4]


@pytest.mark.parametrize("k", [2, 3, 4, 5, 6, 7, 8])
def test_balanced_arrangements_are_latin_squares(k):
    from depthtraj.tasks import balanced_arrangements

    b = balanced_arrangements(k).astype(int)
    assert b.shape == (k, k) and b[0].tolist() == list(range(k))
    assert (np.sort(b, axis=0) == np.arange(k)[:, None]).all()  # every candidate once per position
    assert (np.sort(b, axis=1) == np.arange(k)[None, :]).all()  # every arrangement a permutation
    pairs = {(int(r[i]), int(r[i + 1])) for r in b for i in range(k - 1)}
    if k % 2 == 0:  # Williams: every ordered pair adjacent exactly once
        assert len(pairs) == k * (k - 1)


def test_arrangement_orders_mix_k_with_unused_rows():
    from depthtraj.tasks import arrangement_orders, balanced_arrangements

    o = arrangement_orders([3, 4, 5], 4)
    assert o.shape == (3, 5, 5) and o.dtype == np.int8
    assert (o[0, :3, :3] == balanced_arrangements(3)).all() and (o[0, 3:] == -1).all() and (o[0, :, 3:] == -1).all()
    assert (o[1, :4, :4] == balanced_arrangements(4)).all() and (o[1, 4] == -1).all()
    assert (o[2] == balanced_arrangements(5)).all()
    one = arrangement_orders([3, 5], 1)
    assert one.tolist() == [[[0, 1, 2, -1, -1]], [[0, 1, 2, 3, 4]]]
    with pytest.raises(ValueError, match="1 .* or 4"):
        arrangement_orders([4], 2)
    with pytest.raises(ValueError, match="at least 2"):
        balanced_arrangements(1)
