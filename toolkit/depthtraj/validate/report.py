"""Findings, the validation report, and its two renderers (text for people, JSON for machines).

A :class:`Finding` is one rule broken at one place. Its ``path`` names where:

* ``attrs.depthtraj.<field>[.<field>|[i]]`` for the root attributes;
* an array name (``score``), or ``<array>.<property>`` (``score.dimension_names``,
  ``score.chunks``, ``score.data_type``) for structure;
* ``<array>[q=<i>, <dim>=<value>, ...]`` for one cell of the data, where ``q`` is the
  0-based question *index* (the question id is in the message) and every other dim is given by
  its coordinate value (``depth=8``, ``precision='bf16'``).

The JSON document (:func:`render_json`, ``depthtraj validate --format json``) is::

    {
      "store": "<path or URL as given>",
      "format_version": "<attrs.depthtraj.format_version as stored, or null>",
      "level": "attrs" | "structure" | "data",
      "findings": [
        {"rule": "DT-...", "severity": "error" | "warning",
         "path": "...", "message": "...", "hint": "...",
         "url": "<the rule on the documentation site's rules page>"},
        ...
      ],
      "notes": ["what could not be checked on this store", ...],
      "summary": {"errors": <int>, "warnings": <int>}
    }

Findings are ordered by rule (registry order), then in the order they were found.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import IO, Any

import numpy as np

from .rules import RULE_ORDER, RULES, Severity, rule_url

#: Data rules report at most this many failing cells per (rule, variable), then one total.
CELL_LIMIT = 10


def printable(text: Any) -> str:
    """``text`` as a string any UTF-8 stream can print: lone surrogates (a JSON escape such as
    ``"\\ud800"`` in attrs, an undecodable byte in a path) become their ``\\udXXX`` escape."""
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass(frozen=True)
class Finding:
    """One broken rule at one place: ``rule`` id, ``severity``, ``path``, ``message``, ``hint``."""

    rule: str
    severity: Severity
    path: str
    message: str
    hint: str = ""

    def to_dict(self) -> dict[str, str]:
        """The finding as the JSON document writes it, with ``url``: the rule's anchor on the
        documentation site (:func:`~depthtraj.validate.rules.rule_url`)."""
        return {**asdict(self), "url": rule_url(self.rule)}


@dataclass
class Report:
    """The findings of one validation run of one store, at one level.

    ``format_version`` is the store's declared ``attrs.depthtraj.format_version`` (``None`` when
    absent or not a string).
    """

    store: str
    format_version: str | None
    level: str
    findings: list[Finding] = field(default_factory=list)
    #: How many places break each rule, including those past the listing limit
    #: (:data:`CELL_LIMIT` findings per rule and variable are listed).
    counts: dict[str, int] = field(default_factory=dict)
    #: What the validator could not check on this store, one line each (e.g. a store that
    #: cannot list its keys).
    notes: list[str] = field(default_factory=list)

    @property
    def errors(self) -> int:
        """Number of findings at severity ``error``."""
        return sum(f.severity == "error" for f in self.findings)

    @property
    def warnings(self) -> int:
        """Number of findings at severity ``warning``."""
        return sum(f.severity == "warning" for f in self.findings)

    @property
    def rule_ids(self) -> list[str]:
        """The distinct rule ids found, in registry order."""
        return sorted({f.rule for f in self.findings}, key=lambda r: RULE_ORDER.get(r, 1 << 30))

    def failed(self, strict: bool = False) -> bool:
        """True when any finding is an error, or (``strict``) a warning."""
        return bool(self.errors or (strict and self.warnings))

    def exit_code(self, strict: bool = False) -> int:
        """The CLI exit code: 0 clean, 1 when :meth:`failed`."""
        return 1 if self.failed(strict) else 0

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON object (see the module docstring)."""
        return {
            "store": printable(self.store),
            "format_version": None if self.format_version is None else printable(self.format_version),
            "level": self.level,
            "findings": [f.to_dict() for f in self.findings],
            "notes": [printable(n) for n in self.notes],
            "summary": {"errors": self.errors, "warnings": self.warnings},
        }


def render_json(report: Report, *, indent: int | None = 2) -> str:
    """The report as the documented JSON document (one object, no trailing newline)."""
    return json.dumps(report.to_dict(), indent=indent, ensure_ascii=False)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def render_text(report: Report, *, file: IO[str] | None = None, color: bool | None = None) -> None:
    """Print the report for people (rich; colours only on a terminal unless ``color``).

    One block per finding: severity, rule id, path; then the message and the hint; then a
    summary line.
    """
    import sys

    from rich.console import Console
    from rich.text import Text

    out = file if file is not None else sys.stdout
    console = Console(
        file=out, highlight=False, soft_wrap=True, force_terminal=color, no_color=color is False,
        emoji=False,
    )
    version = printable(report.format_version) if report.format_version is not None else "unknown"
    version = version if version.isprintable() else repr(version)  # "1.2.0\n" shown as such
    console.print(Text.assemble(
        ("depthtraj validate ", "bold"), (printable(report.store), "bold"),
        f"  (format {version}, level {report.level})",
    ))
    for f in report.findings:
        style = "bold red" if f.severity == "error" else "bold yellow"
        console.print(Text.assemble((f"{f.severity:<7}", style), " ", (f.rule, "bold"), "  ", f.path))
        console.print(Text("        " + f.message))
        if f.hint:
            console.print(Text("        hint: " + f.hint, style="dim"))
        console.print(Text(f"        rule: {rule_url(f.rule)} (offline: depthtraj rules {f.rule})", style="dim"))
    for n in report.notes:
        console.print(Text("note: " + printable(n), style="dim"))
    if not report.findings:
        console.print(Text("ok: no findings", style="green"))
    else:
        console.print(Text(f"{_plural(report.errors, 'error')}, {_plural(report.warnings, 'warning')}"))


def shown(value, *, bare: bool = False, limit: int = 80) -> str:
    """``repr(value)`` (or ``str`` with ``bare``) cut to ``limit`` characters, never converting
    a huge int to text."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"<an integer of {value.bit_length()} bits>"
    text = str(value) if bare else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- collecting findings --------------------------------------------------------------------


class Collector:
    """Collects findings lazily (every check runs; nothing stops at the first failure).

    Cell-level findings go through :meth:`cells`, which keeps the first :data:`CELL_LIMIT`
    locations per (rule, variable) and, at :meth:`findings`, adds one finding with the total
    count when there were more.
    """

    def __init__(self, limit: int = CELL_LIMIT):
        self.limit = limit
        self._items: list[tuple[int, int, int, Finding]] = []  # (rule order, group, seq, finding)
        self._groups: dict[tuple[str, str], int] = {}
        self._totals: dict[tuple[str, str], int] = {}
        self._what: dict[tuple[str, str], str] = {}
        self._seq = 0
        self.counts: dict[str, int] = {}

    def _group(self, key: tuple[str, str]) -> int:
        if key not in self._groups:
            self._groups[key] = len(self._groups)
        return self._groups[key]

    def add(
        self,
        rule: str,
        path: str,
        message: str,
        *,
        hint: str | None = None,
        severity: Severity | None = None,
        group: str = "",
    ) -> None:
        """Record one finding (severity and hint default to the rule's)."""
        r = RULES[rule]
        path, message = printable(path), printable(message)
        hint = None if hint is None else printable(hint)
        if not group:  # cell findings are counted by `limited`
            self.counts[rule] = self.counts.get(rule, 0) + 1
        f = Finding(rule, severity or r.severity, path, message, r.hint if hint is None else hint)
        self._items.append((RULE_ORDER[rule], self._group((rule, group)), self._seq, f))
        self._seq += 1

    def limited(self, rule: str, key: str, count: int, what: str) -> int:
        """Account ``count`` failures of (rule, key); return how many may still be shown."""
        k = (rule, key)
        self.counts[rule] = self.counts.get(rule, 0) + count
        before = self._totals.get(k, 0)
        self._totals[k] = before + count
        self._what.setdefault(k, what)
        self._group(k)
        return max(0, min(count, self.limit - before))

    def cells(
        self,
        rule: str,
        var: str,
        mask: np.ndarray,
        path: Callable[[tuple[int, ...]], str],
        message: Callable[[tuple[int, ...]], str],
        *,
        what: str | None = None,
    ) -> None:
        """Record the failing cells ``mask`` (True = fails) of ``var`` for ``rule``.

        ``path`` and ``message`` map a cell index (a tuple into ``mask``) to the finding's path
        and message; they are called for at most :data:`CELL_LIMIT` cells per (rule, var).
        """
        count = int(np.count_nonzero(mask))
        if not count:
            return
        show = self.limited(rule, var, count, what or f"cells of {var}")
        if show:
            flat = np.flatnonzero(mask.reshape(-1))[:show]
            for loc in zip(*np.unravel_index(flat, mask.shape)):
                idx = tuple(int(i) for i in loc)
                self.add(rule, path(idx), message(idx), group=var)

    def findings(self) -> list[Finding]:
        """Every finding, ordered by rule, then (rule, variable) group, then as found."""
        items = list(self._items)
        for (rule, key), total in self._totals.items():
            if total > self.limit:
                f = Finding(
                    rule, RULES[rule].severity, key,
                    f"{total} {self._what[(rule, key)]} break {rule} in total; "
                    f"the first {self.limit} are listed",
                    RULES[rule].hint,
                )
                items.append((RULE_ORDER[rule], self._groups[(rule, key)], 1 << 62, f))
        items.sort(key=lambda t: (t[0], t[1], t[2]))
        return [t[3] for t in items]


def format_ids(ids: Sequence[str], total: int | None = None, limit: int = CELL_LIMIT) -> str:
    """``'a', 'b', 'c'`` (and ``... N more``) for messages."""
    text = ", ".join(repr(str(i)) for i in list(ids)[:limit])
    total = len(ids) if total is None else total
    if total > limit:
        text += f", ... ({total - limit} more)"
    return text


__all__ = ["CELL_LIMIT", "Collector", "Finding", "Report", "printable", "render_json", "shown", "render_text"]
