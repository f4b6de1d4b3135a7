"""Sensitivity to score scale, centring, token composition and precision arms (paper §6,
``arxiv:sec:sensitivity``; ``pd:app:scale``, ``r9:eq:scale-equivariance``, ``r2:eq:temperature``,
``pd:app:extended-precision``).

Adjacent increments as in :mod:`.dynamics`: over consecutive recorded depths t < t' of the
chosen depth set (default every recorded depth ≤ T), ``d = s_{t'} - s_t`` over the K real
candidates; arrangements weighted 1/A_i; a (question, arm) is complete when every real score is
finite at every depth of the set in every used arrangement (otherwise its summaries are NaN).

LSE-centre residual over a scale grid (``pd:app:scale``, ``pd:eq:centering``)
    For α > 0 the LSE representative in the original units is ``a_α(s) = LSE(α s)/α`` and its
    increment ``b_α = a_α(s_{t'}) - a_α(s_t)``. By ``pd:eq:centering`` the excess of the
    b-centred radius over the quotient radius is ``2|mid(d) - b|``; normalised by the raw radii,
    ``Σ 2|mid(d) - b_α| / Σ 2‖d‖∞`` (the LSE residual, per α of the grid, default
    :data:`DEFAULT_ALPHAS`) beside the mean-centred ``Σ 2|mid(d) - mean(d)| / Σ 2‖d‖∞`` (which does
    not depend on α). LSE centring is not homogeneous; as α → 0⁺, b_α → Δ mean(s) at fixed K
    (``r2:eq:temperature``), so the LSE residual tends to the mean-centred one.

Scale invariance (``r9:eq:scale-equivariance``)
    For α > 0, winners, D_j for j ∈ raw, mean, q, dir, res (and so W_j), the contrast share
    Q/(Q+C), τ and Ξ are unchanged by ``s → α s``, while energies scale by α² and radii by α.
    :func:`scale_invariance` recomputes them on ``α s`` (float64) for a grid of α — a check users
    can run; the LSE-centred depth area W_LSE is reported beside them as the non-homogeneous case.

Token composition (§6, "For ARC, split each score…")
    For a text store, each score splits into its first-token and later-token terms under the
    store's normalisation divisor L_k (1, n_k or ℓ_k; ``pd:app:eq:text-scoring``):
    ``f_k = logprob_first_k / L_k``, ``g_k = (logprob_sum_k - logprob_first_k) / L_k``. Their
    cross-choice mean increments ``u = mean Δf``, ``v = mean Δg`` give
    ``K(u+v)² = Ku² + Kv² + 2Kuv``: first / later / cross contributions to common energy,
    reported as ratios of sums over increments and questions (they sum to one; the cross term
    is signed).

Per-question summaries and cells
--------------------------------
:func:`centre_residual_kernel` and :func:`token_kernel` map a question chunk to per-question
arrays ``[q, precision, ...]``; :data:`CELL_STATISTICS` (rule kinds of :mod:`.energy`) forms the
cell values; :func:`~depthtraj.analysis.energy.cell_statistics` evaluates them lazily.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit

from ... import layout as L
from ..core.arrangements import arrangement_weights, used_arrangements
from ..core.grid import depths_of
from ..core.chunks import candidate_counts, map_question_chunks
from ..composition.energy import cell_statistics
from ..core.data import score_of
from ..core.grid import resolve_endpoint
from ..core.inputs import NORMALIZATIONS, readout_info

__all__ = [
    "CELL_STATISTICS",
    "DEFAULT_ALPHAS",
    "SCALE_VARS",
    "TOKEN_VARS",
    "centre_residual",
    "centre_residual_cells",
    "centre_residual_kernel",
    "centre_residual_summary",
    "precision_arms",
    "scale_invariance",
    "token_composition",
    "token_kernel",
    "token_summary",
]

#: The paper's scale grid α (``pd:app:scale``).
DEFAULT_ALPHAS: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 10.0)

#: Per-question summaries of :func:`centre_residual_kernel`: name -> (extra dim, text, units, label).
SCALE_VARS: dict[str, tuple[str | None, str, str, str]] = {
    "raw_radius": (None, "Σ 2‖d‖∞ over adjacent increments (ω = 1/A)", "nats", "pd:eq:centering"),
    "mean_excess": (None, "Σ 2|mid(d) - mean(d)| (ω = 1/A)", "nats", "pd:eq:centering"),
    "lse_excess": ("alpha", "Σ 2|mid(d) - b_α|, b_α = Δ LSE(α s)/α (ω = 1/A)", "nats", "pd:app:scale"),
    "complete_scale": (None, "1 if complete at every depth of the set, else NaN", "1", "pd:app:scale"),
}
#: Per-question summaries of :func:`token_kernel`: name -> (text, units, label).
TOKEN_VARS: dict[str, tuple[str, str, str]] = {
    "tok_first": ("Σ K u² (u = mean Δ first-token term)", "nats²", "pd:app:extended-precision"),
    "tok_later": ("Σ K v² (v = mean Δ later-token term)", "nats²", "pd:app:extended-precision"),
    "tok_cross": ("Σ 2 K u v (signed)", "nats²", "pd:app:extended-precision"),
    "tok_C": ("Σ K (u + v)², the common energy of the split score", "nats²", "pd:app:extended-precision"),
    "complete_tokens": ("1 if complete at every depth of the set, else NaN", "1", "pd:app:extended-precision"),
}

#: How each cell value is formed from per-question summaries (rule kinds of :mod:`.energy`).
CELL_STATISTICS: dict[str, tuple[str, ...]] = {
    "lse_residual": ("ratio", "lse_excess", "raw_radius"),  # per α (pd:app:scale)
    "mean_residual": ("ratio", "mean_excess", "raw_radius"),
    "n_questions_scale": ("sum", "complete_scale"),
    "share_first": ("ratio", "tok_first", "tok_C"),
    "share_later": ("ratio", "tok_later", "tok_C"),
    "share_cross": ("ratio", "tok_cross", "tok_C"),
    "n_questions_tokens": ("sum", "complete_tokens"),
}


# ----------------------------------------------------------------------------------------------
# LSE-centre residual
# ----------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _residual_sums(s, K, w, pos, alphas):
    """``[q, precision, 2 + n_alpha]``: Σ ω 2‖d‖∞, Σ ω 2|mid - mean(d)|, Σ ω 2|mid - b_α| over the
    adjacent increments of the depth positions ``pos``; NaN for an incomplete (question, arm)."""
    nq, _, _, na, npr = s.shape
    J = pos.shape[0]
    NA = alphas.shape[0]
    out = np.full((nq, npr, 2 + NA), np.nan)
    la = np.empty((J, NA))
    acc = np.empty(2 + NA)
    for i in range(nq):
        k = int(K[i])
        if k < 2:
            continue
        for p in range(npr):
            acc[:] = 0.0
            good = True
            for a in range(na):
                wa = w[i, a]
                if wa == 0.0:
                    continue
                for j in range(J):  # a_α(s_t) = LSE(α s_t)/α for every depth and α
                    top = -np.inf
                    for c in range(k):
                        x = np.float64(s[i, pos[j], c, a, p])
                        if not np.isfinite(x):
                            good = False
                        elif x > top:
                            top = x
                    if not good:
                        break
                    for m in range(NA):
                        e = 0.0
                        for c in range(k):
                            e += np.exp(alphas[m] * (np.float64(s[i, pos[j], c, a, p]) - top))
                        la[j, m] = top + np.log(e) / alphas[m]
                if not good:
                    break
                for j in range(J - 1):
                    dmax = -np.inf
                    dmin = np.inf
                    dsum = 0.0
                    for c in range(k):
                        d = np.float64(s[i, pos[j + 1], c, a, p]) - np.float64(s[i, pos[j], c, a, p])
                        dsum += d
                        if d > dmax:
                            dmax = d
                        if d < dmin:
                            dmin = d
                    mid = (dmax + dmin) / 2.0
                    acc[0] += wa * 2.0 * max(dmax, -dmin)
                    acc[1] += wa * 2.0 * abs(mid - dsum / k)
                    for m in range(NA):
                        acc[2 + m] += wa * 2.0 * abs(mid - (la[j + 1, m] - la[j, m]))
            if good:
                for f in range(2 + NA):
                    out[i, p, f] = acc[f]
    return out


def centre_residual_kernel(s, K, answer=None, *, depth_idx, alphas=DEFAULT_ALPHAS, used=None, **_ignored):
    """Per-question centre residual sums of one question chunk (``pd:app:scale``; compiled).

    Parameters
    ----------
    s
        scores ``[q, depth, candidate, arrangement, precision]`` (nats, NaN padding).
    K
        ``[q]`` ``n_candidates``; ``answer`` is unused.
    depth_idx
        positions along ``depth`` of the depth set whose consecutive pairs are the increments.
    alphas
        the scale grid (each > 0).
    used
        ``[q, arrangement]`` bool (default: inferred as in :mod:`.correctness`).

    Returns
    -------
    dict of float64 arrays (:data:`SCALE_VARS`): ``raw_radius``, ``mean_excess``,
    ``complete_scale`` ``[q, precision]`` and ``lse_excess`` ``[q, precision, alpha]`` (nats);
    NaN where the (question, arm) is incomplete.
    """
    s = np.asarray(s)
    if s.dtype not in (np.float32, np.float64):
        s = s.astype(np.float64)
    K = np.ascontiguousarray(np.asarray(K).astype(np.int64))
    w = np.ascontiguousarray(arrangement_weights(used_arrangements(s, used)))
    X = _residual_sums(s, K, w, np.asarray(list(depth_idx), np.int64), np.asarray(alphas, np.float64))
    return {
        "raw_radius": X[..., 0], "mean_excess": X[..., 1], "lse_excess": X[..., 2:],
        "complete_scale": np.where(np.isfinite(X[..., 0]), 1.0, np.nan),
    }


def check_alphas(alphas) -> list[float]:
    al = [float(a) for a in alphas]
    if not al or any(not np.isfinite(a) or a <= 0 for a in al):
        raise ValueError(f"every scale α must be a positive number, got {list(alphas)}")
    return al


def centre_residual_summary(ds, alphas=DEFAULT_ALPHAS, depths: Sequence[int] | None = None,
                            endpoint: int | None = None):
    """Per-question raw radii and centre excesses over a scale grid (:func:`centre_residual_kernel`).

    Returns
    -------
    xarray.Dataset, dask-backed: ``raw_radius``, ``mean_excess``, ``complete_scale``
    (question, precision) and ``lse_excess`` (question, precision, alpha), nats.

    Raises
    ------
    ValueError
        for a non-positive α, an unrecorded depth or endpoint, or fewer than two depths.
    """
    al = check_alphas(alphas)
    score = score_of(ds)
    recorded = [int(t) for t in score[L.DEPTH].values]
    T = resolve_endpoint(recorded, endpoint)
    dep = depths_of(score, depths, T)
    if len(dep) < 2:
        raise ValueError(f"no adjacent increment: fewer than two depths in {dep}")
    layout = {n: (L.PRECISION,) + ((extra,) if extra else ()) for n, (extra, *_rest) in SCALE_VARS.items()}
    out = map_question_chunks(centre_residual_kernel, [score, candidate_counts(score)], layout,
                              dict(depth_idx=[recorded.index(t) for t in dep], alphas=al), {"alpha": al})
    for n, (_, text, units, label) in SCALE_VARS.items():
        out[n].attrs.update(long_name=text, units=units, paper=label)
    out.attrs.update(endpoint=T, depths=dep, paper="pd:app:scale")
    return out


def centre_residual(ds, alphas=DEFAULT_ALPHAS, depths: Sequence[int] | None = None, endpoint: int | None = None,
                    *, by: str = "task"):
    """LSE-centre residual over a scale grid beside its mean-centred counterpart, per cell
    (``pd:app:scale``).

    Returns
    -------
    xarray.Dataset, dask-backed: ``lse_residual`` (``by``, precision, alpha) =
    ``Σ 2|mid(d) - b_α| / Σ 2‖d‖∞`` and ``mean_residual`` (``by``, precision) =
    ``Σ 2|mid(d) - mean(d)| / Σ 2‖d‖∞`` (fractions; NaN without a nonzero increment), and
    ``n_questions_scale``.
    """
    summ = centre_residual_summary(ds, alphas, depths, endpoint)
    rules = {n: CELL_STATISTICS[n] for n in ("lse_residual", "mean_residual", "n_questions_scale")}
    out = cell_statistics(summ, rules, by=by)
    out["lse_residual"].attrs.update(units="fraction", paper="pd:app:scale", long_name="Σ2|mid(d) - b_α| / Σ2‖d‖∞")
    out["mean_residual"].attrs.update(units="fraction", paper="pd:eq:centering",
                                      long_name="Σ2|mid(d) - mean(d)| / Σ2‖d‖∞")
    return out


def centre_residual_cells(res, *, by: str = "task"):
    """:func:`centre_residual`'s cell values from a :func:`~depthtraj.analysis.passes.store_pass`
    result (its ``scale`` sums), without another read of the store.

    Returns
    -------
    xarray.Dataset (in memory): ``lse_residual`` (``by``, precision, alpha), ``mean_residual``
    (``by``, precision) (fractions) and ``n_questions_scale`` (``by``, precision).

    Raises
    ------
    KeyError
        when the pass was built with ``scale=False``.
    """
    import xarray as xr

    tot = {v: res.extra["sum"][v][0] for v in ("raw_radius", "mean_excess", "lse_excess", "complete_scale")}
    den = np.where(tot["raw_radius"] > 0, tot["raw_radius"], np.nan)
    al = list(res.extra["scale_alphas"])
    dims = (by, L.PRECISION)
    out = xr.Dataset(
        {"lse_residual": (dims + ("alpha",), tot["lse_excess"] / den[..., None]),
         "mean_residual": (dims, tot["mean_excess"] / den),
         "n_questions_scale": (dims, tot["complete_scale"])},
        coords={by: list(res.groups), L.PRECISION: list(res.precision), "alpha": al},
    )
    out["lse_residual"].attrs.update(units="fraction", paper="pd:app:scale", long_name="Σ2|mid(d) - b_α| / Σ2‖d‖∞")
    out["mean_residual"].attrs.update(units="fraction", paper="pd:eq:centering",
                                      long_name="Σ2|mid(d) - mean(d)| / Σ2‖d‖∞")
    return out


# ----------------------------------------------------------------------------------------------
# token composition
# ----------------------------------------------------------------------------------------------
def token_kernel(first, total, K, divisor, *, depth_idx, used=None) -> dict[str, np.ndarray]:
    """Per-question first/later/cross contributions to common energy of one question chunk (NumPy).

    Parameters
    ----------
    first, total
        ``logprob_first`` and ``logprob_sum`` ``[q, depth, candidate, arrangement, precision]``
        (nats, NaN padding).
    K
        ``[q]`` ``n_candidates``.
    divisor
        the normalisation divisor L_k broadcastable to ``[q, candidate, arrangement]`` (1 for
        ``sum``, ``n_tokens`` for ``token``, ``n_chars[..., None]`` for ``char``).
    depth_idx
        positions of the depth set whose consecutive pairs are the increments.
    used
        ``[q, arrangement]`` bool (default: inferred from ``total``).

    Returns
    -------
    dict of float64 arrays ``[q, precision]`` (:data:`TOKEN_VARS`): ``tok_first = Σ K u²``,
    ``tok_later = Σ K v²``, ``tok_cross = Σ 2 K u v``, ``tok_C = Σ K (u+v)²`` (nats², weight 1/A
    per arrangement), ``complete_tokens``; NaN where incomplete (or a divisor is not positive).
    """
    first = np.asarray(first, dtype=np.float64)
    total = np.asarray(total, dtype=np.float64)
    K = np.asarray(K).astype(np.int64)
    nq, _, C, A, P = total.shape
    idx = list(depth_idx)
    u_ar = used_arrangements(total, used)
    w = arrangement_weights(u_ar)[:, None, :, None]  # [q, 1, A, 1]
    L_ = np.broadcast_to(np.asarray(divisor, dtype=np.float64), (nq, C, A))
    real = (np.arange(C)[None, :] < K[:, None])[:, :, None] & (u_ar[:, None, :])  # [q, C, A]
    with np.errstate(invalid="ignore", divide="ignore"):
        f = np.moveaxis(first[:, idx], 2, 0) / np.moveaxis(L_, 1, 0)[:, :, None, :, None]  # [C, q, J, A, P]
        g = np.moveaxis(total[:, idx] - first[:, idx], 2, 0) / np.moveaxis(L_, 1, 0)[:, :, None, :, None]
        R = np.moveaxis(real, 1, 0)[:, :, None, :, None]  # [C, q, 1, A, 1]
        fin = (np.isfinite(f) & np.isfinite(g)) | ~R
        ok = fin.all(axis=(0, 2, 3)) & (K >= 2)[:, None] & ((L_ > 0) | ~real).all(axis=(1, 2))[:, None]
        df = np.where(R, f[:, :, 1:] - f[:, :, :-1], 0.0)
        dg = np.where(R, g[:, :, 1:] - g[:, :, :-1], 0.0)
        Kf = np.maximum(K, 1).astype(np.float64)[:, None, None, None]
        u = df.sum(0) / Kf  # [q, J-1, A, P]
        v = dg.sum(0) / Kf
    parts = {"tok_first": Kf * u * u, "tok_later": Kf * v * v, "tok_cross": 2.0 * Kf * u * v,
             "tok_C": Kf * (u + v) ** 2}
    out = {n: np.where(ok, (x * w).sum(axis=(1, 2)), np.nan) for n, x in parts.items()}
    out["complete_tokens"] = np.where(ok, 1.0, np.nan)
    return out


def _divisor(ds, normalization: str | None):
    """The divisor DataArray (question, candidate, arrangement) of a text store's normalisation."""
    import xarray as xr

    norm = normalization or ds.attrs.get("normalization") or readout_info(ds)["normalization"]
    if norm not in NORMALIZATIONS:
        raise ValueError(f"unknown text normalisation {norm!r} (expected one of {', '.join(NORMALIZATIONS)})")
    var = NORMALIZATIONS[norm]
    shape = (ds.sizes[L.QUESTION], ds.sizes[L.CANDIDATE], ds.sizes[L.ARRANGEMENT])
    if var is None:
        return xr.DataArray(np.ones(shape), dims=(L.QUESTION, L.CANDIDATE, L.ARRANGEMENT)), norm
    if var not in ds.variables:
        raise ValueError(f"token composition under '{norm}' normalisation needs '{var}', which the store lacks")
    d = ds[var].reset_coords(drop=True).astype(np.float64)
    if L.ARRANGEMENT not in d.dims:
        d = d.expand_dims({L.ARRANGEMENT: ds.sizes[L.ARRANGEMENT]}, axis=-1)
    return d.transpose(L.QUESTION, L.CANDIDATE, L.ARRANGEMENT), norm


def token_summary(ds, depths: Sequence[int] | None = None, endpoint: int | None = None, *,
                  normalization: str | None = None):
    """Per-question first/later/cross contributions to common energy (:func:`token_kernel`).

    Parameters
    ----------
    ds
        a text store Dataset with ``logprob_first``, ``logprob_sum`` and the divisor of its
        normalisation (``n_tokens`` or ``n_chars``).
    depths, endpoint
        the depth set of the increments (default every recorded depth ≤ T) and T.
    normalization
        ``'sum'``, ``'token'`` or ``'char'`` (default: the store's, or ``attrs['normalization']``
        as set by :func:`~depthtraj.analysis.inputs.normalized_score`).

    Returns
    -------
    xarray.Dataset, dask-backed, dims (question, precision): :data:`TOKEN_VARS`.

    Raises
    ------
    ValueError
        for a store without ``logprob_first``/``logprob_sum`` (label stores), a missing
        divisor, or invalid depths.
    """
    import xarray as xr

    if not isinstance(ds, xr.Dataset) or not {"logprob_first", "logprob_sum"} <= set(ds.variables):
        raise ValueError("token composition needs an answer-text store with 'logprob_first' and 'logprob_sum'")
    score = score_of(ds)
    recorded = [int(t) for t in score[L.DEPTH].values]
    T = resolve_endpoint(recorded, endpoint)
    dep = depths_of(score, depths, T)
    if len(dep) < 2:
        raise ValueError(f"no adjacent increment: fewer than two depths in {dep}")
    div, norm = _divisor(ds, normalization)
    chunks = {L.QUESTION: score.chunks[0]}

    def prep(x):
        x = x.reset_coords(drop=True).transpose(*L.SCORE_DIMS) if x.ndim == 5 else x
        return x.chunk({**chunks, **{d: -1 for d in x.dims if d != L.QUESTION}})

    first, total = prep(ds["logprob_first"]), prep(ds["logprob_sum"])
    div = prep(div)

    def kern(f, t, k, dv, **kw):
        return token_kernel(f, t, k, dv, **kw)

    inputs = [first, total, candidate_counts(score), div]
    layout = {n: (L.PRECISION,) for n in TOKEN_VARS}
    out = map_question_chunks(kern, inputs, layout, dict(depth_idx=[recorded.index(t) for t in dep]), {})
    qcoords = {n: (L.QUESTION, np.asarray(c.values)) for n, c in score.coords.items()
               if c.dims == (L.QUESTION,) and n != L.QUESTION}
    out = out.assign_coords(qcoords)
    for n, (text, units, label) in TOKEN_VARS.items():
        out[n].attrs.update(long_name=text, units=units, paper=label)
    out.attrs.update(endpoint=T, depths=dep, normalization=norm, paper="pd:app:extended-precision")
    return out


def token_composition(ds, depths: Sequence[int] | None = None, endpoint: int | None = None, *,
                      normalization: str | None = None, by: str = "task"):
    """First-token / later-token / cross contributions to common energy per cell (§6).

    Returns
    -------
    xarray.Dataset, dask-backed, dims (``by``, precision), fractions summing to one:
    ``share_first = ΣKu²/ΣK(u+v)²``, ``share_later``, ``share_cross`` (signed), and
    ``n_questions_tokens``. Arguments as in :func:`token_summary`.
    """
    summ = token_summary(ds, depths, endpoint, normalization=normalization)
    rules = {n: CELL_STATISTICS[n] for n in ("share_first", "share_later", "share_cross", "n_questions_tokens")}
    out = cell_statistics(summ, rules, by=by)
    for n in ("share_first", "share_later", "share_cross"):
        out[n].attrs.update(units="fraction", paper="pd:app:extended-precision")
    return out


# ----------------------------------------------------------------------------------------------
# scale invariance (a check users can run)
# ----------------------------------------------------------------------------------------------
def scale_invariance(ds, alphas=DEFAULT_ALPHAS, grid="quarter", endpoint: int | None = None, *,
                     by: str = "task"):
    """Recompute the homogeneous statistics on ``α s`` for a grid of α (``r9:eq:scale-equivariance``).

    Statistics, each per α (float64 scores ``α s``), in the original units:

    * ``winners_kept``: fraction of (question, depth, arrangement, arm) entries whose winner
      under α s equals that under s (should be 1);
    * ``W_raw, W_mean, W_q, W_dir, W_res`` (homogeneous) and ``W_LSE`` (not homogeneous): depth
      areas on ``grid`` over all questions;
    * ``Q_per_alpha2``, ``C_per_alpha2``: cell means over adjacent increments of Q/α² and C/α²
      (nats²); ``D``: the pooled contrast share ΣQ/ΣE;
    * ``tau``: ``pd:eq:tau``; ``xi_obs``: ``pd:app:eq:xi``.

    Returns
    -------
    xarray.Dataset, dask-backed, dims (alpha, ``by``, precision) (W_*: (alpha, precision)) and
    ``deviation_<stat>`` = max |stat(α) - stat(s)| over cells (per alpha), with stat(s)
    computed on the stored scores (float64). Invariance holds to rounding for every α; exactly
    for powers of two.

    Raises
    ------
    ValueError
        for a non-positive α or an invalid grid or endpoint.
    """
    import xarray as xr

    from ..dynamics.correctness import winners
    from ..dynamics.increments import tau
    from ..composition.energy import energy_shares
    from ..geometry.margin_ladder import depth_area, earliest_depths
    from ..composition.marginal import CELL_STATISTICS as XI, marginal_summary

    al = check_alphas(alphas)
    base = score_of(ds).astype(np.float64)
    y0 = winners(base)

    def stats(score, alpha):
        sh = energy_shares(score, by=by, endpoint=endpoint)
        W = depth_area(earliest_depths(score, grid, endpoint))
        xi = cell_statistics(marginal_summary(score, endpoint=endpoint), {"xi_obs": XI["xi_obs"]}, by=by)["xi_obs"]
        E = sh["mean_E"] * sh["n"]
        out = xr.Dataset({
            "winners_kept": (winners(score) == y0).mean(),
            "Q_per_alpha2": sh["mean_Q"].mean("interval") / alpha**2,
            "C_per_alpha2": sh["mean_C"].mean("interval") / alpha**2,
            "D": (sh["mean_Q"] * sh["n"]).sum("interval") / E.sum("interval").where(E.sum("interval") > 0),
            "tau": tau(score, endpoint=endpoint, by=by),
            "xi_obs": xi,
        })
        for j in ("raw", "mean", "LSE", "q", "dir", "res"):
            out[f"W_{j}"] = W[f"W_{j}"]
        return out

    ref = stats(base, 1.0)
    rows = [stats(base * a, a) for a in al]
    out = xr.concat(rows, dim=xr.DataArray(al, dims="alpha", name="alpha"))
    for v in ref.data_vars:
        dev = np.abs(out[v] - ref[v])
        out[f"deviation_{v}"] = dev.max([d for d in dev.dims if d != "alpha"])
    out["W_LSE"].attrs.update(long_name="LSE-centred depth area (not homogeneous)", paper="pd:app:scale")
    out.attrs.update(paper="r9:eq:scale-equivariance")
    return out


# ----------------------------------------------------------------------------------------------
# precision arms (composition with §4 dynamics)
# ----------------------------------------------------------------------------------------------
def precision_arms(ds, depths: Sequence[int] | None = None, endpoint: int | None = None, *,
                   reference: str | None = None, by: str = "task"):
    """τ, exact zero-span counts and ρ distributions per precision arm, with differences from a
    reference arm (``pd:app:extended-precision``, ``pd:app:tab:precision``, ``pd:fig:precision``).

    Built on :func:`~depthtraj.analysis.dynamics.increment_summary` and its
    :data:`~depthtraj.analysis.dynamics.CELL_STATISTICS` (one implementation of ``pd:eq:tau``).

    Returns
    -------
    xarray.Dataset, dask-backed, dims (``by``, precision): ``tau`` (fraction), ``n_zero_span``,
    ``n_I`` (counts of exact pure translations and of nonzero increments, arrangements weighted
    1/A), ``zero_span_frac``, ``rho_hist`` (``by``, precision, rho_bin; counts), and
    ``tau_minus_reference`` = τ(arm) - τ(reference arm) (the paired differences; intervals from
    the shared whole-question bootstrap). Only questions complete in *every* arm enter, so arms
    are compared on the same questions.

    Raises
    ------
    ValueError
        when the store has a single arm, or ``reference`` is not one of its arms.
    """
    from ..core.cells import cell_values
    from ..dynamics.increments import CELL_STATISTICS as DYN, increment_summary

    score = score_of(ds)
    arms = [str(p) for p in score[L.PRECISION].values.tolist()]
    if len(arms) < 2:
        raise ValueError(f"precision comparisons need at least two precision arms; this store has {arms}")
    ref = arms[0] if reference is None else str(reference)
    if ref not in arms:
        raise ValueError(f"reference arm {ref!r} is not one of the store's arms {arms}")
    summ = increment_summary(ds, depths, endpoint)
    every = summ["complete_increments"].notnull().all(L.PRECISION)
    summ = summ.where(every)
    names = ("tau", "n_zero_span", "n_I", "zero_span_frac", "rho_hist", "n_questions_increments")
    out = cell_values(summ, {n: DYN[n] for n in names}, by=by)
    out["tau_minus_reference"] = out["tau"] - out["tau"].sel({L.PRECISION: ref})
    out["tau_minus_reference"].attrs.update(units="fraction", long_name=f"τ(arm) - τ({ref})",
                                            paper="pd:app:tab:precision")
    out.attrs.update(reference=ref, paper="pd:app:extended-precision")
    return out
