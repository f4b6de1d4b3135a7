"""Helpers for tests and benchmarks: conforming random stores, and the adapter conformance kit.

**Adapter conformance kit** (:class:`AdapterKit`, :func:`check_adapter`, :data:`KIT_CHECKS`):
checks an adapter class (`spec/adapters.md`) on a tiny checkpoint of its model. Each check
raises ``AssertionError`` naming the check and the adapter; see :class:`AdapterKit`. torch and
transformers are imported only when a check runs.

**Synthetic stores.** :func:`synthetic_store` writes a format-v1 store through the public
:class:`TrajectoryWriter`, one chunk at a time (memory is bounded by the chunk size, so it scales
to millions of questions). Scores follow a converging trajectory model: for question i, candidate k,
arrangement a and arm p at depth t,

    z_t = z_T + amplitude * decay**(t-1) * (e_i + jitter * eta_t)
    s_t = z_t - LSE(z_t) + log M_t          (label readout: log-probabilities, M_t <= 1)

where ``log M_t`` adds a common translation (candidate-set mass) shrinking with depth. Exact
ties and exactly translated (zero-contrast) adjacent updates can be injected at chosen rates.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__
from .models.v1 import (
    STANDARD_ARMS,
    AdapterInfo,
    ModelInfo,
    PrecisionArm,
    Probes,
    PromptTemplate,
    Readout,
    Seeds,
    StoreAttrs,
    TaskInfo,
)
from .store import SEED_SCHEME, QuestionSet, TrajectoryWriter


def synthetic_attrs(
    *,
    endpoint: int,
    readout: str = "label",
    precision: Sequence[str] = ("bf16",),
    tasks: Sequence[str] = ("arc_challenge", "mmlu"),
    options_displayed: bool = True,
    seed: int = 0,
    model: str = "synthetic",
) -> StoreAttrs:
    """Attrs for a synthetic store (model family ``synthetic``, named ``model``)."""
    arms = [STANDARD_ARMS.get(p) or PrecisionArm(name=p, recurrence_dtype="float32", head_dtype="float32") for p in precision]
    return StoreAttrs(
        model=ModelInfo(
            name=model,
            family="synthetic",
            revision="none",
            adapter=AdapterInfo(name="depthtraj.testing", version=__version__),
        ),
        readout=Readout(
            kind=readout,
            options_displayed=options_displayed,
            normalization="none" if readout == "label" else "char",
            prompt_template=PromptTemplate(id="synthetic", text="{question}"),
        ),
        endpoint=endpoint,
        precision=arms,
        tasks=[TaskInfo(name=t, source="synthetic", split="none", license="CC0-1.0") for t in tasks],
        software={"depthtraj": __version__},
        created=_dt.datetime.now(_dt.timezone.utc),
        seeds=Seeds(base=seed, scheme=SEED_SCHEME),
    )


def synthetic_questions(
    n: int,
    *,
    k_mix: Mapping[int, float] | Sequence[int] = (4,),
    tasks: Sequence[str] = ("arc_challenge", "mmlu"),
    arrangements: int = 1,
    seed: int = 0,
) -> QuestionSet:
    """``n`` synthetic questions with K drawn from ``k_mix`` (``{K: weight}`` or a list of K)."""
    rng = np.random.default_rng([seed, 1])
    if isinstance(k_mix, Mapping):
        ks, w = np.array(list(k_mix)), np.array(list(k_mix.values()), dtype=float)
    else:
        ks, w = np.array(list(k_mix)), np.ones(len(k_mix))
    k = rng.choice(ks, size=n, p=w / w.sum())
    labels = rng.integers(0, k)
    letters = "ABCDEFGHIJ"
    kmax = int(k.max())
    order = np.full((n, arrangements, kmax), -1, dtype=np.int8)
    for i, kk in enumerate(k):
        for a in range(arrangements):
            order[i, a, :kk] = np.roll(np.arange(kk), a)
    qs = QuestionSet(
        id=[f"q{i:08d}" for i in range(n)],
        task=[tasks[i % len(tasks)] for i in range(n)],
        subject=["" if tasks[i % len(tasks)] != "mmlu" else "synthetic_subject" for i in range(n)],
        label=labels.astype(int).tolist(),
        candidate_text=[[f"answer {letters[j]}" for j in range(kk)] for kk in k],
        candidate_label=[[letters[j] for j in range(kk)] for kk in k],
        arrangement_order=order,
    )
    return qs.with_seeds(seed)


def synthetic_scores(
    n_candidates: np.ndarray,
    depths: np.ndarray,
    arrangements: int,
    arms: int,
    *,
    rng: np.random.Generator,
    readout: str = "label",
    decay: float = 0.85,
    amplitude: float = 3.0,
    jitter: float = 0.5,
    translation: float = 2.0,
    tie_rate: float = 0.0,
    stall_rate: float = 0.0,
    dtype: str = "float32",
    k_max: int | None = None,
) -> np.ndarray:
    """Random converging score trajectories ``[question, depth, candidate, arrangement, precision]``.

    Units: nats (log-probabilities for ``readout='label'``). Candidates past each question's
    ``n_candidates`` are NaN; the candidate axis has ``k_max`` entries (default the largest K).
    Scores are log-probabilities with candidate-set mass at most one for both readouts (for
    text readouts they stand for per-character log-likelihoods). ``tie_rate`` is the fraction
    of (question, depth) cells whose top score is lowered exactly onto the runner-up (an exact
    tie for the maximum, mass kept below one); ``stall_rate`` the fraction of adjacent updates
    that are pure translations (zero contrast).
    """
    n, t, a, p = len(n_candidates), len(depths), arrangements, arms
    k = int(n_candidates.max()) if k_max is None else int(k_max)
    mask = np.arange(k)[None, :] < n_candidates[:, None]  # [n, k]
    z_end = rng.normal(0.0, 1.5, size=(n, 1, k, a, p))
    e = rng.normal(0.0, 1.0, size=(n, 1, k, a, p))
    eta = rng.normal(0.0, 1.0, size=(n, t, k, a, p))
    steps = (depths - depths[0]).astype(float)
    damp = (decay**steps)[None, :, None, None, None]
    damp[:, -1] = 0.0  # the endpoint is the endpoint
    z = z_end + amplitude * damp * (e + jitter * eta)
    z = np.where(mask[:, None, :, None, None], z, np.nan)
    zmax = np.nanmax(z, axis=2, keepdims=True)
    lse = np.log(np.nansum(np.exp(z - zmax), axis=2, keepdims=True)) + zmax
    log_mass = -np.abs(rng.normal(0.5, 0.3, size=(n, 1, 1, a, p))) - translation * damp * np.abs(
        rng.normal(1.0, 0.5, size=(n, t, 1, a, p))
    )
    s = z - lse + log_mass
    if stall_rate > 0 and t > 2:
        # s_{t+1} := s_t + c·1 on stalled steps (pure translation, no contrast); never the endpoint.
        stall = rng.random((n, t - 1, 1, a, p)) < stall_rate
        stall[:, -1] = False
        c = rng.normal(0.0, 0.3, size=(n, t - 1, 1, a, p))
        c = -np.abs(c)  # translations towards less mass keep it below one
        for j in range(t - 1):
            s[:, j + 1] = np.where(stall[:, j], s[:, j] + c[:, j], s[:, j + 1])
    if tie_rate > 0:
        tie = rng.random((n, t, a, p)) < tie_rate
        filled = np.where(np.isnan(s), -np.inf, s)
        top = np.argmax(filled, axis=2)
        runner_up = np.sort(filled, axis=2)[:, :, -2]
        ii = np.nonzero(tie)
        s[ii[0], ii[1], top[ii], ii[2], ii[3]] = runner_up[ii]
    return s.astype(dtype)


def synthetic_store(
    path,
    n: int = 256,
    *,
    endpoint: int = 8,
    depths: Sequence[int] | None = None,
    k_mix: Mapping[int, float] | Sequence[int] = (4,),
    arrangements: int = 1,
    precision: Sequence[str] = ("bf16",),
    readout: str = "label",
    tasks: Sequence[str] = ("arc_challenge", "mmlu"),
    optional: Sequence[str] = ("logsumexp", "latent_step_norm"),
    chunk_size: int = 256,
    dtype: str = "float32",
    seed: int = 0,
    complete: bool = True,
    overwrite: bool = True,
    options_displayed: bool = True,
    probes: Sequence[int] | None = None,
    model: str = "synthetic",
    **dynamics,
) -> str:
    """Write a conforming random store and return its path.

    ``n`` questions, endpoint ``endpoint`` (depths ``1..endpoint`` unless ``depths`` is given),
    K drawn from ``k_mix``, ``arrangements`` arrangements, one precision arm per name in
    ``precision``; ``options_displayed=False`` makes a text store F2 (answer texts without the
    options), else F3. ``dynamics`` go to :func:`synthetic_scores` (``decay``, ``amplitude``,
    ``jitter``, ``translation``, ``tie_rate``, ``stall_rate``). With ``complete=False`` the
    last chunk is left unwritten. Chunks are generated and written one at a time.

    ``probes`` (anchor depths) adds the §7 probe variables (:func:`synthetic_probes`): random
    positive-semidefinite ``probe_jjt`` and nonlinear moments loosely tied to the store's own
    score increments at each anchor, so the moment and allocation analyses have signal.
    ``model`` names the model in the attrs (an archive of several synthetic models).
    """
    depths = np.arange(1, endpoint + 1) if depths is None else np.asarray(depths)
    attrs = synthetic_attrs(
        endpoint=int(depths[-1]), readout=readout, precision=precision, tasks=tasks, seed=seed,
        options_displayed=options_displayed, model=model,
    )
    if probes is not None:
        attrs = attrs.model_copy(update={"probes": Probes(
            anchors=[int(a) for a in probes], score="score" if readout == "label" else "logprob_sum", draws=512,
        )})
    qs = synthetic_questions(n, k_mix=k_mix, tasks=tasks, arrangements=arrangements, seed=seed)
    w = TrajectoryWriter.create(
        path, attrs, qs, depths=depths, optional=optional, chunk_size=chunk_size,
        score_dtype=dtype, overwrite=overwrite,
    )
    kk = qs.n_candidates
    chunks = w.chunks()
    if not complete:
        chunks = chunks[:-1]
    for ci, region in enumerate(chunks):
        rng = np.random.default_rng([seed, 2, ci])
        nc = kk[region]
        score = synthetic_scores(
            nc, depths, arrangements, len(precision), rng=rng, readout=readout, dtype=dtype,
            k_max=qs.k_max, **dynamics,
        )
        arrays = {"score": score}
        m = len(nc)
        if readout == "text":
            n_chars = np.asarray(w.group["n_chars"][region])
            n_tok = np.where(np.arange(score.shape[2])[None, :] < nc[:, None], np.maximum(1, n_chars // 4), 0)
            arrays["logprob_sum"] = (score * n_chars[:, None, :, None, None]).astype(dtype)
            frac = rng.uniform(0.2, 0.9, size=score.shape)
            arrays["logprob_first"] = (arrays["logprob_sum"] * frac).astype(dtype)
            arrays["n_tokens"] = np.repeat(n_tok[:, :, None], arrangements, axis=2).astype(np.int32)
        if "logsumexp" in optional:
            arrays["logsumexp"] = rng.normal(12.0, 1.0, size=(m, len(depths), arrangements, len(precision))).astype(dtype)
        if "latent_step_norm" in optional:
            steps = (depths - depths[0]).astype(float)
            base = 10.0 * 0.8 ** steps[None, :, None, None]
            arrays["latent_step_norm"] = (base * rng.uniform(0.5, 1.5, size=(m, len(depths), arrangements, len(precision)))).astype(dtype)
        if "exit_gate" in optional:  # a per-step exit probability (Ouro's λ_t) in [0, 0.5)
            arrays["exit_gate"] = rng.uniform(0.0, 0.5, size=(m, len(depths), arrangements, len(precision))).astype(dtype)
        if probes is not None:
            probed = arrays["score" if readout == "label" else "logprob_sum"]
            depth_index = {int(d): i for i, d in enumerate(depths)}
            arrays.update(synthetic_probes(probed, [depth_index[int(a)] for a in probes], rng=rng, dtype=dtype))
        arrays = {k: v for k, v in arrays.items() if k in w.data_variables}
        w.write(region, **arrays)
    if complete:
        w.finalize()
    return str(path)


def synthetic_probes(score: np.ndarray, anchor_index: Sequence[int], *, rng: np.random.Generator,
                     dtype: str = "float32", rank: int = 6) -> dict[str, np.ndarray]:
    """Random §7 probe arrays for a chunk of scores (spec §4.5).

    Args:
        score: ``[question, depth, candidate, arrangement, precision]`` the probed score; NaN
            marks missing candidates and unused arrangements (they stay NaN in the probes).
        anchor_index: index into ``depth`` of each anchor t (t + 1 is the next index).
        rng: the generator.

    Returns:
        ``probe_sigma`` ``[question, anchor, arrangement, precision]``, ``probe_nl_mean``
        ``[question, anchor, candidate, arrangement, precision]``, ``probe_jjt`` and
        ``probe_nl_moment`` ``[question, anchor, candidate, candidate2, arrangement, precision]``:
        ``J Jᵀ`` of a random ``K × rank`` J, and a nonlinear covariance that mixes the observed
        increment's outer product with ``J Jᵀ`` (so both predictors carry some signal).
    """
    q, _, k, a, p = score.shape
    idx = np.asarray(anchor_index)
    y = np.moveaxis(score[:, idx + 1] - score[:, idx], (3, 4), (1, 2))  # [q, a, p, anchor, k]
    real = np.isfinite(y)
    y0 = np.where(real, y, 0.0)
    J = rng.normal(size=(q, a, p, idx.size, k, rank)) * rng.uniform(0.05, 0.5, size=(q, a, p, idx.size, 1, 1))
    jjt = J @ np.swapaxes(J, -1, -2)
    mu = 0.1 * y0 + rng.normal(scale=0.01, size=y0.shape)
    lam = rng.uniform(0.2, 0.8, size=(q, a, p, idx.size, 1, 1))
    cov = lam * y0[..., :, None] * y0[..., None, :] + (1 - lam) * jjt
    moment = cov + mu[..., :, None] * mu[..., None, :]
    pair = real[..., :, None] & real[..., None, :]
    used = real.any(-1)
    sigma = np.where(used, rng.uniform(0.01, 1.0, size=used.shape), np.nan)

    def back(x, nd):  # [q, a, p, anchor, ...] -> [q, anchor, ..., a, p]
        return np.moveaxis(x, (1, 2), (nd - 2, nd - 1)).astype(dtype)

    return {
        "probe_sigma": back(sigma, 4),
        "probe_nl_mean": back(np.where(real, mu, np.nan), 5),
        "probe_jjt": back(np.where(pair, jjt, np.nan), 6),
        "probe_nl_moment": back(np.where(pair, moment, np.nan), 6),
    }


# ====================================================================== adapter conformance kit
KIT_CHECKS: tuple[str, ...] = (
    "readout-equals-own-forward",
    "batch-independence",
    "seed-determinism",
    "packed-equals-unshared",
    "precision-arms",
    "probes",
    "store-validates",
)
"""The checks of :class:`AdapterKit`, in the order :meth:`AdapterKit.run_all` runs them (see
`spec/adapters.md` §6); parametrise a pytest test over this tuple to get one test per check."""


class _KitFailure(AssertionError):
    """A conformance check failed (the message names the check and the adapter)."""


class KitUsageError(ValueError):
    """The kit was given probes or options it cannot check with (not an adapter failure)."""


@dataclass(frozen=True)
class KitItem:
    """One probe question of the kit: a prompt text and its candidates' continuations.

    ``continuations`` are scored as answer texts after ``prompt`` (leading space included, e.g.
    ``" carbon dioxide"``), split into tokens as lm-eval does
    (:func:`depthtraj.adapter.encode_pair`).
    """

    prompt: str
    continuations: tuple[str, ...]


def sample_items() -> list[KitItem]:
    """The kit's default probes: real questions from the shipped sample (``depthtraj/data``).

    For every number of candidates K in the sample (3, 4 and 5), the question with the shortest
    F2 prompt (:func:`depthtraj.tasks.render_text_prompt` without options), with the
    continuations ``' ' + text`` of its candidates; ordered by prompt length. So a batch of the
    items has different lengths and different K.
    """
    from .collect import load_questions
    from .demo import sample_sources
    from .tasks import continuation_text, render_text_prompt

    shortest: dict[int, Any] = {}
    for q in load_questions(sample_sources()):
        text = render_text_prompt(q, options=False)
        k = len(q.choices)
        if k not in shortest or len(text) < len(shortest[k][0]):
            shortest[k] = (text, q)
    items = [
        KitItem(text, tuple(continuation_text(q, c) for c in range(len(q.choices))))
        for text, q in shortest.values()
    ]
    return sorted(items, key=lambda item: len(item.prompt))


@dataclass
class KitReport:
    """What :meth:`AdapterKit.run_all` measured: per check, its figures (errors in nats, flags)."""

    adapter: str
    results: dict[str, dict[str, Any]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """One line per check: ``name: key=value, ...``."""
        def fmt(v: Any) -> str:
            return f"{v:.3g}" if isinstance(v, float) else str(v)

        return [
            f"{name}: " + ", ".join(f"{k}={fmt(v)}" for k, v in figures.items())
            for name, figures in self.results.items()
        ]


def _nanmax_abs(a: np.ndarray, b: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """``max |a - b|`` over ``axes``, where NaN in both counts as equal and NaN in one as inf."""
    both = np.isnan(a) & np.isnan(b)
    d = np.where(both, 0.0, np.abs(a.astype(np.float64) - b.astype(np.float64)))
    d = np.where(np.isnan(d), np.inf, d)
    return d.max(axis=axes) if d.size else np.zeros(())


class AdapterKit:
    """Conformance checks of one adapter class on one (tiny) checkpoint of its model.

    The adapter is loaded with :meth:`~depthtraj.adapter.LoopedLMAdapter.load` (the three
    standard precision arms, self-check off: the kit checks more), once, on first use. Probes
    are ``items`` (default :func:`sample_items`: real questions, K = 3, 4, 5), tokenised with the
    checkpoint's tokenizer (:func:`depthtraj.adapter.encode_pair`). Depths ``1..n_steps``.

    The checks (:data:`KIT_CHECKS`; `spec/adapters.md` §6):

    ``readout-equals-own-forward``
        For each item alone, in fp32 from one seeded initial state: the engine's label readout
        over the *whole* vocabulary equals ``log_softmax(own_forward_logits(ids, t))`` at the
        last token, and its logsumexp the forward's, at every depth ``t = 1..T``; the unshared
        answer-text readout's ``logprob_sum`` and ``logprob_first`` equal those of the model's
        own forward over ``[prompt, continuation]`` (from the same per-position state). Within
        ``own_atol`` nats.
    ``batch-independence``
        The middle-length item scores the same alone, in the middle of a batch with a shorter
        and a longer item, and first in a batch with a shorter one (label and packed answer-text
        readouts, every field and step extra), in **every** standard arm, under both batching
        modes of the engine: ``invariant`` batching must give the same bytes (tolerance 0);
        ``padded`` batching must agree within ``atol`` in fp32 (the hooks are padding-safe: an
        item's state does not depend on its batch), and its bf16 arms' differences are reported
        (``padded_<arm>``), not asserted: padded bf16 rounding depends on the batch's shapes.
    ``seed-determinism``
        The same seeds give identical readouts, whatever the global torch RNG; if
        :meth:`~depthtraj.adapter.LoopedLMAdapter.initial_state` is random (two generators give
        two states), other seeds change every item's readout, otherwise they change nothing;
        ``initial_state`` is a function of its generators.
    ``packed-equals-unshared``
        ``text_readout(shared_prefix=True)`` equals ``shared_prefix=False`` (every field and step
        extra) within ``atol``, fp32, for the batch of all items.
    ``precision-arms``
        Every standard arm (``bf16``, ``bf16-fp32head``, ``fp32``): readouts have the documented
        shapes and dtypes, are finite (NaN exactly past an item's candidates), log-probabilities
        are <= 0; ``bf16`` and ``bf16-fp32head`` share their hidden values (identical
        ``latent_step_norm`` and step extras); the head dtype and the recurrence dtype are
        honoured (``bf16`` differs from ``bf16-fp32head`` and from ``fp32``).
    ``probes``
        The §7 collection probes (spec §4.5) of the label and packed answer-text readouts, fp32,
        at anchors ``1`` and ``n_steps - 1`` with 16 draws, against a reference built from the
        hooks alone: ``h_t`` from :meth:`embed`, :meth:`initial_state` and :meth:`step` in
        float32 (the arm's recurrence), the readout path in float64 from there; ``J Jᵀ`` from float64 autograd of the log-softmax readout with respect to the
        hidden state at the readout positions (itself checked by central finite differences
        along random directions); ``σ`` from ``h_{t+1} − h_t``; the
        nonlinear moments from the same Rademacher draws evaluated one at a time. Within a
        relative ``1e-3`` of each matrix's scale (the nonlinear moments also within the fp32 rounding
        of two readouts, ``2e-5`` nats per scored token). The probes are also the same bytes for an
        item alone and in a batch (invariant batching) and for the same seeds twice.
    ``store-validates``
        :func:`depthtraj.collect.collect` with this adapter class (passed directly: no entry point
        needs to be installed), on 2 ARC + 2 MMLU questions of the shipped sample, writes
        a store that :func:`depthtraj.validate.validate_store` passes at level ``data`` with no
        error, recording the adapter's name, version and family: for each of
        ``store_readouts``, ``label`` (F1, three arms) and ``text`` (F3 with options under the
        balanced arrangements, arm bf16).

    Failures raise ``AssertionError`` whose message starts ``adapter conformance check
    '<check>' failed for adapter '<name>' (<module>.<class>)``; an exception raised by the
    adapter inside a check is reported the same way (chained).

    Args:
        adapter_cls: the :class:`~depthtraj.adapter.LoopedLMAdapter` subclass.
        checkpoint: directory (or hub id) its ``load`` accepts; a tiny random-weight model.
        items: probe questions (at least two prompts of different token lengths).
        n_steps: endpoint depth ``T`` of the checks.
        tmp_path: where the stores of ``store-validates`` go (default: a temporary directory).
        device: torch device of the adapter.
        atol: tolerance (nats) of batch independence and packed vs unshared.
        own_atol: tolerance (nats) of the comparison with the model's own forward.
        store_readouts: readouts of the store check (``label``, ``text``).
        batching: the engine's batching mode the adapter is loaded with (``invariant``, the
            default of ``collect``, or ``padded``); ``batch-independence`` checks both.

    Example (pytest)::

        @pytest.fixture(scope="module")
        def kit(tmp_path_factory):
            ckpt = MyAdapter.tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny")
            return AdapterKit(MyAdapter, ckpt, tmp_path=tmp_path_factory.mktemp("kit"))

        @pytest.mark.parametrize("check", KIT_CHECKS)
        def test_conformance(kit, check):
            kit.run(check)
    """

    def __init__(
        self,
        adapter_cls: type,
        checkpoint: str | Path,
        *,
        items: Sequence[KitItem] | None = None,
        n_steps: int = 6,
        tmp_path: str | Path | None = None,
        device: str = "cpu",
        atol: float = 1e-5,
        own_atol: float = 1e-4,
        store_readouts: Sequence[str] = ("label", "text"),
        batching: str = "invariant",
    ) -> None:
        if n_steps < 1:
            raise ValueError(f"n_steps must be >= 1, got {n_steps}")
        unknown = set(store_readouts) - {"label", "text"}
        if unknown:
            raise ValueError(f"store_readouts must be among label, text; got {sorted(unknown)}")
        self.adapter_cls = adapter_cls
        self.checkpoint = checkpoint
        self.items = list(items) if items is not None else sample_items()
        if len(self.items) < 2 or any(not it.continuations for it in self.items):
            raise ValueError("the kit needs at least two items, each with at least one continuation")
        self.n_steps = int(n_steps)
        self.tmp_path = None if tmp_path is None else Path(tmp_path)
        self.device = device
        self.atol = float(atol)
        self.own_atol = float(own_atol)
        self.store_readouts = tuple(store_readouts)
        if batching not in ("invariant", "padded"):
            raise ValueError(f"batching must be invariant or padded, got {batching!r}")
        self.batching = batching
        self.seeds = [1009 + 7919 * i for i in range(len(self.items))]
        self._adapter: Any = None
        self._tokens: list[tuple[list[int], list[list[int]]]] | None = None

    # ------------------------------------------------------------------ plumbing
    @property
    def label(self) -> str:
        """``'<name>' (<module>.<class>)`` of the adapter under test."""
        cls = self.adapter_cls
        return f"{getattr(cls, 'name', cls.__name__)!r} ({cls.__module__}.{cls.__qualname__})"

    def _fail(self, check: str, detail: str) -> _KitFailure:
        return _KitFailure(
            f"adapter conformance check {check!r} failed for adapter {self.label}: {detail}"
        )

    @property
    def adapter(self) -> Any:
        """The adapter loaded from :attr:`checkpoint` with the three standard arms (cached)."""
        if self._adapter is None:
            from .models.v1 import STANDARD_ARMS

            try:
                self._adapter = self.adapter_cls.load(
                    self.checkpoint, device=self.device, arms=list(STANDARD_ARMS.values()),
                    self_check=None, batching=self.batching,
                )
            except Exception as exc:
                raise _KitFailure(
                    f"adapter conformance kit: adapter {self.label} cannot load {self.checkpoint} "
                    f"({type(exc).__name__}: {exc})"
                ) from exc
        return self._adapter

    @property
    def tokens(self) -> list[tuple[list[int], list[list[int]]]]:
        """Per item, ``(prompt_ids, [continuation_ids, ...])`` with the checkpoint's tokenizer."""
        if self._tokens is None:
            from .adapter import encode_pair

            tok = self.adapter.tokenizer
            out = []
            for it in self.items:
                pairs = [encode_pair(tok, it.prompt, c) for c in it.continuations]
                if any(not cont for _, cont in pairs):
                    raise KitUsageError(f"a continuation of {it.prompt[:40]!r}... has no tokens")
                out.append((pairs[0][0], [cont for _, cont in pairs]))
            self._tokens = out
        return self._tokens

    def run(self, check: str) -> dict[str, Any]:
        """Run one check of :data:`KIT_CHECKS`; return its figures or raise ``AssertionError``."""
        if check not in KIT_CHECKS:
            raise ValueError(f"unknown check {check!r}; the kit's checks: {', '.join(KIT_CHECKS)}")
        method: Callable[[str], dict[str, Any]] = getattr(self, "_" + check.replace("-", "_"))
        try:
            return method(check)
        except (_KitFailure, KitUsageError):
            raise
        except Exception as exc:
            raise self._fail(check, f"the adapter raised {type(exc).__name__}: {exc}") from exc

    def run_all(self, checks: Sequence[str] = KIT_CHECKS) -> KitReport:
        """Run ``checks`` in order (stopping at the first failure) and return their figures."""
        report = KitReport(self.label)
        for check in checks:
            report.results[check] = self.run(check)
        return report

    def _depthwise(self, check: str, err: np.ndarray, atol: float, what: str) -> float:
        """Fail unless every entry of ``err`` ``[depth]`` is ``<= atol`` (NaN fails too)."""
        err = np.asarray(err, dtype=np.float64)
        bad = np.flatnonzero(~(err <= atol))
        if bad.size:
            t = int(bad[0])
            raise self._fail(
                check,
                f"{what}: max |difference| {err[t]:.3g} nats at depth {t + 1} > tolerance "
                f"{atol:g} (failing at depths {', '.join(str(int(d) + 1) for d in bad[:8])}"
                f"{', ...' if bad.size > 8 else ''} of 1..{err.size})",
            )
        return float(err.max(initial=0.0))

    def _compare(self, check: str, got: Any, want: Any, rows: Sequence[int], ks: Sequence[int],
                 atol: float, what: str) -> float:
        """Compare every field and step extra of readouts ``got`` (rows ``rows``) with ``want``
        (rows 0..), candidates cut to ``ks``; returns the largest difference."""
        worst = 0.0
        if set(got.extras) != set(want.extras):
            raise self._fail(check, f"{what}: step extras {sorted(got.extras)} vs {sorted(want.extras)}")
        fields = {f: (getattr(got, f), getattr(want, f)) for f in got._fields}
        fields.update({f"extras[{k!r}]": (got.extras[k], want.extras[k]) for k in got.extras})
        for name, (g, w) in fields.items():
            for j, (r, k) in enumerate(zip(rows, ks, strict=True)):
                a, b = np.asarray(g[r], dtype=np.float64), np.asarray(w[j], dtype=np.float64)
                if name == "n_tokens":
                    if not np.array_equal(a[:k], b[:k]):
                        raise self._fail(check, f"{what}: n_tokens {a[:k].tolist()} vs {b[:k].tolist()}")
                    continue
                label = f"{what}, {name}"
                if a.ndim == 2:  # [depth, candidate]
                    a, b = a[:, :k], b[:, :k]
                if name == "logprob_sum":  # a sum of n_k log-probabilities: tolerance per token
                    per_token = np.maximum(1, np.asarray(want.n_tokens[j][:k], dtype=np.float64))
                    a, b, label = a / per_token, b / per_token, label + " per scored token"
                axes = tuple(range(1, a.ndim))
                worst = max(worst, self._depthwise(check, _nanmax_abs(a, b, axes), atol, label))
        return worst

    def _arm(self, name: str) -> Any:
        from .models.v1 import STANDARD_ARMS

        return STANDARD_ARMS[name]

    def _label_targets(self) -> list[list[int]]:
        """Per item, the first token of each continuation (any token ids will do)."""
        return [[c[0] for c in conts] for _, conts in self.tokens]

    # ------------------------------------------------------------------ the checks
    def _readout_equals_own_forward(self, check: str) -> dict[str, Any]:
        import torch

        from .adapter.engine import packed_initial_state
        from .adapter.packing import pack, unshare

        a, T, fp32 = self.adapter, self.n_steps, self._arm("fp32")
        worst_label = worst_text = 0.0
        for i, (prompt, conts) in enumerate(self.tokens):
            seed = self.seeds[i]
            ids = torch.tensor([prompt], device=a.device)
            with torch.inference_mode():
                context = a.embed(ids, torch.float32)
                generator = torch.Generator().manual_seed(seed)
                h0 = a.initial_state(context, [len(prompt)], [generator]).float()
                own = torch.stack([  # [depth, vocab]
                    a.own_forward_logits(ids, t, state=h0.clone())[0, -1].float() for t in range(1, T + 1)
                ])
            vocab = int(own.shape[-1])
            r = a.label_readout([prompt], [list(range(vocab))], [seed], T, fp32)
            ref = torch.log_softmax(own, -1).cpu().numpy()
            err = np.maximum(
                np.abs(r.logprob[0].astype(np.float64) - ref).max(axis=1),
                np.abs(r.logsumexp[0].astype(np.float64) - torch.logsumexp(own, -1).cpu().numpy()),
            )
            worst_label = max(worst_label, self._depthwise(
                check, err, self.own_atol,
                f"label readout of item {i} ({len(prompt)} tokens) vs log_softmax(own_forward_logits) "
                "over the whole vocabulary",
            ))

            # answer text, unshared: [prompt, v_k] from the rows of the item's packed initial state
            packed = pack([prompt], [conts], a.pad_token_id)
            h0p = packed_initial_state(a, packed, [seed], fp32)
            split = unshare(packed)
            tr = a.text_readout([prompt], [conts], [seed], T, fp32, shared_prefix=False)
            for k, cont in enumerate(conts):
                n = len(prompt) + len(cont)
                rows = torch.as_tensor(split.state_rows[k, :n], device=a.device)
                seq = torch.tensor([prompt + cont], device=a.device)
                pos = torch.arange(len(prompt) - 1, n - 1, device=a.device)
                tgt = torch.tensor(cont, device=a.device)
                ref_sum, ref_first = np.empty(T), np.empty(T)
                with torch.inference_mode():
                    for t in range(1, T + 1):
                        state = h0p[0, rows][None].clone()
                        logits = a.own_forward_logits(seq, t, state=state)[0].float()
                        lp = torch.log_softmax(logits, -1)[pos, tgt]
                        ref_sum[t - 1], ref_first[t - 1] = float(lp.sum()), float(lp[0])
                err = np.maximum(  # logprob_sum: per scored token
                    np.abs(tr.logprob_sum[0, :, k] - ref_sum) / len(cont),
                    np.abs(tr.logprob_first[0, :, k] - ref_first),
                )
                worst_text = max(worst_text, self._depthwise(
                    check, err, self.own_atol,
                    f"answer-text readout of item {i}, continuation {k} ({len(cont)} tokens) vs the "
                    "model's own forward over [prompt, continuation] (logprob_sum per scored token)",
                ))
        return {"label_max_err": worst_label, "text_max_err": worst_text, "depths": T}

    def _batch_independence(self, check: str) -> dict[str, Any]:
        from .models.v1 import STANDARD_ARMS

        a, T = self.adapter, self.n_steps
        toks, targets = self.tokens, self._label_targets()
        order = sorted(range(len(toks)), key=lambda i: len(toks[i][0]))
        short, mid, long_ = order[0], order[len(order) // 2], order[-1]
        if len(toks[short][0]) == len(toks[long_][0]):
            raise KitUsageError("batch-independence needs items of different token lengths")
        seeds = self.seeds
        k = len(targets[mid])
        huge = float(np.finfo(np.float64).max)  # measured, not asserted (NaN/inf still fail)
        figures: dict[str, Any] = {}
        configured = a.batching
        try:
            for mode in ("padded", "invariant"):
                a.batching = mode
                layouts = (
                    ([short, mid, long_], 1, f"in the middle of a {mode} batch"),
                    ([mid, short], 0, f"first in a {mode} batch"),
                )
                for arm in STANDARD_ARMS.values():
                    # invariant: the same bytes in every arm; padded: fp32 within atol (the hooks
                    # are padding-safe), the bf16 arms' rounding differences measured
                    atol = 0.0 if mode == "invariant" else (self.atol if arm.name == "fp32" else huge)
                    alone = a.label_readout([toks[mid][0]], [targets[mid]], [seeds[mid]], T, arm)
                    alone_text = a.text_readout([toks[mid][0]], [toks[mid][1]], [seeds[mid]], T, arm)
                    worst = 0.0
                    for members, row, where in layouts:
                        batch = a.label_readout([toks[i][0] for i in members], [targets[i] for i in members],
                                                [seeds[i] for i in members], T, arm)
                        worst = max(worst, self._compare(
                            check, batch, alone, [row], [k], atol,
                            f"{arm.name}: label readout of item {mid} {where} vs alone"))
                        text = a.text_readout([toks[i][0] for i in members], [toks[i][1] for i in members],
                                              [seeds[i] for i in members], T, arm)
                        worst = max(worst, self._compare(
                            check, text, alone_text, [row], [k], atol,
                            f"{arm.name}: answer-text readout of item {mid} {where} vs alone"))
                    figures[f"{mode}_{arm.name}"] = worst
        finally:
            a.batching = configured
        figures["max_err"] = figures["padded_fp32"]
        figures["lengths"] = [len(toks[i][0]) for i in (short, mid, long_)]
        return figures

    def _seed_determinism(self, check: str) -> dict[str, Any]:
        import torch

        a, T, fp32 = self.adapter, self.n_steps, self._arm("fp32")
        prompts = [p for p, _ in self.tokens]
        conts = [c for _, c in self.tokens]
        targets = self._label_targets()
        other = [s + 104729 for s in self.seeds]

        def both(seeds: Sequence[int], global_seed: int) -> tuple[Any, Any]:
            torch.manual_seed(global_seed)
            return (a.label_readout(prompts, targets, seeds, T, fp32),
                    a.text_readout(prompts, conts, seeds, T, fp32))

        devices = [a.device.index or 0] if a.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            first, again, moved = both(self.seeds, 0), both(self.seeds, 12345), both(other, 0)
            with torch.inference_mode():
                context = a.embed(torch.tensor([prompts[0]], device=a.device), torch.float32)
                n = [len(prompts[0])]
                s1 = a.initial_state(context, n, [torch.Generator().manual_seed(1)])
                s1b = a.initial_state(context, n, [torch.Generator().manual_seed(1)])
                s2 = a.initial_state(context, n, [torch.Generator().manual_seed(2)])
        if not torch.equal(s1, s1b):
            raise self._fail(check, "initial_state gave two different states from two generators "
                                    "seeded alike: it must draw from the generators it is given")
        random_state = not torch.equal(s1, s2)
        for got, want, what in zip(again, first, ("label", "answer-text"), strict=True):
            rows = list(range(len(prompts)))
            ks = [len(c) for c in conts]
            self._compare(check, got, want, rows, ks, 0.0,
                          f"{what} readout run twice with the same seeds (another global torch seed)")
        changed = []
        for i in range(len(prompts)):
            d = max(
                float(_nanmax_abs(moved[0].logprob[i], first[0].logprob[i], (0, 1))),
                float(_nanmax_abs(moved[1].logprob_sum[i], first[1].logprob_sum[i], (0, 1))),
                float(_nanmax_abs(moved[0].latent_step_norm[i], first[0].latent_step_norm[i], (0,))),
            )
            changed.append(d)
        if random_state and min(changed) == 0.0:
            i = changed.index(0.0)
            raise self._fail(check, f"initial_state is random, but item {i} gives identical readouts "
                                    f"under seeds {self.seeds[i]} and {other[i]}: the seed does not reach "
                                    "the recurrence")
        if not random_state and max(changed) > 0.0:
            i = int(np.argmax(changed))
            raise self._fail(check, f"initial_state does not depend on its generator, but item {i}'s "
                                    f"readouts change with the seed (by {changed[i]:.3g})")
        return {"random_initial_state": random_state, "min_change_other_seed": min(changed)}

    def _packed_equals_unshared(self, check: str) -> dict[str, Any]:
        a, T, fp32 = self.adapter, self.n_steps, self._arm("fp32")
        prompts = [p for p, _ in self.tokens]
        conts = [c for _, c in self.tokens]
        packed = a.text_readout(prompts, conts, self.seeds, T, fp32, shared_prefix=True)
        apart = a.text_readout(prompts, conts, self.seeds, T, fp32, shared_prefix=False)
        rows = list(range(len(prompts)))
        worst = self._compare(check, packed, apart, rows, [len(c) for c in conts], self.atol,
                              "packed (shared-prefix) vs unshared answer-text readout")
        return {"max_err": worst, "items": len(rows), "continuations": sum(map(len, conts))}

    def _precision_arms(self, check: str) -> dict[str, Any]:
        from .models.v1 import STANDARD_ARMS

        a, T = self.adapter, self.n_steps
        prompts = [p for p, _ in self.tokens]
        conts = [c for _, c in self.tokens]
        targets = self._label_targets()
        b = len(prompts)
        ks = np.array([len(c) for c in conts])
        k_max = int(ks.max())
        real = np.broadcast_to((np.arange(k_max)[None, :] < ks[:, None])[:, None, :], (b, T, k_max))
        lengths = np.array([[len(v) for v in cs] + [0] * (k_max - len(cs)) for cs in conts])
        out: dict[str, tuple[Any, Any]] = {}
        for name, arm in STANDARD_ARMS.items():
            lr = a.label_readout(prompts, targets, self.seeds, T, arm)
            tr = a.text_readout(prompts, conts, self.seeds, T, arm)
            for what, r, per_candidate in (
                ("label", lr, ("logprob",)),
                ("answer-text", tr, ("logprob_sum", "logprob_first")),
            ):
                arrays = {f: getattr(r, f) for f in (*per_candidate, "logsumexp", "latent_step_norm")}
                arrays.update({f"extras[{k!r}]": v for k, v in r.extras.items()})
                for f, v in arrays.items():
                    where = f"arm {name}, {what} readout, {f}"
                    shape = (b, T, k_max) if f in per_candidate else (b, T)
                    if v.shape != shape or v.dtype != np.float32:
                        raise self._fail(check, f"{where}: {v.dtype} {v.shape}, expected float32 {shape}")
                    values = v[real] if f in per_candidate else v
                    if not np.isfinite(values).all():
                        raise self._fail(check, f"{where}: {int((~np.isfinite(values)).sum())} non-finite values")
                    if f in per_candidate and not np.isnan(v[~real]).all():
                        raise self._fail(check, f"{where}: not NaN past an item's candidates")
                    if f in per_candidate and values.max() > 1e-4:
                        raise self._fail(check, f"{where}: a log-probability of {values.max():.3g} > 0")
                    if f == "latent_step_norm" and (v < 0).any():
                        raise self._fail(check, f"{where}: negative norms")
            if tr.n_tokens.shape != (b, k_max) or not np.array_equal(tr.n_tokens, lengths):
                raise self._fail(
                    check, f"arm {name}: n_tokens {tr.n_tokens.tolist()} are not the continuation lengths"
                )
            out[name] = (lr, tr)
        (lb, tb), (lh, th), (lf, _) = out["bf16"], out["bf16-fp32head"], out["fp32"]
        for what, x, y in (("label", lb, lh), ("answer-text", tb, th)):
            same = [np.array_equal(x.latent_step_norm, y.latent_step_norm)]
            same += [np.array_equal(x.extras[k], y.extras[k], equal_nan=True) for k in x.extras]
            if not all(same):
                raise self._fail(
                    check,
                    f"{what} readout: arms bf16 and bf16-fp32head must run the same bf16 recurrence "
                    "(same hidden values), but latent_step_norm or the step extras differ",
                )
        head = float(_nanmax_abs(lb.logprob, lh.logprob, (0, 1, 2)))
        rec = float(_nanmax_abs(lb.latent_step_norm, lf.latent_step_norm, (0, 1)))
        if head == 0.0:
            raise self._fail(check, "arms bf16 and bf16-fp32head give identical log-probabilities: "
                                    "read_logits ignores the head dtype (it must run in h.dtype)")
        if rec == 0.0:
            raise self._fail(check, "arms bf16 and fp32 give identical latent_step_norm: the hooks "
                                    "ignore the recurrence dtype (use self.module(dtype))")
        return {"bf16_vs_fp32head_logprob": head, "bf16_vs_fp32_step_norm": rec}

    def _probes(self, check: str) -> dict[str, Any]:
        import torch

        from .adapter import probe_seed
        from .adapter.packing import pack

        a, T, fp32 = self.adapter, self.n_steps, self._arm("fp32")
        if T < 2:
            raise KitUsageError("the probes check needs n_steps >= 2")
        anchors, draws = sorted({1, T - 1}), 16
        items = self.tokens[:2]
        prompts, conts = [p for p, _ in items], [c for _, c in items]
        targets, seeds = self._label_targets()[:2], self.seeds[:2]
        got = {
            "label": a.label_readout(prompts, targets, seeds, T, fp32, probe_anchors=anchors, probe_draws=draws).probes,
            "text": a.text_readout(prompts, conts, seeds, T, fp32, probe_anchors=anchors, probe_draws=draws).probes,
        }
        again = a.label_readout(prompts, targets, seeds, T, fp32, probe_anchors=anchors, probe_draws=draws).probes
        alone = a.text_readout(prompts[1:], conts[1:], seeds[1:], T, fp32, probe_anchors=anchors, probe_draws=draws).probes
        for name, x, y in (("the same seeds twice (label)", got["label"], again),
                           ("item 1 alone vs in a batch (text)", _slice_probes(got["text"], 1), alone)):
            tol = 0.0 if a.batching == "invariant" or "twice" in name else self.atol
            for part in x._fields:
                u, v = getattr(x, part), getattr(y, part)
                k = min(u.shape[-1], v.shape[-1]) if u.ndim > 2 else None
                if k is not None:
                    u, v = u[..., :k], v[..., :k]
                    if u.ndim == 4:
                        u, v = u[..., :k, :], v[..., :k, :]
                err = float(np.nanmax(np.abs(u.astype(np.float64) - v))) if np.isfinite(u).any() else 0.0
                if err > tol or not np.array_equal(np.isnan(u), np.isnan(v)):
                    raise self._fail(check, f"probes.{part} differ for {name} by {err:.3g} (tolerance {tol:g})")

        f64 = torch.float64
        worst = {"jjt": 0.0, "nl": 0.0, "sigma": 0.0}
        for i, (prompt, cont) in enumerate(items):
            for kind in ("label", "text"):
                if kind == "label":
                    ids = torch.tensor([prompt], device=a.device)
                    ctx32, ctx = a.embed(ids, torch.float32), a.embed(ids, f64)
                    h = a.initial_state(ctx32, [len(prompt)], [torch.Generator().manual_seed(seeds[i])]).float()
                    read_at = torch.tensor([len(prompt) - 1], device=a.device)
                    pos = read_at
                    tgt = torch.tensor(targets[i], device=a.device)

                    def scores(logits, tgt=tgt):  # [n, vocab] -> [n, K]
                        return torch.log_softmax(logits, -1)[:, tgt]
                else:
                    pk = pack([prompt], [cont], a.pad_token_id)
                    ctx32, ctx = (a.embed(torch.as_tensor(pk.ids, device=a.device), dt,
                                          position_ids=torch.as_tensor(pk.position_ids, device=a.device),
                                          attention_mask=torch.as_tensor(pk.attention_mask(), device=a.device))
                                  for dt in (torch.float32, f64))
                    h = a.initial_state(ctx32, pk.lengths.tolist(), [torch.Generator().manual_seed(seeds[i])]).float()
                    read_at = torch.as_tensor(pk.read_at, device=a.device)  # [1, R]
                    pos = read_at[0]
                    own = torch.as_tensor(pk.owner[0], device=a.device)
                    tg = torch.as_tensor(pk.target[0], device=a.device)
                    first = torch.as_tensor(pk.first_token[0], device=a.device)

                    def scores(logits, own=own, tg=tg, first=first, k_n=len(cont)):  # [n, R, vocab] -> [n, K]
                        lsm = torch.log_softmax(logits, -1)
                        lp = lsm.gather(2, tg[None, :, None].expand(lsm.shape[0], -1, 1))[..., 0]
                        out = lsm[:, 0, first]
                        return torch.stack([out[:, k] + lp[:, 1:][:, own[1:] == k].sum(1) for k in range(k_n)], 1)
                n_pos, hidden = int(pos.numel()), int(h.shape[-1])
                with torch.no_grad():
                    states = [h]  # the fp32 arm's recurrence, as the engine runs it
                    for step in range(T):
                        states.append(a.step(states[-1], ctx32, step))
                    states = [x.to(f64) for x in states]

                    # [n, seq, hidden] states at depth t (a per-depth readout needs t) -> [n, K]
                    def evaluate(hb, t, read_at=read_at, ctx=ctx, scores=scores):
                        n = hb.shape[0]
                        c = a.take_context(ctx, torch.zeros(n, dtype=torch.long, device=a.device), 1)
                        return scores(a.read_logits_at(hb, c, read_at.expand(n, *read_at.shape[1:]),
                                                       depth=t)).double()

                    for j, t in enumerate(anchors):
                        ht = states[t]
                        step = states[t + 1][0, pos] - ht[0, pos]
                        sigma = float(torch.linalg.vector_norm(step)) / float(np.sqrt(n_pos * hidden))
                        # J by float64 autograd w.r.t. the whole state (read at the positions),
                        # itself checked by central differences along random directions
                        with torch.enable_grad():
                            hg = ht.clone().requires_grad_(True)
                            sg = evaluate(hg, t)[0]
                            J = torch.stack([torch.autograd.grad(sg[c], hg, retain_graph=True)[0][0, pos].reshape(-1)
                                             for c in range(sg.shape[0])]).cpu().numpy()  # [K, P * hidden]
                        # a step of 1e-2 of the states' RMS: readouts whose norm computes in float32 whatever
                        # the input dtype (Llama's RMSNorm) are float32-accurate only, and a smaller step
                        # drowns central differences in their rounding
                        eps = 1e-2 * float(ht[0, pos].pow(2).mean().sqrt())
                        rng = np.random.default_rng(i)
                        # three directions, each stepped both ways, in one float64 batch [6, seq, hidden]
                        vs = torch.as_tensor(rng.normal(size=(3, n_pos, hidden)), dtype=f64, device=a.device)
                        hb = ht.expand(6, -1, -1).clone()
                        hb[0::2, pos] += eps * vs
                        hb[1::2, pos] -= eps * vs
                        sc = evaluate(hb, t)
                        for d, v in enumerate(vs):
                            fd = ((sc[2 * d] - sc[2 * d + 1]) / (2 * eps)).cpu().numpy()
                            jv = J @ v.reshape(-1).cpu().numpy()
                            # within 1e-3 of the directional derivative's scale: a detached or missing op is off by O(1)
                            if not np.abs(jv - fd).max() <= 1e-3 * max(float(np.abs(fd).max()), 1e-9):
                                raise self._fail(check, f"{kind} readout of item {i} at anchor {t}: its float64 autograd "
                                                        f"Jacobian disagrees with central differences ({jv} vs {fd})")
                        ref_jjt = J @ J.T
                        gen = torch.Generator(device="cpu").manual_seed(probe_seed(seeds[i], t))
                        rr = torch.randint(0, 2, (draws, n_pos, hidden), generator=gen, dtype=torch.int8)
                        base = evaluate(ht, t)[0]
                        # every draw's perturbed state in one float64 batch [draws, seq, hidden]: each row
                        # is read on its own (the readout is per row), so this is the draws one at a time
                        hb = ht.expand(draws, -1, -1).clone()
                        hb[:, pos] += (rr.to(f64) * 2 - 1).to(a.device) * sigma
                        ch = (evaluate(hb, t) - base).cpu().numpy()  # [draws, K]
                        ref_mean, ref_moment = ch.mean(0), ch.T @ ch / draws
                        pr = got[kind]
                        k = ref_jjt.shape[0]
                        scale = max(float(np.abs(ref_jjt).max()), 1e-12)
                        e_j = float(np.abs(pr.jjt[i, j, :k, :k] - ref_jjt).max()) / scale
                        scale_nl = max(float(np.abs(ref_moment).max()), float(np.abs(ref_mean).max()) ** 2, 1e-12)
                        # a score change is a difference of two fp32 readouts: besides 1e-3 of the
                        # scale, allow fp32 rounding of the base score (2e-5 nats per scored token)
                        n_scored = 1 if kind == "label" else max(len(c) for c in cont)
                        slack = 2e-5 * n_scored
                        e_nl = max(float(np.abs(pr.nl_mean[i, j, :k] - ref_mean).max()) / (1e-3 * np.sqrt(scale_nl) + slack),
                                   float(np.abs(pr.nl_moment[i, j, :k, :k] - ref_moment).max())
                                   / (1e-3 * scale_nl + 2 * np.sqrt(scale_nl) * slack)) * 1e-3
                        e_s = abs(float(pr.sigma[i, j]) - sigma) / max(sigma, 1e-12)
                        for key, e, what in (("jjt", e_j, "J Jᵀ vs central finite differences"),
                                             ("nl", e_nl, "nonlinear moments vs the draws one at a time (beyond fp32 rounding)"),
                                             ("sigma", e_s, "sigma vs ||h_{t+1} − h_t|| / sqrt(P·hidden)")):
                            worst[key] = max(worst[key], e)
                            if not e <= 1e-3:
                                raise self._fail(check, f"{kind} probes of item {i} at anchor {t}: {what} differ by "
                                                        f"{e:.3g} of their scale (tolerance 1e-3)")
        return {f"{k}_rel_err": v for k, v in worst.items()} | {"anchors": anchors, "draws": draws}

    def _store_validates(self, check: str) -> dict[str, Any]:
        import zarr

        from .collect import CollectError, Source, collect
        from .demo import sample_sources
        from .validate import validate_store

        # one question of each shipped task, in chunks of one: two chunks, every precision arm,
        # balanced arrangements and both readouts, at the smallest cost
        sources = [Source(s.task, s.path, limit=1, split=s.split) for s in sample_sources()]
        runs = {
            "label": dict(readout="label", precision=("bf16", "bf16-fp32head", "fp32")),
            "text": dict(readout="text", options=True, arrangements=4, precision=("bf16",)),
        }
        cls = self.adapter_cls
        figures: dict[str, Any] = {}
        if self.tmp_path is not None:
            self.tmp_path.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as stack:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kit-", dir=self.tmp_path)))
            for readout in self.store_readouts:
                out = work / f"{readout}.zarr"
                try:
                    collect(
                        adapter=cls, model=self.checkpoint, sources=sources, out=out,
                        depths=self.n_steps, device=self.device, batch_size=4, chunk_size=1,
                        **runs[readout],
                    )
                except CollectError as exc:
                    raise self._fail(check, f"depthtraj collect --readout {readout} refused: {exc}") from None
                report = validate_store(str(out), level="data")
                if report.errors:
                    shown = "; ".join(
                        f"{f.rule} at {f.path}: {f.message}" for f in report.findings if f.severity == "error"
                    )
                    raise self._fail(
                        check, f"the {readout} store does not validate ({report.errors} errors): {shown[:1500]}"
                    )
                model = zarr.open_group(str(out), mode="r").attrs["depthtraj"]["model"]
                want = {"name": cls.name, "version": cls.version}
                if model["adapter"] != want or model["family"] != cls.family:
                    raise self._fail(
                        check,
                        f"the {readout} store records adapter {model['adapter']} of family "
                        f"{model['family']!r}, expected {want} of family {cls.family!r}",
                    )
                figures[f"{readout}_warnings"] = report.warnings
        return figures


def _slice_probes(p: Any, i: int) -> Any:
    """Item ``i`` of a :class:`~depthtraj.adapter.ReadoutProbes` (keeping the batch axis)."""
    return type(p)(*(x[i : i + 1] for x in p))


def check_adapter(
    adapter_cls: type,
    checkpoint_dir: str | Path,
    *,
    items: Sequence[KitItem] | None = None,
    n_steps: int = 6,
    tmp_path: str | Path | None = None,
    checks: Sequence[str] = KIT_CHECKS,
    **options: Any,
) -> KitReport:
    """Run the adapter conformance kit (:class:`AdapterKit`) and return its figures.

    ``checkpoint_dir`` is a tiny checkpoint of the adapter's model (for instance what its
    ``tiny_checkpoint`` writes); ``options`` go to :class:`AdapterKit` (``device``, ``atol``,
    ``own_atol``, ``store_readouts``). Raises ``AssertionError`` at the first failing check,
    naming the check and the adapter.
    """
    kit = AdapterKit(
        adapter_cls, checkpoint_dir, items=items, n_steps=n_steps, tmp_path=tmp_path, **options
    )
    return kit.run_all(checks)


__all__ = [
    "KIT_CHECKS",
    "AdapterKit",
    "KitItem",
    "KitReport",
    "KitUsageError",
    "check_adapter",
    "sample_items",
    "synthetic_attrs",
    "synthetic_questions",
    "synthetic_scores",
    "synthetic_store",
]
