"""The report's glossary: every symbol a table or summary shows, its definition and the paper's
label, and the links from a symbol where it is read to its definition.

:data:`GLOSSARY` is the one list: the report's glossary section, the symbol links of the HTML
report (:func:`link_symbols`), and ``depthtraj glossary`` in the terminal read it.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

__all__ = ["GLOSSARY", "Entry", "glossary_lines", "link_symbols", "lookup"]


@dataclass(frozen=True)
class Entry:
    """One glossary entry: its anchor ``id`` (``g-<id>`` in the HTML report), the ``symbol`` as the
    tables write it, its ``meaning``, the paper's ``label`` and the ``tokens`` of table headers and
    titles that link to it (exact symbols, matched as whole tokens)."""

    id: str
    symbol: str
    meaning: str
    label: str
    tokens: tuple[str, ...] = ()

    @property
    def anchor(self) -> str:
        """The entry's anchor in the HTML report: ``g-<id>``."""
        return f"g-{self.id}"


#: The report's glossary, in the order a reader meets the symbols.
GLOSSARY: tuple[Entry, ...] = (
    Entry("scores", "s_t, y_t, T", "the K candidates' scores at depth t (nats); y_t their winner (lowest identity among "
          "ties); T the endpoint depth", "pd:eq:f1, pd:eq:f2", ("y_t", "y_T")),
    Entry("delta", "δ, d", "δ = s_T − s_t, the update to the endpoint; d = s_t − s_{t−1}, an adjacent increment", "",
          ("δ",)),
    Entry("radius", "B_raw, B_q = osc(δ)", "the raw radius 2‖δ‖∞ and the quotient radius max δ − min δ: the largest "
          "change of any comparison; B_q ≤ B_raw", "pd:eq:comparison", ("B_raw", "B_q", "osc")),
    Entry("margin", "m, h, R", "the margin of the winner at t (smallest gap), the largest competitor-relative update, "
          "and the endpoint reserve min_b (s_T,a − s_T,b)", "pd:eq:gap-update, pd:eq:reserve"),
    Entry("slack", "A_tr, A_dir, A_pair", "the slack R − (m − B_raw) split into translation, direction and "
          "competitor pairing", "pd:eq:slack", ("A_tr", "A_dir", "A_pair")),
    Entry("D", "D_j, F_j", "D_j: the earliest depth at which test j ∈ {raw, q, dir, res} of the margin ladder passes "
          "(T if none); D_raw ≥ D_q ≥ D_dir ≥ D_res. F_j(d) = Pr(D_j ≤ d), its distribution over questions",
          "pd:eq:ladder, pd:cor:depth",
          ("D_j", "D_raw", "D_q", "D_dir", "D_res", "F_j", "F_raw", "F_q", "F_dir", "F_res", "F_mean", "F_LSE", "F_env")),
    Entry("W", "W_j", "the normalised depth area 1 − E[D_j]/T: the share of depth the test j certifies early (%)",
          "pd:eq:depth-area", ("W_j", "W_raw", "W_q", "W_dir", "W_res", "W_mean", "W_LSE", "W_env")),
    Entry("Delta", "Δ_tr, Δ_dir, Δ_pair", "W_q − W_raw, W_dir − W_q, W_res − W_dir: the depth area each relaxation "
          "adds (pp)", "r3:eq:depth-components", ("Δ_tr", "Δ_dir", "Δ_pair")),
    Entry("tau", "τ, ρ", "τ: the removable share of the adjacent raw radii, 1 − Σq/Σr; ρ = q/r per increment (ρ = 0: "
          "a pure common shift)", "pd:eq:tau", ("τ", "ρ")),
    Entry("A", "A_t, ε", "A_t: accuracy at depth t (A_T at the endpoint); ε_f: the share of intermediate answers on "
          "the grid that differ from their own endpoint (format f)", "r3:eq:correctness, pd:eq:format-summaries",
          ("A_t", "A_T", "ε", "ε_f")),
    Entry("transitions", "N_W→C, N_C→W, N_W→W′", "corrections, degradations and switches between wrong answers from "
          "t to T", "r3:eq:correctness", ("W→C", "C→W", "W→W′", "C→C", "W=W")),
    Entry("energy", "Q, C, E, M, κ", "contrast energy ‖P⊥δ‖², common energy K c² (c the mean of δ), E = Q + C; M the "
          "candidate set's probability mass and κ its concentration (label readouts)",
          "pd:eq:mass, pd:eq:c, pd:eq:energies", ("κ", "E_M", "E_κ")),
    Entry("xi", "Ξ", "the common-energy share of the adjacent increments, Σ C / Σ E (%)", "pd:app:eq:xi", ("Ξ",)),
    Entry("N2", "N1, N2, α_j", "§7's predictions of an increment's moments: independent logit innovations (N1), the "
          "output head's linear (σ² J Jᵀ) or nonlinear response to hidden innovations (N2); α_j the training-energy "
          "factor", "pd:app:readout-prediction, pd:app:eq:energy-match", ("N1", "N2", "α_j")),
)

_BY_TOKEN = {tok: e for e in GLOSSARY for tok in e.tokens}
# longest first, so W_raw wins over W_r…; a token is whole: no word character on either side
_TOKENS = re.compile(r"(?<![\w′])(" + "|".join(re.escape(t) for t in sorted(_BY_TOKEN, key=len, reverse=True))
                     + r")(?![\w′])")
_CODE = re.compile(r"`([^`]+)`")


def link_symbols(text: str) -> str:
    """``text`` as escaped HTML in which every glossary symbol (:data:`GLOSSARY`'s tokens, e.g.
    ``W_q``, ``τ``, ``A_t``) links to its definition (``<a class="sym" href="#g-W">``) and
    `` `code` `` spans are ``<code>``."""
    out: list[str] = []
    for k, part in enumerate(_CODE.split(str(text))):
        if k % 2:
            out.append(f"<code>{html.escape(part)}</code>")
            continue
        pos = 0
        for m in _TOKENS.finditer(part):
            out.append(html.escape(part[pos:m.start()]))
            e = _BY_TOKEN[m.group(1)]
            out.append(f'<a class="sym" href="#{e.anchor}" title="{html.escape(e.meaning)}">'
                       f"{html.escape(m.group(1))}</a>")
            pos = m.end()
        out.append(html.escape(part[pos:]))
    return "".join(out)


def lookup(symbol: str) -> list[Entry]:
    """The entries whose symbol or tokens name ``symbol`` (``W_q``, ``tau``/``τ``, ``xi``; case
    insensitive for the spelled-out Greek names), or whose anchor id is ``symbol``."""
    names = {"tau": "τ", "rho": "ρ", "xi": "Ξ", "kappa": "κ", "epsilon": "ε", "delta": "δ"}
    s = names.get(symbol.lower(), symbol)
    return [e for e in GLOSSARY if s in e.tokens or s == e.id or s in [p.strip() for p in re.split(r"[,=]", e.symbol)]]


def glossary_lines(entries=GLOSSARY) -> list[str]:
    """The glossary as plain text lines for the terminal (``depthtraj glossary``)."""
    out = []
    for e in entries:
        out.append(f"{e.symbol}: {e.meaning}" + (f" ({e.label})" if e.label else ""))
    return out
