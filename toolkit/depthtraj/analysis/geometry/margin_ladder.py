"""The geometry of prediction stability (paper §3, ``sec:geometry``), lazily over a store.

Per question i, depth t, arrangement and precision arm, with K_i the question's own
``n_candidates`` (candidates past K_i are padding and ignored everywhere), endpoint T and
``δ = s_T - s_t``:

* winner ``a = y_t = argmax_k s_{t,k}``, ties broken towards the lowest candidate identity;
  ``unique`` when the maximum is attained by exactly one candidate;
* ``g_b = s_{t,a} - s_{t,b}``, ``m = min_{b≠a} g_b``, ``u_b = δ_b - δ_a``,
  ``h = max_{b≠a} u_b``, ``R = min_{b≠a}(s_{T,a} - s_{T,b})`` (``pd:eq:gap-update``,
  ``pd:eq:reserve``);
* ``B_raw = 2‖δ‖∞``, ``B_q = osc(δ)``, ``mid(δ)``, ``b_mean = mean(δ)``,
  ``b_LSE = LSE(s_T) - LSE(s_t)``, ``B_c = 2‖δ - b_c 1‖∞`` (``pd:eq:comparison``,
  ``pd:eq:centering``);
* the ladder ``L_raw = m - B_raw ≤ L_q = m - B_q ≤ L_dir = m - h ≤ L_res = R``
  (``pd:eq:ladder``), the centred bounds ``L_mean = m - B_mean``, ``L_LSE = m - B_LSE``, and the
  slacks ``A_tr = |max δ + min δ|``, ``A_dir = B_q - h``, ``A_pair = R - m + h``
  (``pd:eq:slack``), with ``A_tr + A_dir + A_pair = R - (m - B_raw)``;
* earliest qualifying depths ``D_j`` on a candidate grid (``pd:cor:depth``), ``D_env =
  min(D_mean, D_LSE)``, and normalised depth areas ``W_j = 1 - E[D_j]/T``
  (``pd:eq:depth-area``) or their sparse form (``pd:eq:sparse-area``).

Every function takes a Dataset (as from :func:`depthtraj.store.open_store`) or its ``score``
DataArray and returns dask-backed xarray objects with named dims; nothing is computed until the
caller computes. Work happens per question chunk (candidate and depth axes whole), in float64.

Conventions
-----------
* Floating point: the centred radii are computed through the exact identity
  ``B_c = B_q + 2|mid(δ) - b_c|`` (``pd:eq:centering``), and each bound is capped by the one
  above it (``L_dir = min(m - h, R)``, ``L_q = min(m - B_q, L_dir)``, ``L_raw``, ``L_mean``,
  ``L_LSE ≤ L_q``). Both are identities in exact arithmetic; in floating point they keep the
  nesting of ``pd:eq:ladder`` / ``pd:cor:depth`` exact and anchor every test at ``R``, whose
  sign is always exact, so no bound certifies a winner that changes by the endpoint.
* The ladder quantities are computed at every (question, depth, arrangement, arm) whatever the
  winner's uniqueness (with ties, ``a`` is the lowest tied identity and ``m = 0``); the paper's
  tests use them only where ``unique`` holds, and so do :func:`earliest_depths` and the tables.
* ``valid`` is false where K_i < 2 or a score of one of the K_i candidates at t or at T is not
  finite (an incomplete question); there every float output is NaN, ``unique`` is false and
  ``winner`` is -1. An earliest depth D_j is NaN for a (question, arrangement, arm) unless it is
  valid at the endpoint and at every grid depth; such trajectories are left out of areas.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ... import layout as L
from ..core.arrangements import arrangement_average, arrangement_mean, n_arrangements
from ..core.data import recorded_depths, score_of
from ..core.grid import Grid, parse_grid, resolve_endpoint

__all__ = [
    "BOUNDS",
    "DEPTH_METHODS",
    "LADDER_VARS",
    "depth_area",
    "depth_cdf",
    "earliest_depths",
    "earliest_from_ladder",
    "ladder",
]

#: Bounds of the ladder (``pd:eq:ladder``) and the two conventional centres, in the order of
#: the paper's tables: name -> (ladder variable, text).
BOUNDS: dict[str, tuple[str, str]] = {
    "raw": ("L_raw", "m - B_raw (raw radius, b = 0)"),
    "mean": ("L_mean", "m - B_mean (mean-centred radius)"),
    "LSE": ("L_LSE", "m - B_LSE (LSE-centred radius)"),
    "q": ("L_q", "m - B_q (quotient / oscillation radius)"),
    "dir": ("L_dir", "m - h (winner-directed update)"),
    "res": ("L_res", "R (endpoint reserve)"),
}
#: Every earliest-depth method: the six bounds and the per-trajectory envelope of mean/LSE.
DEPTH_METHODS: tuple[str, ...] = ("raw", "mean", "LSE", "env", "q", "dir", "res")

_FLOAT_VARS: dict[str, tuple[str, str]] = {
    # name: (description, paper label)
    "m": ("smallest winner gap min_{b≠a}(s_{t,a} - s_{t,b})", "pd:eq:gap-update"),
    "h": ("largest competitor-relative update max_{b≠a}(δ_b - δ_a)", "pd:eq:gap-update"),
    "R": ("endpoint reserve min_{b≠a}(s_{T,a} - s_{T,b})", "pd:eq:reserve"),
    "B_raw": ("raw radius 2‖δ‖∞", "pd:eq:centering"),
    "B_q": ("quotient radius osc(δ) = max δ - min δ", "pd:eq:comparison"),
    "B_mean": ("mean-centred radius 2‖δ - mean(δ)1‖∞", "pd:eq:centering"),
    "B_LSE": ("LSE-centred radius 2‖δ - (LSE(s_T) - LSE(s_t))1‖∞", "pd:eq:centering"),
    "mid": ("midrange (max δ + min δ)/2", "pd:eq:centering"),
    "b_mean": ("mean centre mean(δ)", "pd:eq:centering"),
    "b_LSE": ("LSE centre LSE(s_T) - LSE(s_t)", "pd:eq:centering"),
    "L_raw": ("raw bound m - B_raw", "pd:eq:ladder"),
    "L_mean": ("mean-centred bound m - B_mean", "pd:eq:centering"),
    "L_LSE": ("LSE-centred bound m - B_LSE", "pd:eq:centering"),
    "L_q": ("quotient bound m - B_q", "pd:eq:ladder"),
    "L_dir": ("directed bound m - h", "pd:eq:ladder"),
    "L_res": ("reserve bound R", "pd:eq:ladder"),
    "A_tr": ("translation slack |max δ + min δ| = B_raw - B_q", "pd:eq:slack"),
    "A_dir": ("direction slack B_q - h", "pd:eq:slack"),
    "A_pair": ("pairing slack R - m + h", "pd:eq:slack"),
}
#: Every variable of :func:`ladder`, in output order.
LADDER_VARS: tuple[str, ...] = tuple(_FLOAT_VARS) + ("unique", "winner", "valid")


# ----------------------------------------------------------------------------------------------
# the per-chunk kernel
# ----------------------------------------------------------------------------------------------
def _ladder_kernel(st, sT, k):
    """NumPy-facing kernel: ``st[..., depth, cand]``, ``sT[..., cand]``, ``k[...]`` -> ladder tuple.

    Leading dims broadcast (question, arrangement, precision); outputs are ``[..., depth]`` in
    the order of :data:`LADDER_VARS`. The arithmetic is the compiled per-trajectory kernel
    :func:`depthtraj.analysis.kernels.ladder_at` (one implementation for every code path).
    """
    from . import kernels

    st = np.asarray(st)
    sT = np.asarray(sT)
    lead = np.broadcast_shapes(st.shape[:-2], sT.shape[:-1], np.shape(k))
    n_depth, n_cand = st.shape[-2], st.shape[-1]
    dtype = np.result_type(st.dtype, sT.dtype, np.float32)
    st = np.broadcast_to(st, lead + (n_depth, n_cand)).reshape(-1, n_depth, n_cand)
    sT = np.broadcast_to(sT, lead + (n_cand,)).reshape(-1, 1, n_cand)
    kk = np.broadcast_to(np.asarray(k), lead).reshape(-1).astype(np.int64)
    s5 = np.concatenate([st, sT], axis=1).astype(dtype, copy=False)[..., None, None]
    F, winner, unique, valid, _ = kernels.ladder_arrays(
        np.ascontiguousarray(s5), kk, np.arange(n_depth, dtype=np.int64), n_depth
    )
    shape = lead + (n_depth,)
    res = [F[f, :, :, 0, 0].reshape(shape) for f in range(len(_FLOAT_VARS))]
    res.append(unique[:, :, 0, 0].reshape(shape))
    res.append(winner[:, :, 0, 0].reshape(shape))
    res.append(valid[:, :, 0, 0].reshape(shape))
    return tuple(res)


def _earliest_kernel(*arrays, depths, endpoint):
    """NumPy kernel: six bounds, ``unique``, ``valid`` ``[..., J]`` and ``endpoint_valid``
    ``[...]`` -> the seven D_j ``[...]`` in :data:`DEPTH_METHODS` order (float64)."""
    *bounds, unique, valid, ok_T = arrays
    ok = np.asarray(ok_T, dtype=bool) & np.asarray(valid, dtype=bool).all(-1)
    res = {}
    for j, L_j in zip(BOUNDS, bounds):
        with np.errstate(invalid="ignore"):
            passed = np.asarray(unique, dtype=bool) & (np.asarray(L_j) > 0)
        first = passed.argmax(-1)  # earliest passing grid depth (0 if none: masked below)
        D = np.where(passed.any(-1), depths[first], endpoint)
        res[j] = np.where(ok, D, np.nan)
    res["env"] = np.fmin(res["mean"], res["LSE"])
    return tuple(res[j] for j in DEPTH_METHODS)


def _indicator_kernel(D, n_arr, *, at):
    """NumPy kernel: ``D[..., arrangement]`` -> mean over used arrangements of ``1{D ≤ d}``
    ``[..., d]`` (NaN if a used arrangement is NaN)."""
    D = np.asarray(D, dtype=np.float64)
    return np.stack([arrangement_mean(np.where(np.isnan(D), np.nan, D <= d), n_arr) for d in at], axis=-1) \
        if len(at) else np.zeros(D.shape[:-1] + (0,))


# ----------------------------------------------------------------------------------------------
# public lazy transformations
# ----------------------------------------------------------------------------------------------
def ladder(ds, endpoint: int | None = None, depths: Sequence[int] | None = None):
    """The margin ladder and its slacks at each depth (``pd:eq:gap-update``–``pd:eq:pairing``).

    Parameters
    ----------
    ds
        a store Dataset or its ``score`` DataArray, dims (question, depth, candidate,
        arrangement, precision), units nats, with the ``n_candidates`` coordinate.
    endpoint
        the endpoint depth T (a recorded depth); default the last recorded depth.
    depths
        the depths t to evaluate (recorded, < T); default every recorded depth < T.

    Returns
    -------
    xarray.Dataset, dask-backed, dims (question, depth, arrangement, precision), ``depth``
    holding only the evaluated depths:

    * float64, nats: ``m, h, R, B_raw, B_q, B_mean, B_LSE, mid, b_mean, b_LSE, L_raw, L_mean,
        L_LSE, L_q, L_dir, L_res, A_tr, A_dir, A_pair`` (see the module docstring);
    * bool ``unique`` (unique winner at t), int16 ``winner`` (candidate identity a, -1 where
        invalid), bool ``valid`` (K ≥ 2 and finite scores at t and T);
    * ``endpoint_valid`` (question, arrangement, precision): finite scores at T and K ≥ 2.

    ``attrs['endpoint']`` is T. Question coordinates (task, n_candidates, ...) are kept.

    Raises
    ------
    ValueError
        when the input is not a score layout, the endpoint is not recorded, or a depth is not
        recorded or not below T.
    """
    import xarray as xr

    score = score_of(ds)
    recorded = recorded_depths(score)
    T = resolve_endpoint(recorded, endpoint)
    if depths is None:
        depths = [t for t in recorded if t < T]
    depths = [int(t) for t in depths]
    bad = [t for t in depths if t not in recorded or t >= T]
    if bad:
        raise ValueError(f"depths {bad} are not recorded depths below the endpoint T={T}")

    K = score["n_candidates"].reset_coords(drop=True).astype(np.int64)
    sT = score.sel({L.DEPTH: T}, drop=True)
    real = score[L.CANDIDATE] < score["n_candidates"]
    endpoint_valid = (np.isfinite(sT) | ~real).all(L.CANDIDATE) & (score["n_candidates"] >= 2)
    endpoint_valid = endpoint_valid.reset_coords(drop=True)

    if depths:
        st = score.sel({L.DEPTH: depths})
        outs = xr.apply_ufunc(
            _ladder_kernel,
            st, sT, K,
            input_core_dims=[[L.DEPTH, L.CANDIDATE], [L.CANDIDATE], []],
            output_core_dims=[[L.DEPTH]] * len(LADDER_VARS),
            dask="parallelized",
            output_dtypes=[np.float64] * len(_FLOAT_VARS) + [bool, np.int16, bool],
            keep_attrs=False,
        )
        data = {name: o.transpose(*L.DEPTH_STAT_DIMS) for name, o in zip(LADDER_VARS, outs)}
    else:
        import dask.array as da

        n, a, p = (score.sizes[d] for d in (L.QUESTION, L.ARRANGEMENT, L.PRECISION))
        qc = score.chunksizes[L.QUESTION]
        data = {}
        for name in LADDER_VARS:
            dt, fill = (
                (np.float64, np.nan) if name in _FLOAT_VARS
                else (np.int16, -1) if name == "winner" else (bool, False)
            )
            arr = da.full((n, 0, a, p), fill, dtype=dt, chunks=(qc, 0, a, p))
            data[name] = xr.DataArray(arr, dims=L.DEPTH_STAT_DIMS)
    out = xr.Dataset(data)
    out = out.assign_coords({L.DEPTH: np.asarray(depths, dtype=np.int64)})
    for c in (L.QUESTION, L.ARRANGEMENT, L.PRECISION):
        out = out.assign_coords({c: score[c].values})
    qcoords = {n: c for n, c in score.coords.items() if c.dims == (L.QUESTION,) and n != L.QUESTION}
    out = out.assign_coords({n: (L.QUESTION, c.data) for n, c in qcoords.items()})
    out["endpoint_valid"] = endpoint_valid.transpose(L.QUESTION, L.ARRANGEMENT, L.PRECISION).variable
    for name, (text, label) in _FLOAT_VARS.items():
        out[name].attrs.update(long_name=text, units="nats", paper=label)
    out["unique"].attrs.update(long_name="the winner at t is the only maximiser")
    out["winner"].attrs.update(long_name="winner y_t (lowest identity among ties), -1 if invalid")
    out["valid"].attrs.update(long_name="K ≥ 2 and finite scores at t and T")
    out["endpoint_valid"].attrs.update(long_name="K ≥ 2 and finite scores at T")
    out.attrs.update(endpoint=T, paper="sec:geometry")
    return out


def earliest_from_ladder(lad, grid):
    """Earliest qualifying depths D_j from a :func:`ladder` Dataset (``pd:cor:depth``).

    ``grid`` is a :class:`~depthtraj.analysis.grid.Grid` or a sequence of depths, all present
    in ``lad.depth``. D_j is the first grid depth t with a unique winner and L_j(t) > 0, or T if
    none; ``D_env = min(D_mean, D_LSE)``.

    Returns
    -------
    xarray.Dataset, dask-backed, dims (question, arrangement, precision), float64 depths
    (recurrence steps): ``D_raw, D_mean, D_LSE, D_env, D_q, D_dir, D_res``; NaN where the
    trajectory is invalid at T or at a grid depth. ``attrs``: ``endpoint`` (T), ``grid``
    (the depths), ``grid_name``.

    Raises
    ------
    ValueError
        when a grid depth is absent from the ladder.
    """
    import xarray as xr

    T = int(lad.attrs["endpoint"])
    depths = list(grid.depths) if isinstance(grid, Grid) else [int(t) for t in grid]
    name = grid.name if isinstance(grid, Grid) else ",".join(map(str, depths))
    have = {int(t) for t in lad[L.DEPTH].values}
    missing = [t for t in depths if t not in have]
    if missing:
        raise ValueError(f"grid depths {missing} are not in the ladder (has {sorted(have)})")
    okT = lad["endpoint_valid"]
    if depths:
        sub = lad.sel({L.DEPTH: depths})
        inputs = [sub[var] for var, _ in BOUNDS.values()] + [sub["unique"], sub["valid"]]
        outs = xr.apply_ufunc(
            _earliest_kernel,
            *inputs, okT,
            input_core_dims=[[L.DEPTH]] * len(inputs) + [[]],
            output_core_dims=[[]] * len(DEPTH_METHODS),
            kwargs={"depths": np.asarray(depths, dtype=np.float64), "endpoint": float(T)},
            dask="parallelized",
            output_dtypes=[np.float64] * len(DEPTH_METHODS),
        )
        out = dict(zip((f"D_{j}" for j in DEPTH_METHODS), outs))
    else:  # 𝒯 = ∅: D_j = T for every valid trajectory
        D = xr.where(okT, float(T), np.nan)
        out = {f"D_{j}": D for j in DEPTH_METHODS}
    out = {k: v.transpose(L.QUESTION, L.ARRANGEMENT, L.PRECISION) for k, v in out.items()}
    res = xr.Dataset({f"D_{j}": out[f"D_{j}"] for j in DEPTH_METHODS})
    for j in DEPTH_METHODS:
        res[f"D_{j}"].attrs.update(
            long_name=f"earliest qualifying depth D_{j}", units="depth", paper="pd:cor:depth"
        )
    res.attrs.update(endpoint=T, grid=list(depths), grid_name=name, paper="pd:cor:depth")
    return res


def earliest_depths(ds, grid, endpoint: int | None = None):
    """Earliest qualifying depths D_j on a candidate grid (``pd:cor:depth``).

    Parameters
    ----------
    ds
        a store Dataset or its ``score`` DataArray (question, depth, candidate, arrangement,
        precision; nats).
    grid
        a :class:`Grid`, a grid spelling (``'quarter'``, ``'native'``, ``'8,16,24'``,
        ``'4:31'``) or a sequence of recorded depths < T.
    endpoint
        the endpoint T (a recorded depth); default the last recorded depth.

    Returns
    -------
    xarray.Dataset, dask-backed, dims (question, arrangement, precision), float64 depths:
    ``D_raw, D_mean, D_LSE, D_env, D_q, D_dir, D_res`` (see :func:`earliest_from_ladder`).

    Raises
    ------
    ValueError
        when the grid cannot be parsed, a grid depth is not recorded or ≥ T, or the endpoint is
        not recorded.
    """
    score = score_of(ds)
    recorded = recorded_depths(score)
    T = resolve_endpoint(recorded, endpoint)
    if isinstance(grid, str):
        grid = parse_grid(grid, recorded, T)
    elif not isinstance(grid, Grid):
        grid = Grid(",".join(str(int(t)) for t in grid), tuple(int(t) for t in grid), T)
        bad = [t for t in grid.depths if t not in recorded]
        if bad:
            raise ValueError(f"grid depths {bad} are not recorded in the store")
    if grid.endpoint != T:
        raise ValueError(f"grid {grid.name!r} was made for T={grid.endpoint}, not T={T}")
    return earliest_from_ladder(ladder(score, T, grid.depths), grid)


def _question_indicator(Dj, at):
    """Per question ``mean_a 1{D_j ≤ d}`` at depths ``at``: dims (question, precision, depth)."""
    import xarray as xr

    at = [int(d) for d in at]
    F = xr.apply_ufunc(
        _indicator_kernel, Dj, n_arrangements(Dj),
        input_core_dims=[[L.ARRANGEMENT], []], output_core_dims=[[L.DEPTH]],
        kwargs={"at": np.asarray(at, dtype=np.float64)},
        dask="parallelized", output_dtypes=[np.float64],
        dask_gufunc_kwargs={"output_sizes": {L.DEPTH: len(at)}},
    )
    return F.assign_coords({L.DEPTH: at})


def depth_cdf(D, at: Sequence[int] | None = None):
    """Earliest-depth curves F_j(d) = Pr(D_j ≤ d) (``pd:cor:depth``).

    ``D`` is an :func:`earliest_depths` Dataset (question, arrangement, precision). Arrangements
    are averaged within each question, then questions (NaN questions left out).

    Returns
    -------
    xarray.Dataset, dask-backed, dims (depth, precision), fraction in [0, 1]: ``F_raw ...
    F_res`` at depths ``at`` (default the grid and T).

    Raises
    ------
    KeyError
        when ``D`` lacks a ``D_j`` variable or its ``endpoint``/``grid`` attrs.
    """
    import xarray as xr

    T = int(D.attrs["endpoint"])
    at = list(D.attrs["grid"]) + [T] if at is None else [int(d) for d in at]
    out = xr.Dataset()
    for j in DEPTH_METHODS:
        Fq = _question_indicator(D[f"D_{j}"], at)
        out[f"F_{j}"] = Fq.mean(L.QUESTION, skipna=True)
        out[f"F_{j}"].attrs.update(units="fraction", paper="pd:cor:depth")
    out.attrs.update(D.attrs)
    return out.transpose(L.DEPTH, ...)


def depth_area(D, form: str = "dense", dims: Sequence[str] = (L.QUESTION,)):
    """Normalised depth areas W_j (``pd:eq:depth-area`` dense, ``pd:eq:sparse-area`` sparse).

    ``D`` is an :func:`earliest_depths` Dataset (question, arrangement, precision; depths).
    Arrangements are averaged within each question first (a question with any NaN arrangement
    is NaN), then ``dims`` are averaged skipping NaN questions.

    * ``form='dense'``: ``W_j = 1 - E[D_j]/T``;
    * ``form='sparse'``: ``W_j = (1/T) Σ_k (t_{k+1} - t_k) F_j(t_k)`` with ``t_{J+1} = T``.

    The two agree on every grid (D_j takes values in 𝒯 ∪ {T}).

    Returns
    -------
    xarray.Dataset, dask-backed, the remaining dims (e.g. (precision,)), fraction in [0, 1]:
    ``W_raw, W_mean, W_LSE, W_env, W_q, W_dir, W_res``.

    Raises
    ------
    ValueError
        for an unknown ``form``.
    KeyError
        when ``D`` lacks a ``D_j`` variable or its ``endpoint``/``grid`` attrs.
    """
    import xarray as xr

    T = float(D.attrs["endpoint"])
    grid = [int(t) for t in D.attrs["grid"]]
    dims = list(dims)
    out = xr.Dataset()
    if form == "dense":
        for j in DEPTH_METHODS:
            Dq = arrangement_average(D[f"D_{j}"])
            out[f"W_{j}"] = 1.0 - Dq.mean(dims, skipna=True) / T
    elif form == "sparse":
        w = xr.DataArray(np.diff(np.asarray(grid + [int(T)], dtype=np.float64)), dims=L.DEPTH,
                         coords={L.DEPTH: grid})
        for j in DEPTH_METHODS:
            Fq = _question_indicator(D[f"D_{j}"], grid)  # (question, precision, depth)
            F = Fq.mean(dims, skipna=True)
            out[f"W_{j}"] = (F * w).sum(L.DEPTH) / T  # empty grid: the empty sum, 0
    else:
        raise ValueError(f"form must be 'dense' or 'sparse', got {form!r}")
    for j in DEPTH_METHODS:
        out[f"W_{j}"].attrs.update(units="fraction", paper="pd:eq:depth-area" if form == "dense" else "pd:eq:sparse-area")
    out.attrs.update(D.attrs, form=form)
    return out


def _check_field_order() -> None:
    from .kernels import LADDER_FIELDS

    if tuple(_FLOAT_VARS) != LADDER_FIELDS:  # pragma: no cover - a programming error
        raise AssertionError("geometry._FLOAT_VARS and kernels.LADDER_FIELDS disagree")
