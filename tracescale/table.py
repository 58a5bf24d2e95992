"""A columnar table of numpy arrays: what the analyze path hands between stages instead of pandas.

Why not pandas: importing it costs about 0.4 s of a 2-3 s cold ``analyze``, and the analyze
path only ever needs named columns of equal length, row masks and a few group sums
(:mod:`tracescale.groups`). A :class:`Table` is that and no more; :meth:`Table.to_pandas`
builds the frame (importing pandas then) when a caller asks for one.

Result dataclasses that document a field as a pandas frame declare it with
:class:`FrameField`: the object stores the :class:`Table` and reading the attribute gives the
frame, built once on request; the analyze path reads the table itself (:func:`table_of`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


class Column(np.ndarray):  # type: ignore[type-arg]
    """A table's column: a numpy array that also answers ``to_numpy()``, as a Series would."""

    def to_numpy(self, dtype: Any = None) -> np.ndarray[Any, Any]:
        """The plain array (copied only when ``dtype`` asks for a conversion)."""
        plain = self.view(np.ndarray)
        return plain if dtype is None else plain.astype(dtype)


def _array(values: Any, rows: int | None) -> np.ndarray[Any, Any]:
    """A 1-d array of ``values``; a scalar is repeated over ``rows`` (as a frame would)."""
    if isinstance(values, np.ndarray):
        arr = values.view(np.ndarray)
    elif isinstance(values, (list, tuple, range)) or hasattr(values, "to_numpy"):
        arr = np.asarray(values.to_numpy() if hasattr(values, "to_numpy") else values)
        if arr.dtype.kind == "U":  # strings as Python objects, as a frame holds them
            arr = arr.astype(object)
    else:
        if rows is None:
            raise ValueError("a scalar column needs a row count")
        kind = object if isinstance(values, str) else None
        return np.full(rows, values, dtype=kind)
    if arr.ndim != 1:
        raise ValueError(f"a column must be 1-d, got shape {arr.shape}")
    return arr


class Table:
    """Named 1-d numpy columns of one length, in order; ``attrs`` as a frame's."""

    __slots__ = ("_cols", "_frame", "_rows", "attrs")

    def __init__(
        self,
        data: Mapping[str, Any] | None = None,
        columns: Iterable[str] | None = None,
        attrs: Mapping[str, Any] | None = None,
    ) -> None:
        self._cols: dict[str, np.ndarray[Any, Any]] = {}
        self._rows: int | None = None
        self.attrs: dict[str, Any] = dict(attrs or {})
        self._frame: Any = None
        data = data or {}
        rows = None
        for v in data.values():  # a scalar takes the length of the array columns
            if isinstance(v, (np.ndarray, list, tuple, range)) or hasattr(v, "to_numpy"):
                rows = len(v)
                break
        for name in columns if columns is not None else data:
            self._put(name, data[name] if name in data else np.zeros(rows or 0, object), rows)
        if self._rows is None:
            self._rows = 0

    def _put(self, name: str, values: Any, rows: int | None) -> None:
        arr = _array(values, rows if rows is not None else self._rows)
        if self._rows is not None and self._cols and len(arr) != self._rows:
            raise ValueError(f"column {name!r}: {len(arr)} rows, the table has {self._rows}")
        self._cols[name] = arr
        self._rows = len(arr)
        self._frame = None

    # -- the frame-like surface the analyze path uses ------------------------------------
    @property
    def columns(self) -> list[str]:
        return list(self._cols)

    @property
    def empty(self) -> bool:
        return len(self) == 0 or not self._cols

    def __len__(self) -> int:
        return self._rows or 0

    def __contains__(self, name: object) -> bool:
        return name in self._cols

    def __iter__(self) -> Iterator[str]:
        return iter(self._cols)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return self._cols[key].view(Column)
        if isinstance(key, list) and all(isinstance(k, str) for k in key):
            return Table({k: self._cols[k] for k in key}, attrs=self.attrs)
        return self.take(np.asarray(key))

    def __setitem__(self, name: str, values: Any) -> None:
        self._put(name, values, len(self) if self._cols else None)

    def select(self, names: Iterable[str]) -> Table:
        """The columns ``names``, in that order."""
        return Table({k: self._cols[k] for k in names}, attrs=self.attrs)

    def col(self, name: str) -> np.ndarray[Any, Any]:
        """The column as a plain numpy array (no copy)."""
        return self._cols[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self._cols.get(name, default)

    def take(self, rows: np.ndarray[Any, Any]) -> Table:
        """The rows a boolean mask or an index array selects, in that order."""
        return Table({k: v[rows] for k, v in self._cols.items()}, attrs=self.attrs)

    def insert(self, pos: int, name: str, values: Any) -> None:
        items = list(self._cols.items())
        self._cols = {}
        rows = self._rows
        self._put(name, values, rows)
        arr = self._cols.pop(name)
        items.insert(pos, (name, arr))
        self._cols = dict(items)

    def assign(self, **columns: Any) -> Table:
        out = self.copy()
        for k, v in columns.items():
            out[k] = v
        return out

    def copy(self) -> Table:
        return Table({k: v.copy() for k, v in self._cols.items()}, attrs=self.attrs)

    def rename(self, columns: Mapping[str, str]) -> Table:
        return Table({columns.get(k, k): v for k, v in self._cols.items()}, attrs=self.attrs)

    def drop(self, columns: Iterable[str]) -> Table:
        gone = set(columns)
        return Table({k: v for k, v in self._cols.items() if k not in gone}, attrs=self.attrs)

    def rows(self, names: Iterable[str] | None = None) -> list[tuple[Any, ...]]:
        """The rows as tuples of Python values (``itertuples(index=False)``'s order)."""
        cols = [self._cols[n].tolist() for n in (names if names is not None else self._cols)]
        return list(zip(*cols, strict=True)) if cols else [() for _ in range(len(self))]

    def equals(self, other: object) -> bool:
        """Same columns, order and values (the frames' ``equals``)."""
        mine = self.to_pandas()
        theirs = other.to_pandas() if isinstance(other, Table) else other
        return bool(mine.equals(theirs))

    # -- pandas, on request ----------------------------------------------------------------
    def to_pandas(self) -> pd.DataFrame:
        """The same table as a pandas frame (built once; pandas is imported here)."""
        if self._frame is None:
            import pandas as pd

            frame = pd.DataFrame(dict(self._cols), columns=list(self._cols))
            frame.attrs.update(self.attrs)
            self._frame = frame
        frame_: pd.DataFrame = self._frame
        return frame_

    @classmethod
    def from_rows(cls, rows: list[tuple[Any, ...]], columns: list[str]) -> Table:
        """A table of row tuples, each column typed as a frame would infer it (no rows: object
        columns, as ``pandas.DataFrame([], columns=...)``)."""
        if not rows:
            return cls(columns=columns)
        data = {}
        for name, values in zip(columns, zip(*rows, strict=True), strict=True):
            arr = np.array(values)
            data[name] = arr.astype(object) if arr.dtype.kind in "UO" else arr
        return cls(data)

    @classmethod
    def from_pandas(cls, frame: Any) -> Table:
        """A table of a frame's columns (RangeIndex assumed; the index is dropped)."""
        data = {str(c): frame[c].to_numpy() for c in frame.columns}
        return cls(data, attrs=dict(getattr(frame, "attrs", {})))

    def __getattr__(self, name: str) -> Any:
        # Old callers (notebooks, tests) that treat the table as the frame it replaced: any
        # method a Table lacks is the frame's. The analyze path never comes here.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.to_pandas(), name)

    def __getstate__(self) -> dict[str, Any]:
        return {"cols": self._cols, "rows": self._rows, "attrs": self.attrs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._cols, self._rows, self.attrs = state["cols"], state["rows"], state["attrs"]
        self._frame = None

    def __repr__(self) -> str:
        return f"Table({len(self)} rows: {', '.join(self._cols)})"


def as_table(value: Any) -> Table:
    """``value`` as a :class:`Table`: a table as is, a pandas frame converted, None empty."""
    if isinstance(value, Table):
        return value
    if value is None:
        return Table()
    if hasattr(value, "columns") and hasattr(value, "iloc"):
        return Table.from_pandas(value)
    if isinstance(value, Mapping):
        return Table(value)
    raise TypeError(f"not a table: {type(value).__name__}")


def concat(tables: Iterable[Table], columns: list[str] | None = None) -> Table:
    """Rows of ``tables`` one after another (the columns of the first, or ``columns``)."""
    parts = [as_table(t) for t in tables]
    parts = [t for t in parts if t.columns] or parts[:1]
    if not parts:
        return Table({c: np.zeros(0, object) for c in columns or []})
    names = columns if columns is not None else parts[0].columns
    data = {n: np.concatenate([t.col(n) for t in parts]) for n in names}
    same = all(t.attrs == parts[0].attrs for t in parts)  # as pandas: kept only when all agree
    return Table(data, attrs=parts[0].attrs if same else None)


class FrameField:
    """A dataclass field documented as a pandas frame, stored as a :class:`Table`.

    Reading the attribute builds the frame (pandas imported then); :func:`table_of` reads the
    table. Assigning either a table or a frame works, so old callers keep passing frames.
    """

    def __init__(self, required: bool = False) -> None:
        self.required = required
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: object, owner: type | None = None) -> pd.DataFrame:
        if obj is None:  # the dataclass asks for the default: none when required
            if self.required:
                raise AttributeError(self.name)
            return None  # type: ignore[return-value]
        return table_of(obj, self.name).to_pandas()

    def __set__(self, obj: object, value: Any) -> None:
        obj.__dict__["_table_" + self.name] = as_table(value)


def table_of(obj: object, name: str) -> Table:
    """The :class:`Table` behind ``obj``'s frame field ``name`` (for an object that is no such
    dataclass, a stand-in holding a frame, its attribute as a table)."""
    held = getattr(obj, "__dict__", {}).get("_table_" + name)
    return held if isinstance(held, Table) else as_table(getattr(obj, name))


def replace_tables(obj: Any, **changes: Any) -> Any:
    """``dataclasses.replace`` that carries frame fields as tables (no pandas built)."""
    import dataclasses

    values: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        if not f.init:
            continue
        key = "_table_" + f.name
        values[f.name] = obj.__dict__[key] if key in obj.__dict__ else getattr(obj, f.name)
    values.update(changes)
    return type(obj)(**values)


def groupby(table: Table, keys: str | list[str]) -> list[tuple[Any, Table]]:
    """``(key, rows)`` per group in sorted key order, rows in table order (pandas' groupby
    iteration: a list of keys gives tuple keys, one name a scalar; rows with a NaN key drop)."""
    from tracescale.groups import group_codes

    names = [keys] if isinstance(keys, str) else list(keys)
    if not len(table):
        return []
    codes, uniq = group_codes(*(table.col(k) for k in names))
    order = np.argsort(codes, kind="stable")
    order = order[codes[order] >= 0]
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    out = []
    for g, rows in enumerate(np.split(order, bounds) if len(order) else []):
        key = tuple(u[g] for u in uniq)
        out.append((key[0] if isinstance(keys, str) else key, table.take(rows)))
    return out


def text(table: Table, name: str) -> np.ndarray[Any, Any]:
    """Column ``name`` as Python strings, '' where missing (or where the column is absent)."""
    out = np.empty(len(table), dtype=object)
    if name not in table:
        out[:] = ""
        return out
    out[:] = [
        "" if v is None or (isinstance(v, float) and v != v) else str(v)
        for v in table.col(name).tolist()
    ]
    return out
