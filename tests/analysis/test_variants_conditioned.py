"""§6 endpoint-conditioned comparisons (``format_conditioned``) against slow references written
from the paper's definitions (here and in tests/analysis/reference_variants.py), a hand-made
case, the ``format`` table's Correct and ΔA, and its identities."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from depthtraj.analysis.core.bootstrap import bootstrap_weights, percentile_interval
from depthtraj.analysis.geometry.margin_ladder import earliest_depths
from depthtraj.analysis.sensitivity.variants import format_conditioned_table
from depthtraj.store import open_store
from depthtraj.testing import synthetic_store

from .reference_dynamics import labelled
from .reference_variants import ref_cell_conditioned, ref_conditioned

T = 8
GRID = [2, 4, 6]  # the quarter grid of T = 8


def _stores(tmp_path, arrangements=1):
    # the same question ids (same seed), different score dynamics: two formats of one population
    a = synthetic_store(tmp_path / "a.zarr", n=60, endpoint=T, precision=("bf16", "fp32"), seed=4, chunk_size=16)
    b = synthetic_store(tmp_path / "b.zarr", n=60, endpoint=T, precision=("bf16", "fp32"), seed=4, chunk_size=16,
                        readout="text", options_displayed=False, arrangements=arrangements, decay=0.6)
    return open_store(a).load(), open_store(b).load()


def _ref_winner(v: np.ndarray, K: int) -> int:
    """argmax over the K real candidates, ties to the lowest identity; -1 if any is not finite."""
    v = v[:K]
    if K < 2 or not np.all(np.isfinite(v)):
        return -1
    best = 0
    for k in range(1, K):
        if v[k] > v[best]:
            best = k
    return best


def _ref_subset(ds, p):
    """Per question: (mean_a correct, mean_a correct·(D_raw − D_q)/T) over used arrangements."""
    D = earliest_depths(ds, GRID, endpoint=T).compute()
    s = ds["score"].sel(depth=T).values  # [q, cand, arr, prec]
    out_w, out_s = [], []
    for i in range(ds.sizes["question"]):
        K, lab = int(ds["n_candidates"].values[i]), int(ds["label"].values[i])
        cs, ds_ = [], []
        for a in range(ds.sizes["arrangement"]):
            d = (D["D_raw"].values[i, a, p] - D["D_q"].values[i, a, p]) / T
            y = _ref_winner(s[i, :, a, p], K)
            if not np.isfinite(d) or y < 0:
                continue
            c = 1.0 if (lab >= 0 and y == lab) else 0.0
            cs.append(c)
            ds_.append(c * d)
        out_w.append(np.mean(cs) if cs else 0.0)
        out_s.append(np.mean(ds_) if cs else 0.0)
    return np.array(out_w), np.array(out_s)


@pytest.mark.parametrize("arrangements", [1, 3])
def test_conditioned_increment_equals_the_slow_reference(tmp_path, arrangements):
    a, b = _stores(tmp_path, arrangements)
    draws = 40
    t = format_conditioned_table(a, b, names=("a", "b"), models=("m", "m"), readouts=("F1", "F2"),
                                 grid="quarter", draws=draws, seed=3)
    ids = [str(q) for q in a["question"].values]
    W = bootstrap_weights(ids, draws, 3).astype(float)
    tasks = np.array([str(x) for x in a["task"].values])
    checked = 0
    for row in t.rows:
        p = ["bf16", "fp32"].index(row["precision"])
        m = tasks == row["task"]
        if row["readout"] in ("F1", "F2"):
            w, sv = _ref_subset(a if row["readout"] == "F1" else b, p)
            assert row["n"] == pytest.approx(w[m].sum())
            want = sv[m].sum() / w[m].sum() * 100
            assert row["dW_correct"] == pytest.approx(want, abs=1e-9)
            boot = np.array([(W[k, m] * sv[m]).sum() / (W[k, m] * w[m]).sum() for k in range(draws)]) * 100
            lo, hi = percentile_interval(boot[np.isfinite(boot)], 0.95)
            assert (row["dW_correct_lo"], row["dW_correct_hi"]) == pytest.approx((lo, hi), abs=1e-9)
        else:
            wa, _ = _ref_subset(a, p)
            wb, _ = _ref_subset(b, p)
            assert row["d_accuracy"] == pytest.approx((wb[m] - wa[m]).mean() * 100, abs=1e-9)
            assert row["n_both"] == pytest.approx((wa[m] * wb[m]).sum())
        checked += 1
    assert checked == 2 * 2 * 3  # tasks × arms × (two formats + difference)


def test_every_question_correct_gives_the_population_increment(tmp_path):
    # with labels set to the endpoint winners (one arrangement), the correct subset is everyone:
    # the conditioned increment is the full-population W_q − W_raw, the accuracy difference 0
    from depthtraj.analysis.dynamics.correctness import winners

    a, _ = _stores(tmp_path)
    y = winners(a, [T]).isel(depth=0, arrangement=0, precision=0).values.astype(int)
    a = a.assign_coords(label=("question", y))
    t = format_conditioned_table(a, a, names=("a", "a2"), models=("m", "m"), readouts=("F1", "F1"),
                                 grid="quarter", draws=0)
    D = earliest_depths(a, GRID, endpoint=T).compute()
    inc = ((D["D_raw"] - D["D_q"]) / T).isel(arrangement=0, precision=0).values
    tasks = np.array([str(x) for x in a["task"].values])
    ok = y >= 0
    for row in t.rows:
        if row["precision"] != "bf16":
            continue
        m = (tasks == row["task"]) & ok
        if row["readout"] == "F1":
            assert row["n"] == m.sum()
            assert row["dW_correct"] == pytest.approx(inc[m].mean() * 100, abs=1e-9)
            assert row["dW_correct_lo"] is None  # no bootstrap, no interval
        else:
            assert row["d_accuracy"] == 0.0 and row["n_both"] == m.sum()


def test_no_shared_question_is_one_line(tmp_path):
    a = open_store(synthetic_store(tmp_path / "a.zarr", n=8, endpoint=4, seed=1)).load()
    b = open_store(synthetic_store(tmp_path / "b.zarr", n=8, endpoint=4, seed=2)).load()
    b = b.assign_coords(question=[f"other-{i}" for i in range(b.sizes["question"])])
    with pytest.raises(ValueError, match="share no question id"):
        format_conditioned_table(a, b, names=("a", "b"), models=("m", "m"), readouts=("F1", "F1"), draws=0)


# ----------------------------------------------------------------------------------------------
# random stores against the slow reference (tests/analysis/reference_variants.py)
# ----------------------------------------------------------------------------------------------
def _labelled_dataset(case, labels, ids):
    return case.dataset().assign_coords(label=("question", labels.astype(np.int8)), question=ids)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(labelled(max_n=6), hst.randoms(use_true_random=False))
def test_conditioned_table_matches_the_reference_on_random_stores(drawn, rnd):
    # the second format: the same questions (ids shuffled: pairing is by id) with negated
    # scores — other winners, other ties, other earliest depths, the same incomplete questions
    case, labels, _ = drawn
    n = len(case.K)
    ids = [f"id{i}" for i in range(n)]
    a = _labelled_dataset(case, labels, ids)
    order = list(range(n))
    rnd.shuffle(order)
    b = a.isel(question=order)
    b = b.assign(score=-b["score"])
    draws = 9
    t = format_conditioned_table(a, b, names=("a", "b"), models=("m", "m"), readouts=("F1", "F2"),
                                 grid=case.grid, endpoint=case.T, draws=draws, seed=5)
    neg = -case.score
    acc_a, s_a = ref_conditioned(case.score, case.K, labels, case.depths, case.T, case.grid, case.n_arr)
    acc_b, s_b = ref_conditioned(neg, case.K, labels, case.depths, case.T, case.grid, case.n_arr)
    W = bootstrap_weights(ids, draws, 5)
    tasks = list(dict.fromkeys(case.tasks))
    arms = [str(p) for p in a.precision.values]
    assert len(t.rows) == len(tasks) * len(arms) * 3
    for row in t.rows:
        p = arms.index(row["precision"])
        members = [i for i in range(n) if case.tasks[i] == row["task"]]
        if row["readout"] in ("F1", "F2"):
            acc, s = (acc_a, s_a) if row["readout"] == "F1" else (acc_b, s_b)
            nn, dW, _ = ref_cell_conditioned(acc[:, p], s[:, p], members)
            assert row["n"] == pytest.approx(nn, abs=1e-12)
            assert row["N"] == sum(np.isfinite(acc[i, p]) for i in members)
            if nn > 0:
                assert row["dW_correct"] == pytest.approx(dW * 100, abs=1e-9)
            else:
                assert np.isnan(row["dW_correct"])
            boot = []
            for k in range(draws):  # draw k: the cell's questions with multiplicities W[k]
                num = sum(W[k, i] * s[i, p] for i in members if np.isfinite(acc[i, p]))
                den = sum(W[k, i] * acc[i, p] for i in members if np.isfinite(acc[i, p]))
                boot.append(num / den * 100 if den > 0 else np.nan)
            boot = np.array(boot)
            if np.isfinite(boot).any():
                lo, hi = percentile_interval(boot[np.isfinite(boot)], 0.95)
                assert (row["dW_correct_lo"], row["dW_correct_hi"]) == pytest.approx((lo, hi), abs=1e-9)
            else:
                assert row["dW_correct_lo"] is None
        else:
            _, _, Aa = ref_cell_conditioned(acc_a[:, p], s_a[:, p], members)
            _, _, Ab = ref_cell_conditioned(acc_b[:, p], s_b[:, p], members)
            if np.isfinite(Aa) and np.isfinite(Ab):
                assert row["d_accuracy"] == pytest.approx((Ab - Aa) * 100, abs=1e-9)
            else:
                assert np.isnan(row["d_accuracy"])
            both = [i for i in members if np.isfinite(acc_a[i, p]) and np.isfinite(acc_b[i, p])]
            assert row["n_both"] == pytest.approx(sum(acc_a[i, p] * acc_b[i, p] for i in both), abs=1e-12)


@pytest.mark.parametrize("arrangements", [1, 3])
def test_n_and_accuracy_difference_are_those_of_the_format_table(tmp_path, arrangements):
    # the same tie rule, fallbacks and paired draws as pd:tab:format: n is format's Correct of
    # the same format, ΔA (point and interval) format's ΔA, both on the shared questions
    from depthtraj.analysis.sensitivity.variants import format_table

    a, b = _stores(tmp_path, arrangements)
    b = b.isel(question=list(range(b.sizes["question"]))[::-1][:45])  # another order, a subset
    kw = dict(names=("a", "b"), models=("m", "m"), readouts=("F1", "F2"), grid="quarter", draws=40, seed=3)
    cond = format_conditioned_table(a, b, **kw)
    fmt = format_table(a, b, **kw)
    per = {(r["store"], r["task"], r["precision"]): r for r in fmt.rows}
    for r in cond.rows:
        f = per[(r["store"], r["task"], r["precision"])]
        if r["store"] in ("a", "b"):
            assert r["n"] == pytest.approx(f["correct"], abs=1e-9) and r["N"] == f["N"]
        else:
            for k in ("d_accuracy", "d_accuracy_lo", "d_accuracy_hi"):
                assert r[k] == pytest.approx(f[k], abs=1e-5), k  # the pass sums draws in float32


def _hand_store(rows, labels, ids):
    """One arm, one arrangement, K = 2, depths 1..4 (T = 4, quarter grid {1, 2, 3}); ``rows``
    per question: (scores at depths 1-3, scores at depth 4)."""
    import xarray as xr

    s = np.array([[list(st)] * 3 + [list(sT)] for st, sT in rows], dtype=np.float64)[..., None, None]
    return xr.Dataset(
        {"score": (("question", "depth", "candidate", "arrangement", "precision"), s)},
        coords={"question": ids, "n_candidates": ("question", np.full(len(ids), 2, np.int8)),
                "label": ("question", np.array(labels, np.int8)), "task": ("question", ["arc"] * len(ids)),
                "depth": np.arange(1, 5, dtype=np.int32), "candidate": np.arange(2, dtype=np.int8),
                "arrangement": np.arange(1, dtype=np.int8), "precision": ["bf16"]},
    )


def test_hand_made_conditioned_comparison():
    # "shift": s_t = (1, 0) for t < 4, s_4 = (6, 5). δ = (5, 5): m = 1 > B_q = 0 at t = 1, but
    #   never m > B_raw = 10: D_q = 1, D_raw = T = 4, the question's increment (4 − 1)/4 = 0.75.
    # "still": s_t = (1, 0) at every depth: δ = 0, both qualify at t = 1: increment 0.
    # Mirrored (candidates swapped) the winner is 1 instead of 0, with the same increments.
    shift, still = ((1, 0), (6, 5)), ((1, 0), (1, 0))
    m_shift, m_still = ((0, 1), (5, 6)), ((0, 1), (0, 1))
    ids = ["A", "B", "C", "D", "E"]
    labels = [0, 0, 1, 1, -1]  # E has no known answer: left out everywhere (N = 4)
    # F1: A (shift, 0 ✓), B (still, 0 ✓), C (shift, 0 ✗), D (still, 0 ✗):
    #   n = 2, W_q − W_raw | correct = (0.75 + 0)/2 = 37.5 pp, A = 2/4
    f1 = _hand_store([shift, still, shift, still, still], labels, ids)
    # F2: A (mirrored shift, 1 ✗), B (still, 0 ✓), C (mirrored shift, 1 ✓), D (mirrored still, 1 ✓):
    #   n = 3, (0 + 0.75 + 0)/3 = 25 pp, A = 3/4; ΔA = 25 pp; correct in both: B only
    f2 = _hand_store([m_shift, still, m_shift, m_still, still], labels, ids)
    t = format_conditioned_table(f1, f2, names=("f1", "f2"), models=("m", "m"), readouts=("F1", "F2"), draws=0)
    r1, r2, d = t.rows
    assert (r1["N"], r1["n"], r1["dW_correct"]) == (4, 2.0, 37.5)
    assert (r2["N"], r2["n"], r2["dW_correct"]) == (4, 3.0, 25.0)
    assert (d["d_accuracy"], d["n_both"]) == (25.0, 1.0)
    assert r1["dW_correct_lo"] is None and d["d_accuracy_hi"] is None
    # a tie at the endpoint goes to the lowest identity (as format): B with s_4 = (0, 0) → 0 ✓
    tie = _hand_store([shift, ((1, 0), (0, 0)), shift, still, still], labels, ids)
    r_tie = format_conditioned_table(tie, f2, names=("t", "f2"), models=("m", "m"), readouts=("F1", "F2"),
                                     draws=0).rows[0]
    assert r_tie["n"] == 2.0
    # without labels no endpoint is correct and every question is left out (format: N = 0)
    r0 = format_conditioned_table(f1.drop_vars("label"), f2, names=("a", "b"), models=("m", "m"),
                                  readouts=("F1", "F2"), draws=0).rows[0]
    assert (r0["N"], r0["n"]) == (0, 0.0) and np.isnan(r0["dW_correct"])


def test_the_comparison_needs_section_4_only(capsys, tmp_path):
    # registered with format's sections: --sections 4 gives both comparisons
    import json

    from depthtraj.analysis.cli import run_analyze

    a = synthetic_store(tmp_path / "a.zarr", n=12, endpoint=4, seed=1)
    b = synthetic_store(tmp_path / "b.zarr", n=12, endpoint=4, seed=1, readout="text", options_displayed=False)
    code = run_analyze([a, b], grids=["quarter"], bootstrap=0, fmt="json", sections="4")
    out, err = capsys.readouterr()
    assert code == 0, err
    names = [t["name"] for t in json.loads(out)["comparisons"]]
    assert names == ["format", "format_conditioned"]


def test_stores_of_different_endpoints_are_not_paired(tmp_path):
    """Issue 28: a label store at T = 16 and a text store at T = 32 (collect's defaults) were
    compared as if paired under one grid heading although their quarter grids differ; the
    comparisons are skipped with one line naming both, and align with --endpoint and --grid."""
    import json
    import warnings

    from typer.testing import CliRunner

    from depthtraj.cli import app
    from depthtraj.testing import synthetic_store

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = synthetic_store(tmp_path / "a.zarr", 24, endpoint=16, seed=1, chunk_size=8)
        b = synthetic_store(tmp_path / "b.zarr", 24, endpoint=32, seed=1, readout="text", options_displayed=False,
                            chunk_size=8)
    r = CliRunner().invoke(app, ["analyze", a, b, "--bootstrap", "10", "--sections", "4", "-f", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["comparisons"] == []
    assert "not paired" in r.stderr and "T=32, grid quarter {8,16,24}" in r.stderr and "T=16" in r.stderr
    r = CliRunner().invoke(app, ["analyze", a, b, "--bootstrap", "10", "--sections", "4", "-f", "json",
                                 "--endpoint", "16", "--grid", "4,8,12"])
    assert r.exit_code == 0, r.output
    assert {t["name"] for t in json.loads(r.stdout)["comparisons"]} == {"format", "format_conditioned"}
