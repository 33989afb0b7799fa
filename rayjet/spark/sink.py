"""Write a Ray Dataset or a Spark DataFrame into streams, exactly once per message id.

Every block is published from the Ray task that holds it (``map_batches``), in batches of
a few thousand messages per actor call, through a per-process ``rayjet.connect()`` that
joins the running Ray. Each message carries a ``Nats-Msg-Id``: the ``msg_id_col`` value,
or else one derived from the block (a digest of the block's subjects, payloads and headers)
and the row's index in it. A retried task publishes the same block with the same ids, so
the stream's de-duplication (``duplicate_window``, 2 minutes by default) stores each
message once however often a task is retried or a write repeated within the window.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import ray

from rayjet.client.column_publish import table_messages
from rayjet.engine.columnar import binary_parts
from rayjet.errors import APIError, BadRequestError, ServiceUnavailableError, TimeoutError
from rayjet.spark.quiet import quiet_execution

PUBLISH_CHUNK = 50_000  # rows per publish_batch call from a write task (a table)
WRITE_TASK_CPUS = 0.5
# a block whose publish found the stream unavailable or timed out is published again (same
# ids: the stream keeps one copy), up to this many times, waiting 0.5 s, 1 s, 2 s between
WRITE_RETRIES = 3
_RESULT_SCHEMA = pa.schema([("rows", pa.int64()), ("stored", pa.int64()),
                            ("duplicates", pa.int64()), ("first_seq", pa.int64()),
                            ("last_seq", pa.int64())])

_worker_js: dict[tuple[str | None, float], Any] = {}


@dataclass
class WriteResult:
    rows: int = 0  # messages handed to the stream
    stored: int = 0  # newly stored
    duplicates: int = 0  # already there (same Nats-Msg-Id within the duplicate window)
    first_seq: int = 0
    last_seq: int = 0
    blocks: int = 0
    per_block: list[dict[str, int]] = field(default_factory=list, repr=False)


@dataclass(frozen=True)
class WriteSpec:
    subject_col: str | None
    subject: str | None
    data_col: str
    headers_col: str | None
    msg_id_col: str | None
    id_prefix: str
    data_dir: str | None
    timeout: float
    chunk: int = PUBLISH_CHUNK


def connection(data_dir: str | None, timeout: float) -> Any:
    """This process's rayjet connection (a Ray worker joins the running Ray, never starts
    one; the meta group is found by name)."""
    key = (data_dir, timeout)
    js = _worker_js.get(key)
    if js is None or js.closed:
        import rayjet

        js = rayjet.connect(data_dir=data_dir, timeout=timeout)
        _worker_js[key] = js
    return js


# -- rows -> messages ------------------------------------------------------------------------
def _as_bytes(v: Any) -> bytes:
    if v is None:
        return b""
    if isinstance(v, bytes):
        return v
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, dict | list):
        return json.dumps(v, separators=(",", ":")).encode()
    raise BadRequestError(f"payload values must be bytes or str, not {type(v).__name__}")


def _as_headers(v: Any) -> dict[str, str]:
    if v is None:
        return {}
    if isinstance(v, str | bytes):
        v = json.loads(v) if v else {}
    if isinstance(v, list):  # an Arrow map column gives (key, value) pairs
        v = dict(v)
    if not isinstance(v, Mapping):
        raise BadRequestError(f"headers must be a map or a JSON object, not {type(v).__name__}")
    return {str(k): str(val) for k, val in v.items() if val is not None}


def _payload_column(col: pa.ChunkedArray) -> pa.Array:
    arr = col.combine_chunks()
    t = arr.type
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_string(t)
            or pa.types.is_large_string(t)):
        return arr  # crosses as it is
    return pa.array([_as_bytes(v) for v in arr.to_pylist()], pa.binary())


def _subject_column(table: pa.Table, spec: WriteSpec) -> pa.Array:
    if spec.subject is not None:
        return pa.array([spec.subject] * table.num_rows, pa.string())
    arr = table.column(spec.subject_col).combine_chunks()
    return arr if pa.types.is_string(arr.type) else arr.cast(pa.string())


def _derived_ids(spec: WriteSpec, subjects: pa.Array, data: pa.Array,
                 headers: list[dict] | None) -> pa.Array:
    """``<prefix><digest of the block>-<rows>-<row>``: the same block gets the same ids."""
    digest = hashlib.blake2b(digest_size=12)
    for arr in (subjects, data):
        ends, values = binary_parts(arr.cast(pa.large_binary()))
        digest.update(ends.tobytes())
        digest.update(values)
    if headers is not None:
        digest.update(json.dumps(headers, sort_keys=True).encode())
    n = len(subjects)
    base = f"{spec.id_prefix}{digest.hexdigest()}-{n}-"
    return pa.array([f"{base}{i}" for i in range(n)], pa.string())


def block_table(table: pa.Table, spec: WriteSpec) -> pa.Table:
    """The messages of one block as a message table (subject, data, msg_id[, headers]),
    each row with its deterministic ``Nats-Msg-Id``."""
    subjects = _subject_column(table, spec)
    data = _payload_column(table.column(spec.data_col))
    headers = ([_as_headers(v) for v in table.column(spec.headers_col).to_pylist()]
               if spec.headers_col else None)
    if spec.msg_id_col:
        ids = table.column(spec.msg_id_col).combine_chunks()
        ids = ids if pa.types.is_string(ids.type) else ids.cast(pa.string())
        if ids.null_count or (len(ids) and not pc.all(pc.greater(pc.utf8_length(ids), 0)).as_py()):
            raise BadRequestError(f"msg_id_col {spec.msg_id_col!r} has empty values: every "
                                  "row needs an id for exactly-once writes")
        if spec.id_prefix:
            ids = pc.binary_join_element_wise(spec.id_prefix, ids, "")
    else:
        ids = _derived_ids(spec, subjects, data, headers)
    columns = {"subject": subjects, "data": data, "msg_id": ids}
    if headers is not None:
        columns["headers"] = pa.array([h or None for h in headers],
                                      pa.map_(pa.string(), pa.string()))
    return pa.table(columns)


def block_messages(table: pa.Table, spec: WriteSpec) -> list[tuple[str, bytes, dict]]:
    """The messages of one block in list form (see :func:`block_table`)."""
    return table_messages(block_table(table, spec))


def publish_block(table: pa.Table, spec: WriteSpec, js: Any = None) -> dict[str, int]:
    """Publish one block as Arrow columns; raise on the first message the stream refused."""
    js = js or connection(spec.data_dir, spec.timeout)
    msgs = block_table(table, spec)
    out = {"rows": msgs.num_rows, "stored": 0, "duplicates": 0, "first_seq": 0, "last_seq": 0}
    for i in range(0, msgs.num_rows, spec.chunk):
        part = msgs.slice(i, spec.chunk)
        acks = js.publish_batch(part, timeout=spec.timeout)
        if acks.errors:
            row, err = min(acks.errors.items())
            raise err if isinstance(err, APIError) else APIError(
                f"publishing to {part.column('subject')[row]} failed: {err}")
        duplicates = len(acks.duplicates)
        out["duplicates"] += duplicates
        out["stored"] += len(acks) - duplicates
        seqs = acks.seqs
        if len(seqs):
            out["first_seq"] = min(out["first_seq"] or int(seqs.min()), int(seqs.min()))
            out["last_seq"] = max(out["last_seq"], int(seqs.max()))
    return out


def _write_batch(batch: pa.Table, spec: WriteSpec) -> pa.Table:
    for attempt in range(WRITE_RETRIES + 1):
        try:
            r = publish_block(batch, spec)
            break
        except (ServiceUnavailableError, TimeoutError):
            if attempt == WRITE_RETRIES:
                raise
            time.sleep(0.5 * 2 ** attempt)
    return pa.Table.from_pylist([r], schema=_RESULT_SCHEMA)


# -- the public entry point -------------------------------------------------------------------
def write_stream(data: Any, subject_col: str | None = "subject", data_col: str = "data",
                 headers_col: str | None = None, msg_id_col: str | None = None, *,
                 subject: str | None = None, js: Any = None, id_prefix: str = "",
                 parallelism: int | None = None, timeout: float | None = None,
                 ray_remote_args: dict | None = None, progress: bool = False) -> WriteResult:
    """Publish every row of ``data`` (a Ray Dataset, a Spark DataFrame of a RayDP session,
    a pyarrow Table or a pandas DataFrame) as one message, exactly once.

    ``subject`` (one subject for every row) or ``subject_col``; ``data_col`` (binary or
    string; dicts and lists become JSON); ``headers_col`` (a map or a JSON object string);
    ``msg_id_col`` (the ``Nats-Msg-Id``; without it an id is derived from the block's
    content and the row's index). ``id_prefix`` namespaces ids (e.g. a job name).
    Returns counts of stored and duplicate messages. The write runs without Ray Data's
    progress output unless ``progress``; ``data``'s own settings are kept.
    """
    from rayjet.spark.session import from_spark, is_spark_dataframe

    if subject is None and not subject_col:
        raise BadRequestError("give subject_col (a column of subjects) or subject")
    if subject is not None:
        from rayjet.subjects import validate_subject

        validate_subject(subject)
    if js is None:
        import rayjet

        js = rayjet.connect()
    if is_spark_dataframe(data):
        ds = from_spark(data, parallelism, progress=progress)
    elif isinstance(data, ray.data.Dataset):
        ds = data
    elif isinstance(data, pa.Table):
        ds = ray.data.from_arrow(data)
    elif type(data).__name__ == "DataFrame" and hasattr(data, "to_dict"):
        ds = ray.data.from_pandas(data)
    else:
        raise BadRequestError(f"write_stream takes a Ray Dataset or a Spark/pandas DataFrame "
                              f"or a pyarrow Table, not {type(data).__name__}")
    schema = ds.schema(fetch_if_missing=False)
    cols = set(schema.names) if schema is not None else set()
    for what, col in (("subject_col", None if subject is not None else subject_col),
                      ("data_col", data_col), ("headers_col", headers_col),
                      ("msg_id_col", msg_id_col)):
        if col is not None and cols and col not in cols:
            raise BadRequestError(f"{what} {col!r} is not a column (columns: {sorted(cols)})")
    if parallelism and not is_spark_dataframe(data):
        ds = ds.repartition(parallelism)
    spec = WriteSpec(subject_col=None if subject is not None else subject_col, subject=subject,
                     data_col=data_col, headers_col=headers_col, msg_id_col=msg_id_col,
                     id_prefix=id_prefix, data_dir=str(js.data_dir),
                     timeout=timeout or js.timeout)
    with quiet_execution(ds, progress):
        results = ds.map_batches(_write_batch, fn_kwargs={"spec": spec},
                                 batch_format="pyarrow", batch_size=None, zero_copy_batch=True,
                                 num_cpus=WRITE_TASK_CPUS, **(ray_remote_args or {})
                                 ).take_all()
    out = WriteResult(blocks=len(results), per_block=results)
    for r in results:
        out.rows += r["rows"]
        out.stored += r["stored"]
        out.duplicates += r["duplicates"]
        if r["rows"]:
            out.first_seq = min(out.first_seq or r["first_seq"], r["first_seq"])
            out.last_seq = max(out.last_seq, r["last_seq"])
    return out


__all__ = ["WriteResult", "WriteSpec", "block_messages", "block_table", "connection",
           "publish_block",
           "write_stream"]
