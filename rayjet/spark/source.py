"""A Ray Data source over a stream: parallel range reads served by the stream's replicas.

The sequence range is fixed when :func:`read_stream` is called (the stream's ``last_seq``
then, a consistent snapshot: messages published later are not read, however long the
read takes or however often the dataset is executed). Read tasks split that range into
contiguous pieces that cover it exactly once. Each task reads its piece straight from one
replica's store with ``read_range`` pages (tasks are spread over all replicas, followers
too); a follower that has not yet applied the end of the piece is waited for briefly, then
another replica is used. A replica that dies mid-read is replaced by another one at the
sequence where the read stopped (pages are idempotent). Pages are turned into Arrow
columns at once and gathered into large blocks.

Reads go where the data is: each task is scheduled on the node where its replica ran when
the read was planned (any node when that one is gone), and asks for its pages over the data plane (an
Arrow record batch per request on the replica process's authenticated connection), with
a Ray actor call when no data-plane connection can be made.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import ray
from ray.data import Datasource, ReadTask
from ray.data.block import BlockMetadata
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from rayjet.actors import direct
from rayjet.actors.host import find_replica
from rayjet.actors.names import stream_actor_name
from rayjet.api import headers as H
from rayjet.errors import BadRequestError, ServiceUnavailableError
from rayjet.errors import TimeoutError as RequestTimeoutError
from rayjet.spark.quiet import quiet_dataset
from rayjet.subjects import subject_matches, validate_filter

# one read_range call: at most this many messages / bytes (the actor builds the page)
PAGE_MSGS = 20_000
PAGE_BYTES = 16 << 20
# a block is yielded once it holds this many rows or bytes
BLOCK_ROWS = 250_000
BLOCK_BYTES = 128 << 20
# a read task covers at least this many sequences (small streams get one task)
MIN_TASK_SPAN = 20_000
CATCH_UP_WAIT = 2.0  # seconds a lagging follower may take to apply its piece
CALL_TIMEOUT = 30.0
READ_TASK_CPUS = 0.5  # read tasks mostly wait on replica actors
NODE_ID_LABEL = "ray.io/node-id"  # the label Ray gives every node: its id

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
HEADERS_JSON = "json"
HEADERS_MAP = "map"
HEADERS_NONE = "none"

BASE_SCHEMA = pa.schema([
    ("stream", pa.string()),
    ("subject", pa.string()),
    ("seq", pa.int64()),
    ("ts", pa.timestamp("ns", tz="UTC")),
    ("headers", pa.string()),
    ("data", pa.binary()),
])


def base_schema(headers: str = HEADERS_JSON) -> pa.Schema:
    if headers == HEADERS_MAP:
        i = BASE_SCHEMA.get_field_index("headers")
        return BASE_SCHEMA.set(i, pa.field("headers", pa.map_(pa.string(), pa.string())))
    return BASE_SCHEMA


@dataclass(frozen=True)
class ReadPlan:
    """What a read covers, fixed when the read starts; shipped to every read task."""

    stream: str
    group: str
    replicas: tuple[str, ...]  # replica ids, followers first, the leader last
    start_seq: int
    end_seq: int  # inclusive; < start_seq means an empty read
    filter: str = ">"  # handed to read_range
    local_filters: tuple[str, ...] = ()  # several filters: matched in the read task
    start_ns: int | None = None  # keep ts >= start_ns
    end_ns: int | None = None  # keep ts < end_ns
    headers: str = HEADERS_JSON
    decoder: Any = None  # "json", "msgpack", a callable, or None
    bytes_per_seq: float = 0.0
    page_msgs: int = PAGE_MSGS
    page_bytes: int = PAGE_BYTES
    block_rows: int = BLOCK_ROWS
    block_bytes: int = BLOCK_BYTES
    min_task_span: int = MIN_TASK_SPAN
    extra: dict = field(default_factory=dict)
    # the Ray node each of ``replicas`` ran on when the read was planned (None: not known)
    nodes: tuple[str | None, ...] = ()

    @property
    def span(self) -> int:
        return max(0, self.end_seq - self.start_seq + 1)

    def pieces(self, n: int) -> list[tuple[int, int]]:
        """``n`` (or fewer) contiguous ranges covering [start_seq, end_seq] exactly once."""
        span = self.span
        if span == 0:
            return []
        n = max(1, min(n, span))
        size, rest = divmod(span, n)
        out, lo = [], self.start_seq
        for i in range(n):
            hi = lo + size + (1 if i < rest else 0) - 1
            out.append((lo, hi))
            lo = hi + 1
        return out

    def placed_pieces(self, n: int) -> dict[str | None, list[tuple[int, int, int]]]:
        """:meth:`pieces` as ``(lo, hi, preferred)`` (the replica index a task reads first,
        round robin), grouped by the node of that replica (None: not known)."""
        out: dict[str | None, list[tuple[int, int, int]]] = {}
        for i, (lo, hi) in enumerate(self.pieces(n)):
            preferred = i % max(1, len(self.replicas))
            node = self.nodes[preferred] if preferred < len(self.nodes) else None
            out.setdefault(node, []).append((lo, hi, preferred))
        return out


# -- rows -> Arrow ---------------------------------------------------------------------------
def _headers_column(hdrs: list[bytes], mode: str) -> pa.Array:
    if mode == HEADERS_MAP:
        return pa.array([list(H.decode_headers(h).items()) if h else None for h in hdrs],
                        pa.map_(pa.string(), pa.string()))
    if mode == HEADERS_NONE:
        return pa.nulls(len(hdrs), pa.string())
    return pa.array([json.dumps(H.decode_headers(h)) if h else None for h in hdrs], pa.string())


def page_table(plan: ReadPlan, page: dict[str, Any]) -> pa.Table:
    """One ``read_range`` page as an Arrow table with the source's base columns: from its
    Arrow record batch (``columnar``) without work per row, except decoding the headers
    of the messages that have any when the plan keeps headers."""
    batch = page["batch"]
    n = batch.num_rows
    hdrs = batch.column("hdr")
    headers = (pa.nulls(n, pa.string()) if plan.headers == HEADERS_NONE
               else _headers_column(hdrs.to_pylist(), plan.headers))
    table = pa.Table.from_arrays([
        pa.repeat(pa.scalar(plan.stream, pa.string()), n),
        batch.column("subject"),
        batch.column("seq").cast(pa.int64()),
        batch.column("ts").cast(pa.timestamp("ns", tz="UTC")),
        headers,
        batch.column("data"),
    ], schema=base_schema(plan.headers))
    return _filter_rows(plan, table)


def _filter_rows(plan: ReadPlan, table: pa.Table) -> pa.Table:
    mask = None
    if plan.local_filters:
        cache: dict[str, bool] = {}

        def keep(s: str) -> bool:
            hit = cache.get(s)
            if hit is None:
                hit = cache[s] = any(subject_matches(s, f) for f in plan.local_filters)
            return hit

        mask = pa.array([keep(s) for s in table.column("subject").to_pylist()], pa.bool_())
    ts = table.column("ts").cast(pa.int64())
    for bound, op in ((plan.start_ns, pc.greater_equal), (plan.end_ns, pc.less)):
        if bound is not None:
            m = op(ts, pa.scalar(bound, pa.int64()))
            mask = m if mask is None else pc.and_(mask, m)
    return table if mask is None else table.filter(mask)


def _decoder_fn(decoder: Any) -> Callable[[bytes], Any]:
    if decoder == "json":
        return json.loads
    if decoder == "msgpack":
        import msgpack

        return lambda b: msgpack.unpackb(b, raw=False)
    if callable(decoder):
        return decoder
    raise BadRequestError(f"decoder must be 'json', 'msgpack' or a callable, not {decoder!r}")


def decode_payloads(table: pa.Table, decoder: Any) -> pa.Table:
    """Add the decoded payload's fields as columns (``data_<name>`` when a name is taken)."""
    fn = _decoder_fn(decoder)
    rows = []
    for b in table.column("data").to_pylist():
        value = fn(b) if b is not None else None
        rows.append(value if isinstance(value, dict) or value is None else {"value": value})
    if not rows:
        return table
    decoded = pa.Table.from_pylist([r or {} for r in rows])
    for name in decoded.column_names:
        col = decoded.column(name)
        out = name if name not in table.column_names else f"data_{name}"
        table = table.append_column(out, col)
    return table


# -- the read task ---------------------------------------------------------------------------
class _Replicas:
    """Replica handles for one read task, the preferred one first, switching on failure."""

    def __init__(self, plan: ReadPlan, preferred: int) -> None:
        n = len(plan.replicas)
        self.order = [plan.replicas[(preferred + i) % n] for i in range(n)]
        self.group = plan.group
        self.pos = 0
        self.failures = 0
        self.handle: Any = None

    def current(self, need_seq: int) -> Any:
        """A handle to a replica that has applied ``need_seq``; raises when none has."""
        if self.handle is not None:
            return self.handle
        n = len(self.order)
        last_err: BaseException | None = None
        for _ in range(2 * n):  # every replica, then each once more after a pause
            rid = self.order[self.pos % n]
            try:
                h = find_replica(stream_actor_name(self.group, rid))
                if self._caught_up(h, need_seq):
                    self.handle = h
                    return h
                last_err = None
            except (RayActorError, RayTaskError, GetTimeoutError, ValueError) as err:
                last_err = err
            self.pos += 1
            if self.pos % n == 0:
                time.sleep(0.5)
        detail = f": {last_err}" if last_err else " (every replica is behind)"
        raise ServiceUnavailableError(
            f"no replica of group {self.group} could serve seq {need_seq}{detail}")

    def name(self) -> str:
        """The actor name of the replica :meth:`current` gave."""
        return stream_actor_name(self.group, self.order[self.pos % len(self.order)])

    def failed(self) -> None:
        self.handle = None
        self.pos += 1
        self.failures += 1
        if self.failures > 4 * len(self.order):
            raise ServiceUnavailableError(f"reading group {self.group}: replicas keep failing")

    @staticmethod
    def _caught_up(h: Any, need_seq: int) -> bool:
        deadline = time.monotonic() + CATCH_UP_WAIT
        while True:
            st = ray.get(h.status.remote(), timeout=CALL_TIMEOUT)
            if st.get("last_seq", 0) >= need_seq:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


def read_piece(plan: ReadPlan, lo: int, hi: int, preferred: int) -> Iterator[pa.Table]:
    """Read ``[lo, hi]`` from one replica in pages, yielding large Arrow blocks."""
    replicas = _Replicas(plan, preferred)
    seq = lo
    parts: list[pa.Table] = []
    rows = size = 0
    while seq and seq <= hi:
        h = replicas.current(hi)
        try:
            page = _read_page(replicas.name(), h, seq, hi, plan)
        except (RayActorError, GetTimeoutError, direct.RequestLost, RequestTimeoutError):
            replicas.failed()  # dead or stuck: read the rest from another replica
            continue
        nxt = page["next"]
        if page["batch"].num_rows:
            t = page_table(plan, page)
            if t.num_rows:
                parts.append(t)
                rows += t.num_rows
                size += t.nbytes
        if rows >= plan.block_rows or size >= plan.block_bytes:
            yield _finish(plan, parts)
            parts, rows, size = [], 0, 0
        seq = nxt
    if parts or rows == 0:
        yield _finish(plan, parts)


def _read_page(name: str, handle: Any, seq: int, hi: int, plan: ReadPlan) -> dict[str, Any]:
    """One ``read_range`` page from replica ``name``: over the data plane, else (no
    connection could be made: nothing was asked) by an actor call."""
    kwargs = {"filter": plan.filter, "max_msgs": plan.page_msgs,
              "max_bytes": plan.page_bytes, "columnar": True}
    if direct.enabled():
        try:
            return direct.call(name, "read_range", (seq, hi), kwargs, CALL_TIMEOUT)
        except direct.NotDirect:
            pass
    return ray.get(handle.read_range.remote(seq, hi, **kwargs), timeout=CALL_TIMEOUT)


def _finish(plan: ReadPlan, parts: list[pa.Table]) -> pa.Table:
    table = pa.concat_tables(parts) if parts else _empty(base_schema(plan.headers))
    if len(parts) > 1:
        table = table.combine_chunks()
    if plan.decoder is not None:
        table = decode_payloads(table, plan.decoder)
    return table


def _empty(schema: pa.Schema) -> pa.Table:
    """No rows, but one (empty) chunk per column: RayDP cannot take chunkless columns."""
    return pa.Table.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)


class StreamDatasource(Datasource):
    """A Ray Data source reading one stream's fixed sequence range (see :func:`read_stream`)."""

    def __init__(self, plan: ReadPlan,
                 pieces: list[tuple[int, int, int]] | None = None) -> None:
        """``pieces``: the ``(lo, hi, preferred)`` ranges its tasks read (default: the
        plan split as Ray Data's parallelism asks)."""
        super().__init__()
        self.plan = plan
        self.fixed_pieces = pieces

    def get_name(self) -> str:
        return f"Stream({self.plan.stream})"

    def estimate_inmemory_data_size(self) -> int | None:
        return int(self.plan.bytes_per_seq * self.plan.span) or None

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ReadTask]:
        plan = self.plan
        pieces = self.fixed_pieces
        if pieces is None:
            pieces = [(lo, hi, i) for i, (lo, hi) in
                      enumerate(plan.pieces(max(1, parallelism or 1)))]
        if not pieces:
            # an empty read still has the schema (one task giving an empty block)
            pieces = [(plan.start_seq, plan.start_seq - 1, 0)]
        tasks = []
        for lo, hi, preferred in pieces:
            meta = BlockMetadata(num_rows=None,
                                 size_bytes=int(plan.bytes_per_seq * max(0, hi - lo + 1)),
                                 exec_stats=None, input_files=None)

            def read(lo=lo, hi=hi, preferred=preferred) -> Iterator[pa.Table]:
                if hi < lo:
                    return iter([_finish(plan, [])])
                return read_piece(plan, lo, hi, preferred)

            schema = base_schema(plan.headers) if plan.decoder is None else None
            tasks.append(ReadTask(read, meta, schema=schema,
                                  per_task_row_limit=per_task_row_limit))
        return tasks


# -- planning on the driver ------------------------------------------------------------------
def _filters(subjects: str | Sequence[str] | None) -> tuple[str, tuple[str, ...]]:
    if subjects is None:
        return ">", ()
    items = [subjects] if isinstance(subjects, str) else list(subjects)
    if not items:
        return ">", ()
    for f in items:
        validate_filter(f)
    if len(items) == 1:
        return items[0], ()
    if ">" in items:
        return ">", ()
    return ">", tuple(dict.fromkeys(items))


def _ns(t: datetime | float | int | None, what: str) -> int | None:
    if t is None:
        return None
    if isinstance(t, datetime):
        if t.tzinfo is None:
            t = t.replace(tzinfo=UTC)
        return (t - _EPOCH) // timedelta(microseconds=1) * 1000  # exact, no float
    if isinstance(t, int | float) and not isinstance(t, bool):
        return int(t * 1e9)  # seconds since the epoch
    raise BadRequestError(f"{what} must be a datetime or seconds since the epoch, not {t!r}")


def _seq_for_time(js: Any, stream: str, ts_ns: int) -> int:
    return js.stream_handle(stream).seq_for_time(ts_ns)


def make_plan(js: Any, stream: str, *, subjects=None, start_seq: int | None = None,
              end_seq: int | None = None, start_time=None, end_time=None,
              headers: str = HEADERS_JSON, decoder: Any = None, **tuning: Any) -> ReadPlan:
    """Fix the read: the stream's replicas and the sequence range as of now."""
    if headers not in (HEADERS_JSON, HEADERS_MAP, HEADERS_NONE):
        raise BadRequestError(f"headers must be 'json', 'map' or 'none', not {headers!r}")
    if decoder is not None:
        _decoder_fn(decoder)
    for name, v in (("start_seq", start_seq), ("end_seq", end_seq)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise BadRequestError(f"{name} must be a sequence number >= 0, not {v!r}")
    info = js.stream_info(stream)
    st = info.state
    handle = js.stream_handle(stream)
    leader = info.cluster.leader if info.cluster is not None else None
    rids = [rid for rid, _node in handle.replicas]
    replicas = tuple([r for r in rids if r != leader] + [r for r in rids if r == leader])
    filt, local = _filters(subjects)
    start_ns, end_ns = _ns(start_time, "start_time"), _ns(end_time, "end_time")
    first = max(st.first_seq, 1)
    lo = max(start_seq or first, first)
    hi = st.last_seq if end_seq is None else min(end_seq, st.last_seq)
    if start_ns is not None:
        lo = max(lo, _seq_for_time(js, stream, start_ns))
    if end_ns is not None:
        hi = min(hi, _seq_for_time(js, stream, end_ns) - 1)
    total_span = max(1, st.last_seq - first + 1)
    return ReadPlan(stream=info.config.name, group=handle.group, replicas=replicas,
                    nodes=_replica_nodes(handle.group, replicas),
                    start_seq=lo, end_seq=hi, filter=filt, local_filters=local,
                    start_ns=start_ns, end_ns=end_ns, headers=headers, decoder=decoder,
                    bytes_per_seq=(st.bytes / total_span) if st.messages else 0.0, **tuning)


def _replica_nodes(group: str, replicas: tuple[str, ...]) -> tuple[str | None, ...]:
    """The Ray node each replica runs on now (None for one that does not answer)."""
    refs: list[Any] = []
    for rid in replicas:
        try:
            refs.append(find_replica(stream_actor_name(group, rid)).status.remote())
        except ValueError:
            refs.append(None)
    nodes: list[str | None] = []
    for ref in refs:
        try:
            nodes.append(None if ref is None else ray.get(ref, timeout=CALL_TIMEOUT).get("node"))
        except (RayActorError, RayTaskError, GetTimeoutError):
            nodes.append(None)
    return tuple(nodes)


def default_parallelism(plan: ReadPlan) -> int:
    """A few tasks per replica for big ranges, one for small ones."""
    return max(1, min(plan.span // max(1, plan.min_task_span), 2 * len(plan.replicas)))


def dataset_of(plan: ReadPlan, parallelism: int | None = None,
               ray_remote_args: dict | None = None, *, progress: bool = False
               ) -> ray.data.Dataset:
    n = parallelism or default_parallelism(plan)
    by_node = plan.placed_pieces(n)
    if not by_node:
        by_node = {None: []}  # an empty read: one task that gives the schema
    chosen = ray_remote_args and ({"scheduling_strategy", "label_selector"} & set(ray_remote_args))
    extra = {"ray_remote_args": ray_remote_args} if ray_remote_args else {}
    parts = []
    for node, pieces in by_node.items():
        beside = {}
        if node is not None and not chosen:
            # the node the replica runs on, else anywhere (the task then reads remotely)
            beside = {"label_selector": {NODE_ID_LABEL: node},
                      "fallback_strategy": [{"label_selector": {}}]}
        parts.append(ray.data.read_datasource(StreamDatasource(plan, pieces),
                                              override_num_blocks=max(1, len(pieces)),
                                              num_cpus=READ_TASK_CPUS, **beside, **extra))
    ds = parts[0] if len(parts) == 1 else parts[0].union(*parts[1:])
    return quiet_dataset(ds, progress)


def with_range(plan: ReadPlan, start_seq: int, end_seq: int) -> ReadPlan:
    return replace(plan, start_seq=start_seq, end_seq=end_seq)


__all__ = ["BASE_SCHEMA", "ReadPlan", "StreamDatasource", "base_schema", "dataset_of",
           "decode_payloads", "make_plan", "page_table", "read_piece"]
