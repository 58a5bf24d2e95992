"""The typed view of a Kineto trace: the msgspec Structs every decoding path fills.

Only the fields the analysis needs are declared; the decoder skips everything else in C.
``ts``/``dur`` stay raw number text for exact ns parsing. The compiled scanner derives its
key table from :class:`Args`, so an arg added here is read on every path.
"""

from __future__ import annotations

from typing import Union

import msgspec


class Args(msgspec.Struct, frozen=True, gc=False):
    """The event args the analysis needs; everything else is skipped by the decoder."""

    correlation: int = -1
    stream: int = -1
    device: int = -1
    external_id: int = msgspec.field(default=-1, name="External id")
    external_id_old: int = msgspec.field(default=-1, name="external id")
    coll_name: str = msgspec.field(default="", name="Collective name")
    in_nelems: int = msgspec.field(default=-1, name="In msg nelems")
    out_nelems: int = msgspec.field(default=-1, name="Out msg nelems")
    group_size: int = msgspec.field(default=-1, name="Group size")
    dtype: str = ""
    pg_name: str = msgspec.field(default="", name="Process Group Name")
    pg_desc: str = msgspec.field(default="", name="Process Group Description")
    seq: int = msgspec.field(default=-1, name="Seq")
    # the group's members as a progression, where the ranks text is cut or absent
    rank_start: int = msgspec.field(default=-1, name="Global rank start")
    rank_stride: int = msgspec.field(default=-1, name="Global rank stride")
    nbytes: int = msgspec.field(default=-1, name="bytes")
    # a cpu_op's RecordFunction handle: the ``rf_id`` of its node in an execution trace
    rf_id: int = msgspec.field(default=-1, name="Record function id")
    wait_on_stream: int = -1
    wait_on_corr: int = msgspec.field(default=-1, name="wait_on_cuda_event_record_corr_id")
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")
    # JSON text as written: PyTorch writes a string ("[0, 1]"); kept raw so a list reads too
    pg_ranks: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Process Group Ranks")
    name: str = ""
    labels: str = ""


NO_ARGS = Args()
NO_RAW = msgspec.Raw(b"")


class Event(msgspec.Struct, gc=False):
    """One trace event as the typed decoder sees it."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Union[int, str] = 0  # noqa: UP007 - msgspec needs the runtime Union here
    tid: Union[int, str] = 0  # noqa: UP007
    ts: msgspec.Raw = NO_RAW
    dur: msgspec.Raw = NO_RAW
    args: Args = NO_ARGS


class PG(msgspec.Struct, gc=False):
    pg_name: str = ""
    pg_desc: str = ""
    backend_config: str = ""
    pg_size: int = -1
    ranks: list[int] = []


class DistInfo(msgspec.Struct, gc=False):
    backend: str = ""
    rank: int = -1
    world_size: int = -1
    pg_config: list[PG] = []


class Device(msgspec.Struct, gc=False):
    name: str = ""


class TraceFile(msgspec.Struct):
    """Top level of a Kineto trace; ``events`` is None when the key is absent."""

    traceEvents: Union[list[Event], None] = None  # noqa: UP007
    schemaVersion: Union[int, None] = None  # noqa: UP007
    distributedInfo: Union[DistInfo, None] = None  # noqa: UP007
    deviceProperties: list[Device] = []
    baseTimeNanoseconds: Union[int, None] = None  # noqa: UP007


class TopLevel(msgspec.Struct):
    """The top level without ``traceEvents`` (validated and skipped, never copied): the
    scanner's first pass; it finds the events' bytes itself."""

    schemaVersion: Union[int, None] = None  # noqa: UP007
    distributedInfo: Union[DistInfo, None] = None  # noqa: UP007
    deviceProperties: list[Device] = []
    baseTimeNanoseconds: Union[int, None] = None  # noqa: UP007


class RawTraceFile(msgspec.Struct):
    """Top level with each event left as raw JSON: a cheap first pass over the file."""

    traceEvents: Union[list[msgspec.Raw], None] = None  # noqa: UP007
    schemaVersion: Union[int, None] = None  # noqa: UP007
    distributedInfo: Union[DistInfo, None] = None  # noqa: UP007
    deviceProperties: list[Device] = []
    baseTimeNanoseconds: Union[int, None] = None  # noqa: UP007


RAW_DECODER = msgspec.json.Decoder(Union[RawTraceFile, list[msgspec.Raw]])  # noqa: UP007
CHUNK_DECODER = msgspec.json.Decoder(list[Event])
TOP_DECODER = msgspec.json.Decoder(TopLevel)
#: Events decoded at a time: decoded structs cost ~10x their JSON, so only a chunk of them is
#: alive at once; small enough to bound memory, large enough that per-chunk overhead vanishes.
CHUNK_EVENTS = 8192
