"""Data-level checks (``DT-DATA-*``): the values, read chunk by chunk along ``question``.

The store is read one question chunk at a time (the chunk size of ``score``): every array with a
``question`` dim is read for the questions of that chunk only, so memory is bounded by the chunk
size, never by the store size. Questions whose ``complete`` is false are skipped by every rule
but ``DT-DATA-010``; questions whose ``n_candidates`` breaks ``DT-DATA-005`` are skipped by the
rules that depend on it. Arrays that failed a structure rule (``Context.ok``) are not read.

An arrangement ``a`` is *used* by question ``q`` when ``arrangement_order[q, a, 0] >= 0`` (spec
§4); values in unused arrangements must be NaN (0 for ``n_tokens``), and the value rules apply
to used arrangements only. Without a readable ``arrangement_order`` every arrangement counts as
used.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import layout as L
from ..models.v1 import FORMAT_VERSIONS, UNUSED_ARRANGEMENTS_SINCE
from .context import SEMVER, Context
from .report import Collector, format_ids

#: Tolerance of the bounds at 0 (DT-DATA-003, DT-DATA-008).
ZERO_TOL = 1e-6
#: DT-DATA-004: logsumexp >= LSE_k(score_k + logsumexp) - LSE_TOL.
LSE_TOL = 1e-4
#: DT-DATA-008: logprob_first >= logprob_sum - FIRST_TOL.
FIRST_TOL = 1e-5
#: DT-DATA-009: |score - logprob_sum / divisor| <= ATOL + RTOL * |logprob_sum / divisor|.
RTOL, ATOL = 1e-5, 1e-6

_SCORE_LIKE = ("score", "logprob_sum", "logprob_first")


def _read(ctx: Context, name: str, start: int, stop: int) -> np.ndarray:
    """The values of questions ``start:stop`` of array ``name`` (the one place data is read)."""
    return np.asarray(ctx.arrays[name].array[start:stop])


def _g(x) -> str:
    return f"{float(x):.7g}"


class _Chunk:
    """The complete questions of one chunk, the arrays read for them, and how to name cells.

    :meth:`load` reads every sound array once for the chunk's questions; an array whose chunk
    cannot be decoded is reported (``DT-DATA-013``, naming the stored chunk) and left out of
    :attr:`ok` for this chunk, so no rule reads it."""

    def __init__(self, ctx: Context, labels: dict[str, Callable[[int], str]], start: int, stop: int):
        self.ctx, self.labels, self.start, self.stop = ctx, labels, start, stop
        self.sel = np.arange(stop - start)
        self.K: np.ndarray | None = None
        self.ok: set[str] = set(ctx.ok)
        self._raw: dict[str, np.ndarray] = {}

    def load(self, col: Collector, names) -> None:
        """Read ``names`` (those in :attr:`ok`) for this chunk; report undecodable chunks."""
        for name in names:
            if name not in self.ok or name in self._raw:
                continue
            try:
                self._raw[name] = _read(self.ctx, name, self.start, self.stop)
            except Exception as exc:  # noqa: BLE001 - every codec raises its own type
                self.ok.discard(name)
                _undecodable(self.ctx, col, name, self.start, self.stop, exc)

    def id_of(self, i: int) -> str:
        """The id of question ``start + i`` (read only when a finding names it; its index when
        the ``question`` coordinate cannot be read)."""
        q = self.start + int(i)
        if L.QUESTION in self.ctx.ok:
            try:
                return str(np.asarray(self.ctx.arrays[L.QUESTION].array[q : q + 1])[0])
            except Exception:  # noqa: BLE001 - an undecodable id chunk: DT-STRUCT-012 reports it
                pass
        return f"#{q}"

    def keep(self, mask: np.ndarray) -> None:
        self.sel = self.sel[mask]
        if self.K is not None:
            self.K = self.K[mask]

    def read(self, name: str) -> np.ndarray:
        if name not in self._raw:
            self._raw[name] = _read(self.ctx, name, self.start, self.stop)
        return self._raw[name][self.sel]

    def path(self, var: str, dims: tuple[str, ...] | None = None):
        dims = dims or L.VARIABLES.get(var, L.COORDS.get(var)).dims
        start, sel, labels = self.start, self.sel, self.labels

        def f(loc: tuple[int, ...]) -> str:
            parts = [f"q={start + int(sel[loc[0]])}"]
            parts += [f"{d}={labels[d](loc[i])}" for i, d in enumerate(dims[1:], 1) if i < len(loc)]
            return f"{var}[{', '.join(parts)}]"

        return f

    def qid(self, loc: tuple[int, ...]) -> str:
        return f"question {self.id_of(self.sel[loc[0]])!r}"


def check_data(ctx: Context, col: Collector) -> None:
    """DT-DATA-001..012 over every question chunk (see the module docstring)."""
    n = ctx.n_questions
    if not n:
        return
    labels = {d: ctx.labeller(d) for d in (L.DEPTH, L.CANDIDATE, L.ARRANGEMENT, L.PRECISION, L.POSITION,
                                           L.ANCHOR, L.CANDIDATE2)}
    step = ctx.question_chunk()
    incomplete: list[str] = []
    n_incomplete = 0
    gaps = _missing(ctx, col)
    unused = False  # an unused arrangement (all -1) anywhere: content of format 1.1
    per_question = [name for name in sorted(ctx.ok) if ctx.arrays[name].dims
                    and ctx.arrays[name].dims[0] == L.QUESTION and name not in (L.QUESTION, "complete")]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for start in range(0, n, step):
            ch = _Chunk(ctx, labels, start, min(n, start + step))
            for name, ranges in gaps.items():  # a missing chunk is reported once, as DT-DATA-013
                if any(a < ch.stop and b > ch.start for a, b in ranges):
                    ch.ok.discard(name)
            ch.load(col, ("complete",))
            if "complete" in ch.ok:
                done = ch.read("complete").astype(bool)
                n_incomplete += int((~done).sum())
                if len(incomplete) < 10:
                    incomplete += [ch.id_of(i) for i in np.flatnonzero(~done)[: 10 - len(incomplete)]]
                ch.keep(done)
            ch.load(col, [name for name in per_question if name in ("n_candidates", "label", "arrangement_order")])
            if ch.sel.size:
                ch.load(col, per_question)
                if "arrangement_order" in ch.ok and not unused:
                    unused = bool(np.all(ch.read("arrangement_order") == -1, axis=-1).any())
                _check_chunk(ctx, col, ch)
    _declared_below_unused(ctx, col, unused)
    if n_incomplete:
        col.add(
            "DT-DATA-010", "complete",
            f"{n_incomplete} of {n} questions are incomplete (complete is false) and were not "
            f"checked: {format_ids(incomplete, n_incomplete)}",
        )


def _declared_below_unused(ctx: Context, col: Collector, unused: bool) -> None:
    """DT-ATTR-002 (warning): unused arrangements came with format 1.1; a store declaring 1.0
    that holds them is older than its content (the attrs' own content is checked at the attrs
    level, which cannot see the arrays' values; one warning of the kind is enough)."""
    m = SEMVER.match(ctx.format_version or "")
    if not unused or m is None or m.group(1) != "1" or int(m.group(2)) >= UNUSED_ARRANGEMENTS_SINCE:
        return
    if any(f.rule == "DT-ATTR-002" for f in col.findings()):
        return
    col.add(
        "DT-ATTR-002", "attrs.depthtraj.format_version",
        f"format_version {ctx.format_version} is older than the content: unused arrangements (all -1 in "
        f"arrangement_order) came with {FORMAT_VERSIONS[UNUSED_ARRANGEMENTS_SINCE]} (a 1.0 reader would not know "
        "that a question's later arrangements may be unused)",
        severity="warning",
        hint=f"set attrs.depthtraj.format_version to {FORMAT_VERSIONS[UNUSED_ARRANGEMENTS_SINCE]!r} "
        "(depthtraj collect writes it)",
    )


def _undecodable(ctx: Context, col: Collector, name: str, start: int, stop: int, exc: BaseException) -> None:
    """DT-DATA-013 for the stored chunk(s) of ``name`` behind a failed read of questions
    ``start:stop`` (found by decoding them one by one)."""
    from ..chunks import undecodable_chunks

    arr = ctx.arrays[name].array
    bad = undecodable_chunks(arr, name, questions=(start, stop))
    if not bad:
        col.add("DT-DATA-013", f"{name}[q={start}..{stop - 1}]",
                f"questions {start}..{stop - 1} of {name!r} cannot be read ({type(exc).__name__}: {exc})")
        return
    for b in bad:
        col.add("DT-DATA-013", f"{name}.chunks[{', '.join(map(str, b.chunk))}]",
                f"{b.where()} cannot be decoded ({b.detail})")


def _missing(ctx: Context, col: Collector) -> dict[str, list[tuple[int, int]]]:
    """DT-DATA-013: chunks of data variables absent from the store under complete questions
    (a reader would see their fill value). Returns the question ranges ``[start, stop)`` of each
    variable's missing chunks: the data rules do not read them (the missing chunk is the cause;
    its fill values would otherwise be reported again, as DT-DATA-001 NaN scores)."""
    from ..chunks import missing_chunks

    gaps: dict[str, list[tuple[int, int]]] = {}
    if "complete" not in ctx.ok:
        return gaps
    try:
        done = np.asarray(ctx.arrays["complete"].array[...], dtype=bool)
    except Exception:  # noqa: BLE001 - reported chunk by chunk by check_data
        return gaps
    for name in L.DATA_VARIABLES:
        if name not in ctx.ok:
            continue
        for b in missing_chunks(ctx.arrays[name].array, name, rows=done):
            col.add("DT-DATA-013", f"{name}.chunks[{', '.join(map(str, b.chunk))}]",
                    f"{b.where()} is missing from the store although its questions are complete "
                    "(it reads as the fill value; the data rules skip it)")
            if b.questions is not None:
                gaps.setdefault(name, []).append(tuple(b.questions))
    return gaps


def _check_chunk(ctx: Context, col: Collector, ch: _Chunk) -> None:
    ok, kind = ch.ok, ctx.kind
    ksize = ctx.sizes.get(L.CANDIDATE)

    # DT-DATA-005: n_candidates.
    if "n_candidates" in ok and ksize is not None:
        K = ch.read("n_candidates").astype(np.int64)
        bad = (K < 2) | (K > ksize)
        col.cells(
            "DT-DATA-005", "n_candidates", bad, ch.path("n_candidates"),
            lambda loc: f"{ch.qid(loc)}: n_candidates is {int(K[loc])}; expected 2..{ksize}",
        )
        ch.K = K
        ch.keep(~bad)
        if not ch.sel.size:
            return
    K = ch.K
    ex = None if K is None else np.arange(ksize)[None, :] < K[:, None]  # [q, candidate]

    def kmsg(loc, c_axis: int) -> str:
        return f"candidate {loc[c_axis]}, n_candidates {int(K[loc[0]])}"

    # DT-DATA-006: label.
    if "label" in ok and K is not None:
        lab = ch.read("label").astype(np.int64)
        col.cells(
            "DT-DATA-006", "label", (lab < -1) | (lab > K - 1), ch.path("label"),
            lambda loc: f"{ch.qid(loc)}: label is {int(lab[loc])}; expected -1..{int(K[loc[0]]) - 1}",
        )

    # DT-DATA-007: arrangement_order; `used` [q, arrangement] for the rules below.
    used = None
    if "arrangement_order" in ok and K is not None:
        o = ch.read("arrangement_order").astype(np.int64)  # [q, arrangement, position]
        pos = np.arange(o.shape[2])
        in_k = pos[None, None, :] < K[:, None, None]
        srt = np.sort(np.where(in_k, o, o.shape[2] + 1), axis=-1)
        perm = np.all(np.where(in_k, srt == pos, True), axis=-1)
        pad = np.all(np.where(in_k, True, o == -1), axis=-1)
        unused_row = np.all(o == -1, axis=-1)
        used = ~unused_row
        # used arrangements are 0..A_q-1: arrangement 0 used, none used after an unused one
        after_gap = np.zeros_like(used)
        after_gap[:, 1:] = used[:, 1:] & ~np.logical_and.accumulate(used, axis=1)[:, :-1]
        first_unused = np.zeros_like(used)
        first_unused[:, 0] = unused_row[:, 0]
        bad = (~(perm & pad) & ~unused_row) | after_gap | first_unused
        col.cells(
            "DT-DATA-007", "arrangement_order", bad,
            ch.path("arrangement_order", (L.QUESTION, L.ARRANGEMENT)),
            lambda loc: f"{ch.qid(loc)}: arrangement_order is {o[loc].tolist()}; expected a "
            f"permutation of 0..{int(K[loc[0]]) - 1} then -1"
            + ("" if not unused_row[loc] else
               " (an unused arrangement, all -1, may only follow the used ones, never be arrangement 0)"),
        )
        del o, srt, in_k
    if used is None:
        used = np.ones((ch.sel.size, ctx.sizes.get(L.ARRANGEMENT, 1)), dtype=bool)
    used5 = used[:, None, None, :, None]  # score dims
    used4 = used[:, None, :, None]  # depth-statistic dims

    def amsg(loc, a_axis: int) -> str:
        return "" if used[loc[0], loc[a_axis]] else f" in unused arrangement {loc[a_axis]}"

    # DT-DATA-012: candidate_text, candidate_label.
    for var in ("candidate_text", "candidate_label"):
        if var in ok and ex is not None:
            t = ch.read(var)
            empty = np.asarray(t == "", dtype=bool)
            col.cells(
                "DT-DATA-012", var, (ex & empty) | (~ex & ~empty), ch.path(var),
                lambda loc, t=t, var=var: f"{ch.qid(loc)}: {var} is {str(t[loc])!r} ({kmsg(loc, 1)}); "
                f"expected {'non-empty' if loc[1] < K[loc[0]] else repr('')}",
            )

    # DT-DATA-016: prompt_hash (the sha256 hex of each used arrangement's prompt; '' elsewhere).
    if "prompt_hash" in ok:
        h = ch.read("prompt_hash")
        good = np.vectorize(lambda x: isinstance(x, str) and len(x) == 64
                            and all(c in "0123456789abcdef" for c in x), otypes=[bool])(h) if h.size else \
            np.zeros(h.shape, bool)
        blank = np.asarray(h == "", dtype=bool)
        col.cells(
            "DT-DATA-016", "prompt_hash", np.where(used, ~good, ~blank), ch.path("prompt_hash"),
            lambda loc, h=h: f"{ch.qid(loc)}: prompt_hash is {str(h[loc])[:70]!r}{amsg(loc, 1)}; expected "
            + ("64 lowercase hex digits (sha256)" if used[loc[0], loc[1]] else "''"),
        )

    # DT-DATA-001 / 002 / 003 on score, logprob_sum, logprob_first.
    vals: dict[str, np.ndarray] = {}
    exb = None if ex is None else ex[:, None, :, None, None] & used5
    for var in _SCORE_LIKE:
        if var not in ok:
            continue
        v = ch.read(var)
        vals[var] = v
        fin = np.isfinite(v)
        if exb is not None:
            col.cells(
                "DT-DATA-001", var, exb & ~fin, ch.path(var),
                lambda loc, v=v, var=var: f"{ch.qid(loc)}: {var} is {_g(v[loc])} for a real "
                f"candidate ({kmsg(loc, 2)}); expected a finite value",
            )
            col.cells(
                "DT-DATA-002", var, ~exb & ~np.isnan(v), ch.path(var),
                lambda loc, v=v, var=var: f"{ch.qid(loc)}: {var} is {_g(v[loc])} "
                + (f"past the candidates ({kmsg(loc, 2)})" if loc[2] >= K[loc[0]] else
                   f"in unused arrangement {loc[3]}")
                + "; expected NaN",
            )
        if var == "score" and kind == "label":
            col.cells(
                "DT-DATA-003", "score", fin & (v > ZERO_TOL), ch.path("score"),
                lambda loc, v=v: f"{ch.qid(loc)}: score is {_g(v[loc])} > 0; label readouts "
                "store log-probabilities",
            )

    # DT-DATA-004: logsumexp.
    if "logsumexp" in ok:
        lse = ch.read("logsumexp").astype(np.float64)  # [q, depth, arrangement, precision]
        path = ch.path("logsumexp")
        col.cells(
            "DT-DATA-004", "logsumexp", np.where(used4, ~np.isfinite(lse), ~np.isnan(lse)), path,
            lambda loc: f"{ch.qid(loc)}: logsumexp is {_g(lse[loc])}{amsg(loc, 2)}; expected "
            + ("a finite value" if used[loc[0], loc[2]] else "NaN"),
        )
        if kind == "label" and "score" in vals and exb is not None:
            s = vals["score"]
            z = np.where(exb, s.astype(np.float64) + lse[:, :, None, :, :], -np.inf)
            m = z.max(axis=2)
            lz = m + np.log(np.sum(np.exp(z - m[:, :, None]), axis=2))
            allfin = np.all(np.where(exb, np.isfinite(s), True), axis=2)
            bad = allfin & np.isfinite(lse) & np.isfinite(m) & (lse < lz - LSE_TOL)
            del z
            col.cells(
                "DT-DATA-004", "logsumexp", bad, path,
                lambda loc: f"{ch.qid(loc)}: logsumexp {_g(lse[loc])} is below the log-sum-exp "
                f"{_g(lz[loc])} of the recovered candidate logits score + logsumexp (candidate "
                f"probability mass {_g(np.exp(lz[loc] - lse[loc]))} > 1)",
            )

    # DT-DATA-008: text components.
    if kind == "text" and ex is not None:
        for var, e in (("n_tokens", ex[:, :, None] & used[:, None, :]), ("n_chars", ex)):
            if var not in ok:
                continue
            c = ch.read(var).astype(np.int64)
            col.cells(
                "DT-DATA-008", var, (e & (c < 1)) | (~e & (c != 0)), ch.path(var),
                lambda loc, c=c, var=var, e=e: f"{ch.qid(loc)}: {var} is {int(c[loc])} ({kmsg(loc, 1)}"
                f"{amsg(loc, 2) if var == 'n_tokens' else ''}); expected {'>= 1' if e[loc] else '0'}",
            )
            vals[var] = c
        ls = vals.get("logprob_sum")
        if ls is not None:
            col.cells(
                "DT-DATA-008", "logprob_sum", exb & np.isfinite(ls) & (ls > ZERO_TOL),
                ch.path("logprob_sum"),
                lambda loc: f"{ch.qid(loc)}: logprob_sum is {_g(ls[loc])} > 0",
            )
        lf = vals.get("logprob_first")
        if lf is not None:
            bad = lf > ZERO_TOL
            if ls is not None:
                bad = bad | (np.isfinite(ls) & (lf < ls.astype(np.float64) - FIRST_TOL))
            col.cells(
                "DT-DATA-008", "logprob_first", exb & np.isfinite(lf) & bad, ch.path("logprob_first"),
                lambda loc: f"{ch.qid(loc)}: logprob_first is {_g(lf[loc])}"
                + (" > 0" if lf[loc] > ZERO_TOL else f" < logprob_sum {_g(ls[loc])}")
                + "; the first token's log-probability is one non-positive term of logprob_sum",
            )

    # DT-DATA-009: score = logprob_sum / divisor.
    norm = ctx.normalization
    if kind == "text" and exb is not None and "score" in vals and "logprob_sum" in vals and norm:
        s, ls = vals["score"], vals["logprob_sum"]
        if norm == "sum":
            div = np.ones((1, 1, 1, 1, 1))
        elif norm == "token" and "n_tokens" in ok:
            div = vals.get("n_tokens", None)
            div = (ch.read("n_tokens") if div is None else div).astype(np.float64)[:, None, :, :, None]
        elif norm == "char" and "n_chars" in ok:
            div = vals.get("n_chars", None)
            div = (ch.read("n_chars") if div is None else div).astype(np.float64)[:, None, :, None, None]
        else:
            div = None
        if div is not None:
            expected = ls.astype(np.float64) / np.where(div >= 1, div, np.nan)
            check = exb & np.isfinite(s) & np.isfinite(expected)
            good = np.abs(s - expected) <= ATOL + RTOL * np.abs(expected)
            col.cells(
                "DT-DATA-009", "score", check & ~good, ch.path("score"),
                lambda loc: f"{ch.qid(loc)}: score is {_g(s[loc])} but logprob_sum / "
                f"{'1' if norm == 'sum' else ('n_tokens' if norm == 'token' else 'n_chars')} "
                f"is {_g(expected[loc])} (normalization {norm!r})",
            )

    # DT-DATA-014: greedy (lm-eval's is_greedy per candidate and depth).
    if "greedy" in ok and exb is not None:
        g = ch.read("greedy")
        exg = np.broadcast_to(exb, g.shape)
        col.cells(
            "DT-DATA-014", "greedy", np.where(exg, (g != 0) & (g != 1), g != -1), ch.path("greedy"),
            lambda loc, g=g: f"{ch.qid(loc)}: greedy is {int(g[loc])} "
            + (f"for a real candidate ({kmsg(loc, 2)}); expected 0 or 1" if exg[loc] else
               (f"past the candidates ({kmsg(loc, 2)})" if loc[2] >= K[loc[0]] else f"in unused arrangement {loc[3]}")
               + "; expected -1"),
        )

    # DT-DATA-011: latent_step_norm (>= 0), exit_gate (a probability: Ouro's λ_t in [0, 1]).
    for var, floor, ceil, want in (("latent_step_norm", 0.0, np.inf, "finite and >= 0"),
                                   ("exit_gate", 0.0, 1.0, "in [0, 1]")):
        if var not in ok:
            continue
        v = ch.read(var)
        with np.errstate(invalid="ignore"):
            good = np.isfinite(v) & (v >= floor) & (v <= ceil)
        col.cells(
            "DT-DATA-011", var, np.where(used4, ~good, ~np.isnan(v)), ch.path(var),
            lambda loc, v=v, var=var, want=want: f"{ch.qid(loc)}: {var} is {_g(v[loc])}{amsg(loc, 2)}; "
            f"expected {want if used[loc[0], loc[2]] else 'NaN'}",
        )

    _check_probes(ch, col, ex, used, amsg)


#: DT-DATA-015: PSD and symmetry up to this fraction of the trace (float32 J Jᵀ and moments).
PSD_RTOL = 1e-4


def _check_probes(ch: _Chunk, col: Collector, ex, used, amsg) -> None:
    """DT-DATA-015: finite where the candidates exist in used arrangements, NaN elsewhere;
    ``probe_sigma >= 0``; ``probe_jjt``, ``probe_nl_moment`` and ``moment − μ μᵀ`` symmetric PSD."""
    if ex is None:
        return
    ok = ch.ok
    K = ch.K
    ex_v = ex[:, None, :, None, None] & used[:, None, None, :, None]  # [q, anchor, candidate, a, p]
    ex_m = ex_v[:, :, :, None] & ex[:, None, None, :, None, None]  # [q, anchor, c, c2, a, p]
    if "probe_sigma" in ok:
        v = ch.read("probe_sigma")
        u = np.broadcast_to(used[:, None, :, None], v.shape)
        col.cells("DT-DATA-015", "probe_sigma", np.where(u, ~(np.isfinite(v) & (v >= 0)), ~np.isnan(v)),
                  ch.path("probe_sigma"),
                  lambda loc, v=v, u=u: f"{ch.qid(loc)}: probe_sigma is {_g(v[loc])}{amsg(loc, 2)}; "
                  f"expected {'finite and >= 0' if u[loc] else 'NaN'}")
    for var, want in (("probe_nl_mean", ex_v), ("probe_jjt", ex_m), ("probe_nl_moment", ex_m)):
        if var not in ok:
            continue
        v = ch.read(var)
        w = np.broadcast_to(want, v.shape)
        col.cells("DT-DATA-015", var, np.where(w, ~np.isfinite(v), ~np.isnan(v)), ch.path(var),
                  lambda loc, v=v, w=w, var=var: f"{ch.qid(loc)}: {var} is {_g(v[loc])} at candidate {loc[2]}"
                  f" (n_candidates {int(K[loc[0]])}){amsg(loc, v.ndim - 2)}; expected {'finite' if w[loc] else 'NaN'}")
    mats = {}
    if "probe_jjt" in ok:
        mats["probe_jjt"] = ch.read("probe_jjt")
    if "probe_nl_moment" in ok:
        mats["probe_nl_moment"] = ch.read("probe_nl_moment")
        if "probe_nl_mean" in ok:
            mu = ch.read("probe_nl_mean")
            mats["probe_nl_moment - mu mu^T"] = mats["probe_nl_moment"] - mu[:, :, :, None] * mu[:, :, None, :]
    for var, m in mats.items():
        real = np.broadcast_to(ex_m, m.shape)
        x = np.moveaxis(np.where(real, m, 0.0).astype(np.float64), (2, 3), (4, 5))  # [q, anchor, a, p, c, c2]
        bad = ~np.all(np.isfinite(x), axis=(-2, -1))
        x = np.where(bad[..., None, None], 0.0, x)
        tr = np.abs(np.trace(x, axis1=-2, axis2=-1))
        tol = PSD_RTOL * np.maximum(tr, 1e-30)
        asym = np.abs(x - np.swapaxes(x, -1, -2)).max(axis=(-2, -1)) > tol
        low = np.linalg.eigvalsh(0.5 * (x + np.swapaxes(x, -1, -2)))[..., 0]
        fail = ~bad & (asym | (low < -tol))
        col.cells("DT-DATA-015", var, fail,
                  lambda loc, var=var: f"{var}[q={ch.start + int(ch.sel[loc[0]])}, anchor={ch.labels[L.ANCHOR](loc[1])}, "
                  f"arrangement={loc[2]}, precision={ch.labels[L.PRECISION](loc[3])}]",
                  lambda loc, var=var, asym=asym, low=low, tr=tr: f"{ch.qid(loc)}: {var} over its real candidates is "
                  + ("not symmetric" if asym[loc] else f"not positive semidefinite (smallest eigenvalue {_g(low[loc])}, "
                     f"trace {_g(tr[loc])})"))


__all__ = ["check_data"]
