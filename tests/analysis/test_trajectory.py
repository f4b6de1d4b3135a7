"""One question's trajectory (``depthtraj.analysis.trajectory``, ``depthtraj question``): held to a
slow reference written from the definitions (plain loops over depths and candidates) on random
stores with every awkward feature of the layout (hypothesis), and to the §4 correctness kernel
(``pd:app:tab:transitions``) that the analyses use; hand-made cases (a tie, flips, an unlabelled
question, K = 3 under K_max = 5, unused arrangements); the command (table, JSON, PNG, one-line
errors); and the examples rule (the smallest bootstrap keys per class), stable across chunkings."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from depthtraj.analysis.trajectory import (
    QuestionTrajectory,
    draw_examples,
    draw_trajectory,
    question_trajectory,
    render_trajectory,
    trajectory_examples,
)
from depthtraj.cli import app
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from .stores import rechunk
from .strategies import cases

CLASSES = ("WC", "CW", "WWp", "CC", "WW")


# ---------------------------------------------------------------------------------------------- the reference
def reference(s, K, gold, depths, start, T):
    """From the definitions, one (question, arm, arrangement): ``s[depth][candidate]`` (padding
    included), K real candidates, ``gold`` (y*; outside 0..K-1 unknown). Winner: the first
    candidate whose score is strictly above every earlier one (the first maximum), -1 when a real
    score is not finite; margin: best minus second best; flips: depths whose valid winner differs
    from the previous depth's valid winner; the class of (y_start, y_T) as the paper's table
    defines it."""
    winner, tied, margin = [], [], []
    for row in s:
        vals = [float(row[k]) for k in range(K)]
        if not all(np.isfinite(v) for v in vals):
            winner.append(-1), tied.append(False), margin.append(float("nan"))
            continue
        best = 0
        for k in range(1, K):
            if vals[k] > vals[best]:
                best = k
        n_max = sum(1 for v in vals if v == vals[best])
        second = max(v for k, v in enumerate(vals) if k != best)
        winner.append(best), tied.append(n_max > 1), margin.append(vals[best] - second)
    flips = []
    for j in range(1, len(depths)):
        if winner[j] >= 0 and winner[j - 1] >= 0 and winner[j] != winner[j - 1]:
            flips.append(int(depths[j]))
    g = int(gold) if 0 <= int(gold) < K else None
    correct = None if g is None else [w == g for w in winner]
    y0, yT = winner[list(depths).index(start)], winner[list(depths).index(T)]
    if g is None or y0 < 0 or yT < 0:
        cls = None
    elif y0 != g and yT == g:
        cls = "WC"
    elif y0 == g and yT != g:
        cls = "CW"
    elif y0 != g and yT != g and y0 != yT:
        cls = "WWp"
    elif y0 == g and yT == g:
        cls = "CC"
    else:
        assert y0 == yT != g
        cls = "WW"
    return {"winner": winner, "tied": tied, "margin": margin, "flips": flips, "correct": correct, "class": cls}


def assert_matches(traj: QuestionTrajectory, ref: dict, s_real) -> None:
    np.testing.assert_array_equal(traj.scores, np.asarray(s_real, dtype=np.float64))
    assert traj.winner.tolist() == ref["winner"]
    assert traj.tied.tolist() == ref["tied"]
    np.testing.assert_array_equal(traj.margin, np.asarray(ref["margin"]))
    assert list(traj.flips) == ref["flips"]
    assert (None if traj.correct is None else traj.correct.tolist()) == ref["correct"]
    assert traj.transition == ref["class"]


# ---------------------------------------------------------------------------------------------- random stores
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), data=st.data())
def test_trajectory_equals_the_reference_on_random_stores(case, data):
    ds = case.dataset()
    n, _, _, A, P = case.score.shape
    labels = np.array(data.draw(st.lists(st.integers(-1, 5), min_size=n, max_size=n)), dtype=np.int8)
    ds = ds.assign_coords(label=("question", labels))
    recorded = list(case.depths)
    start = data.draw(st.sampled_from([t for t in recorded if t <= case.T]))
    for i in range(n):
        used = A if case.n_arr is None else int(case.n_arr[i])
        for p in range(P):
            for a in range(used):
                traj = question_trajectory(ds, f"q{i}", precision=f"arm{p}", arrangement=a, start=start,
                                           endpoint=case.T)
                s = case.score[i, :, :, a, p]
                K = int(case.K[i])
                ref = reference(s, K, labels[i], recorded, start, case.T)
                assert_matches(traj, ref, s[:, :K])
                assert traj.K == K and traj.index == i and traj.n_arrangements == used
                assert traj.start == start and traj.endpoint == case.T
            if used < A:  # an arrangement the question leaves unused is refused in one line
                with pytest.raises(ValueError, match=f"does not use arrangement {used}") as exc:
                    question_trajectory(ds, i, precision=f"arm{p}", arrangement=used)
                assert "\n" not in str(exc.value)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), data=st.data())
def test_classes_are_the_correctness_kernels_transitions(case, data):
    """The class of every used arrangement, averaged with weight 1/A_i, is the §4 kernel's
    per-question transition row at t (``correctness_summary``, the numbers of the table)."""
    from depthtraj.analysis.dynamics.correctness import correctness_summary, winners

    ds = case.dataset()
    n, _, _, A, P = case.score.shape
    labels = np.array(data.draw(st.lists(st.integers(-1, 4), min_size=n, max_size=n)), dtype=np.int8)
    ds = ds.assign_coords(label=("question", labels))
    start = data.draw(st.sampled_from([t for t in case.depths if t <= case.T]))
    summ = correctness_summary(ds, depths=[start], grid=[], endpoint=case.T).compute()
    w_all = winners(ds).compute()
    arms = [f"arm{p}" for p in range(P)]
    for i in range(n):
        used = A if case.n_arr is None else int(case.n_arr[i])
        for p, arm in enumerate(arms):
            trajs = [question_trajectory(ds, i, precision=arm, arrangement=a, start=start, endpoint=case.T)
                     for a in range(used)]
            for a, tr in enumerate(trajs):  # the winners are the analyses' winners
                assert tr.winner.tolist() == w_all.isel(question=i, arrangement=a, precision=p).values.tolist()
            row = summ.isel(question=i, precision=p).sel(depth=start)
            if not np.isfinite(row["WC"].item()):  # no gold or incomplete: no class anywhere
                assert any(tr.transition is None for tr in trajs)
                continue
            mean = {c: sum(tr.transition == c for tr in trajs) / used for c in CLASSES}
            for c in CLASSES:
                assert mean[c] == pytest.approx(row[c].item()), (i, arm, c)


# ---------------------------------------------------------------------------------------------- hand-made
LONG = ("the mitochondrial inner membrane, whose electron transport chain pumps protons into the "
        "intermembrane space")


def _write(path, questions, scores, depths, *, arrangements, complete=True, chunk_size=8):
    """A label store written by the public writer from hand-made arrays. ``questions``: dicts with
    id, task, label, texts, labels, order ([arrangement][K] identity rows; missing rows unused);
    ``scores``: [question, depth, K_max, arrangement, 1] (NaN where not written)."""
    from depthtraj.store import QuestionSet, TrajectoryWriter
    from depthtraj.testing import synthetic_attrs

    kmax = max(len(q["texts"]) for q in questions)
    order = np.full((len(questions), arrangements, kmax), -1, dtype=np.int8)
    for i, q in enumerate(questions):
        for a, row in enumerate(q["order"]):
            order[i, a, : len(row)] = row
    qs = QuestionSet(
        id=[q["id"] for q in questions], task=[q["task"] for q in questions],
        subject=[q.get("subject", "") for q in questions], label=[q["label"] for q in questions],
        candidate_text=[q["texts"] for q in questions], candidate_label=[q["labels"] for q in questions],
        arrangement_order=order,
    ).with_seeds(0)
    attrs = synthetic_attrs(endpoint=int(depths[-1]), tasks=sorted({q["task"] for q in questions}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = TrajectoryWriter.create(path, attrs, qs, depths=depths, chunk_size=chunk_size, overwrite=True)
        regions = w.chunks() if complete else w.chunks()[:-1]
        for region in regions:
            w.write(region, score=np.asarray(scores[region], dtype=np.float32))
        if complete:
            w.finalize()
    return str(path)


def _latin(K, A):
    return [[(k + a) % K for k in range(K)] for a in range(A)]


@pytest.fixture(scope="module")
def hand_store(tmp_path_factory):
    """Four questions, depths 1..6, K_max = 5, five arrangement slots:

    * ``tie`` (K = 4, gold 1, 4 arrangements): at t = 1 candidates 1 and 2 tie for the top (the
      winner is 1, the lowest), then 2 leads (t = 2..4), then 1 again: flips at t = 2 and 5,
      C→C (1 → 1);
    * ``flip`` (K = 4, gold 3): winner 0, 0, 3, 3, 2, 3 → flips at 3, 5, 6; W→C;
    * ``nolabel`` (K = 4, label −1): no gold, no class;
    * ``k3`` (K = 3 of K_max = 5, gold 0, 3 arrangements; arrangements 3, 4 unused), a long text:
      winner 2 throughout: W=W;
    * ``k5`` (K = 5, gold 4, 5 arrangements): winner 4 at t = 1, then 0: C→W.
    """
    depths = np.arange(1, 7)
    T, C, A = len(depths), 5, 5
    s = np.full((5, T, C, A, 1), np.nan)

    def fill(i, K, rows, arrs):
        for a in range(arrs):
            for t, row in enumerate(rows):
                assert len(row) == K
                s[i, t, :K, a, 0] = np.asarray(row) - 0.25 * a  # arrangement a: shifted, same winners
    fill(0, 4, [[-3, -1, -1, -4], [-3, -2, -1, -4], [-3, -2, -1.5, -4], [-3, -2, -0.5, -4],
                [-3, -0.5, -1, -4], [-3, -0.2, -1, -4]], 4)
    fill(1, 4, [[-1, -2, -3, -4], [-1, -2, -3, -1.5], [-2, -2, -3, -1], [-2, -3, -3, -1],
                [-2, -3, -0.5, -1], [-2, -3, -2, -0.1]], 1)
    fill(2, 4, [[-1, -2, -3, -4]] * 6, 1)
    fill(3, 3, [[-3, -2, -1], [-3, -2, -0.5], [-2, -2.5, -0.5], [-2, -2.5, -1], [-2, -3, -1], [-2, -3, -0.1]], 3)
    fill(4, 5, [[-2, -3, -3, -3, -1]] + [[-1, -3, -3, -3, -2]] * 5, 5)
    questions = [
        {"id": "tie", "task": "arc_challenge", "label": 1, "texts": ["red", "blue", "green", "yellow"],
         "labels": list("ABCD"), "order": _latin(4, 4)},
        {"id": "flip", "task": "arc_challenge", "label": 3, "texts": ["one", "two", "three", "four"],
         "labels": list("ABCD"), "order": _latin(4, 1)},
        {"id": "nolabel", "task": "mmlu", "subject": "anatomy", "label": -1, "texts": ["w", "x", "y", "z"],
         "labels": list("ABCD"), "order": _latin(4, 1)},
        {"id": "k3", "task": "mmlu", "subject": "biology", "label": 0, "texts": [LONG, "the nucleus", "ribosomes"],
         "labels": ["1", "2", "3"], "order": _latin(3, 3)},
        {"id": "k5", "task": "mmlu", "label": 4, "texts": ["a", "b", "c", "d", "e"], "labels": list("ABCDE"),
         "order": _latin(5, 5)},
    ]
    path = tmp_path_factory.mktemp("trajectory") / "hand.zarr"
    return _write(path, questions, s, depths, arrangements=A)


def _open(path):
    from depthtraj.analysis.core.data import open_admitted

    return open_admitted(path)[0]


def test_a_tie_goes_to_the_lowest_identity_and_has_margin_zero(hand_store):
    tr = question_trajectory(_open(hand_store), "tie")
    assert tr.winner.tolist() == [1, 2, 2, 2, 1, 1]
    assert tr.tied.tolist() == [True, False, False, False, False, False]
    assert tr.margin[0] == 0.0 and tr.margin[1] == pytest.approx(1.0)
    assert tr.flips == (2, 5) and tr.transition == "CC"
    assert tr.correct.tolist() == [True, False, False, False, True, True]
    assert tr.gold == 1 and tr.K == 4 and tr.n_arrangements == 4
    # arrangement 2: what was displayed, and the same winners (the scores are shifted)
    tr2 = question_trajectory(_open(hand_store), "tie", arrangement=2)
    assert tr2.displayed == (2, 3, 0, 1) and tr2.winner.tolist() == tr.winner.tolist()
    np.testing.assert_allclose(tr2.scores, tr.scores - 0.5)


def test_flips_and_the_summary_line(hand_store):
    tr = question_trajectory(_open(hand_store), "flip")
    assert tr.winner.tolist() == [0, 0, 3, 3, 2, 3]
    assert tr.tied.tolist() == [False, False, False, False, False, False]  # t=3: -2,-2 tie below the top
    assert tr.flips == (3, 5, 6) and tr.transition == "WC"
    assert tr.summary_line().startswith("winner changes at t = 3, 5, 6; ends correct (W→C")
    assert tr.margin.tolist() == pytest.approx([1.0, 0.5, 1.0, 1.0, 0.5, 1.9])


def test_an_unlabelled_question_has_no_gold_and_no_class(hand_store):
    tr = question_trajectory(_open(hand_store), "nolabel")
    assert tr.gold is None and tr.correct is None and tr.transition is None
    assert tr.flips == () and "no gold" in tr.summary_line()
    doc = tr.to_json()
    assert doc["gold"] is None and doc["correct"] is None and doc["transition"] is None
    assert doc["subject"] == "anatomy"


def test_k3_under_k_max_5_shows_its_three_candidates_only(hand_store):
    ds = _open(hand_store)
    tr = question_trajectory(ds, "k3", arrangement=1)
    assert tr.K == 3 and tr.scores.shape == (6, 3) and np.isfinite(tr.scores).all()
    assert tr.candidate_text == (LONG, "the nucleus", "ribosomes") and tr.candidate_label == ("1", "2", "3")
    assert tr.displayed == (1, 2, 0) and tr.n_arrangements == 3
    assert tr.winner.tolist() == [2] * 6 and tr.transition == "WW" and tr.defects == ()
    for a in (3, 4):  # unused by a K = 3 question (spec §4.3)
        with pytest.raises(ValueError, match=rf"does not use arrangement {a}: it uses arrangements 0\.\.2"):
            question_trajectory(ds, "k3", arrangement=a)
    assert question_trajectory(ds, "tie", arrangement=3).arrangement == 3  # a K = 4 question uses it


def test_ids_and_positions_and_both_openings_agree(hand_store):
    from depthtraj.store import open_store

    lazy, indexed = _open(hand_store), open_store(hand_store)
    for i, qid in enumerate(["tie", "flip", "nolabel", "k3", "k5"]):
        a, b, c = question_trajectory(lazy, qid), question_trajectory(lazy, i), question_trajectory(indexed, qid)
        assert a.to_json() == b.to_json() == c.to_json()


def test_bad_inputs_are_one_line_value_errors(hand_store):
    ds = _open(hand_store)
    bad = [
        ({"question": "fli"}, r"no question 'fli' among the store's 5 questions; did you mean 'flip'"),
        ({"question": 5}, r"question index 5 is out of range: the store has 5 questions"),
        ({"question": "tie", "precision": "fp32"}, r"precision arm 'fp32' is not in the store \(arms: bf16\)"),
        ({"question": "tie", "arrangement": 5}, r"arrangement 5 is out of range: the store has arrangements 0\.\.4"),
        ({"question": "flip", "arrangement": 1}, r"does not use arrangement 1"),
        ({"question": "tie", "start": 7}, r"start depth 7 is not recorded"),
        ({"question": "tie", "start": 5, "endpoint": 3}, r"start depth 5 is after the endpoint 3"),
    ]
    for kw, msg in bad:
        q = kw.pop("question")
        with pytest.raises(ValueError, match=msg) as exc:
            question_trajectory(ds, q, **kw)
        assert "\n" not in str(exc.value)


def test_render_marks_winner_gold_and_flips(hand_store):
    text = render_trajectory(question_trajectory(_open(hand_store), "tie"))
    lines = text.splitlines()
    assert lines[0] == "question tie · arc_challenge · K=4 · gold B (identity 1)"
    assert "question text: not stored" in text and "  1  B  blue  ← gold" in text
    head = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("t "))
    assert lines[head].split() == ["t", "A", "B✓", "C", "D", "winner", "margin", "correct"]
    assert lines[head + 1].split() == ["1", "-3.000", "-1.000*", "-1.000=", "-4.000", "B", "0.000", "✓"]
    assert lines[head + 2].endswith("← changes") and lines[head + 5].endswith("← changes")
    assert lines[-1].startswith("winner changes at t = 2, 5; ends correct (C→C")


# ---------------------------------------------------------------------------------------------- figures
def test_draw_trajectory_writes_a_png_with_metadata(hand_store, tmp_path):
    from PIL import Image

    tr = question_trajectory(_open(hand_store), "k3")
    out = draw_trajectory(tr, tmp_path / "k3.png")
    assert out == tmp_path / "k3.png"
    im = Image.open(out)
    assert im.format == "PNG" and im.text["depthtraj:panels"] == "1" and im.text["depthtraj:label"] == ""
    draw_trajectory(tr, out)  # replaces the file, never k3~2.png
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k3.png"]


def test_draw_examples_one_panel_per_example(hand_store, tmp_path):
    from PIL import Image

    ex = trajectory_examples(_open(hand_store), per_class=2)
    out = draw_examples(ex, tmp_path / "ex.png")
    assert int(Image.open(out).text["depthtraj:panels"]) == sum(len(v) for v in ex.classes.values()) == 4
    out2 = draw_examples([question_trajectory(_open(hand_store), q) for q in ("tie", "nolabel")], tmp_path / "two.png")
    assert Image.open(out2).text["depthtraj:panels"] == "2"
    with pytest.raises(ValueError, match="no trajectory"):
        draw_examples([], tmp_path / "none.png")


# ---------------------------------------------------------------------------------------------- examples
def test_examples_on_the_hand_store(hand_store):
    ex = trajectory_examples(_open(hand_store), per_class=2)
    assert {k: [t.question for t in v] for k, v in ex.classes.items()} == \
        {"WC": ["flip"], "CW": ["k5"], "WWp": [], "CC": ["tie"], "WW": ["k3"]}
    assert ex.counts == {"WC": 1, "CW": 1, "WWp": 0, "CC": 1, "WW": 1}
    assert (ex.n_questions, ex.n_unlabelled, ex.n_invalid) == (5, 1, 0)
    assert "smallest bootstrap key" in ex.rule and "\n" not in ex.rule
    only = trajectory_examples(_open(hand_store), task="mmlu")
    assert only.counts == {"WC": 0, "CW": 1, "WWp": 0, "CC": 0, "WW": 1} and only.n_questions == 3
    at3 = trajectory_examples(_open(hand_store), arrangement=3)  # k3, flip and nolabel do not use it
    assert at3.counts["CC"] == 1 and at3.counts["CW"] == 1 and at3.n_invalid == 2 and at3.n_unlabelled == 1
    assert trajectory_examples(_open(hand_store), arrangement=4).counts["CW"] == 1  # only k5 uses it
    with pytest.raises(ValueError, match="no question of task 'hellaswag'"):
        trajectory_examples(_open(hand_store), task="hellaswag")
    with pytest.raises(ValueError, match="per_class must be an integer ≥ 1"):
        trajectory_examples(_open(hand_store), per_class=0)


@pytest.fixture(scope="module")
def random_store(tmp_path_factory):
    from depthtraj.testing import synthetic_store

    path = tmp_path_factory.mktemp("trajectory") / "random.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return synthetic_store(path, 150, endpoint=8, k_mix={3: 1, 4: 1, 5: 1}, arrangements=2,
                               precision=("bf16", "fp32"), tie_rate=0.05, chunk_size=32, jitter=1.0)


def _picks(ex):
    return {k: [t.question for t in v] for k, v in ex.classes.items()}


def test_examples_are_the_smallest_keys_of_each_class(random_store):
    """The rule, checked from scratch: every question's class from the reference, then the
    per_class smallest bootstrap keys in each class; counts equal the §4 table's."""
    from depthtraj.analysis.core.bootstrap import question_keys
    from depthtraj.analysis.dynamics.correctness import correctness_summary
    from depthtraj.store import open_store

    raw = open_store(random_store).load()
    ids = [str(q) for q in raw.question.values]
    keys = dict(zip(ids, question_keys(ids).tolist()))
    depths = [int(t) for t in raw.depth.values]
    for arm, a in (("bf16", 0), ("fp32", 1)):
        ex = trajectory_examples(_open(random_store), per_class=3, precision=arm, arrangement=a)
        p = ["bf16", "fp32"].index(arm)
        members = {c: [] for c in CLASSES}
        for i, q in enumerate(ids):
            K = int(raw.n_candidates[i])
            ref = reference(raw.score.values[i, :, :, a, p], K, int(raw.label[i]), depths, 1, 8)
            members[ref["class"]].append(q)
        want = {c: sorted(m, key=lambda q: keys[q])[:3] for c, m in members.items()}
        assert _picks(ex) == want
        assert ex.counts == {c: len(m) for c, m in members.items()} and sum(ex.counts.values()) == 150
        for c, trajs in ex.classes.items():
            assert all(t.transition == c and t.precision == arm and t.arrangement == a for t in trajs)
    # with one arrangement the counts are the §4 kernel's transition counts at t = 1
    one = raw.isel(arrangement=[0], precision=[0])
    summ = correctness_summary(one, depths=[1], grid=[]).sum("question").isel(precision=0).sel(depth=1).compute()
    ex0 = trajectory_examples(_open(random_store))
    assert ex0.counts == {c: round(summ[c].item()) for c in CLASSES}


def test_examples_do_not_depend_on_the_chunking(random_store, tmp_path):
    base = trajectory_examples(_open(random_store), per_class=2, precision="fp32")
    for chunk in (1, 7, 150):
        other = rechunk(random_store, str(tmp_path / f"c{chunk}.zarr"), chunk)
        ex = trajectory_examples(_open(other), per_class=2, precision="fp32")
        assert _picks(ex) == _picks(base) and ex.counts == base.counts and ex.rule == base.rule


# ---------------------------------------------------------------------------------------------- the command
def _run(*args):
    r = CliRunner().invoke(app, ["question", *map(str, args)])
    return r.exit_code, r.stdout, r.stderr


def test_cli_table(hand_store):
    code, out, err = _run(hand_store, "flip")
    assert code == 0, err
    assert out.splitlines()[0] == "question flip · arc_challenge · K=4 · gold D (identity 3)"
    assert "  3  D  four  ← gold" in out
    assert "winner changes at t = 3, 5, 6; ends correct (W→C" in out
    code, out, _ = _run(hand_store, "3", "--arrangement", "2")  # a position when no id matches
    assert code == 0 and out.startswith("question k3 ") and "arrangement 2 of 3 (displayed labels: 3 1 2)" in out


def test_cli_json_is_the_trajectory(hand_store):
    code, out, _ = _run(hand_store, "tie", "-f", "json", "--arrangement", "1")
    assert code == 0
    doc = json.loads(out)
    want = question_trajectory(_open(hand_store), "tie", arrangement=1).to_json()
    want["store"] = hand_store
    assert doc == want
    assert doc["winner"] == [1, 2, 2, 2, 1, 1] and doc["flips"] == [2, 5] and doc["transition"] == "CC"
    assert doc["candidates"][1] == {"identity": 1, "label": "B", "text": "blue"} and doc["question_text"] is None


def test_cli_png(hand_store, tmp_path):
    from PIL import Image

    png = tmp_path / "sub" / "k3.png"
    code, out, err = _run(hand_store, "k3", "--out", png)
    assert code == 0 and "question k3" in out and f"wrote {png}" in err
    assert Image.open(png).format == "PNG"


@pytest.fixture(scope="module")
def broken_stores(tmp_path_factory, hand_store):
    """An incomplete store (the last chunk unwritten) and one with a NaN real score (DT-DATA-001)."""
    import shutil

    import zarr

    d = tmp_path_factory.mktemp("broken")
    from depthtraj.store import open_store

    ds = open_store(hand_store).load()
    qs = [{"id": str(q), "task": str(ds.task[i].item()), "label": int(ds.label[i]),
           "texts": [x for x in ds.candidate_text.values[i] if x], "labels": [x for x in ds.candidate_label.values[i] if x],
           "order": [r[r >= 0].tolist() for r in ds.arrangement_order.values[i] if r[0] >= 0]}
          for i, q in enumerate(ds.question.values)]
    s = ds.score.transpose("question", "depth", "candidate", "arrangement", "precision").values
    inc = _write(d / "inc.zarr", qs, s, ds.depth.values, arrangements=5, complete=False, chunk_size=2)
    nan = str(d / "nan.zarr")
    shutil.copytree(hand_store, nan)
    arr = zarr.open_array(nan + "/score", mode="r+")
    arr[1, 2, 0, 0, 0] = np.nan
    return inc, nan


def test_cli_errors_are_one_line_exit_2(hand_store, broken_stores, tmp_path):
    inc, nan = broken_stores
    cases_ = [
        ((hand_store, "fli"), "no question 'fli' among the store's 5 questions; did you mean 'flip'?"),
        ((hand_store, "9"), "question index 9 is out of range"),
        ((hand_store, "tie", "--precision", "fp32"), "precision arm 'fp32' is not in the store"),
        ((hand_store, "k3", "--arrangement", "3"), "does not use arrangement 3"),
        ((hand_store, "tie", "-f", "csv"), "--format must be table or json"),
        ((hand_store, "tie", "--out", tmp_path / "x.svg"), "--out must name a .png file"),
        ((tmp_path / "nothing.zarr", "tie"), "nothing.zarr"),
        ((inc, "k5"), "question 'k5' is incomplete (complete is false, DT-DATA-010)"),
        ((nan, "flip"), "DT-DATA-001: a real candidate's score is not finite"),
    ]
    for args, msg in cases_:
        code, out, err = _run(*args)
        assert code == 2, (args, out, err)
        assert out == "" and err.count("\n") == 1 and err.startswith("depthtraj: error: ") and msg in err, (args, err)
    assert not (tmp_path / "x.svg").exists()
    code, out, err = _run(nan, "flip", "--allow-defects")
    assert code == 0 and "defects: DT-DATA-001" in out and "note:" in err
    assert _run(inc, "tie")[0] == 0  # the complete questions of an incomplete store are shown


def test_cli_normalization_of_a_text_store(tmp_path, hand_store):
    from depthtraj.store import open_store
    from depthtraj.testing import synthetic_store

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = synthetic_store(tmp_path / "text.zarr", 12, endpoint=4, k_mix=(3, 4), readout="text",
                               options_displayed=False, chunk_size=5)
    raw = open_store(text).load()
    i = 7
    K = int(raw.n_candidates[i])
    for norm, want in ((None, raw.score), ("sum", raw.logprob_sum)):
        args = (text, raw.question.values[i], "-f", "json") + (("--normalization", norm) if norm else ())
        code, out, err = _run(*args)
        assert code == 0, err
        doc = json.loads(out)
        np.testing.assert_allclose(np.array(doc["scores"], dtype=float),
                                   want.values[i, :, :K, 0, 0].astype(np.float64), rtol=1e-6)
        assert doc["units"].startswith("nats per character (" if norm is None else "nats (")
    code, _, err = _run(hand_store, "tie", "--normalization", "sum")
    assert code == 2 and "applies to answer-text stores" in err and err.count("\n") == 1
