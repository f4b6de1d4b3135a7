"""What every check reads: the opened store, its arrays' metadata and the attrs read leniently.

The checks of one level record in :attr:`Context.ok` which layout arrays are sound enough for
the next level to read their values (right dims, sizes and dtype kind), so a broken array gives
one structure finding instead of a cascade of data findings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import layout as L
from ..models.v1 import ATTRS_KEY

FLOAT_TYPES = frozenset({"float32", "float64"})
INT_TYPES = frozenset({f"{s}int{b}" for s in ("", "u") for b in (8, 16, 32, 64)})
BOOL_TYPES = frozenset({"bool"})
STRING_TYPES = frozenset({"string"})
TYPES_BY_KIND = {"float": FLOAT_TYPES, "int": INT_TYPES, "bool": BOOL_TYPES, "str": STRING_TYPES}

# \Z, not $: Python's $ also matches before a trailing newline ("1.2.0\n" is not a version)
SEMVER = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\Z")

_MISSING = object()


@dataclass
class ArrayInfo:
    """Metadata of one array of the store (no values read)."""

    name: str
    array: Any  # zarr.Array
    shape: tuple[int, ...]
    dims: tuple[str, ...] | None
    data_type: str  # zarr v3 data type name ('float32', 'string', 'fixed_length_utf32', ...)
    chunks: tuple[int, ...]  # the chunk grid (the shard shape when sharded)

    @classmethod
    def of(cls, name: str, array) -> ArrayInfo:
        """The metadata of the zarr array ``array`` stored under ``name``: its shape, dimension
        names (None when the metadata has none; ``''`` for an unnamed dim), data type name and chunk
        grid (the shard shape when sharded)."""
        meta = array.metadata
        dt = meta.to_dict().get("data_type")
        dt_name = dt.get("name", str(dt)) if isinstance(dt, Mapping) else str(dt)
        dims = getattr(meta, "dimension_names", None)
        grid = getattr(meta, "chunk_grid", None)
        chunks = tuple(getattr(grid, "chunk_shape", None) or array.chunks)
        return cls(
            name=name,
            array=array,
            shape=tuple(int(s) for s in array.shape),
            dims=tuple(str(d) if d is not None else "" for d in dims) if dims is not None else None,
            data_type=dt_name,
            chunks=tuple(int(c) for c in chunks),
        )


@dataclass
class Context:
    """The store under validation and what the checks so far learned about it."""

    store: str
    group: Any  # zarr.Group opened without consolidated metadata (the truth)
    consolidated: Any  # the same group opened as readers do (consolidated metadata if present)
    root_attrs: Mapping[str, Any]
    arrays: dict[str, ArrayInfo] = field(default_factory=dict)
    subgroups: list[str] = field(default_factory=list)
    ok: set[str] = field(default_factory=set)
    sizes: dict[str, int] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)  # name -> why its metadata cannot be read
    _values: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    # -- the attrs, read leniently (None where absent or of the wrong type) ---------------------
    @property
    def raw(self) -> Any:
        """The ``attrs['depthtraj']`` object as stored, of whatever type (a private sentinel when
        the key is absent)."""
        return self.root_attrs.get(ATTRS_KEY, _MISSING)

    @property
    def attrs(self) -> dict[str, Any]:
        """:attr:`raw` when it is a dict, else ``{}``."""
        raw = self.raw
        return raw if isinstance(raw, dict) else {}

    @property
    def format_version(self) -> str | None:
        """The attrs' ``format_version`` when it is a string, else None."""
        v = self.attrs.get("format_version")
        return v if isinstance(v, str) else None

    @property
    def readout(self) -> dict[str, Any]:
        """The attrs' ``readout`` object when it is a dict, else ``{}``."""
        r = self.attrs.get("readout")
        return r if isinstance(r, dict) else {}

    @property
    def kind(self) -> str | None:
        """The readout's ``kind`` when it is ``'label'`` or ``'text'``, else None."""
        k = self.readout.get("kind")
        return k if k in ("label", "text") else None

    @property
    def normalization(self) -> str | None:
        """The readout's ``normalization`` when it is ``'sum'``, ``'token'`` or ``'char'``, else
        None."""
        n = self.readout.get("normalization")
        return n if n in ("sum", "token", "char") else None

    @property
    def endpoint(self) -> int | None:
        """The attrs' ``endpoint`` depth when it is an integer (an integral float such as ``16.0``
        counts, a bool does not), else None."""
        e = self.attrs.get("endpoint")
        if isinstance(e, float) and e.is_integer():  # JSON Schema's integer: 16.0 is 16
            e = int(e)
        return e if isinstance(e, int) and not isinstance(e, bool) else None

    @property
    def precision_names(self) -> list[str] | None:
        """The ``name`` of each arm of the attrs' ``precision`` list, in order, when it is a list of
        objects with string names, else None."""
        p = self.attrs.get("precision")
        if not isinstance(p, list) or not all(isinstance(a, dict) and isinstance(a.get("name"), str) for a in p):
            return None
        return [a["name"] for a in p]

    @property
    def probes(self) -> dict[str, Any] | None:
        """``attrs.probes`` when present (a dict; its fields are checked by DT-ATTR-003)."""
        v = self.attrs.get("probes")
        return v if isinstance(v, dict) else None

    @property
    def probe_anchors(self) -> list[int] | None:
        """``attrs.probes.anchors`` when they are a list of integers."""
        a = (self.probes or {}).get("anchors")
        if isinstance(a, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in a):
            return a
        return None

    @property
    def task_names(self) -> list[str] | None:
        """The ``name`` of each entry of the attrs' ``tasks`` list, in order, when it is a list of
        objects with string names, else None."""
        t = self.attrs.get("tasks")
        if not isinstance(t, list) or not all(isinstance(a, dict) and isinstance(a.get("name"), str) for a in t):
            return None
        return [a["name"] for a in t]

    # -- arrays ---------------------------------------------------------------------------------
    def spec(self, name: str) -> L.ArraySpec | None:
        """The layout's spec (:class:`~depthtraj.layout.ArraySpec`) of the coordinate or variable
        ``name``, or None for an array the layout does not define."""
        return L.COORDS.get(name) or L.VARIABLES.get(name)

    @property
    def n_questions(self) -> int | None:
        """The size of the ``question`` dim as the checks so far learned it from the arrays (None
        until known)."""
        return self.sizes.get(L.QUESTION)

    def values(self, name: str) -> np.ndarray:
        """All values of a (small, 1-D) array (read once, then cached).

        Raises whatever zarr raises when a chunk cannot be decoded: the structure level reads
        each coordinate once first and reports that (``DT-STRUCT-012``)."""
        if name not in self._values:
            self._values[name] = np.asarray(self.arrays[name].array[...])
        return self._values[name]

    def labeller(self, dim: str):
        """A function index -> display value of ``dim`` for finding paths."""
        if dim in self.ok and dim in self.arrays and len(self.arrays[dim].shape) == 1:
            vals = self.values(dim)
            if vals.dtype.kind in "iub":
                return lambda i: str(int(vals[i]))
            return lambda i: repr(str(vals[i]))
        return str

    def question_chunk(self) -> int:
        """The question chunk size the data level iterates by (that of ``score`` if usable)."""
        for name in ("score", "complete", "n_candidates"):
            info = self.arrays.get(name)
            if info is not None and info.dims and info.dims[0] == L.QUESTION:
                return max(1, info.chunks[0])
        for info in self.arrays.values():
            if info.dims and L.QUESTION in info.dims:
                return max(1, info.chunks[info.dims.index(L.QUESTION)])
        return 1024


__all__ = ["ArrayInfo", "Context"]
