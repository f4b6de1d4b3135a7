"""The whole-question bootstrap (``pd:sec:observation``, "Paired uncertainty estimates").

Question i enters draw b with multiplicity ``w_bi ~ Poisson(1)``, a function of (seed,
question id, b) only (:func:`poisson_weights` of :func:`question_keys`), so every quantity,
arm, grid and store resampled with the same seed is paired question by question, and the
draws do not depend on chunking or scheduling. Percentile intervals are read off the draws
(:func:`percentile_interval`, :func:`interval`). :func:`one_blas_thread` pins the BLAS of the
bootstrap's matrix products to one summation order.

Part of the shared lower layer: imports no section.
"""

from __future__ import annotations

import hashlib
import math
import warnings

import numpy as np
from numba import njit

__all__ = [
    "blas_scope",
    "bootstrap_means",
    "bootstrap_weights",
    "distinct_columns",
    "interval",
    "one_blas_thread",
    "percentile_interval",
    "poisson_weights",
    "question_keys",
    "splitmix64",
]


def question_keys(ids) -> np.ndarray:
    """64-bit bootstrap keys of question ids (blake2b of the UTF-8 id): ``[question]`` uint64.

    The key, not the position, identifies a question to the bootstrap, so stores holding the
    same questions in any order are resampled alike (paired).
    """
    ids = np.asarray(ids).tolist()
    fresh = _KEY_HASH.copy  # a copy of the keyed, empty state: cheaper than a new object

    def key(q) -> bytes:
        h = fresh()
        h.update(str(q).encode("utf-8"))
        return h.digest()

    return np.frombuffer(b"".join([key(q) for q in ids]), dtype="<u8").astype(np.uint64)


_KEY_HASH = hashlib.blake2b(digest_size=8, person=b"depthtraj-boot")


def _column_hash(X) -> np.ndarray:
    """A random projection of each column of ``X`` ``[row, column]`` (fixed seed)."""
    return np.random.default_rng(0x5EED).standard_normal(X.shape[0]) @ X


def distinct_columns(X) -> tuple[np.ndarray, np.ndarray]:
    """The distinct columns of a finite ``X`` ``[row, column]`` (numbers or bools): ``(first,
    inverse)`` with ``X[:, first[inverse]] == X`` exactly, ``first`` each distinct column's first
    position, in order. Columns are grouped by a random projection and every grouped column is compared
    entry by entry with its representative; a block where the projection merged two different
    columns (never seen: it would take a measure-zero coincidence) keeps every column.

    For bootstrap products that are exact in any order (integer counts, dyadic outcomes): each
    distinct column is multiplied once and the product scattered back, to the same numbers."""
    n, c = X.shape
    if c == 0 or n == 0:
        return np.arange(c), np.arange(c)
    h = _column_hash(X)
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    order = np.argsort(first, kind="stable")  # representatives in order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    first, inverse = first[order], rank[inverse]
    moved = np.nonzero(first[inverse] != np.arange(c))[0]
    if len(moved) and not np.array_equal(X[:, moved], X[:, first[inverse[moved]]]):
        return np.arange(c), np.arange(c)
    return first, inverse


#: The default number of whole-question bootstrap draws of every command (``analyze``,
#: ``report``, ``exits``): the paper's "2,000 paired question resamples".
DEFAULT_DRAWS = 2000
#: The most bootstrap draws an analysis takes (the paper uses 2,000; the draws' weights and sums
#: are held per cell in memory, so an absurd count is refused before anything is allocated).
MAX_DRAWS = 100_000
#: The most permutation draws (Ξ's finite-permutation check) and question folds (§7) taken.
MAX_PERMUTATIONS = 100_000
MAX_FOLDS = 100


def check_counts(*, draws: int | None = None, permutations: int | None = None, folds: int | None = None,
                 readout_folds: int | None = None) -> None:
    """Refuse option counts outside what an analysis can hold, before anything is allocated.

    Raises
    ------
    ValueError
        one line naming the option (``--bootstrap``, ``--permutations``, ``--folds``,
        ``--readout-folds``) and its bounds.
    """
    for flag, value, lo, hi in (("--bootstrap", draws, 0, MAX_DRAWS), ("--permutations", permutations, 0,
                                                                        MAX_PERMUTATIONS),
                                ("--folds", folds, 2, MAX_FOLDS), ("--readout-folds", readout_folds, 2, MAX_FOLDS)):
        if value is None:
            continue
        if value < lo:
            raise ValueError(f"{flag} must be ≥ {lo}, got {value}")
        if value > hi:
            raise ValueError(f"{flag} must be ≤ {hi:,}, got {value:,}")


_BLAS = {}


def one_blas_thread():
    """Pin the BLAS of this process to one thread (threadpoolctl), so that the bootstrap's
    matrix products — the only BLAS calls of the pass — sum in one order whatever thread count
    BLAS would choose: the same inputs give the same bytes under any scheduler (threads,
    processes, a dask.distributed cluster), ``OMP_NUM_THREADS`` or ``OPENBLAS_NUM_THREADS``.
    The scheduler's workers give the parallelism. Called by every chunk of the pass; it leaves
    the limit set in the process (:func:`blas_scope` restores it in the caller's process).
    Returns the limiter."""
    import os

    pid = os.getpid()
    if pid not in _BLAS:
        from threadpoolctl import ThreadpoolController

        _BLAS.clear()
        _BLAS[pid] = ThreadpoolController()
    return _BLAS[pid].limit(limits=1, user_api="blas")


def blas_scope():
    """A context manager computing the pass with one BLAS thread in this process and restoring
    the previous limit afterwards (:func:`one_blas_thread`)."""
    return one_blas_thread()


def interval(point, boot, level):
    """``(point, lo, hi)``: the percentile interval (:func:`percentile_interval`) of the draws
    ``boot`` ``[draw, ...]`` around ``point`` ``[...]``; lo/hi NaN without draws."""
    point = np.asarray(point, dtype=np.float64)
    if boot.shape[0] == 0:
        return point, np.full_like(point, np.nan), np.full_like(point, np.nan)
    lo, hi = percentile_interval(boot, level)
    return point, lo, hi


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
#: Poisson(1) cumulative probabilities Pr(W ≤ k), k = 0..19 (beyond: below 2^-53 of mass).
_POISSON_CDF = np.cumsum([np.exp(-1.0) / float(np.prod(np.arange(1, k + 1))) for k in range(20)])
#: The same thresholds on the 53-bit integer m of u = m·2^-53: u ≥ cdf[k] ⟺ m ≥ ⌈cdf[k]·2^53⌉
#: (cdf[k]·2^53 is exact in float64), so the generator compares integers, not floats.
_POISSON_M = np.array([math.ceil(c * 2.0 ** 53) for c in _POISSON_CDF[:19]], dtype=np.int64)


@njit(cache=True, nogil=True, inline="always")
def splitmix64(x):
    """The splitmix64 finaliser (a bijective 64-bit mixer)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


@njit(cache=True, nogil=True)
def poisson_weights(keys, draws, seed):
    """Poisson(1) resampling multiplicities ``[draw, question]`` (float32: small integers) of
    questions ``keys``.

    Entry ``(b, i)`` is a function of ``(seed, keys[i], b)`` only, through a counter-based
    generator (splitmix64 of ``key + mix(seed) + (b + 1)·φ``, then the Poisson(1) inverse CDF),
    so a question's multiplicity in draw b does not depend on the chunking, on the other
    questions or on which store it comes from: every analysis of the same questions is paired.
    """
    n = keys.shape[0]
    out = np.empty((draws, n), dtype=np.float32)
    s = splitmix64(np.uint64(seed) + _GOLDEN)
    th = _POISSON_M
    for b in range(draws):
        off = s + np.uint64(b + 1) * _GOLDEN
        for i in range(n):
            # u = m·2^-53 with m the top 53 bits of the hash; the inverse CDF as a count of the
            # thresholds at or below u (the CDF never decreases, so this is the first w with
            # u < cdf[w], capped at 19), compared as integers (_POISSON_M): branch-free
            m = np.int64(splitmix64(keys[i] + off) >> np.uint64(11))
            w = 0
            for k in range(19):
                w += m >= th[k]
            out[b, i] = w
    return out





def bootstrap_weights(ids, draws: int, seed: int = 0) -> np.ndarray:
    """Poisson(1) whole-question resampling multiplicities ``[draw, question]`` (float64).

    ``ids`` are the question ids; entry (b, i) depends only on (seed, ids[i], b)
    (:func:`~depthtraj.analysis.kernels.poisson_weights`), so every quantity, arm, grid and
    store resampled with the same seed is paired question by question.
    """

    if draws <= 0:
        return np.zeros((0, len(np.asarray(ids))))
    return poisson_weights(question_keys(ids), int(draws), int(seed)).astype(np.float64)


def bootstrap_means(X: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Resampled means ``[draw, column]`` of the columns of ``X`` ``[question, column]``.

    ``W`` ``[draw, question]`` are resampling multiplicities (:func:`bootstrap_weights`); a
    draw's mean of column c is ``Σ_i w_bi X_ic / Σ_i w_bi 1{X_ic finite}`` (NaN entries left
    out; NaN where a draw has no weight on a finite value). One product serves every column,
    so the draws are paired across columns.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    V = np.isfinite(X)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (W @ np.where(V, X, 0.0)) / (W @ V.astype(np.float64))


def percentile_interval(boot: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """The (1-level)/2 and (1+level)/2 percentiles over the first axis (NaN draws ignored)."""
    alpha = 1.0 - level
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = np.nanquantile(boot, [alpha / 2, 1 - alpha / 2], axis=0)
    return lo, hi

