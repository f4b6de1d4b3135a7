"""``depthtraj validate STORE [--level attrs|structure|data] [--format text|json] [--strict]``.

Exit codes: 0 no finding at or above the threshold; 1 some error (with ``--strict``, some
warning); 2 the validator could not run (missing path, not a zarr v3 group, bad option value),
with one line ``depthtraj: error: <message>`` on stderr. With ``--format json`` only the JSON
document (``depthtraj.validate.report``) is written to stdout.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

FORMATS = ("text", "json")
OK, FAILED, COULD_NOT_RUN = 0, 1, 2


def _fail(message: str) -> int:
    sys.stderr.write(f"depthtraj: error: {' '.join(str(message).split())}\n")
    sys.stderr.flush()
    return COULD_NOT_RUN


def run_validate(
    store: str,
    *,
    level: str = "data",
    fmt: str = "text",
    strict: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> int:
    """Validate ``store``, print the report to stdout, return the exit code (0, 1 or 2).

    ``fmt`` is ``text`` (for people) or ``json`` (the documented JSON object, nothing else on
    stdout). Never raises for a store or option problem: it prints one line on stderr and
    returns 2.
    """
    from .report import render_json, render_text
    from .rules import LEVELS

    if level not in LEVELS:
        return _fail(f"--level must be one of {', '.join(LEVELS)}, got {level!r}")
    if fmt not in FORMATS:
        return _fail(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    from ..store import StoreError
    from . import validate_store

    try:
        report = validate_store(store, level=level, storage_options=storage_options)
    except StoreError as exc:
        return _fail(str(exc))
    except Exception as exc:  # noqa: BLE001 - anything else means the validator could not run
        return _fail(f"{store}: could not validate ({type(exc).__name__}: {exc})")
    if fmt == "json":
        sys.stdout.write(render_json(report) + "\n")
        sys.stdout.flush()
    else:
        render_text(report, file=sys.stdout)
    return report.exit_code(strict)


__all__ = ["run_validate"]
