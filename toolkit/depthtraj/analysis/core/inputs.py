"""What an analysis reads from a store: the readout (and its normalisation), the selected
questions and the cell grouping.

* :func:`normalized_score` — for answer-text stores, the score under another normalisation of
  the same continuation log-likelihoods (``pd:app:eq:text-scoring``): ``s^(L) = logprob_sum /
  L`` with ``L = 1`` (sum), ``n_tokens`` (token mean) or ``n_chars`` (character mean, the
  stored ``score``, ``pd:eq:f2``).
* :func:`select_questions` — keep the questions matching ``key=value`` selections on the
  per-question coordinates (task, subject, K, label, ...).
* :data:`BY` — the cell groupings ``task``, ``subject``, ``K``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ... import layout as L

__all__ = [
    "BY",
    "NORMALIZATIONS",
    "parse_selections",
    "normalized_score",
    "readout_info",
    "select_questions",
]

#: Cell groupings: option value -> per-question coordinate.
BY: dict[str, str] = {"task": "task", "subject": "subject", "K": "n_candidates"}
#: Text-score normalisations (``pd:app:eq:text-scoring``): name -> divisor variable (None: 1).
NORMALIZATIONS: dict[str, str | None] = {"sum": None, "token": "n_tokens", "char": "n_chars", "lmeval": "n_chars"}
"""Text-score normalisations and the variable each divides ``logprob_sum`` by: ``sum`` (L = 1),
``token`` (n_k), ``char`` (ℓ_k, the paper's: the continuation's characters, leading delimiter
included; ``pd:app:eq:text-scoring``) and ``lmeval`` (lm-evaluation-harness's ``acc_norm``: the
answer text's characters without the target delimiter, ℓ_k − len(target_delimiter))."""
_ALIASES = {"K": "n_candidates", "k": "n_candidates"}


def readout_info(ds) -> dict:
    """``{'kind', 'options_displayed', 'normalization', 'label'}`` of a store's readout (from
    ``attrs['depthtraj']['readout']``; a bare dataset counts as a label readout). ``label``
    is the paper's name: F1 (label), F2 (text, options hidden), F3 (text, options shown)."""
    try:
        r = ds.attrs["depthtraj"]["readout"]
        kind = str(r["kind"])
        shown = bool(r.get("options_displayed", kind == "label"))
        norm = str(r.get("normalization", "none"))
    except (KeyError, TypeError):
        kind, shown, norm = "label", True, "none"
    label = "F1" if kind == "label" else ("F3" if shown else "F2")
    return {"kind": kind, "options_displayed": shown, "normalization": norm, "label": label}


def normalized_score(ds, normalization: str | None):
    """The store with ``score`` replaced by the ``normalization`` of its text scores.

    Parameters
    ----------
    ds
        a store Dataset.
    normalization
        ``None`` (the stored score), ``'sum'``, ``'token'``, ``'char'`` or ``'lmeval'``
        (:data:`NORMALIZATIONS`).

    Returns
    -------
    xarray.Dataset, lazily: ``score`` (question, depth, candidate, arrangement, precision;
    nats, or nats per token / per character) = ``logprob_sum / L`` on the real candidates,
    NaN past K; ``attrs['normalization']`` set.

    Raises
    ------
    ValueError
        for an unknown normalisation, a label store, or a text store lacking the variables.
    """
    if normalization is None:
        return ds
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"--normalization must be one of {', '.join(NORMALIZATIONS)}, got {normalization!r}")
    info = readout_info(ds)
    if info["kind"] != "text":
        raise ValueError(
            f"--normalization {normalization} applies to answer-text stores; this store holds "
            f"{info['kind']} scores (pd:app:eq:text-scoring)"
        )
    divisor = NORMALIZATIONS[normalization]
    need = ["logprob_sum"] + ([divisor] if divisor else [])
    missing = [v for v in need if v not in ds.variables]
    if missing:
        raise ValueError(f"the text store lacks {', '.join(missing)} needed for --normalization {normalization}")
    total = ds["logprob_sum"]
    real = ds[L.CANDIDATE] < ds["n_candidates"]
    if divisor is None:
        score = total
    else:
        d = ds[divisor].astype(np.float64)
        if normalization == "lmeval":  # lm-eval divides by len(choice), the delimiter not counted
            try:
                delim = str(ds.attrs["depthtraj"]["readout"].get("target_delimiter", " "))
            except (KeyError, TypeError, AttributeError):
                delim = " "
            d = d - len(delim)
        score = total / d.where(d > 0)
    score = score.where(real).astype(ds["score"].dtype).transpose(*L.SCORE_DIMS)
    out = ds.assign(score=score)
    out["score"].attrs.update(ds["score"].attrs, normalization=normalization)
    out.attrs = dict(ds.attrs, normalization=normalization)
    return out


def parse_selections(items: Sequence[str]) -> dict[str, list[str]]:
    """``['task=mmlu', 'K=4,5']`` -> ``{'task': ['mmlu'], 'n_candidates': ['4', '5']}``.

    Raises
    ------
    ValueError
        for an item without ``=`` or with an empty key or value.
    """
    out: dict[str, list[str]] = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise ValueError(f"--select {item!r}: expected KEY=VALUE[,VALUE...] (e.g. task=mmlu, K=4)")
        out.setdefault(_ALIASES.get(key, key), []).extend(v.strip() for v in value.split(",") if v.strip())
    return out


def select_questions(ds, selections: Mapping[str, Sequence[str]]):
    """The questions whose coordinates match every selection (values compared as text).

    Raises
    ------
    ValueError
        when a key is not a per-question coordinate of the store, or nothing matches.
    """
    if not selections:
        return ds
    mask = np.ones(ds.sizes[L.QUESTION], dtype=bool)
    for key, values in selections.items():
        if key not in ds.coords or ds[key].dims != (L.QUESTION,):
            have = sorted(n for n, c in ds.coords.items() if c.dims == (L.QUESTION,) and n != L.QUESTION)
            raise ValueError(f"--select {key}: not a per-question coordinate (have: {', '.join(have)}, K)")
        wanted = {str(v) for v in values}
        col = np.asarray(ds[key].values).tolist()
        mask &= np.fromiter((str(v) in wanted for v in col), dtype=bool, count=len(col))
    if not mask.any():
        wanted = "; ".join(f"{k}={','.join(v)}" for k, v in selections.items())
        raise ValueError(f"--select {wanted}: no question matches")
    return ds.isel({L.QUESTION: np.flatnonzero(mask)})
