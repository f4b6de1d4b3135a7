"""``depthtraj exits STORE... [--out DIR]``: which stopping rule, at which threshold.

For each store (admitted as ``depthtraj analyze`` admits it: :func:`~..core.data.open_admitted`)
and precision arm, every question pooled (tasks together: a serving loop does not know the
task), :func:`~.exits.evaluate_exits` compares the stopping rules on the same held-out
questions and calibrates each rule's serving threshold with Learn then Test on every question.
Prints the rules (work saved, disagreement, accuracy with intervals, the calibrated threshold)
as a table, the JSON document or CSV, and with ``--out DIR`` writes

* ``exits.json``: the document (schema ``depthtraj.exits/1``, ``spec/exits.md``): per store the
  setup, the rules table, the curves table, the policies and what was skipped;
* ``policy-<rule>.json``: one flat policy per rule a serving loop reads (one store and one arm;
  with several, ``policy-<rule>--<store>--<arm>.json``);
* ``exits_*.png``: the figure of all curves.

User errors (a store that cannot be read or is refused, an option out of range, an ``--out`` that
exists and is not empty without ``--overwrite``) are one line ``depthtraj: error: ...`` on
stderr and exit code 2; nothing is written. ``--out`` is written whole or not at all.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..core.bootstrap import DEFAULT_DRAWS

__all__ = ["EXITS_SCHEMA", "FORMATS", "exits_document", "exits_reads", "has_exit_gate", "policy_files", "run_exits"]

#: The version of ``exits.json`` (bump when a key changes meaning).
EXITS_SCHEMA = "depthtraj.exits/1"
FORMATS = ("table", "json", "csv")
USER_ERROR = 2
#: The cell of ``depthtraj exits``: every question of a store pooled (no coordinate is named so).
POOLED = "__all_questions__"


def _error(message: str) -> int:
    print(f"depthtraj: error: {message}", file=sys.stderr)
    return USER_ERROR


def _json_ready(x):
    from ..core.tables import Table

    if isinstance(x, Table):
        return x.to_json()
    if isinstance(x, dict):
        return {k: _json_ready(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_ready(v) for v in x]
    if isinstance(x, float) and x != x:
        return None
    return x


def exits_document(results: list[dict], options: dict) -> dict:
    """The ``exits.json`` document from the per-store results of :func:`run_exits`."""
    from ... import __version__

    return _json_ready({"schema": EXITS_SCHEMA, "depthtraj_version": __version__, "options": options,
                        "stores": results})


def policy_files(results: list[dict]) -> dict[str, dict]:
    """``{file name: policy}``: one flat policy per rule (``policy-<rule>.json``), or per rule,
    store and arm when the document holds several stores or arms."""
    from ..core.plotting import safe_name

    pols = [(r, p) for r in results for p in r["policies"]]
    many = len({(r["store"], p["precision"]) for r, p in pols}) > 1
    out = {}
    for r, p in pols:
        name = (f"policy-{p['rule']}--{safe_name(Path(r['store']).stem)}--{safe_name(p['precision'])}.json" if many
                else f"policy-{p['rule']}.json")
        flat = {"rule": p["rule"], "member": p["member"], "statistic": p["statistic"], "direction": p["direction"],
                "threshold": p["threshold"], "never_exit": p["never_exit"], "unit": p["unit"],
                "window": p["window"], "aggregation": p["aggregation"], "radius": p["radius"],
                "candidate_depths": p["candidate_depths"], "endpoint": p["endpoint"],
                "recorded_depths": p["recorded_depths"], "recipe": p["recipe"], "guarantee": p["guarantee"],
                "target_disagreement": p["target_disagreement"], "delta": p["delta"],
                "delta_per_test": p["delta_per_test"], "method": p["method"],
                "calibration_questions": p["calibration_questions"],
                "calibration_disagreement": p["calibration_disagreement"],
                "calibration_disagreement_exits": p["calibration_disagreement_exits"],
                "calibration_work": p["calibration_work"],
                "store": r["store"], "model": r["model"], "readout": r["readout"], "depth": r["depth"],
                "precision": p["precision"]}
        out[name] = _json_ready(flat)
    return out


def depth_of(ds) -> dict:
    """The store's ``depth`` attribute (format 1.2) from the attrs of the opened store: what a
    policy's depths are — a recurrence step, or a layer read through a lens (a serving loop must
    read the same lens); a store without it is a recurrence."""
    from ...models.v1 import RECURRENCE_DEPTH

    meta = ds.attrs.get("depthtraj")
    depth = meta.get("depth") if isinstance(meta, dict) else None
    return depth or RECURRENCE_DEPTH.model_dump(mode="json")


def run_exits(stores, *, out: Path | None = None, target: float = 0.025, delta: float = 0.1, window: int = 4,
              depths: str | None = None, folds: int = 4, seed: int = 0, bootstrap: int = DEFAULT_DRAWS, level: float = 0.95,
              endpoint: int | None = None, fmt: str = "table", allow_defects: bool = False,
              overwrite: bool = False, scheduler_spec: str | None = None) -> int:
    """The ``exits`` command; returns the exit code (0 done, 2 user error). ``scheduler_spec``:
    the dask scheduler of the two passes (:func:`~depthtraj.analysis.core.scheduler.scheduler`: threads by
    default, processes, synchronous or a dask.distributed address); the bytes do not depend on it."""
    from ...store import StoreError
    from ...trust import defect_line, unique_defects
    from ..core.bootstrap import check_counts
    from ..core.data import model_name, open_admitted, score_of
    from ..core.grid import Grid, format_depths
    from ..core.inputs import readout_info
    from ..core.scheduler import scheduler
    from ..core.tables import Analysis, render_rich, small_population_note, table_csv
    from . import tables as T7
    from .exits import evaluate_exits

    if fmt not in FORMATS:
        return _error(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    try:  # absurd counts and an occupied --out are refused before any store is read
        check_counts(draws=bootstrap, folds=folds)
        if out is not None:
            from ...outdir import check_free

            check_free(Path(out), overwrite=overwrite)
    except (ValueError, FileExistsError) as exc:
        return _error(str(exc))
    if not stores:
        return _error("no store given")
    results, analyses, tables = [], [], []
    try:
        opened = []
        for path in stores:
            ds, adm = open_admitted(path, allow_defects=allow_defects, reads=exits_reads(path))
            opened.append((str(path), ds, adm))
        from ...progress import stages

        with scheduler(scheduler_spec), stages("depthtraj exits") as status:
            for path, ds, adm in opened:
                status.update(f"{path}: every rule at every threshold on held-out folds (two passes)")
                if adm is not None and adm.n_incomplete:
                    print(f"depthtraj: note: {adm.exclusion_line()}", file=sys.stderr)
                for note in (adm.notes if adm is not None else []):  # e.g. a layer store's depth
                    print(f"depthtraj: note: {path}: {note}", file=sys.stderr)
                score = score_of(ds)
                gate = ds["exit_gate"] if "exit_gate" in ds.variables else None
                info = readout_info(ds)
                found = list(adm.defects) if adm is not None else []
                # admitted as analyze admits: the score defects counted in pass 1 refuse the store
                # (DT-DATA-001/002/003; -008 for text) unless --allow-defects, before pass 2
                ev = evaluate_exits(score, gate=gate, T=endpoint, depths=depths, window=window, folds=folds,
                                    seed=seed, draws=bootstrap, level=level, target=target, delta=delta, by=POOLED,
                                    check_defects=True, allow_defects=allow_defects, store=path, defects=found,
                                    kind=info["kind"])
                for line in unique_defects(found):
                    print(f"depthtraj: warning: {defect_line(path, [line], allowed=True)}", file=sys.stderr)
                model = model_name(ds)
                kw = dict(store=path, model=model, readout=info["label"], by="task")
                rules = T7.exit_rules_table(ev, **kw)
                if bootstrap > 0:
                    rules.title += small_population_note(rules, {}, by="task")
                curves = T7.exit_curves_table(ev, **kw)
                skipped = T7.skipped_rules(ev)
                for name, why in skipped.items():
                    print(f"depthtraj: skipped {name} for {path}: {why}", file=sys.stderr)
                s = ev.setup
                results.append({"store": path, "model": model, "readout": info["label"], "depth": depth_of(ds),
                                "endpoint": s.T,
                                "candidate_depths": list(s.depths), "window": s.window, "folds": s.folds,
                                "n_questions": int(round(ev.counts[:, :, 0].sum())), "precision": ev.precision,
                                "rules": rules, "curves": curves, "policies": ev.policies(), "skipped": skipped})
                tables.append(rules)
                analyses.append(Analysis(store=path, model=model, endpoint=s.T,
                                         grid=Grid(format_depths(s.depths), s.depths, s.T),
                                         n_questions=int(score.sizes["question"]),
                                         arrangements=int(score.sizes["arrangement"]), precision=ev.precision,
                                         draws=bootstrap, seed=seed, tables={"exit_rules": rules},
                                         readout=info["label"], skipped=skipped))
    except (StoreError, ValueError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return _error(msg)
    options = {"target": target, "delta": delta, "window": window, "depths": depths or "4:T-1", "folds": folds,
               "seed": seed, "bootstrap": bootstrap, "level": level, "endpoint": endpoint}
    document = exits_document(results, options)
    if out is not None:
        from ...outdir import OutputExists

        try:
            _write(Path(out), document, results, overwrite=overwrite)
        except OutputExists as exc:
            return _error(str(exc))
        except OSError as exc:
            return _error(f"cannot write {out}: {exc.strerror or exc}")
    if fmt == "json":
        sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    elif fmt == "csv":
        sys.stdout.write(table_csv(tables))
    else:
        render_rich(analyses, sys.stdout)
    sys.stdout.flush()
    return 0


def exits_reads(path) -> tuple[str, ...]:
    """The arrays besides ``score`` whose data rules admission checks for ``exits``, as
    ``analyze --sections 7`` does: a text store's components (DT-DATA-008/009: the score must be
    what its normalisation says) and the exit gate (DT-DATA-011, the Ouro rule reads it)."""
    from ...store import read_attrs

    try:
        kind = str(read_attrs(path)["readout"]["kind"])
    except Exception:  # noqa: BLE001 - admission reports malformed attrs
        return ()
    out = ("score", "logprob_sum", "logprob_first") if kind == "text" else ()
    return out + (("exit_gate",) if has_exit_gate(path) else ())


def has_exit_gate(path) -> bool:
    """Whether the store declares ``exit_gate`` (its data rules are then checked on admission)."""
    try:
        from ...store import open_root

        return "exit_gate" in open_root(path)
    except Exception:  # noqa: BLE001 - admission reports an unreadable store
        return False


def _write(out: Path, document: dict, results: list[dict], *, overwrite: bool = False) -> None:
    """Write the document, the policies and the figure into ``out`` whole or not at all (built in a
    hidden sibling and renamed in: :func:`depthtraj.outdir.atomic_directory`)."""
    from ...outdir import atomic_directory

    with atomic_directory(out, overwrite=overwrite) as directory:
        _write_files(directory, document, results)


def _write_files(directory: Path, document: dict, results: list[dict]) -> None:
    from .figures import exits_figure

    (directory / "exits.json").write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    for name, pol in policy_files(results).items():
        (directory / name).write_text(json.dumps(pol, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    # the figure reads the analysis-document shape: one analysis per store with its two tables
    fig_doc = {"bootstrap": {"level": document["options"]["level"]},
               "analyses": [{"store": r["store"], "readout": r["readout"],
                             "tables": {"exit_curves": r["curves"], "exit_rules": r["rules"]}}
                            for r in document["stores"]]}
    exits_figure(fig_doc, directory)
