"""Streams in Ray Data and Spark: bulk replay, exactly-once writes, incremental cursors.

``read_stream`` gives a Ray Dataset of a stream's messages (a consistent snapshot read in
parallel from the replicas), ``read_stream_df`` / ``to_spark`` the same as a Spark
DataFrame through RayDP, ``write_stream`` publishes a Dataset or DataFrame exactly once,
and ``read_stream(..., durable="nightly")`` reads only what arrived since the last
``commit()``. ``session()`` starts a RayDP Spark session with working defaults.
"""

from __future__ import annotations

from typing import Any

import ray

from rayjet.spark.cursor import CommitResult, Cursor, open_cursor, reset_cursor
from rayjet.spark.session import (
    JAVA_OPTIONS,
    from_spark,
    session,
    spark_configs,
    stop_session,
    to_spark,
)
from rayjet.spark.sink import WriteResult, write_stream
from rayjet.spark.source import (
    BASE_SCHEMA,
    ReadPlan,
    StreamDatasource,
    dataset_of,
    make_plan,
    with_range,
)

SPARK_BLOCK_BYTES = 64 << 20


def read_stream(stream: str, subjects: str | list[str] | None = None,
                start_seq: int | None = None, end_seq: int | None = None,
                start_time: Any = None, end_time: Any = None, parallelism: int | None = None,
                decoder: Any = None, js: Any = None, *, headers: str = "json",
                durable: str | None = None, ray_remote_args: dict | None = None,
                progress: bool = False, **tuning: Any) -> ray.data.Dataset | tuple[ray.data.Dataset, Cursor]:
    """A Ray Dataset of ``stream``'s messages: columns ``stream, subject, seq, ts, headers,
    data`` (``data`` binary, ``ts`` a UTC timestamp, ``headers`` a JSON object string, or an
    Arrow map with ``headers="map"``, or null with ``headers="none"``).

    The range is fixed now: ``start_seq..end_seq`` (inclusive) within what the stream holds
    up to its current ``last_seq``; messages published later are not part of the dataset.
    ``subjects`` is a filter or a list of filters. ``start_time`` (inclusive) and
    ``end_time`` (exclusive), datetimes or epoch seconds, are turned into sequences by a
    binary search on the leader's store and also checked row by row. ``parallelism``
    read tasks split the range (default: by size, up to two per replica). ``decoder``
    (``"json"``, ``"msgpack"`` or a callable) adds the payload's fields as columns.

    With ``durable="name"`` the read is incremental: it covers what arrived after the
    cursor's last commit, and returns ``(dataset, cursor)``; call ``cursor.commit()``
    once the run's output is safe. ``start_seq``/``start_time`` then only apply when the
    cursor is created.

    The dataset, and those derived from it, execute without Ray Data's progress bars and
    execution log lines on the console (they still go to Ray Data's log file);
    ``progress=True`` keeps Ray Data's own settings. Only this dataset's ``DataContext``
    changes, never the process-wide one.
    """
    if js is None:
        import rayjet

        js = rayjet.connect()
    cursor = None
    if durable is not None:
        from rayjet.spark.source import _filters

        filt, local = _filters(subjects)
        filters = local or ((filt,) if filt != ">" else ())
        first, _info = open_cursor(js, stream, durable, filters, start_seq=start_seq,
                                   start_time=_to_datetime(start_time))
        plan = make_plan(js, stream, subjects=subjects, end_seq=end_seq, end_time=end_time,
                         headers=headers, decoder=decoder, **tuning)
        plan = with_range(plan, max(first, plan.start_seq), plan.end_seq)
        cursor = Cursor(js, plan.stream, durable, plan.start_seq, plan.end_seq)
    else:
        plan = make_plan(js, stream, subjects=subjects, start_seq=start_seq, end_seq=end_seq,
                         start_time=start_time, end_time=end_time, headers=headers,
                         decoder=decoder, **tuning)
    ds = dataset_of(plan, parallelism, ray_remote_args, progress=progress)
    return ds if cursor is None else (ds, cursor)


def _to_datetime(t: Any) -> Any:
    from datetime import UTC, datetime

    if t is None or isinstance(t, datetime):
        return t
    return datetime.fromtimestamp(float(t), tz=UTC)


def read_stream_df(spark: Any, stream: str, subjects: str | list[str] | None = None, *,
                   parallelism: int | None = None, **kwargs: Any) -> Any:
    """A Spark DataFrame of ``stream`` (see :func:`read_stream`; same arguments), through
    RayDP. With ``durable=...`` returns ``(df, cursor)``; ``progress`` as for
    :func:`read_stream`.

    The read makes few large blocks (one per ~64 MB, at most 16; ``parallelism`` sets the
    count) and hands them to Spark as they are: RayDP converts block by block."""
    if parallelism is None:
        js = kwargs.get("js")
        if js is None:
            import rayjet

            js = kwargs["js"] = rayjet.connect()
        st = js.stream_info(stream).state
        parallelism = max(1, min(16, st.bytes // SPARK_BLOCK_BYTES + 1))
    # one block per read task, built from its pages as one Arrow chunk per column: Ray Data
    # would glue several blocks of a task into one of several chunks, which RayDP refuses
    kwargs["block_rows"] = kwargs["block_bytes"] = 1 << 62
    out = read_stream(stream, subjects, parallelism=parallelism, **kwargs)
    progress = bool(kwargs.get("progress", False))
    if isinstance(out, tuple):
        ds, cursor = out
        return to_spark(ds, spark, blocks=None, progress=progress), cursor
    return to_spark(out, spark, blocks=None, progress=progress)


__all__ = [
    "BASE_SCHEMA", "JAVA_OPTIONS", "CommitResult", "Cursor", "ReadPlan", "StreamDatasource",
    "WriteResult", "from_spark", "read_stream", "read_stream_df", "reset_cursor", "session",
    "spark_configs", "stop_session", "to_spark", "write_stream",
]
