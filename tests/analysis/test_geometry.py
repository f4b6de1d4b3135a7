"""§3 geometry: the lazy implementation against the slow reference, the paper's identities on
random stores, hand-made cases with their derivations, and laziness."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings

from depthtraj.analysis import (
    score_of,
    DEPTH_METHODS,
    earliest_depths,
    depth_area,
    depth_cdf,
    ladder,
    ladder_cells,
    question_summary,
)
from depthtraj.analysis import compute_together

from .reference import FLOATS, METHODS, ref_area, ref_area_sparse, ref_earliest, ref_ladder
from .strategies import cases

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
EXACT = ("raw", "q", "dir", "res")  # no transcendental or inexact centre: bitwise agreement


def _close(got, want, what):
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9, equal_nan=True, err_msg=what)


# ----------------------------------------------------------------------------------------------
# against the reference
# ----------------------------------------------------------------------------------------------
@SETTINGS
@given(cases())
def test_ladder_matches_reference_and_identities(case):
    lad = ladder(case.dataset(), endpoint=case.T)
    assert all(lad[v].chunks is not None for v in lad.data_vars)
    got = lad.compute()
    ref = ref_ladder(case.score, case.K, case.depths, case.T)
    assert list(got.depth.values) == [t for t in case.depths if t < case.T]
    for v in FLOATS:
        _close(got[v].values, ref[v], v)
    np.testing.assert_array_equal(got["valid"].values, ref["valid"])
    np.testing.assert_array_equal(got["unique"].values, ref["unique"])
    np.testing.assert_array_equal(got["winner"].values, ref["winner"])

    ok = got["valid"].values
    g = {v: got[v].values[ok] for v in FLOATS}
    tol = 1e-9
    # pd:eq:slack: the three slacks add up to the total gap R - (m - B_raw), each ≥ 0
    _close(g["A_tr"] + g["A_dir"] + g["A_pair"], g["R"] - (g["m"] - g["B_raw"]), "slack sum")
    for v in ("A_tr", "A_dir", "A_pair"):
        assert (g[v] >= -tol).all(), v
    # pd:eq:ladder; the centred bounds never exceed the quotient bound
    assert (g["L_raw"] <= g["L_q"]).all() and (g["L_mean"] <= g["L_q"]).all() and (g["L_LSE"] <= g["L_q"]).all()
    assert (g["L_q"] <= g["L_dir"]).all()
    assert (g["L_dir"] <= g["L_res"] + tol).all()
    # pd:eq:centering: 2‖δ - b1‖∞ = B_q + 2|mid - b|, B_q = 2 min_b ‖δ - b1‖∞
    _close(g["B_raw"], g["B_q"] + 2 * np.abs(g["mid"]), "centering raw")
    _close(g["B_mean"], g["B_q"] + 2 * np.abs(g["mid"] - g["b_mean"]), "centering mean")
    _close(g["A_tr"], g["B_raw"] - g["B_q"], "A_tr")
    # pd:eq:pairing and pd:eq:reserve's two forms (reference)
    _close(ref["A_pair"], ref["A_pair_min"], "pairing")
    _close(ref["R"], ref["R_gap"], "reserve forms")


@settings(SETTINGS, max_examples=45)
@given(cases())
def test_earliest_depths_and_areas_match_reference(case):
    ds = case.dataset()
    D = earliest_depths(ds, case.grid, endpoint=case.T)
    dense, sparse = depth_area(D, "dense"), depth_area(D, "sparse")
    summ = question_summary(D)
    assert all(x[v].chunks is not None for x in (D, dense, sparse, summ) for v in x.data_vars)
    D, dense, sparse, summ = compute_together(D, dense, sparse, summ)

    Dref, fragile = ref_earliest(case.score, case.K, case.depths, case.T, case.grid)
    for j in METHODS:
        got, want = D[f"D_{j}"].values, Dref[j]
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        if j in EXACT:
            assert same.all(), (j, got, want)
        else:  # mean/LSE centres are inexact: only knife-edge trajectories may differ
            assert (same | fragile[j]).all(), (j, got, want)
    W, Ws = ref_area(Dref, case.T, case.n_arr), ref_area_sparse(Dref, case.T, case.grid, case.n_arr)
    for j in METHODS:
        _close(dense[f"W_{j}"].values, sparse[f"W_{j}"].values, f"dense/sparse W_{j}")
        _close(W[j], Ws[j], f"reference dense/sparse W_{j}")
        if j in EXACT or not fragile[j].any():
            _close(dense[f"W_{j}"].values, W[j], f"W_{j}")

    # pd:cor:depth nesting and the envelope, on every trajectory
    d = {j: D[f"D_{j}"].values for j in DEPTH_METHODS}
    fin = np.isfinite(d["raw"])
    for j in DEPTH_METHODS:
        np.testing.assert_array_equal(np.isfinite(d[j]), fin)
        assert ((d[j][fin] >= min(case.grid, default=case.T)) & (d[j][fin] <= case.T)).all()
    f = {j: v[fin] for j, v in d.items()}
    assert (f["raw"] >= f["q"]).all() and (f["q"] >= f["dir"]).all() and (f["dir"] >= f["res"]).all()
    np.testing.assert_array_equal(f["env"], np.minimum(f["mean"], f["LSE"]))
    assert (f["q"] <= f["env"]).all() and (f["env"] <= f["mean"]).all() and (f["env"] <= f["LSE"]).all()
    assert (f["mean"] >= f["q"]).all() and (f["LSE"] >= f["q"]).all()
    # r3:eq:depth-components: Δ_tr + Δ_dir + Δ_pair = W_res - W_raw (per question and overall)
    s = {v: summ[v].values for v in summ.data_vars}
    _close(s["delta_tr"] + s["delta_dir"] + s["delta_pair"], s["W_res"] - s["W_raw"], "increments")
    _close(
        (dense.W_q - dense.W_raw) + (dense.W_dir - dense.W_q) + (dense.W_res - dense.W_dir),
        dense.W_res - dense.W_raw, "area increments",
    )
    # nested areas: W_raw ≤ W_q ≤ W_dir ≤ W_res and W_env ≤ W_q
    w = {j: dense[f"W_{j}"].values for j in DEPTH_METHODS}
    ok = np.isfinite(w["raw"])
    assert (w["raw"][ok] <= w["q"][ok] + 1e-12).all() and (w["q"][ok] <= w["dir"][ok] + 1e-12).all()
    assert (w["dir"][ok] <= w["res"][ok] + 1e-12).all() and (w["env"][ok] <= w["q"][ok] + 1e-12).all()


@settings(SETTINGS, max_examples=25)
@given(cases())
def test_dense_and_sparse_agree_on_native_grid(case):
    ds = case.dataset()
    D = earliest_depths(ds, "native", endpoint=case.T)
    dense, sparse = compute_together(depth_area(D, "dense"), depth_area(D, "sparse"))
    for j in DEPTH_METHODS:
        _close(dense[f"W_{j}"].values, sparse[f"W_{j}"].values, j)
    # the cumulative curves end at the terminal fallback F_j(T) = 1
    F = depth_cdf(D).compute()
    for j in DEPTH_METHODS:
        last = F[f"F_{j}"].sel(depth=case.T).values
        assert np.all((last == 1.0) | np.isnan(last))


# ----------------------------------------------------------------------------------------------
# hand-made cases
# ----------------------------------------------------------------------------------------------
def _store(rows, K=None, arrangements=1):
    """A store from ``rows``: per question a list of per-depth score vectors (depths 1..T)."""
    n = len(rows)
    if arrangements == 1:  # rows[i] is one trajectory; else rows[i][a] is arrangement a's
        rows = [[r] for r in rows]
    T = len(rows[0][0])
    c = max(len(v) for q in rows for arr in q for v in arr)
    s = np.full((n, T, c, arrangements, 1), np.nan)
    for i, q in enumerate(rows):
        for a, arr in enumerate(q):
            for t, v in enumerate(arr):
                s[i, t, : len(v), a, 0] = v
    K = np.array(K if K is not None else [len(q[0][0]) for q in rows])
    return xr.Dataset(
        {"score": (("question", "depth", "candidate", "arrangement", "precision"), s)},
        coords={
            "question": [f"q{i}" for i in range(n)], "n_candidates": ("question", K),
            "task": ("question", ["t"] * n), "depth": np.arange(1, T + 1),
            "candidate": np.arange(c), "arrangement": np.arange(arrangements), "precision": ["p"],
        },
    ).chunk({"question": 1})


def _at(ds, var, t=1):
    return float(ladder(ds).sel(depth=t)[var].values.ravel()[0])


def test_pure_translation():
    # s_t = (1, 0, -1), s_T = s_t + 0.75·1, so δ = 0.75·1: every comparison is unchanged.
    # B_q = osc(δ) = 0, mid = 0.75, B_raw = 2|0.75| = 1.5 = A_tr; winner 0 unique with
    # m = min(1, 2) = 1, u_b = 0 so h = 0, R = min(1, 2) = 1; A_dir = B_q - h = 0,
    # A_pair = R - m + h = 0. The mean and LSE centres both equal 0.75: B_mean = B_LSE = 0.
    # Ladder: L_raw = 1 - 1.5 = -0.5 (fails), L_q = L_mean = L_LSE = L_dir = L_res = 1 (pass).
    ds = _store([[[1.0, 0.0, -1.0], [1.75, 0.75, -0.25]]])
    lad = ladder(ds).compute().isel(question=0, depth=0, arrangement=0, precision=0)
    want = dict(m=1, h=0, R=1, B_q=0, B_raw=1.5, A_tr=1.5, A_dir=0, A_pair=0, B_mean=0, B_LSE=0,
                L_raw=-0.5, L_q=1, L_dir=1, L_res=1, mid=0.75, b_mean=0.75)
    for k, v in want.items():
        assert float(lad[k]) == pytest.approx(v, abs=1e-12), k
    assert bool(lad["unique"]) and int(lad["winner"]) == 0
    D = earliest_depths(ds, [1]).compute().isel(question=0, arrangement=0, precision=0)
    assert float(D.D_raw) == 2 and all(float(D[f"D_{j}"]) == 1 for j in ("mean", "LSE", "env", "q", "dir", "res"))


def test_winner_directed_update_h_negative():
    # s_t = (2, 1, 0), s_T = (4, 1, 0): δ = (2, 0, 0). Winner 0 (unique), g = (1, 2), m = 1;
    # u_b = δ_b - δ_0 = -2 for both, h = -2 < 0: every gap grew. B_q = 2, B_raw = 4, mid = 1.
    # L_raw = -3, L_q = -1 (both fail), L_dir = m - h = 3 > 0 (pass), R = min(3, 4) = 3.
    # Slacks: A_tr = |2 + 0| = 2, A_dir = 2 - (-2) = 4, A_pair = 3 - 1 - 2 = 0 (competitor 1
    # attains both g = m and u = h, pd:eq:pairing); sum 6 = R - (m - B_raw) = 3 + 3.
    ds = _store([[[2.0, 1.0, 0.0], [4.0, 1.0, 0.0]]])
    lad = ladder(ds).compute().isel(question=0, depth=0, arrangement=0, precision=0)
    for k, v in dict(m=1, h=-2, R=3, B_q=2, B_raw=4, L_q=-1, L_dir=3, A_tr=2, A_dir=4, A_pair=0).items():
        assert float(lad[k]) == pytest.approx(v, abs=1e-12), k
    D = earliest_depths(ds, [1]).compute().isel(question=0, arrangement=0, precision=0)
    assert (float(D.D_raw), float(D.D_q), float(D.D_dir), float(D.D_res)) == (2, 2, 1, 1)


def test_competitor_pairing():
    # s_t = (3, 2, 0): g = (1, 3), m = 1 at competitor 1. s_T = (3, 2, 2): δ = (0, 0, 2),
    # u = (0, 2), h = 2 at competitor 2 — the extrema sit on different competitors.
    # L_dir = m - h = -1 fails, but R = min(3-2, 3-2) = 1 > 0 passes: m ≤ h and u_b < g_b
    # for every b (the pairing relaxation). A_pair = R - m + h = 2 = min_b[(g_b-m)+(h-u_b)]
    # = min(0 + 2, 2 + 0); A_tr = |2 + 0| = 2, A_dir = 2 - 2 = 0; sum 4 = 1 - (1 - 4).
    ds = _store([[[3.0, 2.0, 0.0], [3.0, 2.0, 2.0]]])
    lad = ladder(ds).compute().isel(question=0, depth=0, arrangement=0, precision=0)
    for k, v in dict(m=1, h=2, R=1, A_pair=2, A_tr=2, A_dir=0, B_raw=4, L_dir=-1).items():
        assert float(lad[k]) == pytest.approx(v, abs=1e-12), k
    D = earliest_depths(ds, [1]).compute().isel(question=0, arrangement=0, precision=0)
    assert (float(D.D_dir), float(D.D_res)) == (2, 1)


def test_tied_winner_never_qualifies():
    # s_t = (1, 1, 0) has two maximisers: the tie rule picks identity 0 and m = 0, and the
    # depth is excluded from every test even though R = 5 > 0 at s_T = (5, 0, 0).
    ds = _store([[[1.0, 1.0, 0.0], [5.0, 0.0, 0.0]]])
    lad = ladder(ds).compute().isel(question=0, depth=0, arrangement=0, precision=0)
    assert not bool(lad["unique"]) and int(lad["winner"]) == 0 and float(lad["m"]) == 0
    assert float(lad["R"]) == 5
    D = earliest_depths(ds, [1]).compute()
    assert all(float(D[f"D_{j}"].values.ravel()[0]) == 2 for j in DEPTH_METHODS)


def test_padding_is_ignored():
    # K = 2 in a 4-candidate store: the padded candidates (NaN, or even a huge finite value in
    # one slot) must not change anything; compare with the same question stored with K = 2.
    base = _store([[[1.0, 0.5], [0.2, 0.9]]])
    padded = _store([[[1.0, 0.5, np.nan, 99.0], [0.2, 0.9, np.nan, -99.0]]], K=[2])
    a, b = ladder(base).compute(), ladder(padded).compute()
    for v in FLOATS + ("unique", "winner", "valid"):
        np.testing.assert_array_equal(a[v].values, b[v].values, err_msg=v)


def test_depth_area_worked_example():
    # T = 4, grid {1, 2, 3}. Question 0, arrangement 0: a pure translation at every depth,
    # so D_q = 1; arrangement 1: a tie at every depth, so D_q = T = 4. Question 1: ties
    # throughout, D_q = 4 in both arrangements. Per question W_q = 1 - mean_a D/T:
    # q0 = 1 - 2.5/4 = 0.375, q1 = 0; W_q = 0.1875. Sparse form: F(1) = F(2) = F(3) = 0.25,
    # (1·0.25 + 1·0.25 + 1·0.25)/4 = 0.1875.
    trans = [[1.0, 0.0], [1.5, 0.5], [2.0, 1.0], [2.5, 1.5]]
    tie = [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [2.0, 1.0]]
    ds = _store([[trans, tie], [tie, tie]], arrangements=2)
    D = earliest_depths(ds, "native")
    assert D.attrs["grid"] == [1, 2, 3]
    dq = D.D_q.values[:, :, 0]
    np.testing.assert_array_equal(dq, [[1, 4], [4, 4]])
    for form in ("dense", "sparse"):
        assert float(depth_area(D, form).W_q.values[0]) == pytest.approx(0.1875, abs=1e-15)
    s = question_summary(D).compute()
    np.testing.assert_allclose(s.W_q.values[:, 0], [0.375, 0.0])


def test_incomplete_question_left_out():
    # An all-NaN question (never written) has D = NaN and is excluded: W equals that of the
    # complete question alone.
    trans = [[1.0, 0.0], [1.5, 0.5]]
    ds = _store([trans, [[np.nan, np.nan], [np.nan, np.nan]]])
    D = earliest_depths(ds, [1]).compute()
    assert np.isnan(D.D_q.values[1]).all() and D.D_q.values[0].item() == 1
    assert float(depth_area(D).W_q.values[0]) == pytest.approx(0.5)


def test_empty_grid_gives_zero_area():
    # 𝒯 = ∅: D_j = T and W_j = 0 (the empty-sum convention of pd:eq:sparse-area).
    ds = _store([[[1.0, 0.0], [1.5, 0.5]]])
    D = earliest_depths(ds, [])
    assert (D.D_res.values == 2).all()
    for form in ("dense", "sparse"):
        assert float(depth_area(D, form).W_res.values[0]) == 0.0


def test_endpoint_option():
    # With endpoint 2 on a 3-depth store, depth 3 is ignored and δ = s_2 - s_1.
    ds = _store([[[1.0, 0.0], [1.5, 0.5], [0.0, 9.0]]])
    lad = ladder(ds, endpoint=2).compute()
    assert list(lad.depth.values) == [1] and lad.attrs["endpoint"] == 2
    assert float(lad.B_q.values.ravel()[0]) == 0.0
    with pytest.raises(ValueError, match="endpoint 5 is not a recorded depth"):
        ladder(ds, endpoint=5)
    with pytest.raises(ValueError, match="not below the endpoint"):
        earliest_depths(ds, "2", endpoint=2)


# ----------------------------------------------------------------------------------------------
# laziness
# ----------------------------------------------------------------------------------------------
def test_lazy_until_computed(small_store):
    from depthtraj.store import open_store

    ds = open_store(small_store)

    def boom(block):
        raise AssertionError("a score chunk was computed while building the analysis")

    trap = ds.assign(score=ds["score"].copy(data=ds["score"].data.map_blocks(boom, dtype=ds["score"].dtype)))
    lad = ladder(trap)
    D = earliest_depths(trap, "quarter")
    objs = [lad, D, depth_area(D), depth_area(D, "sparse"), depth_cdf(D), question_summary(D), ladder_cells(lad)]
    for obj in objs:
        for v in obj.data_vars:
            assert obj[v].chunks is not None, v
    # work is per question chunk: outputs keep the analysis chunks (small store chunks merged)
    assert lad["m"].chunks[0] == score_of(ds).chunks[0] == (64,)
    assert D["D_q"].chunks[0] == score_of(ds).chunks[0]
    big = score_of(ds.score.chunk({"question": 16}), )
    from depthtraj.analysis.core import data

    old = data.CHUNK_BYTES
    data.CHUNK_BYTES = 16 * 8 * 5 * 2 * 2 * 4  # 16 questions of this store per chunk
    try:
        assert score_of(ds).chunks[0] == (16, 16, 16, 16)  # store chunks already at the target
    finally:
        data.CHUNK_BYTES = old
    assert big.chunks[0] == (64,)
    with pytest.raises(AssertionError, match="score chunk was computed"):
        depth_area(D).compute()
