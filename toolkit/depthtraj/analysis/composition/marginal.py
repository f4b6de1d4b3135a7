"""Joint variation across questions: observed common-energy fraction Ξ_obs, its exact marginal
reference Ξ_marg and the covariance excess (paper §5, ``r2:sec:joint-motion``;
``pd:app:eq:xi``, ``pd:app:eq:covariance``, ``pd:app:tab:marginal``).

Increments and groups
    For consecutive recorded depths t < t' (≤ T) whose *destination* t' lies in a window
    (default every recorded depth ≤ T), ``d = s_{t'} - s_t`` over the question's K real
    candidates. Groups g are (cell ``by`` × the ``within`` coordinates — by default subject and
    K — × the number A_i of used arrangements × destination depth), separately per precision
    arm; every group has one K_g. The observations of a group are its (question, used
    arrangement) pairs, each weighted ``ω = 1/A_i`` so that every question counts once, as in
    every other family (arrangements averaged). Within a group the weights are equal (A_i is a
    group key), so the paper's identities hold verbatim with n_g the number of questions.

Quantities
    ``C = (1ᵀd)²/K``, ``E = ‖d‖²``; ``Ξ_obs = Σ C / Σ E`` over the cell's groups (``pd:app:eq:xi``).
    With group sums ``n_g = Σ ω`` (questions), ``S_g = Σ ω d`` (a K_g-vector) and
    ``E_g = Σ ω ‖d‖²``, the exact conditional expectation under independent uniform permutations
    of each coordinate across the group's observations is
    ``Ξ_marg = Σ_g [E_g + ((1ᵀS_g)² - ‖S_g‖²)/n_g] / K_g / E_tot``, i.e.
    ``(n_g/K_g)[tr Σ_g + (1ᵀμ_g)²]`` per group (``pd:app:eq:covariance``), and the covariance
    excess is ``Ξ_obs - Ξ_marg = Σ_g (n_g/K_g) Σ_{k≠l} Cov_g(d_k, d_l) / E_tot``.
    :func:`permutation_sums` draws the permutations themselves (the finite-permutation estimate,
    default 1,000 draws, with its Monte-Carlo standard error).

Per-question summaries and cells
--------------------------------
:func:`marginal_kernel` maps a question chunk to per-question arrays: ``xi_C``, ``xi_E`` (sums over
the window, [q, precision]) for Ξ_obs — a ratio of sums with a paired whole-question interval —
and, per destination depth, ``xi_S`` [q, precision, depth, candidate], ``xi_E_t``, ``xi_C_t``
[q, precision, depth] and ``xi_n`` [q, precision] for the exact reference. Ξ_marg is not a
function of cell sums: it needs the sums of ``xi_n``, ``xi_S``, ``xi_E_t`` per *group*
(:func:`marginal_groups` gives each question's group code), then :func:`xi_from_group_sums`.
It is reported without an interval (the paper's "reference" column). The permutation estimate
needs the increment vectors of each group's questions themselves (memory: the group's n_g × depths
× K × A values), not a summary: :func:`marginal_covariance` gathers them group by group.

:data:`CELL_STATISTICS` follows :mod:`.energy`'s rule kinds, plus ``("marginal", n, S, E_t)``:
Σ over the cell's groups of ``[E + ((1ᵀS)² - ‖S‖²)/n]/K`` from per-group sums, divided by the
cell's Σ ``xi_E``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
from numba import njit

from ... import layout as L
from ..core.arrangements import arrangement_weights, used_arrangements
from ..core.chunks import candidate_counts, map_question_chunks
from .energy import parse_starts
from ..core.data import score_of
from ..core.grid import resolve_endpoint

__all__ = [
    "CELL_STATISTICS",
    "MARGINAL_VARS",
    "destination_increments",
    "marginal_covariance",
    "marginal_groups",
    "marginal_kernel",
    "marginal_summary",
    "permutation_sums",
    "xi_from_group_sums",
]

#: Per-question summaries of :func:`marginal_kernel`: name -> (extra dims, text, units, label).
MARGINAL_VARS: dict[str, tuple[tuple[str, ...], str, str, str]] = {
    "xi_C": ((), "Σ over window increments and arrangements (ω = 1/A) of (1ᵀd)²/K", "nats²", "pd:app:eq:xi"),
    "xi_E": ((), "Σ over window increments and arrangements (ω = 1/A) of ‖d‖²", "nats²", "pd:app:eq:xi"),
    "xi_n": ((), "1 if complete at every window depth (the question's total weight Σω), else NaN", "1",
             "pd:app:eq:covariance"),
    "xi_S": ((L.DEPTH, L.CANDIDATE), "Σ_a ω d per destination depth (0 past K)", "nats", "pd:app:eq:covariance"),
    "xi_E_t": ((L.DEPTH,), "Σ_a ω ‖d‖² per destination depth", "nats²", "pd:app:eq:covariance"),
    "xi_C_t": ((L.DEPTH,), "Σ_a ω (1ᵀd)²/K per destination depth", "nats²", "pd:app:eq:xi"),
}

#: How each cell value is formed (rule kinds of :mod:`.energy`, plus ``marginal``; module docstring).
CELL_STATISTICS: dict[str, tuple[str, ...]] = {
    "xi_obs": ("ratio", "xi_C", "xi_E"),  # pd:app:eq:xi, with a paired interval
    "xi_marg": ("marginal", "xi_n", "xi_S", "xi_E_t"),  # pd:app:eq:covariance, per-group sums, no interval
    "xi_excess": ("diff", "xi_obs", "xi_marg"),  # covariance excess, no interval
    "n_questions_marginal": ("sum", "xi_n"),
}

#: Elements of one batch of permuted values (bounds the permutation estimate's extra memory).
_PERM_BUDGET = 1 << 22


# ----------------------------------------------------------------------------------------------
# increments and the chunk kernel
# ----------------------------------------------------------------------------------------------
def destination_increments(recorded: Sequence[int], endpoint: int, destinations=None) -> list[tuple[int, int]]:
    """Adjacent recorded-depth pairs (t, t') with t' ≤ T and t' in ``destinations``.

    ``destinations``: ``None`` (every pair), ``'16:32'`` (inclusive), ``'16,24'`` or a sequence.

    Raises
    ------
    ValueError
        when no adjacent pair has its destination in the window.
    """
    below = [int(t) for t in recorded if int(t) <= endpoint]
    pairs = list(zip(below[:-1], below[1:]))
    if destinations is not None:
        keep = set(parse_starts(destinations))
        pairs = [pr for pr in pairs if pr[1] in keep]
    if not pairs:
        raise ValueError(
            f"no adjacent increment with its destination depth in {destinations!r} "
            f"(recorded depths ≤ T={endpoint}: {below})"
        )
    return pairs


@njit(cache=True, nogil=True)
def _marginal_sums(s, K, w, src, dst):
    """Per question ``[q, precision, J]`` Σ_a ω (1ᵀd)²/K and Σ_a ω ‖d‖², ``[q, precision, J, cand]``
    Σ_a ω d, and ``[q, precision]`` completeness, over the increments ``s[dst_j] - s[src_j]``."""
    nq, _, C, na, npr = s.shape
    J = src.shape[0]
    Ct = np.full((nq, npr, J), np.nan)
    Et = np.full((nq, npr, J), np.nan)
    St = np.full((nq, npr, J, C), np.nan)
    ok = np.zeros((nq, npr), dtype=np.bool_)
    accC = np.empty(J)
    accE = np.empty(J)
    accS = np.empty((J, C))
    for i in range(nq):
        k = int(K[i])
        if k < 2:
            continue
        for p in range(npr):
            accC[:] = 0.0
            accE[:] = 0.0
            accS[:] = 0.0
            good = True
            for a in range(na):
                wa = w[i, a]
                if wa == 0.0:
                    continue
                for j in range(J):
                    tot = 0.0
                    sq = 0.0
                    for c in range(k):
                        d = np.float64(s[i, dst[j], c, a, p]) - np.float64(s[i, src[j], c, a, p])
                        if not np.isfinite(d):
                            good = False
                            break
                        tot += d
                        sq += d * d
                        accS[j, c] += wa * d
                    if not good:
                        break
                    accC[j] += wa * tot * tot / k
                    accE[j] += wa * sq
                if not good:
                    break
            if good:
                ok[i, p] = True
                for j in range(J):
                    Ct[i, p, j] = accC[j]
                    Et[i, p, j] = accE[j]
                    for c in range(C):
                        St[i, p, j, c] = accS[j, c] if c < k else 0.0
    return Ct, Et, St, ok


def marginal_kernel(s, K, answer=None, *, src_idx, dst_idx, used=None, **_ignored) -> dict[str, np.ndarray]:
    """Per-question sums for Ξ_obs and the marginal reference of one question chunk (compiled).

    Parameters
    ----------
    s
        scores ``[q, depth, candidate, arrangement, precision]`` (nats, NaN padding).
    K
        ``[q]`` ``n_candidates``; ``answer`` is unused.
    src_idx, dst_idx
        positions along ``depth`` of each increment's start and destination (J increments).
    used
        ``[q, arrangement]`` bool (default: inferred as in :mod:`.correctness`).

    Returns
    -------
    dict of float64 arrays (:data:`MARGINAL_VARS`): ``xi_C, xi_E, xi_n`` ``[q, precision]``;
    ``xi_S`` ``[q, precision, J, candidate]``; ``xi_E_t, xi_C_t`` ``[q, precision, J]``. NaN
    where the (question, arm) is incomplete (K < 2 or a real score not finite at a window depth
    in a used arrangement).
    """
    s = np.asarray(s)
    if s.dtype not in (np.float32, np.float64):
        s = s.astype(np.float64)
    K = np.ascontiguousarray(np.asarray(K).astype(np.int64))
    w = np.ascontiguousarray(arrangement_weights(used_arrangements(s, used)))
    Ct, Et, St, ok = _marginal_sums(s, K, w, np.asarray(list(src_idx), np.int64), np.asarray(list(dst_idx), np.int64))
    return {
        "xi_C": Ct.sum(-1), "xi_E": Et.sum(-1), "xi_n": np.where(ok, 1.0, np.nan),
        "xi_S": St, "xi_E_t": Et, "xi_C_t": Ct,
    }


# ----------------------------------------------------------------------------------------------
# group-level mathematics
# ----------------------------------------------------------------------------------------------
def xi_from_group_sums(n, S, E, K):
    """Numerators of Ξ_marg per group from per-group sums (``pd:app:eq:covariance``).

    ``n`` ``[G, ...]`` questions (Σω), ``S`` ``[G, ..., C]`` Σω d (0 past K_g), ``E`` ``[G, ...]``
    Σω‖d‖², ``K`` ``[G]`` the group's K_g (NumPy or dask arrays; dims after G broadcast). Returns
    ``[G, ...]``: ``[E + ((1ᵀS)² - ‖S‖²)/n] / K`` = ``(n/K)[tr Σ + (1ᵀμ)²]`` (nats²; 0 for an
    empty group).
    """
    Kg = np.asarray(K, dtype=np.float64).reshape((-1,) + (1,) * (E.ndim - 1))
    cross = S.sum(-1) ** 2 - (S * S).sum(-1)  # Σ_{k≠l} S_k S_l
    with np.errstate(invalid="ignore", divide="ignore"):
        val = (E + np.where(n > 0, cross / np.where(n > 0, n, 1.0), 0.0)) / Kg
    return np.where(n > 0, val, 0.0)


def permutation_sums(d, n_perm: int = 1000, rng=None) -> np.ndarray:
    """Σ_i (1ᵀd^σ_i)² for ``n_perm`` independent draws of coordinate permutations (vectorised).

    ``d`` ``[m, K]``: the m (equally weighted) increment vectors of one group and depth, or
    ``[J, m, K]``: those of J depths of the same m observations. Each draw permutes every
    coordinate independently and uniformly across the m observations (``pd:app:eq:covariance``);
    coordinate 0 is held fixed, which leaves the joint law of the pairing unchanged (relabel the
    observations by σ_0). The J depths share each draw's permutations (each depth's draws keep
    their law; one shuffle serves every depth, the costly part). Returns float64 ``[n_perm]`` or
    ``[J, n_perm]`` (nats²); memory is bounded by batching the draws.
    """
    rng = np.random.default_rng(rng)
    d = np.asarray(d, dtype=np.float64)
    single = d.ndim == 2
    if single:
        d = d[None]
    J, m, K = d.shape
    n_perm = int(n_perm)
    out = np.empty((J, n_perm))
    if m == 0:
        out[:] = 0.0
    elif K < 2 or m == 1:
        out[:] = (d.sum(2) ** 2).sum(1)[:, None]
    else:
        dT = np.ascontiguousarray(np.moveaxis(d, 2, 1))  # [J, K, m]
        batch = max(1, min(n_perm, _PERM_BUDGET // (K * m)))
        for b0 in range(0, n_perm, batch):
            B = min(batch, n_perm - b0)
            idx = rng.permuted(np.broadcast_to(np.arange(m), (B, K - 1, m)), axis=-1)
            for j in range(J):
                y = dT[j, 0][None, :] + np.take_along_axis(np.broadcast_to(dT[j, 1:], (B, K - 1, m)), idx, axis=-1).sum(1)
                out[j, b0:b0 + B] = (y * y).sum(-1)
    return out[0] if single else out


def marginal_groups(score, *, by: str = "task", within: Sequence[str] = ("subject", "n_candidates"), used=None):
    """Each question's group (cell ``by`` × ``within`` coordinates × K × A_i) for the marginal reference.

    ``used`` ``[question, arrangement]`` bool: the used arrangements (default: from the store's
    ``arrangement_order`` if ``score`` carries it as a coordinate, else all arrangements). Absent
    ``within`` coordinates are skipped.

    Returns
    -------
    (groups, codes, cell_names, cell_of_group, K_of_group): ``groups`` the group names
    (``'cell|subject|K=4|A=1'``), ``codes`` ``[question]`` int64, the cell names, each group's
    cell index and K_g.
    """
    from ..core.questions import group_name, local_codes, question_columns

    n = score.sizes[L.QUESTION]
    if used is not None:
        A = np.asarray(used, dtype=bool).sum(1).astype(np.int64)
    elif "n_arrangements" in score.coords:
        A = np.asarray(score["n_arrangements"].values, dtype=np.int64)
    else:
        A = np.full(n, score.sizes[L.ARRANGEMENT], dtype=np.int64)
    score = score.assign_coords(n_arrangements=(L.QUESTION, A))
    cols = question_columns(score, by=by, within=within)
    cells, rows, _, codes = local_codes({k: np.asarray(v) for k, v in cols.items() if k not in ("id", "label")})
    pos = {c: i for i, c in enumerate(cells)}
    return ([group_name(r) for r in rows], codes, cells, np.array([pos[r[0]] for r in rows], dtype=np.int64),
            np.array([r[-2] for r in rows], dtype=np.int64))


def _group_seed(seed: int, name: str) -> list[int]:
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=8, person=b"depthtraj-xi").digest()
    h = int.from_bytes(digest, "little")
    return [int(seed), h]


def _group_permutations(block, k, u, *, src, dst, n_perm, seed, name):
    """Permutation sums of one group: ``[precision, J, n_perm]`` of Σ ω (1ᵀd^σ)²/K (nats²)."""
    block = np.asarray(block)
    res = marginal_kernel(block, k, src_idx=src, dst_idx=dst, used=u)
    done = np.isfinite(res["xi_n"])  # [q, P]
    nq, _, _, A, P = block.shape
    Kg = int(k[0]) if len(k) else 2
    out = np.zeros((P, len(src), int(n_perm)))
    rng = np.random.default_rng(_group_seed(seed, name))
    uu = np.asarray(u, dtype=bool)
    src, dst = list(src), list(dst)
    for p in range(P):
        rows = done[:, p]
        if not rows.any():
            continue
        bp = block[rows][..., p]  # [q, depth, candidate, A]
        d = (bp[:, dst, :Kg] - bp[:, src, :Kg]).astype(np.float64)  # [q, J, K, A]
        d = np.moveaxis(d, (1, 3), (0, 2))[:, uu[rows]]  # [J, pairs, K] (used arrangements)
        omega = 1.0 / max(int(uu[rows][0].sum()), 1)
        out[p] = permutation_sums(d, n_perm, rng) * omega / Kg
    return out


# ----------------------------------------------------------------------------------------------
# public lazy transformations
# ----------------------------------------------------------------------------------------------
def _used_of(ds, score):
    """``[question, arrangement]`` used arrangements from ``arrangement_order`` (spec §4.3), or None."""
    import xarray as xr

    from ...store import used_arrangements

    if isinstance(ds, xr.Dataset) and "arrangement_order" in ds.variables:
        used = np.array(used_arrangements(ds).values, dtype=bool)
        used[:, 0] = True
        return used
    return None


def marginal_summary(ds, destinations=None, endpoint: int | None = None):
    """Per-question sums for Ξ_obs and its marginal reference (:func:`marginal_kernel`).

    Parameters
    ----------
    ds
        a store Dataset or its ``score`` DataArray (nats) with ``n_candidates``.
    destinations
        window of destination depths (``'16:32'``, a list; default every recorded depth ≤ T).
    endpoint
        T (default the last recorded depth).

    Returns
    -------
    xarray.Dataset, dask-backed: ``xi_C, xi_E, xi_n`` (question, precision); ``xi_S`` (question,
    precision, depth, candidate); ``xi_E_t, xi_C_t`` (question, precision, depth); ``depth`` is
    the destination depth, coordinate ``source`` its start. Units in :data:`MARGINAL_VARS`.

    Raises
    ------
    ValueError
        for an invalid endpoint or a window without increments.
    """
    score = score_of(ds)
    recorded = [int(t) for t in score[L.DEPTH].values]
    T = resolve_endpoint(recorded, endpoint)
    pairs = destination_increments(recorded, T, destinations)
    kw = dict(src_idx=[recorded.index(a) for a, _ in pairs], dst_idx=[recorded.index(b) for _, b in pairs])
    layout = {n: (L.PRECISION,) + extra for n, (extra, _, _, _) in MARGINAL_VARS.items()}
    extra = {L.DEPTH: [b for _, b in pairs], L.CANDIDATE: list(score[L.CANDIDATE].values)}
    out = map_question_chunks(marginal_kernel, [score, candidate_counts(score)], layout, kw, extra)
    out = out.assign_coords(source=(L.DEPTH, [a for a, _ in pairs]))
    for n, (_, text, units, label) in MARGINAL_VARS.items():
        out[n].attrs.update(long_name=text, units=units, paper=label)
    out.attrs.update(endpoint=T, destinations=[b for _, b in pairs], paper="pd:app:eq:covariance")
    return out


def marginal_covariance(
    ds,
    destinations=None,
    endpoint: int | None = None,
    *,
    by: str = "task",
    within: Sequence[str] = ("subject", "n_candidates"),
    n_perm: int = 1000,
    seed: int = 0,
):
    """Observed common-energy fraction, exact marginal reference, covariance excess and the
    finite-permutation estimate per cell (``pd:app:eq:xi``, ``pd:app:eq:covariance``,
    ``pd:app:tab:marginal``).

    Parameters
    ----------
    ds, destinations, endpoint
        as in :func:`marginal_summary` (e.g. ``destinations='16:32'`` for late updates).
    by
        the cell coordinate (task); ``within`` the further group keys (subject, K; absent ones
        skipped). Groups also split by destination depth, precision arm and A_i.
    n_perm
        permutation draws (0: no permutation estimate); ``seed`` their seed (each group's
        stream depends on the seed and the group's name only). The estimate costs about
        n_perm × N × J × K operations and holds one group's increments in memory at a time: a
        check for populations of the paper's size (thousands of questions), where the exact
        ``xi_marg`` serves at any size.

    Returns
    -------
    xarray.Dataset, dask-backed, dims (``by``, precision), fractions: ``xi_obs``, ``xi_marg``
    (exact), ``xi_excess`` = xi_obs - xi_marg, ``xi_perm`` (mean of Ξ_σ over the draws) and
    ``xi_perm_se`` (its Monte-Carlo standard error sd/√n_perm), ``E_tot`` (nats²), ``n`` (complete
    questions), ``n_groups``; and per destination depth (``by``, precision, depth):
    ``xi_obs_t``, ``xi_marg_t`` (Σ over that depth's groups / that depth's Σ E). NaN where a
    cell's E_tot is 0.

    Raises
    ------
    ValueError
        for an invalid endpoint, a window without increments or ``n_perm < 0``.
    """
    import dask
    import dask.array as da
    import xarray as xr

    if int(n_perm) < 0:
        raise ValueError(f"n_perm must be ≥ 0, got {n_perm}")
    score = score_of(ds)
    summ = marginal_summary(ds, destinations, endpoint)
    recorded = [int(t) for t in score[L.DEPTH].values]
    dests = list(summ.attrs["destinations"])
    src = [recorded.index(int(a)) for a in summ["source"].values]
    dst = [recorded.index(int(b)) for b in dests]
    used = _used_of(ds, score)
    if used is None:  # a bare score array: infer the used arrangements (one pass over the scores)
        used = np.asarray(np.isfinite(score).any([L.DEPTH, L.CANDIDATE, L.PRECISION]).values)
        used[:, 0] = True
    groups, codes, cells, cell_of, K_of = marginal_groups(score, by=by, within=within, used=used)
    G, Cn = len(groups), len(cells)
    cell_hot = xr.DataArray((cell_of[:, None] == np.arange(Cn)[None, :]).astype(np.float64),
                            dims=("group", by), coords={by: cells})

    def gsum(name):
        x = summ[name]
        return xr.DataArray(_grouped_sum(x, codes, G), dims=("group",) + x.dims[1:])

    n_g = gsum("xi_n")  # [group, P]
    S_g = gsum("xi_S")  # [group, P, depth, candidate]
    E_g = gsum("xi_E_t")  # [group, P, depth]
    C_g = gsum("xi_C_t")
    marg = xr.DataArray(
        xi_from_group_sums(n_g.data[..., None], S_g.data, E_g.data, K_of), dims=("group", L.PRECISION, L.DEPTH))
    E_t = (E_g * cell_hot).sum("group")  # [P, depth, by]
    C_t = (C_g * cell_hot).sum("group")
    M_t = (marg * cell_hot).sum("group")
    E_tot = E_t.sum(L.DEPTH)
    out = xr.Dataset()
    out["xi_obs"] = C_t.sum(L.DEPTH) / E_tot.where(E_tot > 0)
    out["xi_marg"] = M_t.sum(L.DEPTH) / E_tot.where(E_tot > 0)
    out["xi_excess"] = out["xi_obs"] - out["xi_marg"]
    out["xi_obs_t"] = C_t / E_t.where(E_t > 0)
    out["xi_marg_t"] = M_t / E_t.where(E_t > 0)
    out["E_tot"] = E_tot
    out["n"] = (n_g * cell_hot).sum("group")
    out["n_groups"] = ((n_g > 0) * cell_hot).sum("group")
    if int(n_perm) > 0:
        K = np.asarray(score["n_candidates"].values).astype(np.int64)
        P = score.sizes[L.PRECISION]
        run = dask.delayed(_group_permutations, pure=True)
        per_cell = [[] for _ in range(Cn)]
        for g, name in enumerate(groups):
            idx = np.flatnonzero(codes == g)
            u = used[idx]
            part = run(score.data[idx], K[idx], u, src=src, dst=dst, n_perm=int(n_perm), seed=int(seed), name=name)
            per_cell[cell_of[g]].append(da.from_delayed(part, shape=(P, len(dst), int(n_perm)), dtype=np.float64))
        draws = da.stack([da.stack(parts).sum(0) if parts else da.zeros((P, len(dst), int(n_perm)))
                          for parts in per_cell])  # [cell, P, depth, draw]
        draws = xr.DataArray(draws, dims=(by, L.PRECISION, L.DEPTH, "draw"))
        xi_s = draws.sum(L.DEPTH) / E_tot.where(E_tot > 0)
        out["xi_perm"] = xi_s.mean("draw")
        out["xi_perm_se"] = xi_s.std("draw", ddof=1) / np.sqrt(n_perm) if n_perm > 1 else xi_s.mean("draw") * np.nan
    out = out.assign_coords({L.PRECISION: score[L.PRECISION].values, L.DEPTH: dests, by: cells})
    text = {
        "xi_obs": ("observed common-energy fraction Ξ_obs = ΣC/ΣE", "fraction", "pd:app:eq:xi"),
        "xi_marg": ("exact marginal reference Ξ_marg = E_σ[Ξ_σ]", "fraction", "pd:app:eq:covariance"),
        "xi_excess": ("covariance excess Ξ_obs - Ξ_marg", "fraction", "pd:app:eq:covariance"),
        "xi_obs_t": ("Ξ_obs over one destination depth's increments", "fraction", "pd:app:eq:xi"),
        "xi_marg_t": ("Ξ_marg over one destination depth's increments", "fraction", "pd:app:eq:covariance"),
        "xi_perm": (f"finite-permutation estimate of Ξ_marg ({n_perm} draws)", "fraction", "pd:app:eq:covariance"),
        "xi_perm_se": ("Monte-Carlo standard error of xi_perm", "fraction", "pd:app:eq:covariance"),
        "E_tot": ("total energy Σ‖d‖² (ω = 1/A)", "nats²", "pd:app:eq:xi"),
        "n": ("complete questions", "count", "pd:app:eq:xi"),
        "n_groups": ("non-empty groups (subject × K × A × precision)", "count", "pd:app:eq:covariance"),
    }
    for v, (t, units, label) in text.items():
        if v in out:
            out[v].attrs.update(long_name=t, units=units, paper=label)
    out.attrs.update(summ.attrs, by=by, within=[c for c in within], n_perm=int(n_perm), seed=int(seed))
    order = [by, L.PRECISION]
    return out.transpose(*order, ...)



def _grouped_sum(x, codes, G: int):
    """Σ over questions of ``x`` (dask-backed, question first, chunked along question only) per
    group ``codes`` -> dask ``[G, *x.shape[1:]]`` (NaN entries count 0), chunk by chunk."""
    import dask
    import dask.array as da

    rest = tuple(x.shape[1:])

    def one(block, c):
        X = np.nan_to_num(np.asarray(block, dtype=np.float64).reshape(len(c), -1), nan=0.0)
        out = np.zeros((G, X.shape[1]))
        if len(c):
            order = np.argsort(c, kind="stable")
            cs = c[order]
            first = np.flatnonzero(np.r_[True, cs[1:] != cs[:-1]])
            out[cs[first]] = np.add.reduceat(X[order], first, axis=0)
        return out.reshape((G,) + rest)

    parts, start = [], 0
    run = dask.delayed(one, pure=True)
    for blk, nq in zip(x.data.to_delayed().ravel(), x.data.chunks[0]):
        parts.append(da.from_delayed(run(blk, codes[start:start + nq]), shape=(G,) + rest, dtype=np.float64))
        start += nq
    return da.stack(parts).sum(0) if parts else da.zeros((G,) + rest)
