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
