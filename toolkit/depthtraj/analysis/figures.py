"""The paper's figures, drawn from the analysis JSON document by the sections that register
them (:class:`~depthtraj.analysis.engine.FigureSpec`):

=================================  =============================================  ==========
paper label                        drawing                                        section
=================================  =============================================  ==========
``pd:fig:text-geometry``           ``geometry.figures.text_geometry_figure``       §3
``pd:app:fig:text-cdf``            ``geometry.figures.text_cdf_figure``            §3
``pd:app:fig:label-increments``    ``geometry.figures.label_increments_figure``    §3
``pd:fig:ladder``                  ``geometry.figures.ladder_figure``              §3
``pd:fig:prediction``              ``dynamics.figures.prediction_figure``          §4
``pd:fig:mass``                    ``composition.figures.energy_figure``           §5
``pd:fig:precision``               ``sensitivity.figures.precision_figure``        §6
=================================  =============================================  ==========

(``pd:app:fig:arc-cdf``, ``pd:app:fig:ouro-energy`` and ``pd:app:fig:arc-precision`` are the same
drawings for other models and tasks.) :func:`write_figures` draws every registered figure the
document supports; ``depthtraj analyze --out`` and ``depthtraj report`` call it.

The drawings of earlier versions (``energy_shares_figure``, ``precision_figure``,
``gains_figure``: rows and one path) remain as deprecated wrappers (``DeprecationWarning``) of
the section drawings; they return the list of files written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["DrawnFigure", "draw_figures", "write_figures"]


@dataclass(frozen=True)
class DrawnFigure:
    """One registered figure after drawing: its spec's name, label, aliases, caption, section,
    and the files written (empty when skipped, with ``skipped`` the reason)."""

    name: str
    label: str
    aliases: tuple[str, ...]
    caption: str
    section: int
    files: tuple[Path, ...]
    skipped: str = ""


def draw_figures(directory: Path, document: dict, *, sections: frozenset[int] | None = None) -> list[DrawnFigure]:
    """Draw every registered figure (of ``sections``, default all) the document supports into
    ``directory``; the others come back with the one-line reason naming the store they need (or
    the section that was not requested)."""
    from .engine import figures
    from .sections import load

    load()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for spec in figures():
        if sections is not None and spec.section not in sections:
            out.append(DrawnFigure(spec.name, spec.label, spec.aliases, spec.caption, spec.section, (),
                                   f"not drawn: section {spec.section} was not requested (--sections)"))
            continue
        got = spec.draw(document, directory)
        files, why = (tuple(Path(p) for p in got), "") if not isinstance(got, str) else ((), got)
        out.append(DrawnFigure(spec.name, spec.label, spec.aliases, spec.caption, spec.section, files, why))
    return out


def write_figures(directory: Path, document: dict) -> list[Path]:
    """Every figure the analysis document supports, as PNG files under ``directory``."""
    return [p for f in draw_figures(directory, document) for p in f.files]


# ----------------------------------------------------------------------------------------------
# the drawings of depthtraj ≤ 0.x's figures.py, kept as deprecated wrappers (spec/CHANGELOG.md)
# ----------------------------------------------------------------------------------------------
def _deprecated(old: str, new: str) -> None:
    import warnings

    warnings.warn(f"depthtraj.analysis.figures.{old} is deprecated and will be removed in depthtraj 1.0: "
                  f"the figures are registered by the sections ({new}); use write_figures(directory, document) "
                  "or draw_figures", DeprecationWarning, stacklevel=3)


def _document(tables: dict[str, list[dict]]) -> dict:
    """A minimal analysis document holding the given table rows, one analysis per store ×
    readout × grid of the rows (the shape the section drawings read)."""
    analyses: dict[tuple, dict] = {}
    for name, rows in tables.items():
        for r in rows:
            key = (str(r.get("store", "")), str(r.get("readout", "F1")), str(r.get("grid", "native")))
            an = analyses.setdefault(key, {"store": key[0], "readout": key[1], "grid": key[2], "tables": {}})
            an["tables"].setdefault(name, {"rows": []})["rows"].append(r)
    return {"analyses": list(analyses.values()), "comparisons": []}


def _drawn(got, path: Path) -> list[Path]:
    if isinstance(got, str):
        raise ValueError(f"cannot draw {Path(path).name}: {got}")
    return got


def energy_shares_figure(rows, path: Path, *, cell: str = "task") -> list[Path]:
    """Deprecated: :func:`depthtraj.analysis.composition.figures.energy_figure` (``pd:fig:mass``)
    on the ``energy_shares`` rows; writes one PNG per store × cell × arm into ``path``'s folder
    and returns their paths (no longer one file at ``path``). ``cell`` is ignored (the rows'
    cell column is used)."""
    from .composition.figures import energy_figure

    _deprecated("energy_shares_figure", "composition.figures.energy_figure")
    return _drawn(energy_figure(_document({"energy_shares": list(rows)}), Path(path).parent), path)


def precision_figure(rho_rows, tau_rows, path: Path, *, cell: str = "task") -> list[Path]:
    """Deprecated: :func:`depthtraj.analysis.sensitivity.figures.precision_figure`
    (``pd:fig:precision``) on the ``rho`` rows and the ``precision`` rows (``tau_rows``: the
    paired change ``tau_minus_first`` is read from them); writes one PNG per task × readout into
    ``path``'s folder and returns their paths. ``cell`` is ignored."""
    from .sensitivity.figures import precision_figure as draw

    _deprecated("precision_figure", "sensitivity.figures.precision_figure")
    return _drawn(draw(_document({"rho": list(rho_rows), "precision": list(tau_rows)}), Path(path).parent), path)


def gains_figure(rows, path: Path, *, cell: str = "task") -> list[Path]:
    """Deprecated: :func:`depthtraj.analysis.geometry.figures.ladder_figure` (``pd:fig:ladder``)
    on label-store ``gains`` rows; writes one PNG per store into ``path``'s folder and returns
    their paths. ``cell`` is ignored."""
    from .geometry.figures import ladder_figure

    _deprecated("gains_figure", "geometry.figures.ladder_figure")
    return _drawn(ladder_figure(_document({"gains": list(rows)}), Path(path).parent), path)
