"""§4 endpoint agreement and correctness: winners, accuracy, transitions, ε and a_lab,txt
against the slow reference on random stores, the identities of ``r3:eq:correctness``, hand-made
cases with their derivations, pairing of two stores by question id, and laziness."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depthtraj.analysis import ladder
from depthtraj.analysis import compute_together
from depthtraj.analysis.dynamics.correctness import (
    CELL_STATISTICS,
    CORRECTNESS_VARS,
    TRANSITIONS,
    cell_values,
    correctness_kernel,
    correctness_summary,
    endpoint_agreement,
    winners,
)

from .reference_dynamics import labelled, ref_agreement, ref_correctness, ref_winners

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _close(got, want, what):
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12, equal_nan=True, err_msg=what)


def _dataset(case, labels):
    return case.dataset().assign_coords(label=("question", labels.astype(np.int8)))


@SETTINGS
@given(labelled(max_n=6))
def test_summary_matches_reference_and_identities(drawn):
    case, labels, arrs = drawn
    ds = _dataset(case, labels)
    used = [t for t in case.depths if t <= case.T]
    summ = correctness_summary(ds, grid=case.grid, endpoint=case.T)
    w = winners(ds)
    assert all(summ[v].chunks is not None for v in summ.data_vars) and w.chunks is not None
    summ, w = compute_together(summ, w)
    np.testing.assert_array_equal(w.values, ref_winners(case.score, case.K, case.depths))
    ref = ref_correctness(case.score, case.K, labels, case.depths, case.T, used, case.grid, arrs)
    assert list(summ.depth.values) == used
    for v, want in ref.items():
        _close(summ[v].values, want, v)

    s = {v: summ[v].values for v in summ.data_vars}
    known = np.isfinite(s["acc"])
    # the five transitions partition every trajectory: per question they sum to one
    _close(sum(s[c] for c in TRANSITIONS)[known], 1.0, "transitions sum")
    # r3:eq:correctness, per question (hence for every cell mean)
    _close(s["acc_change"][known], (s["WC"] - s["CW"])[known], "A_T - A_t")
    _close(s["disagree"][known], (s["WC"] + s["CW"] + s["WWp"])[known], "disagreement")
    acc_T = np.broadcast_to(s["acc_T"][..., None], s["acc"].shape)
    _close(s["acc_change"][known], (acc_T - s["acc"])[known], "A_T - A_t (direct)")
    # cells: the counts of a row sum to N, the questions with a known label
    cells = cell_values(summ, CELL_STATISTICS).compute()
    for task in cells.task.values:
        in_task = (summ.task == task).values
        n = np.isfinite(s["acc_T"][in_task]).sum(axis=0)  # [P] questions with a known label
        rows = sum(cells[f"N_{c}"].sel(task=task).values for c in TRANSITIONS)  # [P, depth]
        _close(rows, np.broadcast_to(n[:, None], rows.shape), f"rows sum to N ({task})")
        with np.errstate(invalid="ignore", divide="ignore"):
            acc = s["acc"][in_task]
            want = np.where(np.isfinite(acc), acc, 0).sum(0) / np.isfinite(acc).sum(0)
        _close(cells["A_t"].sel(task=task).values, want, f"A_t ({task})")
        # r3:eq:correctness inside each row, with unknown labels among the questions: both
        # sides over the same population (the labelled questions, N = n)
        N = np.where(n > 0, n, np.nan)[:, None]
        with np.errstate(invalid="ignore"):
            _close(cells["acc_change"].sel(task=task).values,
                   (cells["N_WC"] - cells["N_CW"]).sel(task=task).values / N, f"A_T - A_t row ({task})")
            _close(cells["disagreement"].sel(task=task).values,
                   (cells["N_WC"] + cells["N_CW"] + cells["N_WWp"]).sel(task=task).values / N,
                   f"disagreement row ({task})")


def test_winner_is_the_ladders_winner(small_store):
    from depthtraj.store import open_store

    ds = open_store(small_store)
    T = int(ds.depth.values[-1])
    lad, w = compute_together(ladder(ds), winners(ds, [t for t in ds.depth.values if t < T]))
    np.testing.assert_array_equal(w.values, lad["winner"].values)
    assert w.dtype == np.int16 and "units" not in w.attrs  # identities, not the score's nats


def test_kernel_is_the_lazy_function(small_store):
    from depthtraj.store import open_store

    ds = open_store(small_store)
    summ = correctness_summary(ds).compute()
    s = ds["score"].transpose("question", "depth", "candidate", "arrangement", "precision").values
    rec = [int(t) for t in ds.depth.values]
    T = rec[-1]
    raw = correctness_kernel(
        s, ds.n_candidates.values, ds.label.values,
        depth_idx=list(range(len(rec))), grid_idx=[rec.index(t) for t in (2, 4, 6)], endpoint_idx=len(rec) - 1,
    )
    assert summ.attrs["grid"] == [2, 4, 6] and T == 8
    assert set(raw) == set(CORRECTNESS_VARS) | {"complete"}
    for v, x in raw.items():
        np.testing.assert_array_equal(x, summ[v].values, err_msg=v)


# ----------------------------------------------------------------------------------------------
# hand-made cases
# ----------------------------------------------------------------------------------------------
def _store(rows, labels, ids=None, arrangements=1, arm="p"):
    """A one-arm store: rows[i][a] is question i's list of per-depth score vectors."""
    n = len(rows)
    T = len(rows[0][0])
    c = max(len(v) for q in rows for arr in q for v in arr)
    s = np.full((n, T, c, arrangements, 1), np.nan)
    for i, q in enumerate(rows):
        for a, arr in enumerate(q):
            for t, v in enumerate(arr):
                s[i, t, : len(v), a, 0] = v
    return xr.Dataset(
        {"score": (("question", "depth", "candidate", "arrangement", "precision"), s)},
        coords={
            "question": ids or [f"q{i}" for i in range(n)],
            "n_candidates": ("question", [len(q[0][0]) for q in rows]),
            "label": ("question", labels), "task": ("question", ["t"] * n),
            "depth": np.arange(1, T + 1), "candidate": np.arange(c),
            "arrangement": np.arange(arrangements), "precision": [arm],
        },
    ).chunk({"question": 1})


def test_transitions_worked_example():
    # Three questions, K = 3, depths 1..3 (T = 3), grid {1, 2}; two arrangements each.
    # q0 (y* = 0): arrangement 0 goes 1 → 1 → 0 (W→C at t=1, 2); arrangement 1 stays on 0 (C→C).
    # q1 (y* = 2): arrangement 0 goes 0 → 1 → 1: W→W′ at t=1, W=W at t=2; arrangement 1 has a
    #     tie (1, 1, 0) at t=1 whose winner is identity 0 (lowest), then 2 at t=2 and 2 at T:
    #     W→C at t=1, C→C at t=2.
    # q2 (y* = 1): 1 → 1 → 2 in both arrangements: C→W at t=1 and t=2.
    # Per-question weights are 1/2 per arrangement. At t=1: W→C = 1/2 + 1/2 = 1, C→W = 1,
    # W→W′ = 1/2, C→C = 1/2, W=W = 0: sum 3 = N. A_1 = (1/2 + 0 + 1)/3 = 1/2,
    # A_T = (1 + 1/2 + 0)/3 = 1/2: A_T - A_1 = (1 - 1)/3 = 0; disagreement (1 + 1 + 1/2)/3.
    # ε on {1, 2}: q0 (1 + 1 + 0 + 0)/4 = 1/2, q1 (1 + 0 + 1 + 0)/4 = 1/2, q2 1.
    e = [1.0, 0.0, 0.0]
    f = [0.0, 1.0, 0.0]
    g = [0.0, 0.0, 1.0]
    q0 = [[f, f, e], [e, e, e]]
    q1 = [[e, f, f], [[1.0, 1.0, 0.0], g, g]]
    q2 = [[f, f, g], [f, f, g]]
    ds = _store([q0, q1, q2], [0, 2, 1], arrangements=2)
    summ = correctness_summary(ds, grid=[1, 2])
    cells = cell_values(summ, CELL_STATISTICS).compute()
    at1 = cells.sel(task="t", precision="p", depth=1)
    assert [at1[f"N_{c}"].item() for c in TRANSITIONS] == [1.0, 1.0, 0.5, 0.5, 0.0]
    assert at1["A_t"].item() == pytest.approx(0.5) and at1["acc_change"].item() == pytest.approx(0.0)
    assert at1["disagreement"].item() == pytest.approx(2.5 / 3)
    at2 = cells.sel(task="t", precision="p", depth=2)
    assert [at2[f"N_{c}"].item() for c in TRANSITIONS] == [0.5, 1.0, 0.0, 1.0, 0.5]
    assert cells["A_T"].item() == pytest.approx(0.5)
    np.testing.assert_allclose(summ.eps.values.ravel(), [0.5, 0.5, 1.0])
    assert cells["epsilon"].item() == pytest.approx(2 / 3)
    assert cells["n_questions"].item() == 3.0


def test_unknown_label_and_incomplete_question():
    # y* = -1: accuracy, transitions and the per-depth disagreement are NaN (one population for
    # both identities of r3:eq:correctness), ε is not; an all-NaN question is NaN everywhere and
    # left out of the cells.
    e, f = [1.0, 0.0], [0.0, 1.0]
    ds = _store([[[e, f]], [[e, f]], [[[np.nan] * 2] * 2]], [-1, 0, 0])
    summ = correctness_summary(ds, grid=[1]).compute()
    assert np.isnan(summ.acc.values[0]).all() and np.isnan(summ.disagree.values[0]).all()
    assert summ.eps.values[0, 0] == 1.0
    assert np.isnan(summ.disagree.values[2]).all() and np.isnan(summ.complete.values[2]).all()
    cells = cell_values(summ, CELL_STATISTICS).compute()
    assert cells["N_WC"].sel(depth=1).item() == 0.0 and cells["N_CW"].sel(depth=1).item() == 1.0
    assert cells["disagreement"].sel(depth=1).item() == 1.0 and cells["n_questions"].item() == 2.0
    # the identities hold within the row: disagreement = (N_WC + N_CW + N_WWp) / N_labelled
    assert cells["disagreement"].sel(depth=1).item() == (0.0 + 1.0 + 0.0) / 1


def test_correctness_needs_labels():
    ds = _store([[[[1.0, 0.0], [0.0, 1.0]]]], [0]).drop_vars("label")
    with pytest.raises(ValueError, match="no 'label' coordinate"):
        correctness_summary(ds, grid=[1])


# ----------------------------------------------------------------------------------------------
# two stores
# ----------------------------------------------------------------------------------------------
@settings(SETTINGS, max_examples=25)
@given(labelled(max_n=5), labelled(max_n=5), st.randoms(use_true_random=False), st.sampled_from(["all", "index"]))
def test_agreement_matches_reference(one, two, rnd, pairing):
    (c1, l1, u1), (c2, l2, u2) = one, two
    d1, d2 = _dataset(c1, l1), _dataset(c2, l2)
    # ids: the second store holds a shuffled subset of the first's ids plus ids of its own
    ids1 = [f"id{i}" for i in range(len(c1.K))]
    pool = ids1 + [f"other{i}" for i in range(len(c2.K))]
    rnd.shuffle(pool)
    ids2 = pool[: len(c2.K)]
    if not set(ids1) & set(ids2):
        ids2[0] = ids1[0]
    d1 = d1.assign_coords(question=ids1)
    d2 = d2.assign_coords(question=ids2)
    A1, A2 = d1.sizes["arrangement"], d2.sizes["arrangement"]
    if pairing == "index" and A1 != A2:
        with pytest.raises(ValueError, match="same number of arrangements"):
            endpoint_agreement(d1, d2, pairing=pairing)
        return
    arms = [p for p in d1.precision.values if p in d2.precision.values]
    res = endpoint_agreement(d1, d2, pairing=pairing)
    assert res["agree"].chunks is not None
    res = res.compute()
    s1, s2 = c1.score, c2.score  # endpoints: the last recorded depths
    p1 = [list(d1.precision.values).index(p) for p in arms]
    p2 = [list(d2.precision.values).index(p) for p in arms]
    shared, want = ref_agreement(s1[..., p1], s2[..., p2], c1.K, c2.K, ids1, ids2, u1, u2, pairing)
    assert [str(q) for q in res.question.values] == shared
    _close(res["agree"].values, want, "agreement")
    assert res.attrs["stores"] == ["first store", "second store"]


def test_agreement_worked_example_and_errors():
    # Label store: q0 ends on 0, q1 on 1, q2 on 0. Text store (other order, one extra id):
    # q1 ends on 1, q0 on 1, qx on 0. Shared ids in the first store's order: q0 (0 vs 1: 0),
    # q1 (1 vs 1: 1); a_lab,txt = 1/2.
    e, f = [1.0, 0.0], [0.0, 1.0]
    lab = _store([[[f, e]], [[e, f]], [[f, e]]], [0, 1, 0], ids=["q0", "q1", "q2"])
    txt = _store([[[e, f]], [[e, f]], [[f, e]]], [1, 0, 0], ids=["q1", "q0", "qx"], arm="fp32")
    res = endpoint_agreement(lab, txt, names=("F1", "F2")).compute()
    assert list(res.question.values) == ["q0", "q1"] and res.attrs["precision_pairs"] == [["p", "fp32"]]
    np.testing.assert_array_equal(res.agree.values.ravel(), [0.0, 1.0])
    assert cell_values(res, CELL_STATISTICS)["agreement"].compute().item() == 0.5
    # self-agreement with matched arrangements is one
    two = _store([[[e, f], [f, e]]], [0], arrangements=2)
    assert endpoint_agreement(two, two, pairing="index").agree.compute().item() == 1.0
    assert endpoint_agreement(two, two).agree.compute().item() == 0.5  # all pairs: (1 + 0 + 0 + 1)/4
    other = _store([[[e, f]]], [0], ids=["zz"])
    with pytest.raises(ValueError, match=r"stores 'F1' \(3 questions\) and 'F2' \(1 questions\) share no question id"):
        endpoint_agreement(lab, other, names=("F1", "F2"))
    two_arms = xr.concat([lab.compute(), lab.compute().assign_coords(precision=["b"])], dim="precision")
    with pytest.raises(ValueError, match="share no precision arm"):
        endpoint_agreement(two_arms, txt)
    with pytest.raises(ValueError, match="pairing must be"):
        endpoint_agreement(lab, txt, pairing="zip")


# ----------------------------------------------------------------------------------------------
# laziness
# ----------------------------------------------------------------------------------------------
def test_lazy_until_computed(small_store):
    from depthtraj.store import open_store

    ds = open_store(small_store)

    def boom(block):
        raise AssertionError("a score chunk was computed while building the analysis")

    trap = ds.assign(score=ds["score"].copy(data=ds["score"].data.map_blocks(boom, dtype=ds["score"].dtype)))
    summ = correctness_summary(trap)
    objs = [summ, winners(trap), endpoint_agreement(trap, trap), cell_values(summ, CELL_STATISTICS)]
    for obj in objs:
        for v in (obj.data_vars if isinstance(obj, xr.Dataset) else [None]):
            assert (obj[v] if v else obj).chunks is not None, v
    from depthtraj.analysis import score_of

    assert summ["acc"].chunks[0] == score_of(ds).chunks[0]  # one task per analysis question chunk
    with pytest.raises(AssertionError, match="score chunk was computed"):
        objs[-1]["A_t"].compute()
