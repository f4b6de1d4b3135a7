"""Helpers for tests and benchmarks: conforming random stores with controllable dynamics.

:func:`synthetic_store` writes a format-v1 store through the public :class:`TrajectoryWriter`,
one chunk at a time (memory is bounded by the chunk size, so it scales to millions of
questions). Scores follow a converging trajectory model: for question i, candidate k,
arrangement a and arm p at depth t,

    z_t = z_T + amplitude * decay**(t-1) * (e_i + jitter * eta_t)
    s_t = z_t - LSE(z_t) + log M_t          (label readout: log-probabilities, M_t <= 1)

where ``log M_t`` adds a common translation (candidate-set mass) shrinking with depth. Exact
ties and exactly translated (zero-contrast) adjacent updates can be injected at chosen rates.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence

import numpy as np

from . import __version__
from .models.v1 import (
    STANDARD_ARMS,
    AdapterInfo,
    ModelInfo,
    PrecisionArm,
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
) -> StoreAttrs:
    """Attrs for a synthetic store (model family ``synthetic``)."""
    arms = [STANDARD_ARMS.get(p) or PrecisionArm(name=p, recurrence_dtype="float32", head_dtype="float32") for p in precision]
    return StoreAttrs(
        model=ModelInfo(
            name="synthetic",
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
    **dynamics,
) -> str:
    """Write a conforming random store and return its path.

    ``n`` questions, endpoint ``endpoint`` (depths ``1..endpoint`` unless ``depths`` is given),
    K drawn from ``k_mix``, ``arrangements`` arrangements, one precision arm per name in
    ``precision``. ``dynamics`` go to :func:`synthetic_scores` (``decay``, ``amplitude``,
    ``jitter``, ``translation``, ``tie_rate``, ``stall_rate``). With ``complete=False`` the
    last chunk is left unwritten. Chunks are generated and written one at a time.
    """
    depths = np.arange(1, endpoint + 1) if depths is None else np.asarray(depths)
    attrs = synthetic_attrs(
        endpoint=int(depths[-1]), readout=readout, precision=precision, tasks=tasks, seed=seed
    )
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
        arrays = {k: v for k, v in arrays.items() if k in w.data_variables}
        w.write(region, **arrays)
    if complete:
        w.finalize()
    return str(path)


__all__ = ["synthetic_attrs", "synthetic_questions", "synthetic_scores", "synthetic_store"]
