"""Ξ (``pd:app:eq:xi``) in ``text_variants`` (``pd:app:tab:text-variants``): the common-energy
share of all adjacent increments ≤ T as a ratio of sums, with its paired interval, against the
slow reference (tests/analysis/reference_variants.py), a hand-made case, and equal to the §5
``marginal`` table's Ξ_obs whether or not §5 ran."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings

from depthtraj.analysis.core.bootstrap import bootstrap_weights, percentile_interval
from depthtraj.analysis.sensitivity.variants import common_energy_cells

from .reference_variants import ref_xi_parts
from .strategies import cases


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases())
def test_xi_cells_match_the_reference(case):
    ds = case.dataset()
    draws = 7
    got = common_energy_cells(ds, endpoint=case.T, draws=draws, seed=2)
    if len([t for t in case.depths if t <= case.T]) < 2:
        assert got == {}  # no adjacent increment ≤ T
        return
    C, E = ref_xi_parts(case.score, case.K, case.depths, case.T, case.n_arr)
    ids = [f"q{i}" for i in range(len(case.K))]
    W = bootstrap_weights(ids, draws, 2)
    tasks = list(dict.fromkeys(case.tasks))
    arms = [f"arm{j}" for j in range(case.score.shape[-1])]
    assert sorted(got) == sorted((t, a) for t in tasks for a in arms)
    for (task, arm), (xi, lo, hi) in got.items():
        p = arms.index(arm)
        members = [i for i in range(len(case.K)) if case.tasks[i] == task and np.isfinite(C[i, p])]
        num, den = sum(C[i, p] for i in members), sum(E[i, p] for i in members)
        if den > 0:
            assert xi == pytest.approx(num / den * 100, rel=1e-9, abs=1e-9)
            assert -1e-9 <= xi <= 100 + 1e-9
        else:
            assert np.isnan(xi)
        boot = np.array([
            sum(W[b, i] * C[i, p] for i in members) / den_b * 100 if (den_b := sum(W[b, i] * E[i, p] for i in members)) > 0
            else np.nan for b in range(draws)])
        if np.isfinite(boot).any():
            want = percentile_interval(boot, 0.95)
            assert (lo, hi) == pytest.approx(want, rel=1e-9, abs=1e-9)
        else:
            assert lo is None and hi is None


def _store(increments, tasks):
    """K = 2, one arm, depths 0, 1, 2: per question and arrangement (None: unused, all NaN),
    s_0 = 0 and the two adjacent increments ``d`` applied in turn (s_1 = d_1, s_2 = d_1 + d_2)."""
    n, A = len(increments), max(len(q) for q in increments)
    s = np.full((n, 3, 2, A, 1), np.nan)
    for i, q in enumerate(increments):
        for a, inc in enumerate(q):
            if inc is not None:
                d1, d2 = (np.array(d, dtype=float) for d in inc)
                s[i, :, :, a, 0] = [np.zeros(2), d1, d1 + d2]
    return xr.Dataset(
        {"score": (("question", "depth", "candidate", "arrangement", "precision"), s)},
        coords={"question": [f"q{i}" for i in range(n)], "n_candidates": ("question", np.full(n, 2, np.int8)),
                "task": ("question", tasks), "depth": np.arange(3, dtype=np.int32),
                "candidate": np.arange(2, dtype=np.int8), "arrangement": np.arange(A, dtype=np.int8),
                "precision": ["bf16"]},
    )


def test_hand_made_xi():
    # C = (1ᵀd)²/K, E = ‖d‖² (K = 2):
    # "arc": a pure translation (1, 1) then a pure contrast (1, −1): C = 2 + 0, E = 2 + 2;
    #        then (2, 0) twice: C = 2 + 2, E = 4 + 4. Ξ = (2 + 4)/(4 + 8) = 50 %.
    # "mmlu": pure translations only: Ξ = 100 %; "other": contrasts only: Ξ = 0 %.
    ds = _store([[((1, 1), (1, -1))], [((2, 0), (2, 0))], [((3, 3), (-1, -1))], [((1, -1), (0, 0))]],
                ["arc", "arc", "mmlu", "other"])
    got = common_energy_cells(ds, draws=0)
    assert got == {("arc", "bf16"): (50.0, None, None), ("mmlu", "bf16"): (100.0, None, None),
                   ("other", "bf16"): (0.0, None, None)}
    # a question incomplete at a depth ≤ T is left out (as in §5): the arc cell is the second only
    ds["score"][0, 1, 0, 0, 0] = np.nan
    assert common_energy_cells(ds, draws=0)[("arc", "bf16")][0] == pytest.approx(50.0)
    ds["score"][1, 2, 1, 0, 0] = np.nan
    assert np.isnan(common_energy_cells(ds, draws=0)[("arc", "bf16")][0])  # no energy: undefined
    # arrangements weigh 1/A_i: q0 uses two — (1, 1) then 0: C = 2, E = 2; (1, −1) then 0: C = 0,
    # E = 2 — so C = 1, E = 2; q1 uses one — (1, −1) then 0: C = 0, E = 2. Ξ = 1/4 = 25 %
    # (unweighted it would be 2/6).
    two = _store([[((1, 1), (0, 0)), ((1, -1), (0, 0))], [((1, -1), (0, 0)), None]], ["arc", "arc"])
    assert common_energy_cells(two, draws=0)[("arc", "bf16")][0] == pytest.approx(25.0)


def test_text_variants_xi_without_section_5_is_the_marginal_xi(capsys, tmp_path):
    # --sections 3,4 computes Ξ itself (the §5 kernel, the same draws): it equals the Ξ_obs the
    # §5 marginal table reports when §5 runs, point and interval, on every row
    from depthtraj.analysis.cli import run_analyze
    from depthtraj.testing import synthetic_store

    label = synthetic_store(tmp_path / "label.zarr", 24, endpoint=6, seed=3, chunk_size=8)
    text = synthetic_store(tmp_path / "text.zarr", 24, endpoint=6, seed=3, chunk_size=8, readout="text",
                           options_displayed=False)
    docs = {}
    for sections in ("3,4", "3,4,5"):
        code = run_analyze([label, text], grids=["quarter"], bootstrap=30, fmt="json",
                           normalization="sum,char", sections=sections)
        out, err = capsys.readouterr()
        assert code == 0, err
        docs[sections] = json.loads(out)
    rows = {}
    for sections, doc in docs.items():
        tv = next(t for t in doc["comparisons"] if t["name"] == "text_variants")
        assert tv["rows"] and all(r["xi"] is not None and r["xi_lo"] <= r["xi"] <= r["xi_hi"] for r in tv["rows"])
        rows[sections] = {(r["store"], r["readout"], r["task"], r["precision"]): r for r in tv["rows"]}
    assert all("marginal" not in a["tables"] for a in docs["3,4"]["analyses"])
    assert rows["3,4"].keys() == rows["3,4,5"].keys()
    for key, r in rows["3,4"].items():
        want = rows["3,4,5"][key]
        for k in ("xi", "xi_lo", "xi_hi"):
            assert r[k] == pytest.approx(want[k], rel=1e-6), (key, k)  # the pass sums draws in float32
