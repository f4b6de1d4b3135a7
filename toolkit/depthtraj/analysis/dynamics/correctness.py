"""Endpoint agreement and correctness (paper §4, ``arxiv:sec:answer-correction``;
``r3:eq:correctness``, ``pd:app:tab:transitions``, ``pd:app:tab:text-accuracy``,
``pd:eq:format-summaries``), lazily over any store.

Per question i, depth t, arrangement and precision arm, with K_i the question's own
``n_candidates`` (candidates past K_i are padding and ignored), endpoint T and ground truth y*
(the store's ``label`` coordinate; a label outside ``0..K_i-1``, e.g. -1, is *unknown*):

* the winner ``y_t = argmax_k s_{t,k}``, ties broken towards the lowest candidate identity
  (the convention of :func:`~depthtraj.analysis.geometry.ladder`'s ``winner``);
* accuracy ``A_t = mean 1{y_t = y*}``;
* the transitions t → T, exactly one of which holds on every trajectory (:data:`TRANSITIONS`):
  ``WC`` correction (y_t ≠ y*, y_T = y*), ``CW`` degradation (y_t = y*, y_T ≠ y*), ``WWp``
  switch between distinct wrong answers (y_t ≠ y*, y_T ≠ y*, y_T ≠ y_t), ``CC`` (y_t = y_T =
  y*) and ``WW`` the same wrong answer (y_t = y_T ≠ y*);
* ``r3:eq:correctness``: ``A_T - A_t = (N_WC - N_CW)/N`` and
  ``mean 1{y_t ≠ y_T} = (N_WC + N_CW + N_WWp)/N``;
* ``pd:eq:format-summaries``: ``ε = (1/(N|𝒯|)) Σ_i Σ_{t∈𝒯} 1{y_{i,t} ≠ y_{i,T}}`` (the fraction of
  sampled intermediate answers on the grid 𝒯 that disagree with their own endpoint),
  ``A_f = A_T`` and ``a_lab,txt = mean_i 1{y^lab_{i,T} = y^txt_{i,T}}`` over the questions two
  stores share (:func:`endpoint_agreement`).

Arrangements: every arrangement a question uses counts ``1/A_i`` (A_i of them; spec §4:
unused arrangements hold NaN scores, and the used ones are 0..A_i-1), so a question's per-depth
transition weights sum to one and a cell's transition counts sum to N in each row; accuracy and
disagreement are likewise averaged over arrangements first, then over questions. The kernels
take the used arrangements as ``used [q, arrangement]``; without it (as the lazy functions
call them) they infer them from the scores: arrangement 0, and every arrangement with a finite
score somewhere in the chunk.

Per-question summaries and cells
--------------------------------
Everything is produced as per-question summaries (dims (question, precision[, depth])) by one
chunk kernel compiled with numba, :func:`correctness_kernel`; the public lazy functions are
built on it.
:data:`CELL_STATISTICS` states how each cell value is formed from those summaries (a mean over
questions, a ratio of two such means, or a sum), which is what the whole-question bootstrap
resamples; :func:`cell_values` evaluates that table lazily per cell.

Missing data: a (question, arm) is *complete* when K_i ≥ 2 and every real-candidate score is
finite at every depth used, in every used arrangement; otherwise all its summaries are NaN. Summaries
that need y* are NaN where the label is unknown. NaN questions are left out of cell values.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import numpy as np

from ... import layout as L
from ..core import cells
from ..core.chunks import answer_of, apply_kernel, compiled_args, depth_positions, describe_store, nan_where, winner_of
from ..core.grid import depths_of, grid_of
from ..core.data import score_of
from ..core.grid import resolve_endpoint

__all__ = [
    "CELL_STATISTICS",
    "CORRECTNESS_VARS",
    "TRANSITIONS",
    "cell_values",
    "correctness_kernel",
    "correctness_summary",
    "endpoint_agreement",
    "winners",
]

#: The five start-to-end transition categories (``pd:app:tab:transitions``): name -> text.
TRANSITIONS: dict[str, str] = {
    "WC": "W→C: wrong at t, correct at T (correction)",
    "CW": "C→W: correct at t, wrong at T (degradation)",
    "WWp": "W→W′: wrong at t, a different wrong answer at T",
    "CC": "C→C: correct at t and at T",
    "WW": "W=W: the same wrong answer at t and at T",
}

#: Per-question summaries of :func:`correctness_kernel`: name -> (extra dim or None, text, units).
CORRECTNESS_VARS: dict[str, tuple[str | None, str, str]] = {
    "acc": ("depth", "mean_a 1{y_t = y*}", "fraction"),
    **{k: ("depth", f"mean_a 1{{{v.split(':')[0]}}}", "fraction") for k, v in TRANSITIONS.items()},
    "acc_change": ("depth", "mean_a (1{y_T = y*} - 1{y_t = y*})", "fraction"),
    "disagree": ("depth", "mean_a 1{y_t ≠ y_T}", "fraction"),
    "acc_T": (None, "endpoint accuracy mean_a 1{y_T = y*}", "fraction"),
    "eps": (None, "mean over t ∈ 𝒯 and a of 1{y_t ≠ y_T}", "fraction"),
}

#: How each cell value is formed from per-question summaries: ``("mean", var)`` is the mean over
#: the cell's questions (NaN questions left out); ``("sum", var)`` their sum (counts, with each
#: question weighted 1 and its arrangements 1/A); ``("ratio", num, den)`` is
#: ``mean(num) / mean(den)`` over questions where both are finite.
CELL_STATISTICS: dict[str, tuple[str, ...]] = {
    "A_t": ("mean", "acc"),  # accuracy at each depth t (pd:app:tab:transitions)
    "N_WC": ("sum", "WC"),
    "N_CW": ("sum", "CW"),
    "N_WWp": ("sum", "WWp"),
    "N_CC": ("sum", "CC"),
    "N_WW": ("sum", "WW"),
    "acc_change": ("mean", "acc_change"),  # A_T - A_t (r3:eq:correctness)
    "disagreement": ("mean", "disagree"),  # mean 1{y_t ≠ y_T} (r3:eq:correctness)
    "A_T": ("mean", "acc_T"),  # endpoint accuracy A_f (pd:app:tab:text-accuracy)
    "epsilon": ("mean", "eps"),  # ε_f (pd:eq:format-summaries)
    "agreement": ("mean", "agree"),  # a_lab,txt (pd:eq:format-summaries), endpoint_agreement
    "n_questions": ("sum", "complete"),  # complete questions (of endpoint_agreement: paired)
}


# ----------------------------------------------------------------------------------------------
# shared NumPy helpers (also used by :mod:`.dynamics`)
# ----------------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------------
# the chunk kernel
# ----------------------------------------------------------------------------------------------


def correctness_kernel(s, K, answer, *, depth_idx, grid_idx, endpoint_idx, used=None) -> dict[str, np.ndarray]:
    """Per-question correctness summaries of one question chunk (compiled:
    :func:`~depthtraj.analysis.dynamics.kernels.correctness_pass`).

    Parameters
    ----------
    s
        scores ``[q, depth, candidate, arrangement, precision]`` (nats; float32/64, NaN padding).
    K, answer
        ``[q]``: ``n_candidates`` K_i and the correct identity y* (unknown unless in 0..K_i-1).
    depth_idx, grid_idx, endpoint_idx
        positions along ``depth`` of the depths t to report (J of them; may include T), of the
        grid 𝒯 for ε, and of the endpoint T.
    used
        ``[q, arrangement]`` bool, the arrangements each question uses (default: inferred).

    Returns
    -------
    dict of float64 arrays (:data:`CORRECTNESS_VARS`), fractions in [0, 1] (``acc_change`` in
    [-1, 1]): per depth ``[q, precision, J]`` ``acc, WC, CW, WWp, CC, WW, acc_change, disagree``;
    per question ``[q, precision]`` ``acc_T``, ``eps`` (NaN for an empty grid) and ``complete``
    (1.0 or NaN). Each is a mean over the used arrangements (each adding 1/A_i); NaN where the
    (question, arm) is incomplete, and for the label-dependent ones where y* is unknown.
    """
    from . import kernels as kd

    s, K, u, y = compiled_args(s, K, used, answer)
    D, Q = kd.correctness_pass(s, K, u, y, depth_positions(depth_idx), depth_positions(grid_idx), int(endpoint_idx))
    out = dict(zip(kd.CORRECTNESS_DEPTH_FIELDS, D))
    out.update(zip(kd.CORRECTNESS_FIELDS, Q))
    return out


def _agreement_kernel(wa, wb, *, index: bool = False):
    """``wa[..., A1]``, ``wb[..., A2]`` endpoint winners (-1 where invalid) -> mean over the
    pairs of used arrangements (all pairs; ``index``: pairs a = a') of 1{wa = wb} ``[...]``.

    Arrangement 0 is always used; another arrangement counts as used when its winner is valid
    (unused arrangements hold NaN scores). NaN where arrangement 0 of either store is invalid
    or no pair is left.
    """
    wa, wb = np.asarray(wa), np.asarray(wb)
    ua, ub = wa >= 0, wb >= 0
    if index:
        pair = ua & ub
        same = (wa == wb) & pair
    else:
        pair = ua[..., :, None] & ub[..., None, :]
        same = (wa[..., :, None] == wb[..., None, :]) & pair
        pair, same = pair.reshape(pair.shape[:-2] + (-1,)), same.reshape(same.shape[:-2] + (-1,))
    n = pair.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        agree = same.sum(-1) / n
    return nan_where(agree, ~ua[..., 0] | ~ub[..., 0] | (n == 0))


def _winner_kernel(s, K):
    """``s[..., depth, cand]``, ``K[...]`` -> winners ``[..., depth]`` int16 (-1 where K < 2 or a
    real score is not finite)."""
    s = np.asarray(s)
    K = np.asarray(K).astype(np.int64)
    S = np.ascontiguousarray(np.moveaxis(s, -1, 0), dtype=np.float64)  # [C, ..., D]
    M = (np.arange(S.shape[0]).reshape((-1,) + (1,) * (S.ndim - 1)) < K[None, ..., None])
    a, _, ok = winner_of(S, M)
    return np.where(ok & (K[..., None] >= 2), a, -1).astype(np.int16)


# ----------------------------------------------------------------------------------------------
# lazy plumbing shared with :mod:`.dynamics`
# ----------------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------------
# public lazy transformations
# ----------------------------------------------------------------------------------------------
def winners(ds, depths: Sequence[int] | None = None):
    """Intermediate answers y_t = argmax_k s_{t,k} (ties → lowest identity; ``arxiv:sec:answer-correction``).

    Parameters
    ----------
    ds
        a store Dataset or its ``score`` DataArray (question, depth, candidate, arrangement,
        precision; nats) with ``n_candidates``.
    depths
        recorded depths to evaluate (default every recorded depth).

    Returns
    -------
    xarray.DataArray, dask-backed, int16 candidate identities, dims (question, depth,
    arrangement, precision); -1 where K < 2 or a real candidate's score is not finite.

    Raises
    ------
    ValueError
        when the input is not a score layout or a depth is not recorded.
    """
    import xarray as xr

    score = score_of(ds)
    recorded = [int(t) for t in score[L.DEPTH].values]
    depths = recorded if depths is None else [int(t) for t in depths]
    bad = [t for t in depths if t not in recorded]
    if bad:
        raise ValueError(f"depths {bad} are not recorded in the store")
    K = score["n_candidates"].reset_coords(drop=True).astype(np.int64)
    w = xr.apply_ufunc(
        _winner_kernel, score.sel({L.DEPTH: depths}), K,
        input_core_dims=[[L.DEPTH, L.CANDIDATE], []], output_core_dims=[[L.DEPTH]],
        dask="parallelized", output_dtypes=[np.int16],
    )
    w = w.transpose(*L.DEPTH_STAT_DIMS).assign_coords({L.DEPTH: depths})
    # candidate identities, not scores: none of the score's attrs (its units, nats) carry over
    w.attrs = {"long_name": "winner y_t (lowest identity among ties), -1 if invalid",
               "paper": "arxiv:sec:answer-correction"}
    return w.rename("winner")


def correctness_summary(ds, depths: Sequence[int] | None = None, grid="quarter", endpoint: int | None = None):
    """Per-question accuracy, transitions and endpoint disagreement (``r3:eq:correctness``,
    ``pd:app:tab:transitions``, ``pd:eq:format-summaries``).

    Parameters
    ----------
    ds
        a store Dataset or its ``score`` DataArray with ``n_candidates`` and ``label``.
    depths
        the depths t of the per-depth summaries (recorded, ≤ T); default every recorded depth
        ≤ T.
    grid
        the grid 𝒯 of ε (a :class:`Grid`, a spelling such as ``'quarter'`` — the paper's
        {8, 16, 24} at T=32 — or a sequence of recorded depths < T).
    endpoint
        T (a recorded depth); default the last recorded depth.

    Returns
    -------
    xarray.Dataset, dask-backed, of fractions (:data:`CORRECTNESS_VARS`): dims (question,
    precision, depth) for ``acc, WC, CW, WWp, CC, WW, acc_change, disagree``; (question,
    precision) for ``acc_T``, ``eps``, ``complete``. Each is a mean over arrangements; cell
    values follow :data:`CELL_STATISTICS` (:func:`cell_values`). ``attrs``: endpoint, grid.

    Raises
    ------
    ValueError
        when the store has no ``label`` coordinate, the endpoint or a depth is not recorded, or
        the grid is invalid.
    """
    score = score_of(ds)
    answer = answer_of(score, required=True)
    recorded = [int(t) for t in score[L.DEPTH].values]
    T = resolve_endpoint(recorded, endpoint)
    depths = depths_of(score, depths, T)
    g = grid_of(score, grid, T)
    kw = {
        "depth_idx": [recorded.index(t) for t in depths],
        "grid_idx": [recorded.index(t) for t in g.depths], "endpoint_idx": recorded.index(T),
    }
    layout = {n: d for n, (d, _, _) in CORRECTNESS_VARS.items()} | {"complete": None}
    out = apply_kernel(correctness_kernel, score, answer, layout, kw, {L.DEPTH: depths})
    out = out.transpose(L.QUESTION, L.PRECISION, ...)
    for n, (_, text, units) in CORRECTNESS_VARS.items():
        out[n].attrs.update(long_name=text, units=units, paper="r3:eq:correctness")
    out["eps"].attrs["paper"] = "pd:eq:format-summaries"
    out["complete"].attrs.update(long_name="1 for a complete (question, arm), NaN otherwise")
    out.attrs.update(endpoint=T, grid=list(g.depths), grid_name=g.name, paper="arxiv:sec:answer-correction")
    return out


def endpoint_agreement(
    first,
    second,
    *,
    endpoint_first: int | None = None,
    endpoint_second: int | None = None,
    pairing: str = "all",
    names: tuple[str, str] | None = None,
):
    """Endpoint agreement between two stores' answers, paired by question id (``a_lab,txt``,
    ``pd:eq:format-summaries``).

    For each question id present in both stores, ``agree_i`` is the mean over arrangement
    pairs of ``1{y^(1)_{i,T,a} = y^(2)_{i,T',a'}}`` (with one arrangement each: the paper's
    indicator), over the arrangements each question uses (arrangement 0, and any other with a
    valid endpoint answer). ``pairing='all'`` averages all A₁·A₂ pairs (a, a') — the chance that the answers
    under an arrangement drawn from each store agree, the right choice when the stores'
    arrangements are unrelated (e.g. answer-text scoring without displayed options);
    ``pairing='index'`` pairs arrangement a with a' = a (the stores must have the same number
    of arrangements, and index a should mean the same displayed order in both). ``a_lab,txt`` is the mean over
    questions (:data:`CELL_STATISTICS` ``agreement``); pair these per-question values with each
    store's :func:`correctness_summary` by question id for paired bootstraps.

    Parameters
    ----------
    first, second
        store Datasets (or ``score`` DataArrays) with ``n_candidates``.
    endpoint_first, endpoint_second
        each store's own endpoint (default its last recorded depth).
    pairing
        ``'all'`` (default) or ``'index'``, as above.
    names
        the two stores' names for messages (default their source path or model and readout).

    Returns
    -------
    xarray.Dataset, dask-backed, dims (question, precision) over the shared question ids (in
    the first store's order) and the precision arms both stores have (by name; two single-arm
    stores are paired whatever their names, under the first store's arm name): ``agree``
    (fraction; NaN where either store is incomplete at its endpoint) and ``complete`` (1.0 or
    NaN). Question coordinates of the first store are kept. ``attrs``: ``endpoints``,
    ``precision_pairs``, ``stores``.

    Raises
    ------
    ValueError
        when the stores share no question id or no precision arm (the message names both), or
        for an unknown ``pairing`` or ``'index'`` pairing of different arrangement counts.
    """
    import xarray as xr

    sa, sb = score_of(first), score_of(second)
    na = describe_store(first, (names or ("", ""))[0], "first store")
    nb = describe_store(second, (names or ("", ""))[1], "second store")
    ids_a = [str(x) for x in np.asarray(sa[L.QUESTION].values).tolist()]
    ids_b = [str(x) for x in np.asarray(sb[L.QUESTION].values).tolist()]
    pos_b = {q: j for j, q in enumerate(ids_b)}
    ia = [i for i, q in enumerate(ids_a) if q in pos_b]
    if not ia:
        raise ValueError(
            f"stores {na!r} ({len(ids_a)} questions) and {nb!r} ({len(ids_b)} questions) "
            "share no question id"
        )
    ib = [pos_b[ids_a[i]] for i in ia]
    if pairing not in ("all", "index"):
        raise ValueError(f"pairing must be 'all' or 'index', got {pairing!r}")
    A1, A2 = sa.sizes[L.ARRANGEMENT], sb.sizes[L.ARRANGEMENT]
    if pairing == "index" and A1 != A2:
        raise ValueError(
            f"pairing='index' needs the same number of arrangements; {na!r} has {A1}, {nb!r} has {A2}"
        )
    pa = [str(p) for p in sa[L.PRECISION].values.tolist()]
    pb = [str(p) for p in sb[L.PRECISION].values.tolist()]
    common = [p for p in pa if p in pb]
    if common:
        pairs = [(p, p) for p in common]
    elif len(pa) == 1 and len(pb) == 1:
        pairs = [(pa[0], pb[0])]
    else:
        raise ValueError(f"stores {na!r} (arms {pa}) and {nb!r} (arms {pb}) share no precision arm")
    Ta = resolve_endpoint([int(t) for t in sa[L.DEPTH].values], endpoint_first)
    Tb = resolve_endpoint([int(t) for t in sb[L.DEPTH].values], endpoint_second)

    def endpoint_winner(score, T, idx, arms):
        w = winners(score.isel({L.QUESTION: idx}), [T]).isel({L.DEPTH: 0}, drop=True)
        return w.sel({L.PRECISION: arms}).reset_coords(drop=True)

    wa = endpoint_winner(sa, Ta, ia, [p for p, _ in pairs])
    wb = endpoint_winner(sb, Tb, ib, [p for _, p in pairs])
    wb = wb.rename({L.ARRANGEMENT: "arrangement_second"}).assign_coords({L.PRECISION: wa[L.PRECISION].values})
    wb = wb.chunk({L.QUESTION: wa.chunks[0]})
    agree = xr.apply_ufunc(
        functools.partial(_agreement_kernel, index=pairing == "index"), wa, wb,
        input_core_dims=[[L.ARRANGEMENT], ["arrangement_second"]], output_core_dims=[[]],
        dask="parallelized", output_dtypes=[np.float64],
    ).transpose(L.QUESTION, L.PRECISION)
    qcoords = {n: (L.QUESTION, np.asarray(c.values)[ia]) for n, c in sa.coords.items()
               if c.dims == (L.QUESTION,) and n != L.QUESTION}
    out = xr.Dataset({"agree": agree, "complete": xr.where(agree.notnull(), 1.0, np.nan)})
    out = out.assign_coords({L.QUESTION: [ids_a[i] for i in ia], **qcoords})
    out["agree"].attrs.update(units="fraction", paper="pd:eq:format-summaries",
                              long_name="mean over arrangement pairs of 1{y^(1)_T = y^(2)_T}")
    out.attrs.update(endpoints=[Ta, Tb], precision_pairs=[list(p) for p in pairs], stores=[na, nb], pairing=pairing)
    return out




def cell_values(summary, statistics: Mapping[str, tuple[str, ...]] = CELL_STATISTICS, *, by: str = "task"):
    """:func:`depthtraj.analysis.core.cells.cell_values` with the correctness statistics
    (:data:`CELL_STATISTICS`) as the default table (lazy; dims (``by``, ...))."""
    return cells.cell_values(summary, statistics, by=by)
