"""Moment and allocation prediction from a store's §7 collection probes (paper §7:
``pd:app:readout-prediction``, ``pd:app:tab:moment-prediction``; ``arxiv:sec:allocation``,
``pd:app:tab:allocation``).

Inputs (spec §4.5; :data:`depthtraj.layout.PROBES`): at every anchor depth t_j (coordinate
``anchor``) the observed increment ``y = S[t_j+1] − S[t_j]`` ``[candidate]`` of the probed score
``S`` (``attrs.probes.score``: ``score`` for label stores, F1; ``logprob_sum`` for text stores,
the unnormalised F2/F3 sum), and three predictions of its moments:

* **N1** — ``μ = 0``, ``C = I`` on the real candidates (independent equal-variance innovations on
  the candidates' logits);
* **linear N2** — ``μ = 0``, ``C = σ² · probe_jjt`` (``σ² J Jᵀ``: the linear propagation of the
  same innovations ``σ r``, ``Cov(σ r) = σ² I``, that the nonlinear draws use; ``σ`` is the row's
  ``probe_sigma``, so both N2 methods share the observation map and the scale of the innovation,
  and "Nonlinear − linear N2" measures nonlinearity, not a per-question σ² reweighting);
* **nonlinear N2** — ``μ = probe_nl_mean``, ``C = probe_nl_moment − μ μᵀ``.

The evaluation (``spec/exits.md`` §9, every reading where the paper is silent):

* **Rows and questions.** A row is one (question, used arrangement, arm); its anchors are the
  question's "depths". A row is *valid* when the arrangement is used (``a < A_q``) and ``y`` and
  every probe are finite on the real candidates at every anchor. Each valid row of question i
  weighs ``ω = 1/n_i`` (n_i its valid rows in the arm), so every training mean is a mean over
  questions of the arrangement mean, and a question's loss is the mean over its valid rows and
  anchors.
* **Folds.** Question-level, balanced: within each cell (``--by``, default the task) the
  questions are ordered by a hash of (seed, question id) and dealt to folds ``0, 1, …, F−1, 0,
  …`` (F = 4: with 32 questions, 24 training and 8 held out per fold, as in the paper); all
  anchors, arrangements and arms of a question share its fold, whatever the chunking.
* **Fits on the training fold** (:mod:`.moments`): ``α_j`` per method over the training rows and
  anchors, and ``Z`` likewise (energy matching, ``pd:app:eq:energy-match``; ``energy_matching=
  "per-anchor"`` fits both per anchor); ``ȳ_j``, ``E_0``, the constant comparator (the
  training ratio of sums), the weighted ridge on the standardised linear-N2 common share (unit
  slope penalty, unpenalised intercept). The nonlinear-geometry prediction is the common share
  ``uᵀCu / tr C`` of the nonlinear covariance (no fit). All allocation predictions lie in [0, 1].
  ``allocation_loss="two-block"`` uses ℓ₂ instead: constant ``Π_[0,1] p_0`` and the ridge fitted
  under ℓ₂.
* **Mixed K** (``arxiv:sec:allocation`` uses one training mean ``ȳ`` per candidate): ``ȳ_j[k]`` is
  the mean over the training rows that have candidate k (candidate identity, the store's
  ``candidate`` axis). A held-out question with a candidate that no training question of its fold
  has (a K = 5 question among K = 4 ones) has no residual: it is **excluded** from that (cell, arm)'s
  allocation table, under either loss, and counted (``excluded`` in the row and the CSV/JSON, with
  the reason); it stays in the moment table, which needs no ``ȳ``.
* **Held-out losses** per question (each question held out once) and **paired differences**
  ``d_i`` (Linear N2 − N1, Nonlinear N2 − N1, Nonlinear − Linear N2; Nonlinear geometry −
  constant, Weighted ridge − constant); the estimate is the mean of ``d_i`` over the cell's
  questions, the interval the percentile interval (analysis level) of ``Σ W_bi d_i / Σ W_bi`` over
  the analysis's Poisson(1) whole-question bootstrap draws (:func:`~..core.bootstrap.poisson_weights`,
  the same draws as every other table: paired), fits held fixed.

**Memory.** The probe matrices are read lazily, one question chunk at a time (about
:data:`CHUNK_BYTES` of probe and score data, the score at the anchor depths t and t+1 only), and
each chunk is reduced at once to per-row numbers: six moment terms per method
(:class:`~.moments.MomentTerms`), two common shares and the increment ``y`` itself. What stays in
memory is ``[question, arrangement, arm, anchor] × (20 + K_max)`` float64 — linear in K, never
the ``K × K`` matrices of the whole store — plus, per worker thread, a chunk's working copies
(about ten times :data:`CHUNK_BYTES`) and, per bootstrap, ``draws × 1024`` weights. For 14,000
questions, 4 arrangements, 2 arms, 5 anchors and K = 4 that is about 100 MB.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ... import layout as L
from ..core.bootstrap import DEFAULT_DRAWS
from . import moments as M
from .prefix import fold_mix

__all__ = [
    "ALLOCATION_LOSSES",
    "ALLOCATION_DIFFS",
    "ENERGY_MATCHING",
    "DEFAULT_FOLDS",
    "MOMENT_DIFFS",
    "MOMENT_METHODS",
    "NEEDS_PROBES",
    "ReadoutInputs",
    "ReadoutPrediction",
    "balanced_folds",
    "evaluate_readout",
    "has_probes",
    "readout_inputs",
]

#: Why a store without the probes gets no table.
NEEDS_PROBES = ("needs the §7 probe variables (depthtraj collect --probes; paper §7, "
                "pd:app:readout-prediction)")
DEFAULT_FOLDS = 4
#: The moment methods, in the order of every ``[..., method]`` axis.
MOMENT_METHODS = ("n1", "linear", "nonlinear")
#: The paired moment differences (first − second; negative favours the first).
MOMENT_DIFFS = (("linear", "n1"), ("nonlinear", "n1"), ("nonlinear", "linear"))
#: The allocation predictors and the paired differences against the constant.
ALLOCATION_METHODS = ("constant", "nonlinear", "ridge")
ALLOCATION_DIFFS = (("nonlinear", "constant"), ("ridge", "constant"))
ALLOCATION_LOSSES = ("weighted", "two-block")
ENERGY_MATCHING = M.ENERGY_MATCHING
#: Target bytes of one question chunk of probe and score data (float64).
CHUNK_BYTES = 8 * 2**20
#: Questions per block of the bootstrap's weight matrix.
BOOT_BLOCK = 1024
_TERMS = ("energy", "trace", "y4", "d0", "d1", "d2")


# ----------------------------------------------------------------------------------------------
# reading: one lazy pass, each chunk reduced to per-row numbers
# ----------------------------------------------------------------------------------------------
@dataclass
class ReadoutInputs:
    """The per-row reduction of a store's probes (all questions, in store order).

    ``terms`` ``[question, arrangement, arm, anchor, method, term]`` (:data:`MOMENT_METHODS` ×
    ``energy, trace, y4, d0, d1, d2``, :class:`~.moments.MomentTerms`), ``share`` ``[question,
    arrangement, arm, anchor, 2]`` the common shares of linear and nonlinear N2, ``y`` ``[question,
    arrangement, arm, anchor, candidate]`` the observed increments (nats; NaN past K and on
    invalid rows), ``valid`` ``[question, arrangement, arm]``, ``ids``, ``cells`` (the ``by``
    value of each question, text), ``anchors``, ``precision``, ``score`` (the probed variable)
    and ``label`` (F1, or "F2 sum" / "F3 sum")."""

    terms: np.ndarray
    share: np.ndarray
    y: np.ndarray
    valid: np.ndarray
    ids: np.ndarray
    cells: np.ndarray
    anchors: list[int]
    precision: list[str]
    score: str
    label: str


def _probes_meta(ds) -> dict | None:
    meta = ds.attrs.get("depthtraj", {})
    meta = meta.get("probes") if isinstance(meta, dict) else None
    if hasattr(meta, "model_dump"):
        meta = meta.model_dump()
    return meta if isinstance(meta, dict) else None


def has_probes(ds) -> bool:
    """Whether the store Dataset declares ``attrs.probes`` and carries the probe variables the
    tables read (``probe_sigma``, ``probe_jjt``, ``probe_nl_mean``, ``probe_nl_moment``) with the
    ``anchor`` coordinate."""
    return (_probes_meta(ds) is not None and L.ANCHOR in ds.coords
            and all(n in ds.variables for n in ("probe_sigma", "probe_jjt", "probe_nl_mean", "probe_nl_moment")))


def _chunk_terms(s2, sigma, mu, jjt, mom, K, A_q, *, J: int):
    """One question chunk → ``(terms, share, y, valid)`` (see :class:`ReadoutInputs`).

    ``s2`` ``[q, 2J, candidate, arrangement, arm]`` the score at the anchors then at the anchors
    + 1; ``sigma`` ``[q, J, arrangement, arm]``; ``mu`` ``[q, J, candidate, arrangement, arm]``;
    ``jjt``, ``mom`` ``[q, J, candidate, candidate2, arrangement, arm]``; ``K``, ``A_q`` ``[q]``.
    The linear-N2 covariance is ``σ² J Jᵀ``."""
    s2 = np.asarray(s2, dtype=np.float64)
    y = np.moveaxis(s2[:, J:] - s2[:, :J], (3, 4), (1, 2))  # [q, a, p, J, K]
    sig = np.moveaxis(np.asarray(sigma, dtype=np.float64), (2, 3), (1, 2))  # [q, a, p, J]
    mu = np.moveaxis(np.asarray(mu, dtype=np.float64), (3, 4), (1, 2))
    jjt = np.moveaxis(np.asarray(jjt, dtype=np.float64), (4, 5), (1, 2)) * (sig ** 2)[..., None, None]  # [q, a, p, J, K, K]
    mom = np.moveaxis(np.asarray(mom, dtype=np.float64), (4, 5), (1, 2))
    q, n_arr, P, _, k = y.shape
    K = np.asarray(K, dtype=np.int64)
    A_q = np.asarray(A_q, dtype=np.int64)
    real = np.arange(k)[None, :] < K[:, None]  # [q, K]
    pair = real[:, :, None] & real[:, None, :]
    rv = real[:, None, None, None, :]
    rm = pair[:, None, None, None, :, :]
    with np.errstate(invalid="ignore"):
        finite = (np.where(rv, np.isfinite(y) & np.isfinite(mu), True).all((-2, -1))
                  & np.where(rm, np.isfinite(jjt) & np.isfinite(mom), True).all((-3, -2, -1))
                  & np.isfinite(sig).all(-1))
    valid = finite & (np.arange(n_arr)[None, :] < A_q[:, None])[:, :, None] & (K > 0)[:, None, None]
    on = rv & valid[..., None, None]
    y = np.where(on, y, np.nan)
    mu = np.where(on, mu, np.nan)
    eye = np.broadcast_to(np.eye(k), jjt.shape)
    cnl = mom - mu[..., :, None] * mu[..., None, :]
    zero = np.zeros_like(y)
    terms = np.empty((q, n_arr, P, J, len(MOMENT_METHODS), len(_TERMS)))
    for m, (mm, C) in enumerate(((zero, eye), (zero, jjt), (mu, cnl))):
        t = M.moment_terms(y, mm, C)
        for i, name in enumerate(_TERMS):
            terms[..., m, i] = getattr(t, name)
    realy = np.broadcast_to(on, y.shape)
    share = np.stack([M.common_share(jjt, realy), M.common_share(cnl, realy)], axis=-1)
    terms[~valid] = np.nan
    share[~valid] = np.nan
    return terms, share, y, valid


def _rows_per_chunk(P: int, n_arr: int, J: int, k: int) -> int:
    """Questions per chunk: the largest power of two whose float64 probe and score rows fit in
    :data:`CHUNK_BYTES` (the chunk's working copies are a few times that)."""
    per_q = 8 * n_arr * P * J * (3 * k * k + 4 * k + 1)
    fit = max(1, CHUNK_BYTES // max(per_q, 1))
    return 1 << (fit.bit_length() - 1)


def readout_inputs(ds, *, by: str = "task") -> ReadoutInputs | str:
    """Read and reduce a store's §7 probes (see the module docstring), or return a one-line
    reason the store cannot support the tables.

    Args:
        ds: the store Dataset (lazy or in memory): the probe variables (``probe_sigma``,
            ``probe_jjt``, ``probe_nl_mean``, ``probe_nl_moment``), the ``anchor`` coordinate, the probed
            score variable named by ``attrs['depthtraj']['probes']['score']``, ``n_candidates``
            and, if present, ``arrangement_order`` (A_q) and the ``by`` coordinate.
        by: the per-question coordinate of the cells (absent: one cell ``'all'``).

    Returns:
        :class:`ReadoutInputs`, or a reason (str).
    """
    import dask
    import dask.array as da

    from ..core.inputs import readout_info

    if not has_probes(ds):
        return NEEDS_PROBES
    meta = _probes_meta(ds)
    score = str(meta.get("score", "score"))
    if score not in ds.variables:
        return f"the probed score variable {score!r} (attrs.probes.score) is absent"
    anchors = [int(t) for t in np.asarray(ds[L.ANCHOR].values)]
    depths = {int(t): i for i, t in enumerate(np.asarray(ds[L.DEPTH].values))}
    missing = [t for t in anchors if t not in depths or t + 1 not in depths]
    if missing:
        return f"anchor depths {missing} lack t or t + 1 among the store's depths"
    J = len(anchors)
    idx = [depths[t] for t in anchors] + [depths[t + 1] for t in anchors]
    S = ds[score].transpose(*L.SCORE_DIMS).isel({L.DEPTH: idx})
    sigma = ds["probe_sigma"].transpose(*L.PROBE_SCALAR_DIMS)
    mu = ds["probe_nl_mean"].transpose(*L.PROBE_VECTOR_DIMS)
    jjt = ds["probe_jjt"].transpose(*L.PROBE_MATRIX_DIMS)
    mom = ds["probe_nl_moment"].transpose(*L.PROBE_MATRIX_DIMS)
    n = int(ds.sizes[L.QUESTION])
    n_arr, P, k = int(S.sizes[L.ARRANGEMENT]), int(S.sizes[L.PRECISION]), int(S.sizes[L.CANDIDATE])
    K = np.asarray(ds["n_candidates"].values, dtype=np.int64)
    if "arrangement_order" in ds.variables:
        A_q = np.asarray((ds["arrangement_order"].isel({L.POSITION: 0}) >= 0).sum(L.ARRANGEMENT).values, dtype=np.int64)
    else:
        A_q = np.full(n, n_arr, dtype=np.int64)
    ids = np.asarray(ds[L.QUESTION].values)
    if by in ds.coords and ds[by].dims == (L.QUESTION,):
        cells = np.array([str(v) for v in np.asarray(ds[by].values).tolist()], dtype=object)
    else:
        cells = np.full(n, "all", dtype=object)
    rows = _rows_per_chunk(P, n_arr, J, k)

    def lazy(x):
        d = x.data if isinstance(x.data, da.Array) else da.from_array(np.asarray(x.values), chunks=-1)
        return d.rechunk({0: rows, **{i: -1 for i in range(1, d.ndim)}})

    arrays = [lazy(x) for x in (S, sigma, mu, jjt, mom)]
    qchunks = arrays[0].chunks[0]
    bounds = np.concatenate([[0], np.cumsum(qchunks)]).astype(np.int64)
    run = dask.delayed(_chunk_terms, pure=True)
    blocks = [a.to_delayed().ravel() for a in arrays]
    parts = [run(*b, K[bounds[i]:bounds[i + 1]], A_q[bounds[i]:bounds[i + 1]], J=J)
             for i, b in enumerate(zip(*blocks))]
    out = dask.compute(*parts) if parts else []
    if not out:
        return "the store holds no question"
    terms, share, y, valid = (np.concatenate([o[i] for o in out], axis=0) for i in range(4))
    info = readout_info(ds)
    label = "F1" if info["kind"] == "label" else f"{info['label']} sum"
    return ReadoutInputs(terms=terms, share=share, y=y, valid=valid, ids=ids, cells=cells, anchors=anchors,
                         precision=[str(p) for p in np.asarray(ds[L.PRECISION].values).tolist()],
                         score=score, label=label)


# ----------------------------------------------------------------------------------------------
# folds and the bootstrap
# ----------------------------------------------------------------------------------------------
def _mix(keys, seed: int) -> np.ndarray:
    """``splitmix64(key ⊕ mix(seed))`` (vectorised; :func:`~.prefix.fold_mix`, the mix of every §7
    fold assignment): the order in which :func:`balanced_folds` deals the questions."""
    from ..core.bootstrap import splitmix64

    return splitmix64(np.asarray(keys, dtype=np.uint64) ^ np.uint64(fold_mix(seed)))


def balanced_folds(keys, folds: int, seed: int) -> np.ndarray:
    """Balanced question folds ``[question]`` int64 in ``0..folds−1``: the questions ordered by
    ``splitmix64(key ⊕ mix(seed))`` (:func:`~.prefix.fold_mix`; ties: by key) and dealt
    round-robin, so fold sizes differ by at
    most one and a question's fold depends only on the seed and the set of questions (not on
    chunking, order in the store, arm or arrangement).

    Source: `pd:app:readout-prediction` (four question-level folds; 24 training and 8 held-out
    of 32); spec/exits.md §9."""
    keys = np.asarray(keys, dtype=np.uint64)
    order = np.lexsort((keys, _mix(keys, seed)))
    out = np.empty(len(keys), dtype=np.int64)
    out[order] = np.arange(len(keys)) % int(folds)
    return out


def _paired_draws(d, keys, draws: int, seed: int) -> np.ndarray:
    """``[draw, column]``: ``Σ_i W_bi d_ic / Σ_i W_bi`` over the finite ``d_ic`` of per-question
    differences ``d`` ``[question, column]`` with Poisson(1) weights of the questions' keys."""
    from ..core.bootstrap import poisson_weights

    d = np.asarray(d, dtype=np.float64)
    fin = np.isfinite(d)
    d0 = np.where(fin, d, 0.0)
    num = np.zeros((draws, d.shape[1]))
    den = np.zeros((draws, d.shape[1]))
    for a in range(0, d.shape[0], BOOT_BLOCK):
        b = min(d.shape[0], a + BOOT_BLOCK)
        W = poisson_weights(np.asarray(keys[a:b], dtype=np.uint64), draws, seed).astype(np.float64)  # [B, m]
        # einsum without optimize: NumPy's own loops (no BLAS), one summation order under any threads
        num += np.einsum("bq,qc->bc", W, d0[a:b])
        den += np.einsum("bq,qc->bc", W, fin[a:b].astype(np.float64))
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


# ----------------------------------------------------------------------------------------------
# the evaluation
# ----------------------------------------------------------------------------------------------
@dataclass
class CellResult:
    """One (cell, arm) of one table: ``questions`` (indices into the store) with their per-
    question held-out losses ``losses`` ``[question, method]`` and folds, the paired ``diffs``
    ``{name: (estimate, lo, hi)}``, the mean losses ``means`` ``{method: (estimate, lo, hi)}``,
    the ``fits`` per fold, or a ``note`` saying why it could not be computed. ``excluded`` lists
    the ids of questions left out of this table (allocation: a candidate no training question of
    the fold has) and ``excluded_why`` the reason; ``n`` counts the questions kept."""

    n: int = 0
    excluded: list = field(default_factory=list)
    excluded_why: str = ""
    questions: np.ndarray | None = None
    folds: np.ndarray | None = None
    losses: np.ndarray | None = None
    means: dict = field(default_factory=dict)
    diffs: dict = field(default_factory=dict)
    fits: dict = field(default_factory=dict)
    note: str = ""


@dataclass
class ReadoutPrediction:
    """The moment and allocation evaluations of a store: ``moment[(cell, arm)]`` and
    ``allocation[(cell, arm)]`` (:class:`CellResult`, methods :data:`MOMENT_METHODS` and
    :data:`ALLOCATION_METHODS`), with the setup."""

    cells: list[str]
    precision: list[str]
    anchors: list[int]
    label: str
    score: str
    folds: int
    seed: int
    draws: int
    level: float
    loss: str
    moment: dict
    allocation: dict
    energy_matching: str = "pooled"


def _summaries(res: CellResult, methods, diffs, keys, draws, seed, level) -> None:
    """Means and paired differences with their intervals (fits held fixed)."""
    from ..core.bootstrap import percentile_interval

    Lq = res.losses
    ix = {m: i for i, m in enumerate(methods)}
    cols = np.column_stack([Lq] + [Lq[:, ix[a]] - Lq[:, ix[b]] for a, b in diffs])
    with np.errstate(invalid="ignore"):
        point = np.array([np.nanmean(c) if np.isfinite(c).any() else np.nan for c in cols.T])
    if draws > 0 and len(keys):
        boot = _paired_draws(cols, keys, draws, seed)
        lo, hi = percentile_interval(boot, level)
    else:
        lo = hi = np.full(cols.shape[1], np.nan)
    names = list(methods) + [f"{a}-{b}" for a, b in diffs]
    for i, name in enumerate(names):
        target = res.means if i < len(methods) else res.diffs
        target[name] = (float(point[i]), float(lo[i]), float(hi[i]))


#: Why a question is left out of the allocation table (spec/exits.md §9): mixed K, and a
#: prediction without a common share (a zero predicted covariance where the residual is not 0).
NO_TRAINING_CANDIDATE = ("a candidate that no training question of its fold has (mixed K): the training mean ȳ, "
                         "and so its residual, is undefined")
NO_PREDICTION = "a zero predicted covariance (tr C = 0): no common share to predict with"


def _cell_arm(inp: ReadoutInputs, qs: np.ndarray, fold: np.ndarray, p: int, F: int, loss: str,
              matching: str = "pooled"):
    """The held-out per-question losses of one (cell, arm): ``(moment CellResult, allocation
    CellResult)`` without their summaries."""
    valid = inp.valid[qs, :, p]  # [n, A]
    nv = valid.sum(1)
    keep = nv > 0
    qs, fold, valid, nv = qs[keep], fold[keep], valid[keep], nv[keep]
    n, n_arr = valid.shape
    mom, alloc = CellResult(n=n, questions=qs, folds=fold), CellResult(n=n, questions=qs, folds=fold)
    short = [f for f in range(F) if int(((fold != f)).sum()) < 2]
    if n == 0 or short:
        why = (f"{n} questions with valid probe rows: too few for {F} question folds with at least 2 training "
               f"questions each")
        mom.note = alloc.note = why
        return mom, alloc
    R = n * n_arr
    rowq = np.repeat(np.arange(n), n_arr)
    omega = np.where(valid, 1.0 / nv[:, None], 0.0).reshape(R)
    terms = inp.terms[qs, :, p].reshape(R, len(inp.anchors), len(MOMENT_METHODS), len(_TERMS))
    share = inp.share[qs, :, p].reshape(R, len(inp.anchors), 2)
    y = inp.y[qs, :, p].reshape(R, len(inp.anchors), -1)
    rowfold = fold[rowq]
    mloss = np.full((n, len(MOMENT_METHODS)), np.nan)
    aloss = np.full((n, len(ALLOCATION_METHODS)), np.nan)
    no_mean = np.zeros(n, dtype=bool)  # held out with a candidate no training question of the fold has
    mfits = {"alpha": np.full((F, len(MOMENT_METHODS), len(inp.anchors)), np.nan),
             "Z": np.full((F, len(inp.anchors)), np.nan), "matching": matching}
    afits = {"E0": np.full(F, np.nan), "constant": np.full(F, np.nan), "ridge": np.full((F, 2), np.nan)}

    def per_question(rowloss, test):
        """``[n]``: Σ_rows ω · (mean over anchors), on the held-out rows ``test``."""
        x = np.where(test & (omega > 0), omega * rowloss.mean(-1), 0.0)
        return np.bincount(rowq, weights=x, minlength=n)

    for f in range(F):
        wtrain = np.where(rowfold != f, omega, 0.0)
        test = rowfold == f
        held = np.flatnonzero(fold == f)
        if not held.size:
            continue
        if not mom.note:
            try:
                Z = M.loss_normalisation(terms[:, :, 0, 2], wtrain, matching=matching)
                mfits["Z"][f] = Z
                for m in range(len(MOMENT_METHODS)):
                    t = M.MomentTerms(*(terms[:, :, m, i] for i in range(len(_TERMS))))
                    alpha = M.match_energy(t.energy, t.trace, wtrain, matching=matching)
                    mfits["alpha"][f, m] = alpha
                    mloss[held, m] = per_question(M.matched_loss(t, alpha, Z), test)[held]
            except ValueError as exc:
                mom.note = f"fold {f}: {exc}"
        if not alloc.note:
            try:
                A, B, E0 = M.allocation_parts(y, wtrain)
                afits["E0"][f] = E0
                no_mean[held] = per_question(np.where(np.isnan(A), 1.0, 0.0), test)[held] > 0
                if loss == "weighted":
                    const = M.training_constant(A, B, wtrain)
                    a, b, pr = M.ridge_allocation(share[..., 0], A, B, E0, wtrain)
                    lossf = M.allocation_loss
                else:
                    const = M.two_block_minimizer(A, B, E0, wtrain)
                    a, b, pr = M.two_block_ridge(share[..., 0], A, B, E0, wtrain)
                    lossf = M.two_block_loss
                afits["constant"][f] = const
                afits["ridge"][f] = (a, b)
                for m, pred in enumerate((np.full(A.shape, const), share[..., 1], pr)):
                    aloss[held, m] = per_question(lossf(pred, A, B, E0), test)[held]
            except ValueError as exc:
                alloc.note = f"fold {f}: {exc}"
    mom.losses, alloc.losses = mloss, aloss
    mom.fits, alloc.fits = mfits, afits
    if not alloc.note:
        # a held-out question whose residual is undefined (a candidate no training question of its
        # fold has) has NaN losses: left out of the allocation table and counted, never a 0 loss
        out = np.isnan(aloss).any(axis=1)
        if out.any():
            alloc.excluded = [str(q) for q in inp.ids[qs[out]]]
            alloc.excluded_why = "; ".join(
                why for why, hit in ((NO_TRAINING_CANDIDATE, (out & no_mean).any()), (NO_PREDICTION, (out & ~no_mean).any()))
                if hit)
            keep = ~out
            alloc.questions, alloc.folds, alloc.losses = qs[keep], fold[keep], aloss[keep]
            alloc.n = int(keep.sum())
            if alloc.n == 0:
                alloc.note = f"every question has {NO_TRAINING_CANDIDATE}"
    return mom, alloc


def evaluate_readout(inp: ReadoutInputs, *, folds: int = DEFAULT_FOLDS, seed: int = 0, draws: int = DEFAULT_DRAWS,
                     level: float = 0.95, allocation_loss: str = "weighted",
                     energy_matching: str = "pooled") -> ReadoutPrediction:
    """The held-out moment and allocation evaluations of :class:`ReadoutInputs` per cell and arm
    (see the module docstring).

    Args:
        inp: from :func:`readout_inputs`.
        folds: question folds F (≥ 2).
        seed: the analysis seed (folds and bootstrap draws).
        draws: bootstrap draws (0: point estimates only).
        level: interval level in (0, 1).
        allocation_loss: ``"weighted"`` (``pd:app:eq:allocation-loss``) or ``"two-block"`` (ℓ₂).
        energy_matching: ``"pooled"`` (the paper's α_j: one factor per method over the training
            rows and anchors, and one loss normalisation Z) or ``"per-anchor"``.

    Returns:
        :class:`ReadoutPrediction`; a (cell, arm) that cannot be fitted (too few questions, a
        zero training trace or residual energy) carries a ``note`` instead of numbers.

    Raises:
        ValueError: ``folds`` < 2, an unknown ``allocation_loss`` or ``energy_matching``.
    """
    from ..core.bootstrap import question_keys

    if int(folds) < 2:
        raise ValueError(f"the moment and allocation tables need at least 2 question folds, got {folds}")
    if allocation_loss not in ALLOCATION_LOSSES:
        raise ValueError(f"allocation_loss must be one of {', '.join(ALLOCATION_LOSSES)}, got {allocation_loss!r}")
    if energy_matching not in ENERGY_MATCHING:
        raise ValueError(f"energy_matching must be one of {', '.join(ENERGY_MATCHING)}, got {energy_matching!r}")
    F = int(folds)
    keys = question_keys(inp.ids)
    cells = list(dict.fromkeys(inp.cells.tolist()))
    moment, allocation = {}, {}
    for ci, cell in enumerate(cells):
        qs = np.flatnonzero(inp.cells == cell)
        fold = balanced_folds(keys[qs], F, seed)
        for p in range(len(inp.precision)):
            mom, alloc = _cell_arm(inp, qs, fold, p, F, allocation_loss, energy_matching)
            for res, methods, diffs in ((mom, MOMENT_METHODS, MOMENT_DIFFS),
                                        (alloc, ALLOCATION_METHODS, ALLOCATION_DIFFS)):
                if not res.note:
                    _summaries(res, methods, diffs, keys[res.questions], int(draws), int(seed), float(level))
            moment[(ci, p)], allocation[(ci, p)] = mom, alloc
    return ReadoutPrediction(cells=cells, precision=list(inp.precision), anchors=list(inp.anchors), label=inp.label,
                             score=inp.score, folds=F, seed=int(seed), draws=int(draws), level=float(level),
                             loss=allocation_loss, moment=moment, allocation=allocation,
                             energy_matching=energy_matching)
