"""``depthtraj report STORE... --out DIR``: the paper, regenerated.

The report is a directory::

    DIR/report.md        every table and figure of the paper the stores support, in the paper's order
    DIR/report.html      the same as a static page (inline CSS, no script; figures beside it)
    DIR/figures/*.png    the figures (one PNG per panel group; label and panels in the PNG metadata)
    DIR/tables/*.tex     each table as a booktabs float in the paper's layout (caption, label)
    DIR/tables/*.csv     each table's rows (every key, estimate and interval bound)
    DIR/analysis.json    the analysis document (as ``depthtraj analyze -f json``)

Each item names its paper label, caption, population (model, task, readout, precision, N, T,
grid) and interval method; an item the stores cannot support gets one line saying which store it
needs. Items come from the sections' registrations (:class:`~..engine.TableSpec` and
:class:`~..engine.ComparisonSpec` with a ``label``, :class:`~..engine.FigureSpec`), ordered by
:data:`PAPER_ITEMS`; the collection and checkpoint tables (``pd:tab:data``,
``pd:app:tab:checkpoints``) are built here from the stores' attributes.

The directory is written next to ``DIR`` under a temporary name and renamed into place when
complete, so a failed or interrupted run leaves nothing partial.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .glance import depth_label, store_meta
from .glossary import GLOSSARY, link_symbols
from .render import (
    HTML_FOLDED_ROWS,
    Block,
    block_of,
    html_table,
    latex_table,
    markdown_table,
    merged_table,
    table_csv_text,
)

__all__ = ["PAPER_ITEMS", "ReportItem", "build_items", "interval_method", "run_report", "summary_line", "write_report"]

#: The paper's tables and figures in the paper's order: (key, kind, title). The key is the
#: paper's label, or, for results the paper gives in its text without a label
#: (:data:`TEXT_ITEMS`), the registered table or comparison name. Items no registered section
#: computes are reported as skipped with :data:`NOT_COMPUTED`'s reason.
PAPER_ITEMS: tuple[tuple[str, str, str], ...] = (
    ("pd:fig:text-geometry", "figure", "Direction and pairing beyond translation (answer text)"),
    ("pd:app:tab:text-geometry", "table", "Winner-aware geometry under answer-text scoring"),
    ("pd:app:fig:text-cdf", "figure", "Earliest-depth distributions (answer text)"),
    ("pd:app:tab:levels", "table", "Normalised depth areas"),
    ("pd:app:tab:direction", "table", "Paired increases in depth area"),
    ("pd:app:fig:label-increments", "figure", "Direction and pairing on label trajectories"),
    ("pd:fig:ladder", "figure", "Where the geometric gains arise"),
    ("pd:tab:centers", "table", "Endpoint geometry beyond conventional centres"),
    ("pd:app:tab:permutation", "table", "Actual preservation versus the permutation reference"),
    ("pd:app:tab:text-accuracy", "table", "Endpoint accuracy"),
    ("pd:app:tab:transitions", "table", "Start-to-end answer transitions"),
    ("trajectory_examples", "figure", "Single questions: example trajectories per transition class"),
    ("pd:fig:mass", "figure", "Energy allocation within contracting updates"),
    ("pd:tab:energy", "table", "Absolute energies and relative allocation"),
    ("pd:app:tab:depth-prediction", "table", "Fixed early–late comparisons"),
    ("pd:app:tab:weighting", "table", "Pooled and equal-question contrast shares"),
    ("pd:app:tab:marginal", "table", "Common energy and its marginal reference"),
    ("pd:tab:format", "table", "Same-question prediction and geometry, label vs answer text"),
    ("pd:fig:prediction", "figure", "Prediction trajectories across depth"),
    ("pd:app:tab:text-variants", "table", "Every scoring variant on the same questions"),
    ("format_conditioned", "table", "Endpoint-conditioned comparisons"),
    ("pd:fig:precision", "figure", "Exact plateaus and numerical precision"),
    ("pd:app:tab:precision", "table", "Radius reduction under paired precision changes"),
    ("pd:app:tab:moment-prediction", "table", "Moment prediction with matched energy (§7)"),
    ("pd:app:tab:allocation", "table", "Allocation prediction after matching energy (§7)"),
    ("pd:app:prefix-prediction", "table", "Predicting endpoint agreement from a prefix (§7)"),
    ("exit_rules", "table", "Stopping rules with calibrated thresholds"),
    ("exits", "figure", "Work saved against disagreement and accuracy, every stopping rule"),
    ("pd:tab:data", "table", "Trajectory collections"),
    ("pd:app:tab:checkpoints", "table", "Pinned model configuration"),
)

#: Where the paper gives the results it has no label for (keys of :data:`PAPER_ITEMS` that are
#: registered names): the report says so instead of inventing a label.
TEXT_ITEMS = {
    "trajectory_examples": "beyond the paper: single questions of each class of pd:app:tab:transitions "
                           "(`depthtraj question STORE QID` shows any one)",
    "format_conditioned": "§6, the paragraph “Endpoint-conditioned comparisons” after pd:app:tab:text-variants",
    "exit_rules": "beyond the paper: the stopping rules of `depthtraj exits`, after §7's prefix study "
                  "(pd:app:prefix-prediction)",
    "exits": "beyond the paper: the curves of `depthtraj exits`, after §7's prefix study (pd:app:prefix-prediction)",
}

#: Said once under the stores at the top of the page; each item's population line says only what
#: it adds (a cell's N, a grid, a subset), and its intervals only where they differ.
POPULATION_NOTE = ("Every table and figure below covers every question of the stores listed above (their one "
                   "model, T and arm where they share one), unless its population line says otherwise.")

#: Registered tables the report does not print (their rows are drawn in a figure and kept in
#: ``analysis.json`` and ``analyze --out``): every threshold of every stopping rule.
FIGURE_ONLY = frozenset({"exit_curves"})

#: Why an item of the paper is not in the report although no store is missing (none at present:
#: §7's moment and allocation tables are computed from stores that carry the collection probes,
#: and skipped with that reason for the others).
NOT_COMPUTED: dict[str, str] = {}


@dataclass
class ReportItem:
    """One table or figure of the report: its paper label (or ``depthtraj:<name>`` for tables
    the paper has no counterpart of), kind, title, caption, section, the table blocks or figure
    files written, and the reasons it was skipped (one line per store, naming what is needed)."""

    label: str
    kind: str
    title: str
    caption: str = ""
    section: int | None = None
    aliases: tuple[str, ...] = ()
    #: for a result of the paper without a label: where the paper gives it (:data:`TEXT_ITEMS`)
    where: str = ""
    blocks: list[Block] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    #: the one table the page shows: every store's and grid's rows with a store key (the
    #: ``blocks`` keep one CSV/LaTeX file per store and grid, in the paper's layout)
    display: Block | None = None
    #: figures of a per-depth table (its curves over depth; the table folds under them)
    series: list[str] = field(default_factory=list)

    @property
    def written(self) -> bool:
        """Whether anything of the item was written: a table block or a figure file."""
        return bool(self.blocks or self.figures)

    @property
    def paper(self) -> bool:
        """Whether the item is one of the paper's (labelled, or given in its text)."""
        return bool(self.label or self.where)


def interval_method(document: dict) -> str:
    """The sentence on a document's intervals (its ``bootstrap``: draws, level, seed), as the
    report and the archive's index say it."""
    b = document["bootstrap"]
    if not b.get("draws"):
        return "point estimates only (no bootstrap: --bootstrap 0)"
    return (f"{b['level']:.0%} percentile intervals from {b['draws']} paired whole-question Poisson(1) bootstrap "
            f"draws (seed {b['seed']}), question multiplicities shared across quantities, arms, grids and stores")


def _stem(*parts) -> str:
    s = "_".join(str(p) for p in parts if p not in (None, ""))
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in s).strip("-_")


def _store_tables(computed, document):
    """(analysis JSON, Table) pairs per table name, over every store × grid analysis."""
    out: dict[str, list] = {}
    for an, aj in zip(computed.analyses, document["analyses"]):
        for name, t in an.tables.items():
            out.setdefault(name, []).append((aj, t))
    return out


def _skips(computed, name: str) -> list[str]:
    seen, out = set(), []
    for an in computed.analyses:
        why = an.skipped.get(name)
        if why and (an.store, why) not in seen:
            seen.add((an.store, why))
            out.append(f"{an.store} ({an.model}, {an.readout}): {why}")
    return out


def _collections_table(computed):
    """``pd:tab:data`` from the stores: per store, model, tasks with their N, T, readout,
    arrangements, arms."""
    from ..core.tables import Column, Table

    rows = []
    seen = set()
    for an, aj in zip(computed.analyses, computed.document["analyses"]):
        if an.store in seen:
            continue
        seen.add(an.store)
        tasks: dict[str, int] = {}
        for t in an.tables.values():
            if t.rows and "task" in t.rows[0] and "N" in t.rows[0]:
                for r in t.rows:
                    tasks.setdefault(str(r["task"]), int(r["N"]))
                break
        rows.append({"store": an.store, "model": an.model, "readout": an.readout,
                     "tasks": ", ".join(f"{k} ({v})" for k, v in tasks.items()) or "",
                     "N": an.n_questions, "T": an.endpoint, "arrangements": an.arrangements,
                     "precision": "/".join(an.precision),
                     "depth": depth_label(computed.store_attrs.get(str(an.store), {}))})
    cols = [Column("store", "Store", kind="str"), Column("model", "Model", kind="str"),
            Column("readout", "Scoring", kind="str"), Column("tasks", "Tasks (N)", kind="str"),
            # the rest fold into column groups on a page too narrow for the whole table
            Column("N", "N", kind="int", group="value"), Column("T", "T", kind="int", group="value"),
            Column("depth", "Depth t", kind="str", group="value"),
            Column("arrangements", "Arrangements", kind="int", group="value"),
            Column("precision", "Arms", kind="str", group="value")]
    return Table("collections", "Trajectory collections (pd:tab:data)", cols, rows)


#: what the sections that read a recurrence compute on a layer store (spec/v1/index.md §6.1)
LAYER_READINGS = {
    6: "On a layer store ({stores}) depth t is the residual stream after layer t read through the lens: the arms "
       "compare the layers and the lens computed in each precision, not a recurrence's accumulated rounding.",
    7: "On a layer store ({stores}) depth t is the residual stream after layer t read through the lens: the probes "
       "perturb the lens's input at layer t, σ is layer t+1's residual update ‖h_{{t+1}} − h_t‖, and the exits stop "
       "at a layer.",
}


def _layer_stores(computed) -> list[str]:
    return [Path(p).name for p, attrs in computed.store_attrs.items() if depth_label(attrs) != "recurrence step"]


def _checkpoints_table(computed):
    """``pd:app:tab:checkpoints`` from the stores' attributes: model, family, revision, adapter,
    T, the arms' dtypes."""
    from ..core.tables import Column, Table

    rows, seen = [], set()
    for path, attrs in computed.store_attrs.items():
        meta = store_meta(attrs)
        model = meta.get("model", {})
        key = (model.get("name"), model.get("revision"))
        if key in seen:
            continue
        seen.add(key)
        arms = meta.get("precision", [])
        layers = depth_label(attrs) != "recurrence step"
        stepped, read = ("layers", "lens") if layers else ("recurrence", "head")
        rows.append({
            "model": model.get("name", ""), "family": model.get("family", ""),
            "revision": model.get("revision", ""),
            "adapter": f"{model.get('adapter', {}).get('name', '')} {model.get('adapter', {}).get('version', '')}".strip(),
            "T": meta.get("endpoint"),
            "arms": "; ".join(f"{a.get('name')}: {stepped} {a.get('recurrence_dtype')}, {read} {a.get('head_dtype')}"
                              for a in arms if isinstance(a, dict)),
        })
    cols = [Column("model", "Model / checkpoint", kind="str"), Column("family", "Family", kind="str"),
            Column("revision", "Pinned revision", kind="str"), Column("adapter", "Adapter", kind="str"),
            Column("T", "Evaluated T", kind="int"), Column("arms", "Arithmetic arms", kind="str")]
    return Table("checkpoints", "Pinned model configuration (pd:app:tab:checkpoints)", cols, rows)


def build_items(computed, figure_dir: Path, *, relative: bool | None = False) -> list[ReportItem]:
    """Every item of the report, in the paper's order, then the registered tables the paper has
    no label for: tables become :class:`Block` objects, figures are drawn into ``figure_dir``."""
    from .. import engine
    from ..core.plotting import coverage
    from ..figures import draw_figures
    from ..sections import load

    load()
    document = computed.document
    intervals = interval_method(document)
    by_name = _store_tables(computed, document)
    # by paper label, and by name for the results the paper gives without one (TEXT_ITEMS)
    table_specs = {**{t.name: t for t in engine.tables()}, **{t.label: t for t in engine.tables() if t.label}}
    comparison_specs = {**{c.name: c for c in engine.comparisons()},
                        **{c.label: c for c in engine.comparisons() if c.label}}
    stores = _stores_line(document)
    placed: set[str] = set()
    drawn = {}
    for f in draw_figures(figure_dir, document, sections=getattr(computed, "sections", None)):
        for lab in (f.label, *f.aliases):
            if lab:
                drawn[lab] = f
        if not f.label and f.name in TEXT_ITEMS:  # a figure the paper has no label for: placed by name
            drawn[f.name] = f
    items: list[ReportItem] = []
    done_figures = set()

    def table_item(label, title, spec_name, caption, section, tables, intervals=intervals, fold=True):
        item = ReportItem(label, "table", title, caption, section)
        placed.add(spec_name)
        for aj, t in tables:
            stem = _stem(label.replace("pd:", "").replace(":", "-") if label else spec_name,
                         Path(aj["store"]).stem if aj else "", aj["readout"].replace(" ", "-") if aj else "",
                         aj["grid"] if aj else "")
            item.blocks.append(block_of(t, name=spec_name, stem=stem, analysis=aj, intervals=intervals,
                                        stores=stores, fold=fold))
        if len(item.blocks) == 1:
            item.display = item.blocks[0]
        elif item.blocks:  # several stores or grids: one table with a store (and grid) key
            merged = merged_table(spec_name, tables, title=title)
            item.display = block_of(merged, name=spec_name, stem=item.blocks[0].stem, analysis=None,
                                    intervals=intervals, stores=stores, fold=True)
        if item.display is not None and is_series(item.display.table):
            from .series import depth_series_figure

            drawn_series = depth_series_figure([t for _, t in tables], figure_dir / f"series_{item.blocks[0].stem}.png",
                                               relative=relative, level=coverage(document))
            item.series = [str(Path("figures") / Path(p).name) for p in drawn_series]
        return item

    def comparison_item(label, title, spec):
        tabs = [(None, t) for t in computed.comparisons if t.name == spec.name]
        item = table_item(label, title, spec.name, spec.caption, min(spec.sections), tabs)
        if not tabs:
            notes = [n for n in computed.skipped if n.startswith(spec.name)]
            item.skipped += notes or [spec.needs or "needs further stores of the same questions"]
        return item

    for label, kind, title in PAPER_ITEMS:
        if label == "trajectory_examples":
            items.append(_examples_item(computed, figure_dir, title))
        elif kind == "figure":
            f = drawn.get(label)
            if f is None:
                items.append(ReportItem(label, kind, title, skipped=["no section draws this figure"]))
                continue
            if f.name in done_figures:
                continue
            done_figures.add(f.name)
            item = ReportItem(f.label, kind, title, f.caption, f.section, aliases=f.aliases,
                              where=TEXT_ITEMS.get(label, "") if not f.label else "")
            item.figures = [str(Path("figures") / p.name) for p in f.files]
            if f.skipped:
                item.skipped.append(f.skipped)
            items.append(item)
        elif label in table_specs:
            spec = table_specs[label]
            tabs = by_name.get(spec.name, [])
            item = table_item(spec.label, title, spec.name, spec.caption, spec.section, tabs)
            if not tabs:
                item.skipped += _skips(computed, spec.name) or [
                    f"not computed: section {spec.section} was not requested (--sections)"]
            item.where = TEXT_ITEMS.get(label, "")
            items.append(item)
        elif label in comparison_specs:
            spec = comparison_specs[label]
            item = comparison_item(spec.label, title, spec)
            item.where = TEXT_ITEMS.get(label, "")
            items.append(item)
        elif label == "pd:tab:data":
            items.append(table_item(label, title, "collections",
                                    "The stores of this report: model, scoring (F1 label, F2 text without options, "
                                    "F3 text with options), tasks with their N, endpoint T, arrangements, arms.",
                                    None, [(None, _collections_table(computed))], intervals="", fold=False))
        elif label == "pd:app:tab:checkpoints":
            items.append(table_item(label, title, "checkpoints",
                                    "The models as recorded in the stores: checkpoint, revision, adapter, "
                                    "evaluated T and the arithmetic of every precision arm.",
                                    None, [(None, _checkpoints_table(computed))], intervals="", fold=False))
        else:
            items.append(ReportItem(label, kind, title, skipped=[NOT_COMPUTED.get(label, "not computed")]))
    # the registered tables and comparisons the paper has no counterpart of ("Additional tables")
    for spec in engine.tables():
        tabs = by_name.get(spec.name, [])
        if not spec.label and spec.name not in placed and spec.name not in FIGURE_ONLY and tabs:
            items.append(table_item("", spec.name.replace("_", " "), spec.name, spec.caption, spec.section, tabs))
    for cspec in engine.comparisons():
        if not cspec.label and cspec.name not in placed and any(t.name == cspec.name for t in computed.comparisons):
            items.append(comparison_item("", cspec.name.replace("_", " "), cspec))
    layer_stores = _layer_stores(computed)
    if layer_stores:  # what the sections written for a recurrence compute on a layer store
        for item in items:
            reading = LAYER_READINGS.get(item.section or 0)
            # §6's reading concerns its precision-arm items only (not its scale or vocabulary checks)
            if reading and item.written and (item.section != 6 or "arm" in item.caption):
                item.caption = f"{item.caption} {reading.format(stores=', '.join(layer_stores))}".strip()
    return items


def _examples_item(computed, figure_dir: Path, title: str) -> ReportItem:
    """A few single questions per start-to-end transition class, per store (first arm, first
    arrangement), drawn as small multiples: the candidates' scores across depth, the winner at
    each depth, where it flips (:func:`depthtraj.analysis.trajectory.trajectory_examples`; the
    rule that picks them is stated in the caption)."""
    from ..trajectory import draw_examples, trajectory_examples

    item = ReportItem("", "figure", title, where=TEXT_ITEMS["trajectory_examples"], section=4)
    rules, seen = [], set()
    for path, ds, _ in getattr(computed, "jobs", []):
        if path in seen:
            continue
        seen.add(path)
        try:
            ex = trajectory_examples(ds, per_class=2)
        except ValueError as exc:
            item.skipped.append(f"{Path(str(path)).name}: {exc}")
            continue
        if not any(ex.classes.values()):
            item.skipped.append(f"{Path(str(path)).name}: no question with a gold answer and a defined winner")
            continue
        png = draw_examples(ex, figure_dir / f"examples_{_stem(Path(str(path)).stem)}.png")
        item.figures.append(str(Path("figures") / png.name))
        counts = ", ".join(f"{ex.texts.get(k, k).split(':')[0]} {n}" for k, n in ex.counts.items())
        rules.append(f"{Path(str(path)).name}: {counts} questions per class.")
        if not rules[1:]:
            rules.insert(0, ex.rule)
    item.caption = " ".join(rules)
    return item


#: Key columns along which a table is a series over depth (drawn as curves, the table folded).
SERIES_KEYS = ("depth", "interval")


def is_series(table) -> bool:
    """Whether ``table`` is a per-depth series: a key column of :data:`SERIES_KEYS` with more
    than three values (gains, margin ladder, transitions, energies per interval)."""
    from ..core.tables import distinct_values

    return any(c.key in SERIES_KEYS and len(distinct_values(table.rows, c.key)) > 3 for c in table.columns)


def _stores_line(document: dict) -> dict[str, str]:
    """The stores of a document, once each: ``{"f1.zarr": "f1.zarr (synthetic, F1, N=48)", …}``."""
    seen: dict[str, str] = {}
    for an in document["analyses"]:
        seen.setdefault(an["store"], f"{an['store']} ({an['model']}, {an['readout'].split(' ')[0]}, "
                                     f"N={an['n_questions']})")
    return seen


def _write_tables(items: list[ReportItem], directory: Path) -> None:
    (directory / "tables").mkdir(parents=True, exist_ok=True)
    used: set[str] = set()
    for item in items:
        for b in item.blocks:
            stem, i = b.stem or b.name, 1
            while stem in used:
                i += 1
                stem = f"{b.stem}-{i}"
            used.add(stem)
            b.files = {"csv": f"tables/{stem}.csv", "tex": f"tables/{stem}.tex"}
            (directory / b.files["csv"]).write_text(table_csv_text(b.table), encoding="utf-8")
            label = item.label or f"depthtraj:{b.name}"
            (directory / b.files["tex"]).write_text(
                latex_table(b, label=label, caption=item.caption or b.title), encoding="utf-8")


def _tag(item: ReportItem) -> str:
    """The small tag after an item's plain-language title: its kind and the paper's label
    (``table pd:app:tab:levels``), or, for a result the paper gives without a label, where it
    stands (``figure, beyond the paper``; ``table, §6 text``); the full place is said in the item."""
    kind = "figure" if item.kind == "figure" else "table"
    if item.label:
        return " = ".join([f"{kind} {item.label}", *item.aliases])
    if item.where:
        short = "beyond the paper" if item.where.startswith("beyond the paper") else \
            f"{item.where.split(',')[0]} text"
        return f"{kind}, {short}"
    return kind


def _heading(item: ReportItem) -> str:
    """The Markdown heading: the title, then the tag with the label as code
    (``Normalised depth areas · table `pd:app:tab:levels```)."""
    if not item.label:
        return f"{item.title} · {_tag(item)}"
    kind = "figure" if item.kind == "figure" else "table"
    return f"{item.title} · " + " = ".join([f"{kind} `{item.label}`", *(f"`{a}`" for a in item.aliases)])


def _where(item: ReportItem) -> str:
    """Where the paper gives an unlabelled result, as a sentence for the item's first line."""
    return f"{item.where[0].upper()}{item.where[1:]}." if item.where else ""


def _meta_of(item: ReportItem, document: dict) -> tuple[str, str]:
    """(population, intervals) an item must say itself, as sentences without the final full stop:
    what its table's population line adds to "every question of the stores above" (the entry
    naming every store, and the one model, T, arm, readout, question count and arrangement count
    all the stores share, are left out: the stores' lines say them), and its intervals; a figure
    covers every question of every store and says nothing."""
    b = item.display
    if b is None:
        return "", (interval_method(document) if item.figures else "")
    analyses = document.get("analyses", [])
    stores = {str(an["store"]) for an in analyses}
    models = {str(an["model"]) for an in analyses}
    endpoints = {str(an["endpoint"]) for an in analyses}
    arms = {tuple(an.get("precision") or ()) for an in analyses}
    one_arm = next(iter(arms))[0] if len(arms) == 1 and len(next(iter(arms))) == 1 else None
    readouts = {str(an.get("readout")) for an in analyses}
    sizes = {f"{an.get('n_questions')} questions, {an.get('arrangements')} arrangement(s)" for an in analyses}
    own = []
    for entry in b.population.split("; "):
        if entry.startswith("stores ") and all(st in entry for st in stores):
            continue
        if len(stores) == 1 and entry == f"store {next(iter(stores))}":
            continue
        if len(readouts) == 1 and entry == f"readout {next(iter(readouts))}":
            continue
        if len(sizes) == 1 and entry == next(iter(sizes)):
            continue
        if len(models) == 1 and entry == f"model {next(iter(models))}":
            continue
        if len(endpoints) == 1 and entry == f"T={next(iter(endpoints))}":
            continue
        if one_arm is not None and entry in (f"precision {one_arm}", f"arms {one_arm}"):
            continue  # the stores' one arm, listed with them
        own.append(entry)
    return "; ".join(own), b.intervals or ""


def _common_intervals(items, document: dict) -> str:
    """The intervals most items share, said once at the top of the page; an item repeats its
    intervals only where they differ (the same paragraph stood under 30 items)."""
    from collections import Counter

    ivs = Counter(i for item in items if item.written for _, i in [_meta_of(item, document)] if i)
    return ivs.most_common(1)[0][0] if ivs else interval_method(document)


def _part(item: ReportItem) -> str:
    return "The paper's tables and figures" if item.paper else "Additional tables (no counterpart in the paper)"


def _options_text(options: dict | None) -> str:
    """The command's options as ``grids quarter, native; bootstrap 50; …`` (empty: none)."""
    if not options:
        return ""
    parts = []
    for k, v in options.items():
        if isinstance(v, (list, tuple)):
            v = ", ".join(str(x) for x in v)
        elif isinstance(v, bool):
            v = "yes" if v else "no"
        parts.append(f"{k.replace('_spec', '').replace('_', ' ')} {v}")
    return "; ".join(parts)


def _figure_caption(item: ReportItem, i: int, path: str) -> str:
    """``pd:fig:mass, panel group 2 of 4 (figures/….png)``: the panels' titles name model, readout,
    task and arm."""
    return f"{item.label or item.title}, panel group {i} of {len(item.figures)} ({path})"


#: What the glossary's paper column holds (its ``pd:`` and ``r3:`` labels are the paper's own).
GLOSSARY_NOTE = ("The paper column gives each definition's label as the paper's LaTeX source writes it, so it can "
                 "be searched there: most carry the prefix pd:, three equations of the paper carry r3: "
                 "(r3:eq:depth-components, r3:eq:permutation, r3:eq:correctness).")


def _glossary_markdown() -> list[str]:
    lines = ["## Glossary", "", GLOSSARY_NOTE, "", "| symbol | meaning | paper |", "|---|---|---|"]
    lines += [f"| {e.symbol} | {e.meaning} | {f'`{e.label}`' if e.label else ''} |" for e in GLOSSARY]
    return lines + [""]


def _files(item: ReportItem) -> list[dict]:
    """The CSV and LaTeX files of an item's blocks (one pair per store and grid), as links."""
    out = []
    for b in item.blocks:
        where = b.stem.split("_", 1)[1] if "_" in b.stem else b.stem
        many = len(item.blocks) > 1
        out += [{"href": b.files["csv"], "text": f"CSV {where}" if many else "CSV"},
                {"href": b.files["tex"], "text": f"LaTeX {where}" if many else "LaTeX"}]
    return out


def _folded_summary(block: Block) -> str:
    n = len(block.cells)
    return f"The table: {n} row{'s' if n != 1 else ''} (every value with its interval)"


def _glance(computed, figure_dir: Path, stores: dict[str, str], *, relative: bool | None = None) -> dict:
    """The first screen: the glance table (:func:`.glance.glance_table`), the accuracy-across-depth
    figure of every store and arm, the random-weight notes."""
    from .glance import RANDOM_MARK, glance_table, random_weight_models
    from .series import accuracy_across_depth

    document = computed.document
    table = glance_table(document, computed.store_attrs)
    block = block_of(table, name="glance", stem="glance", analysis=None, intervals=interval_method(document),
                     stores=stores, fold=False)  # every column, constant or not: the first screen says it all
    random = random_weight_models(computed.store_attrs)
    figures = [str(Path("figures") / Path(p).name) for p in
               accuracy_across_depth(document, figure_dir / "accuracy_across_depth.png", random=random,
                                     relative=relative)]
    models = {}
    for an in document["analyses"]:
        if random.get(an["store"]):
            models.setdefault(an["model"], Path(an["store"]).name)
    notes = []
    if models:
        named = ", ".join(f"{m} ({store})" for m, store in models.items())
        notes.append(f"{RANDOM_MARK} Random weights: {named} {'is a' if len(models) == 1 else 'are'} depthtraj tiny "
                     f"checkpoint{'' if len(models) == 1 else 's'}, for trying the tool: {'its' if len(models) == 1 else 'their'} "
                     f"numbers exercise the analyses and describe no trained model.")
    return {"block": block, "figures": figures, "notes": notes}


#: The sentence under the glance table: what its columns are (symbols link to the glossary).
GLANCE_NOTE = ("A_T: accuracy at the endpoint T (%). Best t: the shallowest depth of highest accuracy A_t, chosen on "
               "these same questions, so its accuracy is in-sample and optimistic. τ: the translation-removable share "
               "of the adjacent updates (%). Every estimate with its percentile interval.")


def _markdown(items, header: dict, document: dict, glance: dict) -> str:
    lines = [f"# {header['title']}", "", header["summary"], ""]
    lines += [f"> **Note.** {n}" for n in glance["notes"]] + ([""] if glance["notes"] else [])
    lines += ["## At a glance", "", markdown_table(glance["block"]), ""]
    lines += [f"![accuracy across depth]({f})" for f in glance["figures"]] + [""]
    lines += [GLANCE_NOTE, ""]
    lines += [f"- {s}" for s in header["stores"]] + [""]
    intervals = _common_intervals(items, document)
    lines += [f"**Population and intervals.** {POPULATION_NOTE} Intervals: {intervals}.", "",
              f"Written: {header['n_tables']} tables, {header['n_figures']} figures ({header['n_files']} PNG files); "
              f"{header['n_skipped']} items of the paper are not in this report (listed with their reasons at the "
              f"end); the glossary at the end defines the symbols.", ""]
    part = None
    for item in items:
        if not item.written:
            continue
        p = _part(item)
        if p != part:
            part = p
            lines += [f"## {p}", ""]
        lines += [f"### {_heading(item)}", ""]
        if item.where:
            lines += [f"*{_where(item)}*", ""]
        if item.caption:
            lines += [item.caption, ""]
        for reason in item.skipped:
            lines += [f"> **Not for every store**: {reason}", ""]
        for i, f in enumerate(item.figures, 1):
            lines += [f"![{item.label or item.title}]({f})", "", f"*{_figure_caption(item, i, f)}*", ""]
        for f in item.series:
            lines += [f"![{item.title} across depth]({f})", "", f"*The table below as curves over depth ({f}).*", ""]
        pop, ivs = _meta_of(item, document)
        meta = " ".join(([f"*Population*: {pop}."] if pop else [])
                        + ([f"*Intervals*: {ivs}."] if ivs and ivs != intervals else []))
        b = item.display
        if b is not None:
            lines += [f"**{b.title}**", ""]
        lines += [meta, ""] if meta else []
        if b is not None:
            lines += [markdown_table(b), "", "Files: " + ", ".join(f"[{f['text']}]({f['href']})" for f in _files(item)),
                      ""]
    missing = [item for item in items if not item.written]
    if missing:
        lines += ["## Not in this report", ""]
        lines += [f"- {_heading(item)}{f' ({item.where})' if item.where else ''}: {'; '.join(item.skipped)}"
                  for item in missing] + [""]
    lines += _glossary_markdown()
    return "\n".join(lines).rstrip() + "\n"


def _html(items, header: dict, document: dict, glance: dict) -> str:
    """The static page (jinja2 template ``templates/report.html.j2``, its CSS and the small script
    that holds table keys in place): the first screen, contents, every item, what is not in it,
    the glossary. Symbols in titles, captions and headers link to the glossary."""
    from importlib import resources

    import jinja2
    from markupsafe import Markup

    def linked(text: str) -> Markup:
        return Markup(link_symbols(text))

    def heading(item: ReportItem) -> Markup:
        # the plain-language title, then the kind and the paper's label as a small tag
        return Markup(f'{link_symbols(item.title)} <span class="label">{html.escape(_tag(item))}</span>')

    ids = {id(item): f"item{i}" for i, item in enumerate(items)}
    intervals = _common_intervals(items, document)
    parts: list[dict] = []
    for item in items:
        if not item.written:
            continue
        p = _part(item)
        if not parts or parts[-1]["title"] != p:
            parts.append({"id": f"part{len(parts)}", "title": p, "members": []})
        b = item.display
        figures = [{"src": f, "alt": f"{item.label or item.title}, panel group {j}",
                    "caption": _figure_caption(item, j, f)} for j, f in enumerate(item.figures, 1)]
        figures += [{"src": f, "alt": f"{item.title} across depth",
                     "caption": "The table below as curves over depth: every store, cell and arm, with its "
                                "percentile interval as a band."} for f in item.series]
        pop, ivs = _meta_of(item, document)
        parts[-1]["members"].append({
            "id": ids[id(item)], "heading": heading(item), "title": item.title, "tag": _tag(item),
            "where": linked(_where(item)) if item.where else "",
            "caption": linked(item.caption) if item.caption else "",
            "skipped": item.skipped, "figures": figures,
            # said at the top once; an item repeats what differs from it only
            "population": f"{pop}." if pop else "",
            "intervals": ivs if ivs and ivs != intervals else "",
            "table": Markup(html_table(b, rows=HTML_FOLDED_ROWS if item.series else 60, link=link_symbols))
            if b is not None else "",
            "folded": _folded_summary(b) if b is not None and item.series else "",
            "files": _files(item),
        })
    not_here = [{"id": ids[id(item)], "heading": heading(item), "title": item.title, "tag": _tag(item),
                 "skipped": item.skipped} for item in items if not item.written]
    contents = [{"title": "At a glance", "entries": [{"id": "glance", "text": "Accuracy across depth, A_T, the best "
                                                                            "depth and τ per store and arm"}]}]
    # the contents name each item as plain text (a symbol link inside the item's link is not allowed)
    for part in parts:
        contents.append({"title": part["title"], "entries": [
            {"id": it["id"], "text": it["title"], "note": it["tag"]} for it in part["members"]]})
    if not_here:
        contents.append({"title": "Not in this report", "entries": [
            {"id": it["id"], "text": it["title"], "note": f"{it['tag']} (what it needs: below)"} for it in not_here]})
    contents.append({"title": "Glossary", "entries": [{"id": "glossary", "text": "Every symbol with its definition"}]})
    base = resources.files(__name__) / "templates"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(base)), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    summary = Markup(html.escape(header["summary"]).replace("*Prediction", "<i>Prediction").replace("Models*", "Models</i>"))
    return env.get_template("report.html.j2").render(
        title=header["title"], summary=summary, notes=glance["notes"],
        glance_table=Markup(html_table(glance["block"], link=link_symbols, reflow=True)),
        glance_figures=[{"src": f, "alt": "accuracy across depth, every store and arm",
                         "caption": "Accuracy A_t at every recorded depth, with its percentile interval, per store, "
                                    "readout and arm, a panel per task (relative depth t/T when the stores' T "
                                    "differ)."}
                        for f in glance["figures"]],
        glance_note=linked(GLANCE_NOTE), glossary_note=GLOSSARY_NOTE, stores=header["stores"],
        population_note=POPULATION_NOTE, intervals=intervals,
        contents=contents, parts=parts, not_here=not_here, glossary=GLOSSARY,
        css=Markup((base / "report.css").read_text(encoding="utf-8")),
        js=Markup((base / "report.js").read_text(encoding="utf-8")),
    )


#: ``report --depth-axis``: depth t, relative depth t/T, or t/T when the stores' T differ.
DEPTH_AXES = {"auto": None, "t": False, "t/T": True}


def write_report(computed, out: Path, *, overwrite: bool = False, options: dict | None = None,
                 depth_axis: str = "auto") -> list[ReportItem]:
    """Write the report of ``computed`` (:func:`depthtraj.analysis.cli.compute_analysis`) to
    ``out`` (see the module doc) and return its items. ``depth_axis`` (:data:`DEPTH_AXES`): the x
    axis of the accuracy-across-depth figure and the per-depth curves.

    Raises
    ------
    FileExistsError
        (:class:`depthtraj.outdir.OutputExists`) when ``out`` exists and is not empty and
        ``overwrite`` is false: checked before writing, and again when publishing (another run
        wrote it meanwhile).
    OSError
        when the directory cannot be written (nothing is left behind: the report is built in a
        hidden sibling and renamed in whole, :func:`depthtraj.outdir.atomic_directory`).
    """
    from ...outdir import atomic_directory

    out = Path(out)
    with atomic_directory(out, overwrite=overwrite) as tmp:
        relative = DEPTH_AXES[depth_axis]
        items = build_items(computed, tmp / "figures", relative=relative)
        glance = _glance(computed, tmp / "figures", _stores_line(computed.document), relative=relative)
        _write_tables(items, tmp)
        document = computed.document
        models = sorted({an["model"] for an in document["analyses"]})
        stores = []
        seen = set()
        for an in document["analyses"]:
            key = (an["store"], an["readout"])
            if key not in seen:
                seen.add(key)
                stores.append(f"{an['store']}: {an['model']}, readout {an['readout']}, N={an['n_questions']}, "
                              f"T={an['endpoint']}, depth t = "
                              f"{depth_label(computed.store_attrs.get(str(an['store']), {}))}, "
                              f"arms {'/'.join(an['precision'])}, {an['arrangements']} arrangement(s)")
        for entry in document.get("inputs", []):  # admission notes: what a number depends on
            stores += [f"{entry['store']}: {note}" for note in entry.get("notes", [])]
        if options:
            stores.append(f"Options: {_options_text(options)}.")
        header = {
            "title": f"depthtraj report: {', '.join(models) or 'no model'}",
            "summary": (f"The tables and figures of *Prediction Dynamics in Depth-Recurrent Language Models* (Xinyue Luo "
                        f"and Fei Yu, Ant Group, preprint; each item tagged with the paper's label) that "
                        f"{'this store supports' if len(seen) == 1 else 'these stores support'}, regenerated by "
                        f"depthtraj {document.get('depthtraj_version', '')} on "
                        f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}."),
            "stores": stores,
            "n_tables": sum(1 for i in items if i.kind == "table" and i.written),
            "n_figures": sum(1 for i in items if i.kind == "figure" and i.written),
            "n_files": sum(len(i.figures) for i in items),
            "n_skipped": sum(1 for i in items if not i.written),
        }
        (tmp / "report.md").write_text(_markdown(items, header, document, glance), encoding="utf-8")
        (tmp / "report.html").write_text(_html(items, header, document, glance), encoding="utf-8")
        # one line: the file is for programs (jq, json.load); the indented encoder is pure Python and
        # took a tenth of a report's time on a 32 MB document
        (tmp / "analysis.json").write_text(json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    return items


def run_report(stores: Sequence[str], *, out: Path, overwrite: bool = False, **options) -> int:
    """The ``report`` command: compute the analyses as ``analyze`` does
    (:func:`~depthtraj.analysis.cli.compute_analysis` and its options), write the report, print
    one line; returns the exit code (0 done, 2 user error: one line on stderr, nothing written)."""
    import sys

    from ...outdir import OutputExists, check_free
    from ..cli import UsageError, compute_analysis

    out = Path(out)
    depth_axis = options.pop("depth_axis", "auto")
    if depth_axis not in DEPTH_AXES:
        print(f"depthtraj: error: --depth-axis must be one of {', '.join(DEPTH_AXES)}, got {depth_axis!r}",
              file=sys.stderr)
        return 2
    try:
        check_free(out, overwrite=overwrite)
    except OutputExists as exc:
        print(f"depthtraj: error: {exc}", file=sys.stderr)
        return 2
    from ..cli import SECTIONS

    # the report is the whole paper: §7 included unless --sections says otherwise
    sections = options.get("sections") or ",".join(map(str, SECTIONS))
    from ...progress import stages

    try:
        with stages("depthtraj report") as status:
            status.update("analysing the stores")
            computed = compute_analysis(stores, **{**options, "sections": sections})
            status.update("drawing the figures and writing the tables")
            items = write_report(computed, out, overwrite=overwrite, depth_axis=depth_axis,
                                 options={k: v for k, v in options.items() if v not in (None, [], ())})
    except (UsageError, OutputExists) as exc:
        print(f"depthtraj: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"depthtraj: error: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(summary_line(items, out))
    return 0


def summary_line(items: Sequence[ReportItem], out: Path) -> str:
    """One line: where the report is and what it holds (tables and figures written, with their
    files, and the items skipped)."""
    tables = sum(1 for i in items if i.kind == "table" and i.written)
    blocks = sum(len(i.blocks) for i in items)
    figures = sum(1 for i in items if i.kind == "figure" and i.written)
    files = sum(len(i.figures) for i in items)
    skipped = sum(1 for i in items if not i.written)
    return (f"depthtraj: report written to {out}/report.html (and report.md): {tables} tables "
            f"({blocks} LaTeX/CSV pairs), {figures} figures ({files} PNG files); {skipped} items skipped, "
            f"each with its reason")
