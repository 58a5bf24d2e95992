"""A PyTorch execution trace (ET) -> the data dependencies between its ops across threads.

Why: Kineto records when each op ran on each thread, not which tensors it read. An op on one
thread that reads what an op on another thread wrote cannot start before that op ends, and
nothing in the Kineto trace says so (only the autograd engine's forward -> backward flows).
``torch.profiler.ExecutionTraceObserver`` writes, for the same process, every op's tensor
inputs and outputs (``[tensor_id, storage_id, offset, numel, itemsize, device]``) and its
``rf_id``, the RecordFunction handle Kineto writes as the cpu_op's ``Record function id``.
So the ET names the producer of what each op reads, and the replay graph
(:mod:`tracescale.replay.waits.et_edges`) ties a consumer to its producer by that id.

A dependency here: the consumer reads a storage whose last writer before it (in ET id order,
which is the ops' start order in the process) ran on another thread; the producer is that
writer. Same-thread pairs are dropped: a thread's own order already holds them. An op whose
enclosing op (``ctrl_deps``) already depends on the same producer adds nothing and is dropped
too. Memory stays bounded: the file is refused past :data:`MAX_ET_BYTES` of JSON, values are
kept as raw JSON and only tensor-typed ones are decoded. Anything that does not read as an
ET raises :class:`ExecutionTraceError` with a one-line reason (the ET is then not used).
"""

from __future__ import annotations

import functools
import gzip
import zlib
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from tracescale.ingest.sniff import stamp

#: Decompressed bytes of an execution trace read at most (an ET of a large model is a few
#: hundred MB; past this it is not used, with a warning, rather than risk the memory).
MAX_ET_BYTES = 2 * 1024**3

I64 = npt.NDArray[np.int64]


class ExecutionTraceError(Exception):
    """Why an execution trace is not used (one line)."""


class _Attr(msgspec.Struct, gc=False):
    name: str = ""
    value: Any = None


class _Values(msgspec.Struct, frozen=True, gc=False):
    values: list[msgspec.Raw] = []
    types: list[str] = []


class _Node(msgspec.Struct, gc=False):
    id: int = -1
    name: str = ""
    ctrl_deps: int = -1
    inputs: _Values = _Values()
    outputs: _Values = _Values()
    attrs: list[_Attr] = []


class _Trace(msgspec.Struct, gc=False):
    schema: str = ""
    pid: int = -1
    nodes: list[_Node] = []


@dataclass(frozen=True)
class EtDependencies:
    """An ET's cross-thread data dependencies, as record-function ids.

    ``producer``/``consumer``: one entry per dependency (the consumer op may not start before
    the producer op ends); ``ops``: nodes with an ``rf_id``; ``threads``: distinct ``tid``.
    """

    path: str
    pid: int
    schema: str
    ops: int
    threads: int
    producer: I64
    consumer: I64

    def __len__(self) -> int:
        return int(self.producer.shape[0])


def _read(path: str, limit: int) -> bytes:
    with open(path, "rb") as fh:
        magic = fh.read(2)
        fh.seek(0)
        if magic == b"\x1f\x8b":
            with gzip.GzipFile(fileobj=fh) as gz:
                data = gz.read(limit + 1)
        else:
            data = fh.read(limit + 1)
    if len(data) > limit:
        raise ExecutionTraceError(f"larger than the {limit / 1024**3:.3g} GiB read of an ET")
    return data


def _tensors(raw: msgspec.Raw, kind: str, out: list[int], depth: int = 0) -> None:
    """Storage ids of the tensor descriptors in one value (a tensor, or a list of them)."""
    if "Tensor" not in kind:
        return
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return
    _walk(value, out, depth)


def _walk(value: Any, out: list[int], depth: int) -> None:
    if not isinstance(value, list) or depth > 4:
        return
    if (
        len(value) == 6
        and all(type(v) is int for v in value[:5])
        and isinstance(value[5], str)
        and value[3] > 0  # an undefined tensor is all zeros, no storage
    ):
        out.append(int(value[1]))
        return
    for v in value:
        _walk(v, out, depth + 1)


def _attr(node: _Node, name: str) -> int:
    for a in node.attrs:
        if a.name == name:
            v = a.value
            return int(v) if type(v) is int else -1
    return -1


def parse(data: bytes, path: str = "") -> EtDependencies:
    """The cross-thread dependencies of the ET in ``data`` (see the module docstring)."""
    try:
        et = msgspec.json.decode(data, type=_Trace)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ExecutionTraceError(f"does not parse as an execution trace ({exc})") from None
    if not et.schema or not et.nodes:
        raise ExecutionTraceError("no 'schema' and 'nodes' of an execution trace")
    nodes = sorted(et.nodes, key=lambda n: n.id)  # ids are taken at op start
    rf_of: dict[int, int] = {}
    tid_of: dict[int, int] = {}
    for n in nodes:
        rf = _attr(n, "rf_id")
        if rf > 0:
            rf_of[n.id] = rf
            tid_of[n.id] = _attr(n, "tid")
    if not rf_of:
        raise ExecutionTraceError("its nodes carry no rf_id (record function id) to match Kineto")
    writer: dict[int, int] = {}  # storage id -> node id of its last writer so far
    deps: dict[int, set[int]] = {}  # consumer node -> producer nodes (cross-thread)
    prod: list[int] = []
    cons: list[int] = []
    for n in nodes:
        if n.id not in rf_of:
            continue
        reads: list[int] = []
        for raw, kind in zip(n.inputs.values, n.inputs.types, strict=False):
            _tensors(raw, kind, reads)
        parent = deps.get(n.ctrl_deps, set())
        mine: set[int] = set()
        for s in reads:
            w = writer.get(s)
            if w is None or w == n.id or tid_of[w] == tid_of[n.id] or w in mine:
                continue
            mine.add(w)
            if w not in parent:
                prod.append(rf_of[w])
                cons.append(rf_of[n.id])
        if mine:
            deps[n.id] = mine | parent
        writes: list[int] = []
        for raw, kind in zip(n.outputs.values, n.outputs.types, strict=False):
            _tensors(raw, kind, writes)
        for s in writes:
            writer[s] = n.id
    return EtDependencies(
        path=path,
        pid=et.pid,
        schema=et.schema,
        ops=len(rf_of),
        threads=len(set(tid_of.values())),
        producer=np.array(prod, dtype=np.int64),
        consumer=np.array(cons, dtype=np.int64),
    )


@functools.lru_cache(maxsize=4)
def _cached(path: str, version: str, limit: int) -> EtDependencies:
    del version  # part of the cache key only: a rewritten file is read again
    try:
        data = _read(path, limit)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise ExecutionTraceError(f"cannot be read ({exc})") from None
    return parse(data, path)


def read_dependencies(path: str, limit: int = MAX_ET_BYTES) -> EtDependencies:
    """The ET at ``path`` read once per process and version (discovery, then the replay);
    raises :class:`ExecutionTraceError` with the reason it is not used."""
    try:
        return _cached(path, stamp(path), limit)
    except RecursionError:
        raise ExecutionTraceError("nested too deeply to read") from None
