"""Pr(D_j < T) for every j (``pd:cor:depth``, ``pd:eq:depth-area``) in the ``depth_area`` table,
with intervals, against the slow reference (tests/analysis/reference_variants.py) on random
stores and a hand-made case."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings

from depthtraj.analysis.core.bootstrap import bootstrap_weights, percentile_interval
from depthtraj.analysis.core.grid import Grid
from depthtraj.analysis.engine import analyze_store
from depthtraj.analysis.geometry.tables import depth_area_columns

from .reference import METHODS
from .reference_variants import ref_before
from .strategies import cases


def _depth_area(ds, grid, T, draws):
    an = analyze_store(ds, [Grid("g", tuple(grid), T)], draws=draws, seed=2, sections=frozenset({3}),
                       allow_defects=True)
    return an[0].tables["depth_area"].rows


def test_every_criterion_has_a_column():
    keys = {c.key for c in depth_area_columns()}
    assert {f"before_{j}" for j in METHODS} <= keys
    assert all(c.interval for c in depth_area_columns() if c.key.startswith("before_"))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases())
def test_before_matches_the_reference(case):
    ds = case.dataset()
    draws = 7
    rows = _depth_area(ds, case.grid, case.T, draws)
    ref, fragile = ref_before(case.score, case.K, case.depths, case.T, case.grid, case.n_arr)
    W = bootstrap_weights([f"q{i}" for i in range(len(case.K))], draws, 2)
    arms = [f"arm{j}" for j in range(case.score.shape[-1])]
    for row in rows:
        p = arms.index(row["precision"])
        members = np.array([t == row["task"] for t in case.tasks])
        for j in METHODS:
            if fragile[j][members].any():  # mean/LSE knife edges: float64 may see another sign
                continue
            x = ref[j][members, p]
            ok = np.isfinite(x)
            if not ok.any():
                assert row[f"before_{j}"] is None or np.isnan(row[f"before_{j}"])
                continue
            assert row[f"before_{j}"] == pytest.approx(x[ok].mean() * 100, abs=1e-9), j
            with np.errstate(invalid="ignore", divide="ignore"):
                boot = (W[:, members][:, ok] @ x[ok]) / W[:, members][:, ok].sum(1) * 100
            lo, hi = percentile_interval(boot, 0.95)
            # the pass sums its draws in float32
            assert row[f"before_{j}_lo"] == pytest.approx(lo, rel=1e-6, abs=1e-6), j
            assert row[f"before_{j}_hi"] == pytest.approx(hi, rel=1e-6, abs=1e-6), j


def test_hand_made_before():
    # K = 2, depths 1..4, T = 4, grid {1, 2, 3}; s_t is the same at t = 1, 2, 3:
    # "shift": s_t = (1, 0), s_4 = (6, 5): δ = (5, 5), m = 1, B_raw = 10, B_q = 0, h = 0, R = 1 and
    #   the mean and LSE centres are 5: every criterion but raw qualifies at t = 1 (D = 1), raw never.
    # "still": s_t = s_4 = (1, 0): δ = 0, everything qualifies at t = 1.
    # "flip": s_t = (1, 0), s_4 = (0, 1): δ = (−1, 1), B_raw = B_q = 2 > m = 1, h = 2, R = −1:
    #   nothing qualifies before T.
    # "mixed" uses two arrangements, shift and flip: 1/2 for every criterion but raw.
    # Pr(D_raw < T) = (0 + 1 + 0 + 0)/4 = 25 %; every other j: (1 + 1 + 0 + 1/2)/4 = 62.5 %.
    shift, still, flip = ((1, 0), (6, 5)), ((1, 0), (1, 0)), ((1, 0), (0, 1))
    qs = [(shift, shift), (still, still), (flip, flip), (shift, flip)]
    s = np.array([[[list(st)] * 3 + [list(sT)] for st, sT in q] for q in qs], dtype=np.float64)  # [q, a, depth, c]
    s = np.moveaxis(s, 1, -1)[..., None]  # [q, depth, c, a, p]
    ds = xr.Dataset(
        {"score": (("question", "depth", "candidate", "arrangement", "precision"), s)},
        coords={"question": ["shift", "still", "flip", "mixed"], "n_candidates": ("question", np.full(4, 2, np.int8)),
                "task": ("question", ["arc"] * 4), "depth": np.arange(1, 5, dtype=np.int32),
                "candidate": np.arange(2, dtype=np.int8), "arrangement": np.arange(2, dtype=np.int8),
                "precision": ["bf16"]},
    )
    (row,) = _depth_area(ds, [1, 2, 3], 4, draws=0)
    assert row["before_raw"] == pytest.approx(25.0)
    for j in ("mean", "LSE", "env", "q", "dir", "res"):
        assert row[f"before_{j}"] == pytest.approx(62.5), j
