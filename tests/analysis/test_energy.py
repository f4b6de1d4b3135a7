"""§5 composition of score updates: mass and concentration, energies and their signed split,
attenuation and weighting, the vocabulary-invariance check — against the slow reference on random
stores, the paper's identities, hand-made cases with their derivations, and laziness."""

from __future__ import annotations

import math

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from depthtraj.analysis import compute_together
from depthtraj.analysis.composition.energy import (
    CELL_STATISTICS,
    ENERGY_FIELDS,
    SHARE_PARTS,
    attenuation,
    attenuation_summary,
    cell_statistics,
    energies,
    energy_kernel,
    energy_shares,
    energy_summary,
    energy_totals_kernel,
    mass_concentration,
    vocabulary_invariance,
)

from .reference_energy import (
    FIELDS,
    ref_mass,
    ref_question_energies,
    ref_trajectory_energies,
    ref_weighting,
    ref_windows,
)
from .strategies import cases

SETTINGS = settings(max_examples=20, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def _close(got, want, what, atol=1e-9):
    np.testing.assert_allclose(got, want, rtol=0, atol=atol, equal_nan=True, err_msg=what)


@st.composite
def stores(draw, max_n: int = 5):
    """A random store (tests/analysis/strategies.py) where each question uses arrangements
    0..A_i-1 (the rest NaN, spec §4), and those used arrangements ``[question, arrangement]``."""
    case = draw(cases(max_n=max_n))
    A = case.score.shape[3]
    n_used = np.array([draw(st.integers(1, A)) if draw(st.booleans()) else A for _ in case.K])
    if case.n_arr is not None:  # the store's arrangement_order says which are used
        n_used = case.n_arr = np.minimum(n_used, case.n_arr)
    used = np.arange(A)[None, :] < n_used[:, None]
    case.score = np.where(used[:, None, None, :, None], case.score, np.nan).astype(case.score.dtype)
    return case, used


def _adjacent(case):
    below = [t for t in case.depths if t <= case.T]
    return list(zip(below[:-1], below[1:]))


# ----------------------------------------------------------------------------------------------
# against the reference, and the identities
# ----------------------------------------------------------------------------------------------
@SETTINGS
@given(stores())
def test_energies_match_reference_and_identities(drawn):
    case, used = drawn
    pairs = _adjacent(case)
    assume(pairs)
    ds = case.dataset()
    mc = mass_concentration(ds)
    E = energies(ds, endpoint=case.T)
    S = energy_summary(ds, endpoint=case.T)
    sh = energy_shares(ds, endpoint=case.T)
    assert all(x.chunks is not None for obj in (mc, E, S, sh) for x in obj.data_vars.values())
    mc, E, S, sh = compute_together(mc, E, S, sh)

    ref = ref_mass(case.score, case.K)
    for v in ("log_M", "kappa", "pi"):
        _close(mc[v].values, ref[v], v)
    _close(mc["M"].values, np.exp(ref["log_M"]), "M")
    assert (mc["kappa"].values[np.isfinite(mc["kappa"].values)] >= -1e-12).all()  # a KL divergence

    traj = ref_trajectory_energies(case.score, case.K, case.depths, pairs)
    for f in FIELDS:
        _close(E[f].values, traj[f], f"per trajectory {f}")
    per_q = ref_question_energies(case.score, case.K, case.depths, pairs, used)
    for f in FIELDS:
        _close(S[f].values, per_q[f], f"per question {f}")
    np.testing.assert_array_equal(np.isfinite(S["complete_energy"].values), np.isfinite(per_q["E"]).all(-1))

    # pd:eq:energies and pd:eq:signed-components, as floating-point checks (Q is summed directly)
    scale = 1e-12 * np.maximum(1.0, np.nan_to_num(E["E"].values))
    ok = np.isfinite(E["E"].values)
    assert (np.abs(E["E"] - E["Q"] - E["C"]).values[ok] <= scale[ok]).all()
    split = E["Q"] + E["E_M"] + E["E_kappa"] + E["E_cross"]
    size = np.maximum(1.0, E["E_M"].values[ok] + E["E_kappa"].values[ok])  # the cross term may cancel both
    assert (np.abs(E["E"] - split).values[ok] <= 1e-9 * size).all()
    _close(E["c"].values, (E["dlogM"] - E["dkappa"]).values, "c = Δlog M - Δκ", atol=1e-9)
    sign = np.sign(E["E_cross"].values[ok]) == -np.sign((E["dlogM"] * E["dkappa"]).values[ok])
    assert sign.all()

    # shares per interval (pd:fig:mass): the one-pass totals agree with the per-question route and
    # the four signed shares sum to one wherever Σ E > 0
    cells = cell_statistics(S, {k: v for k, v in CELL_STATISTICS.items() if k.startswith(("mean_", "share_"))},
                            by="task").compute()
    for name in [f"share_{x}" for x in SHARE_PARTS] + ["share_C"] + [f"mean_{x}" for x in ENERGY_FIELDS]:
        _close(sh[name].values, cells[name].transpose(*sh[name].dims).values, name, atol=1e-12)
    total = sum(sh[f"share_{x}"] for x in SHARE_PARTS)
    defined = np.isfinite(total.values)
    _close(total.values[defined], 1.0, "shares sum to one", atol=1e-12)
    assert defined.any() == (np.nansum(cells["mean_E"].values) > 0)


@st.composite
def windowed(draw):
    """A random store with an early and a late window of interval starts (step h)."""
    case, used = draw(stores())
    below = [t for t in case.depths if t <= case.T]
    steps = sorted({u - t for t in below for u in below if u > t})
    assume(steps)  # at least one interval below T
    h = draw(st.sampled_from(steps))
    starts = [t for t in below if t + h in below]
    early = draw(st.lists(st.sampled_from(starts), min_size=1, unique=True))  # windows may overlap
    late = draw(st.lists(st.sampled_from(starts), min_size=1, unique=True))
    return case, used, (sorted(early), sorted(late), h)


@SETTINGS
@given(windowed())
def test_attenuation_matches_reference_and_weight_identity(drawn):
    case, used, (early, late, h) = drawn
    ds = case.dataset()
    summ = attenuation_summary(ds, early, late, h, endpoint=case.T)
    cells = attenuation(ds, early, late, h, endpoint=case.T, by="task")
    summ, cells = compute_together(summ, cells)
    ref, complete = ref_windows(case.score, case.K, case.depths, [(t, t + h) for t in early],
                                [(t, t + h) for t in late], used)
    for v, want in ref.items():
        _close(summ[v].values, want, v)
    np.testing.assert_array_equal(np.isfinite(summ["complete_windows"].values), complete)
    for w in ("early", "late"):
        zero = np.where(complete, (ref[f"E_{w}"] == 0).astype(float), np.nan)
        _close(summ[f"zero_{w}"].values, zero, f"zero_{w}")

    tasks = np.array(case.tasks)
    for ci, task in enumerate(cells["task"].values):
        for p in range(case.score.shape[4]):
            rows = (tasks == task) & complete[:, p]
            got = {k: float(cells[k].values[ci, p]) for k in cells.data_vars}
            if not rows.any():
                assert math.isnan(got["D_pool_early"]) and got["n_questions_windows"] == 0
                continue
            res = {}
            for w in ("early", "late"):
                D_pool, D_eq, cov = ref_weighting(ref[f"E_{w}"][rows, p], ref[f"Q_{w}"][rows, p])
                res[w] = (D_pool, D_eq)
                _close(got[f"D_pool_{w}"], float(D_pool) if D_pool is not None else np.nan, f"D_pool_{w}")
                _close(got[f"D_eq_{w}"], float(D_eq) if D_eq is not None else np.nan, f"D_eq_{w}")
                assert got[f"n_zero_{w}"] == float((ref[f"E_{w}"][rows, p] == 0).sum())
                # pd:eq:weight: D_pool - D_eq = Cov_i(E, q)/mean E, the covariance computed exactly
                _close(got[f"weight_{w}"], float(cov) if cov is not None else np.nan, f"weight_{w}", atol=1e-12)
                C = ref[f"C_{w}"][rows, p]
                Ek = ref[f"E_kappa_{w}"][rows, p]
                want = math.fsum(Ek) / math.fsum(C) if math.fsum(C) != 0 else np.nan
                _close(got[f"E_M_err_{w}"], want, f"E_M_err_{w}")
            qe, ql = ref["Q_early"][rows, p], ref["Q_late"][rows, p]
            _close(got["rho_Q"], math.fsum(ql) / math.fsum(qe) if math.fsum(qe) != 0 else np.nan, "rho_Q")
            if res["early"][0] is not None and res["late"][0] is not None:
                _close(got["delta_D_pool"], float(res["late"][0] - res["early"][0]), "delta_D_pool")
                # pd:eq:attenuation-ratios: D_pool rises iff ρ_Q > ρ_C (positive early energies)
                if min(math.fsum(qe), math.fsum(ref["C_early"][rows, p])) > 0 and abs(got["delta_D_pool"]) > 1e-12:
                    assert (got["delta_D_pool"] > 0) == (got["rho_Q"] > got["rho_C"])


# ----------------------------------------------------------------------------------------------
# hand-made cases
# ----------------------------------------------------------------------------------------------
def _one(scores, K=None, tasks=None):
    """A dataset from a [question, depth, candidate] array (one arrangement, one arm)."""
    s = np.asarray(scores, dtype=np.float64)[..., None, None]
    n, d, c = s.shape[:3]
    K = np.full(n, c) if K is None else np.asarray(K)
    return xr.Dataset(
        {"score": (("question", "depth", "candidate", "arrangement", "precision"), s)},
        coords={"question": [f"q{i}" for i in range(n)], "n_candidates": ("question", K),
                "task": ("question", tasks or ["arc"] * n), "depth": np.arange(1, d + 1),
                "candidate": np.arange(c), "arrangement": [0], "precision": ["bf16"]},
    ).chunk({"question": 1})


def test_pure_common_update_worked_example():
    # p_r = (0.2, 0.1), p_t = (0.4, 0.2): M doubles (0.3 -> 0.6), π = (2/3, 1/3) is unchanged, so
    # δ = log 2 · 1: c = Δlog M = log 2, Δκ = 0, Q = 0, C = E = E_M = 2 (log 2)², E_κ = E_× = 0.
    ds = _one([[np.log([0.2, 0.1]), np.log([0.4, 0.2])]])
    E = energies(ds).compute().isel(question=0, interval=0, arrangement=0, precision=0)
    l2 = math.log(2)
    want = dict(c=l2, Q=0.0, C=2 * l2**2, E=2 * l2**2, dlogM=l2, dkappa=0.0, E_M=2 * l2**2, E_kappa=0.0, E_cross=0.0)
    for f, x in want.items():
        assert math.isclose(float(E[f]), x, abs_tol=1e-15), f
    mc = mass_concentration(ds).compute().isel(question=0, arrangement=0, precision=0)
    np.testing.assert_allclose(mc["M"].values, [0.3, 0.6], rtol=1e-15)
    np.testing.assert_allclose(mc["pi"].values, [[2 / 3, 1 / 3]] * 2, rtol=1e-15)
    # κ = ½ log(½ / ⅔) + ½ log(½ / ⅓) = ½ log(9/8)
    np.testing.assert_allclose(mc["kappa"].values, [0.5 * math.log(9 / 8)] * 2, rtol=1e-14)
    assert mc.attrs["interpretation"] == "probability"


def test_cancelling_mass_and_concentration_worked_example():
    # s_r = (0, 0), s_t = (1, -1) (K = 2): δ = (1, -1), c = 0, Q = E = 2, C = 0. Δlog M =
    # log(e + 1/e) - log 2 = log cosh 1 = Δκ, so E_M = E_κ = 2 log² cosh 1 and E_× = -4 log² cosh 1
    # cancels both: the common component is zero although mass and concentration both moved.
    ds = _one([[[0.0, 0.0], [1.0, -1.0]]])
    E = energies(ds).compute().isel(question=0, interval=0, arrangement=0, precision=0)
    lc = math.log(math.cosh(1.0))
    for f, x in dict(c=0.0, Q=2.0, C=0.0, E=2.0, dlogM=lc, dkappa=lc, E_M=2 * lc**2, E_kappa=2 * lc**2,
                     E_cross=-4 * lc**2).items():
        assert math.isclose(float(E[f]), x, abs_tol=1e-15), f


def test_zero_energy_question_leaves_equal_question_share_undefined():
    # question 0 does not move in the early window (E = 0: q undefined); question 1 moves by
    # (1, 0) then (0, 1) (Q = C = 1/2 in both windows). The pooled share is defined
    # (ΣQ/ΣE = (0 + ½)/(0 + 1) = ½), the equal-question share is not, and is never filled.
    s = np.array([
        [[0, 0], [0, 0], [1, 0], [1, 1]],
        [[0, 0], [1, 0], [1, 1], [2, 1]],
    ], dtype=float)
    ds = _one(s)
    cells = attenuation(ds, "1", "3", 1, by="task").compute().isel(task=0, precision=0)
    summ = attenuation_summary(ds, "1", "3", 1).compute().isel(precision=0)
    assert np.isnan(summ["q_early"].values[0]) and summ["zero_early"].values.tolist() == [1.0, 0.0]
    assert float(cells["D_pool_early"]) == 0.5 and float(cells["n_zero_early"]) == 1
    assert np.isnan(float(cells["D_eq_early"])) and np.isnan(float(cells["weight_early"]))
    assert np.isnan(float(cells["delta_D_eq"])) and float(cells["D_eq_late"]) == 0.5
    assert float(cells["delta_D_pool"]) == 0.0


def test_incomplete_question_is_nan_and_left_out():
    s = np.array([[[0, 0], [1, 0], [1, 1]], [[0, 0], [np.nan, 0], [1, 1]]], dtype=float)
    S = energy_summary(_one(s)).compute().isel(precision=0)
    assert np.isnan(S["E"].values[1]).all() and np.isnan(S["complete_energy"].values[1])
    sh = energy_shares(_one(s)).compute()
    assert float(sh["n"].values.ravel()[0]) == 1.0
    np.testing.assert_allclose(sh["mean_E"].values.ravel(), [1.0, 1.0])


def test_kernels_work_on_numpy_chunks():
    # the pass contract: plain NumPy in, per-question / per-cell NumPy out, the two consistent
    rng = np.random.default_rng(1)
    s = rng.normal(size=(6, 4, 3, 2, 2)).astype(np.float32)
    K = np.array([3, 2, 3, 3, 2, 3])
    s[K == 2, :, 2] = np.nan
    kw = dict(upos=np.array([0, 1, 2, 3]), ia=np.array([0, 1, 2]), ib=np.array([1, 2, 3]))
    per_q = energy_kernel(s, K, **kw)
    codes = np.array([0, 1, 0, 1, 1, 0])
    tot = energy_totals_kernel(s, K, codes, 2, **kw)
    for g in range(2):
        _close(tot["sum_E"][g], per_q["E"][codes == g].sum(0), "totals", atol=1e-12)
        _close(tot["n"][g], (codes == g).sum() * np.ones(2), "n")
    assert per_q["E"].shape == (6, 2, 3)


# ----------------------------------------------------------------------------------------------
# vocabulary invariance and the scope of the probability reading
# ----------------------------------------------------------------------------------------------
def test_vocabulary_invariance(small_store):
    ds = xr.open_zarr(small_store)
    v = vocabulary_invariance(ds)
    assert all(x.chunks is not None for x in v.data_vars.values())
    v = v.compute()
    s = ds["score"].values.astype(np.float64)
    # both gaps are bounded by twice the rounding of z = s + logsumexp in float32 (2 eps max|z|)
    z = (ds["score"].values + ds["logsumexp"].values[:, :, None]).astype(np.float64)
    eps = float(np.finfo(np.float32).eps)
    bound = 2 * eps * np.nanmax(np.abs(z), axis=(1, 2, 3))[:, None] + 1e-12
    assert (v["contrast_gap"].values <= bound).all() and (v["osc_gap"].values <= bound).all()
    assert (v["contrast_gap"].values > 0).any()  # float32 rounding does show
    # the label store's candidate-set mass is at most one (spec DT-DATA-004) and is the reference's
    ref = ref_mass(s, ds["n_candidates"].values)
    _close(v["max_log_mass"].values, np.nanmax(ref["log_M"], axis=(1, 2)), "max log M")
    assert (v["max_log_mass"].values <= 1e-6).all()
    # with float64 scores and a zero normaliser, z = s: no gap at all
    ds64 = ds.assign(score=ds["score"].astype(np.float64), logsumexp=ds["logsumexp"].astype(np.float64) * 0.0)
    v64 = vocabulary_invariance(ds64).compute()
    assert float(v64["contrast_gap"].max()) == 0.0 and float(v64["osc_gap"].max()) == 0.0


@pytest.mark.parametrize("by", ["task", "subject"])
def test_vocabulary_cells_of_the_pass_are_the_library_maxima(small_store, by):
    """The engine's vocabulary part (cell maxima merged across chunks by fmax) gives the very
    numbers of the library path, vocabulary_invariance then cell_statistics' max rules, whatever
    the chunking; a question with no finite score leaves no value, a cell of such questions NaN."""
    from depthtraj.analysis import score_of
    from depthtraj.analysis.core.grid import parse_grid
    from depthtraj.analysis.engine import finish_pass, store_pass

    ds = xr.open_zarr(small_store)
    s = ds["score"].values.copy()
    s[:3] = np.nan  # three questions without a value at all
    ds = ds.assign(score=(ds["score"].dims, s)).chunk({"question": 16})
    if by == "subject":  # the first three questions alone in their cell
        ds = ds.assign_coords(subject=("question", np.array(["void" if i < 3 else str(v) for i, v in enumerate(ds["subject"].values.tolist())], dtype=object)))
    rules = {n: CELL_STATISTICS[n] for n in ("max_contrast_gap", "max_osc_gap", "max_tolerance", "max_log_mass")}
    want = cell_statistics(vocabulary_invariance(ds), rules, by=by).compute()
    rec = [int(t) for t in ds["depth"].values]
    for rows in (5, 16, 64):
        score = score_of(ds).chunk({"question": rows})
        d, meta = store_pass(score, [parse_grid("quarter", rec, rec[-1])], by=by, draws=0, ds=ds, vocabulary=True)
        names, maxes = finish_pass(d.compute(), meta).extra["vocabulary"]
        assert names == [str(c) for c in want[by].values]
        for j, v in enumerate(rules):
            np.testing.assert_array_equal(maxes[..., j], want[v].transpose(by, "precision").values, err_msg=v)
    if by == "subject":
        assert np.isnan(maxes[names.index("void")]).all()
    # memory bound: each chunk task reads one block of logsumexp beside what a pass without the
    # part reads, never the whole variable
    from dask.core import get_dependencies

    def deps(delayed):
        graph = dict(delayed.__dask_graph__())
        return sorted(len(get_dependencies(graph, k)) for k in graph if str(k).startswith("_chunk"))

    score = score_of(ds).chunk({"question": 5})
    grid = [parse_grid("quarter", rec, rec[-1])]
    with_part, _ = store_pass(score, grid, by=by, draws=0, ds=ds, vocabulary=True)
    bare, _ = store_pass(score, grid, by=by, draws=0, ds=ds, vocabulary=False)
    assert deps(with_part) == [n + 1 for n in deps(bare)] and len(deps(bare)) == 13
    # without the Dataset (a bare score) the part is left out
    d, meta = store_pass(score_of(ds), [parse_grid("quarter", rec, rec[-1])], draws=0)
    assert "vocabulary" not in finish_pass(d.compute(), meta).extra


def test_scope_of_the_probability_interpretation(tmp_path):
    from depthtraj.testing import synthetic_store

    text = xr.open_zarr(synthetic_store(tmp_path / "t.zarr", 8, endpoint=3, readout="text", chunk_size=8))
    for obj in (mass_concentration(text), energies(text), energy_summary(text), energy_shares(text)):
        assert obj.attrs["interpretation"] == "algebraic" and "pd:app:mass-interpretation" in obj.attrs["scope"]
    assert mass_concentration(text)["M"].attrs["units"] == "1"


# ----------------------------------------------------------------------------------------------
# errors and laziness
# ----------------------------------------------------------------------------------------------
def test_bad_arguments_raise(small_store):
    ds = xr.open_zarr(small_store)
    with pytest.raises(ValueError, match="not recorded"):
        energies(ds, [(1, 9)])
    with pytest.raises(ValueError, match="precede"):
        energies(ds, [(3, 2)])
    with pytest.raises(ValueError, match="'adjacent'"):
        energies(ds, "neighbours")
    with pytest.raises(ValueError, match="not recorded"):
        attenuation(ds, "4:7", "24:27", 4)
    with pytest.raises(ValueError, match="step"):
        attenuation(ds, "1:2", "4:5", 0)
    with pytest.raises(ValueError, match="not understood"):
        attenuation(ds, "early", "4:5", 1)
    with pytest.raises(ValueError, match="logsumexp"):
        vocabulary_invariance(ds.drop_vars("logsumexp"))


def test_lazy_until_computed(small_store):
    from depthtraj.analysis import score_of

    ds = xr.open_zarr(small_store)
    summ = energy_summary(ds)
    att = attenuation_summary(ds, "1:2", "5:6", 2)
    for obj in (summ, att, energy_shares(ds), attenuation(ds, "1:2", "5:6", 2), mass_concentration(ds)):
        for name, x in obj.data_vars.items():
            assert x.chunks is not None, name
    assert summ["E"].chunks[0] == score_of(ds).chunks[0]  # one task per question chunk


# ----------------------------------------------------------------------------------------------
# one compute for several collections
# ----------------------------------------------------------------------------------------------
def test_compute_together_keeps_every_result_in_its_slot(small_store):
    """dask 2026.8 hands interleaved collection kinds (Delayed, array, Delayed) back in grouped
    order; compute_together must not: each value lands in its argument's slot."""
    import itertools

    import dask
    import dask.array as da

    ds = xr.open_zarr(small_store)
    objs = {"D": dask.delayed(lambda: "D")(), "E": dask.delayed(lambda: ("E", 1))(),
            "A": da.arange(6, chunks=2).sum() + 100, "X": ds["logsumexp"].max(), "P": 7}

    def name(v):
        if isinstance(v, xr.DataArray):
            assert v.chunks is None and float(v) == float(ds["logsumexp"].max())
            return "X"
        return {"D": "D", ("E", 1): "E", 115: "A", 7: "P"}[v if not isinstance(v, np.generic) else int(v)]

    for n in (2, 3):  # three are enough to interleave kinds
        for combo in itertools.product(objs, repeat=n):
            got = compute_together(*[objs[c] for c in combo])
            assert "".join(name(v) for v in got) == "".join(combo), combo
    # containers are traversed, as dask.compute does
    (d, (a, p), x), = [compute_together(objs["D"], (objs["A"], 3), [objs["X"]])]
    assert d == "D" and int(a) == 115 and p == 3 and float(x[0]) == float(ds["logsumexp"].max())
