"""read_stream: a Ray Data source reading a fixed range from the stream's replicas."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta

import msgpack
import pyarrow as pa
import pytest
import ray

from rayjet import StreamConfig
from rayjet.spark import read_stream
from rayjet.spark.source import StreamDatasource, _ns, _Replicas, make_plan, read_piece


def _stream(js, name, n=0, replicas=3, subjects=None):
    """A stream holding messages 1..n. A publish the new group could not take (a leader
    change right after creation fails a batch whose outcome is then unknown) makes it
    start over with a fresh stream, so the sequences the tests read are always 1..n."""
    errors = []
    for _ in range(3):
        js.add_stream(StreamConfig(name=name, subjects=subjects or [f"{name}.>"],
                                   num_replicas=replicas))
        if not n:
            return name
        answers = js.publish_batch([(f"{name}.{'a' if i % 2 else 'b'}", b"m%d" % i,
                                     {"i": str(i)} if i % 3 == 0 else None)
                                    for i in range(1, n + 1)])
        errors = [a for a in answers if isinstance(a, Exception)]
        if not errors:
            return name
        js.delete_stream(name)
    raise AssertionError(f"publishing {n} messages to a new stream failed 3 times: "
                         f"{len(errors)} errors, first {errors[0]!r}")


def test_columns_and_values(js, stream_name):
    s = _stream(js, stream_name, 50)
    ds = read_stream(s, js=js)
    t = pa.concat_tables(ray.get(ds.to_arrow_refs()))
    assert t.column_names == ["stream", "subject", "seq", "ts", "headers", "data"]
    assert t.schema.field("data").type == pa.binary()
    assert t.schema.field("seq").type == pa.int64()
    assert pa.types.is_timestamp(t.schema.field("ts").type)
    rows = sorted(t.to_pylist(), key=lambda r: r["seq"])
    assert [r["seq"] for r in rows] == list(range(1, 51))
    assert rows[2]["data"] == b"m3" and rows[2]["subject"] == f"{s}.a"
    assert json.loads(rows[2]["headers"]) == {"i": "3"} and rows[0]["headers"] is None
    assert {r["stream"] for r in rows} == {s}
    assert rows[0]["ts"] <= rows[-1]["ts"]


def test_ranges_subjects_and_time(js, stream_name):
    s = _stream(js, stream_name, 100)
    seqs = lambda ds: sorted(r["seq"] for r in ds.take_all())  # noqa: E731
    assert seqs(read_stream(s, start_seq=10, end_seq=20, js=js)) == list(range(10, 21))
    assert seqs(read_stream(s, start_seq=95, end_seq=1000, js=js)) == list(range(95, 101))
    assert seqs(read_stream(s, subjects=f"{s}.a", js=js)) == list(range(1, 101, 2))
    both = read_stream(s, subjects=[f"{s}.a", f"{s}.b"], end_seq=9, js=js)
    assert seqs(both) == list(range(1, 10))
    assert seqs(read_stream(s, subjects=f"{s}.zzz", js=js)) == []
    # time bounds: start inclusive, end exclusive
    full = pa.concat_tables(ray.get(read_stream(s, js=js).to_arrow_refs()))
    ts = dict(zip(full["seq"].to_pylist(), full["ts"].cast(pa.int64()).to_pylist()))
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    mid, later = (epoch + timedelta(microseconds=ts[q] // 1000) for q in (40, 60))
    lo, hi = _ns(mid, "t"), _ns(later, "t")
    want = sorted(q for q, t in ts.items() if lo <= t < hi)
    assert want and want[0] <= 40 < want[-1] < 60
    assert seqs(read_stream(s, start_time=mid, end_time=later, js=js)) == want
    assert seqs(read_stream(s, start_time=mid.timestamp(), js=js))[-1] == 100
    future = datetime.now(tz=UTC).timestamp() + 3600
    assert seqs(read_stream(s, start_time=future, js=js)) == []


def test_headers_map_and_decoders(js, stream_name):
    s = _stream(js, stream_name)
    js.publish(f"{s}.j", json.dumps({"id": 1, "amount": 2.5}).encode(), headers={"k": "v"})
    js.publish(f"{s}.j", json.dumps({"id": 2, "amount": 4.0}).encode())
    rows = read_stream(s, decoder="json", headers="map", js=js).take_all()
    assert [(r["id"], r["amount"]) for r in rows] == [(1, 2.5), (2, 4.0)]
    assert dict(rows[0]["headers"]) == {"k": "v"}
    js.publish(f"{s}.m", msgpack.packb({"id": 3, "seq": 9}))
    rows = read_stream(s, subjects=f"{s}.m", decoder="msgpack", js=js).take_all()
    assert rows[0]["id"] == 3 and rows[0]["data_seq"] == 9 and rows[0]["seq"] == 3


def test_parallel_tasks_cover_range_once_from_all_replicas(js, stream_name):
    s = _stream(js, stream_name, 3000)
    plan = make_plan(js, s, start_seq=7, end_seq=2990)
    pieces = plan.pieces(4)
    assert len(pieces) == 4 and pieces[0][0] == 7 and pieces[-1][1] == 2990
    assert all(b[0] == a[1] + 1 for a, b in zip(pieces, pieces[1:]))
    ds = read_stream(s, start_seq=7, end_seq=2990, parallelism=4, js=js)
    assert len(StreamDatasource(plan).get_read_tasks(4)) == 4
    seqs = [r["seq"] for r in ds.take_all()]
    assert len(seqs) == len(set(seqs)) == 2984 and set(seqs) == set(range(7, 2991))
    # tasks start on different replicas (followers first), and read in large pages
    plan = make_plan(js, s, page_msgs=500)
    assert len(plan.replicas) == 3
    assert plan.replicas[-1] == js.stream_info(s).cluster.leader
    assert {_Replicas(plan, i).order[0] for i in range(3)} == set(plan.replicas)
    blocks = list(read_piece(plan, 1, 3000, 0))
    assert sum(b.num_rows for b in blocks) == 3000 and len(blocks) == 1


def test_snapshot_is_fixed_while_publisher_writes(js, stream_name):
    s = _stream(js, stream_name, 2000, replicas=3)
    stop = threading.Event()

    def publish():
        i = 0
        while not stop.is_set():
            js.publish_batch([(f"{s}.late", b"x%d" % (i + k)) for k in range(200)])
            i += 200

    t = threading.Thread(target=publish)
    t.start()
    try:
        time.sleep(0.3)
        last = js.stream_info(s).state.last_seq
        ds = read_stream(s, parallelism=3, js=js)
        first = sorted(r["seq"] for r in ds.take_all())
        time.sleep(0.3)
        again = sorted(r["seq"] for r in ds.take_all())  # re-executing: same snapshot
    finally:
        stop.set()
        t.join()
    assert first == again
    assert first[0] == 1 and len(first) == len(set(first)) == first[-1]
    assert first[-1] >= last and js.stream_info(s).state.last_seq > first[-1]


def test_empty_stream_has_schema(js, stream_name):
    s = _stream(js, stream_name)
    ds = read_stream(s, js=js)
    assert ds.count() == 0
    assert ds.schema().names == ["stream", "subject", "seq", "ts", "headers", "data"]


def test_bad_arguments(js, stream_name):
    from rayjet.errors import BadRequestError, StreamNotFoundError

    s = _stream(js, stream_name, 1)
    with pytest.raises(StreamNotFoundError):
        read_stream("NOPE_NOT_THERE", js=js)
    with pytest.raises(BadRequestError):
        read_stream(s, headers="xml", js=js)
    with pytest.raises(BadRequestError):
        read_stream(s, decoder="yaml", js=js)
    with pytest.raises(BadRequestError):
        read_stream(s, start_seq=-1, js=js)
