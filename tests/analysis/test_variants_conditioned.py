"""§6 endpoint-conditioned comparisons (``format_conditioned``) against a slow reference written
from the paper's definitions, and its identities."""

from __future__ import annotations

import numpy as np
import pytest
from depthtraj.analysis.core.bootstrap import bootstrap_weights, percentile_interval
from depthtraj.analysis.geometry.ladder import earliest_depths
from depthtraj.analysis.sensitivity.variants import format_conditioned_table
from depthtraj.store import open_store
from depthtraj.testing import synthetic_store

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
