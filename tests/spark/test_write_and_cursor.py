"""write_stream exactly once, and incremental reads with a durable cursor."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
import ray

from rayjet import AckPolicy, RetentionPolicy, StreamConfig
from rayjet.api import headers as H
from rayjet.errors import BadRequestError
from rayjet.spark import read_stream, write_stream
from rayjet.spark.sink import WriteSpec, block_messages, publish_block


def _rows(js, stream):
    return read_stream(stream, js=js).take_all()


def _dataset(n, blocks=3):
    return ray.data.from_items(
        [{"subject": f"OUT.{'eu' if i % 2 else 'us'}", "data": b"row-%d" % i, "id": f"r{i}",
          "headers": {"k": str(i)}} for i in range(n)], override_num_blocks=blocks)


def test_write_with_msg_id_col_is_exactly_once(js, stream_name):
    js.add_stream(StreamConfig(name=stream_name, subjects=["OUT.>"], num_replicas=3))
    ds = _dataset(300)
    first = write_stream(ds, msg_id_col="id", headers_col="headers", js=js)
    # (a task retried after an unknown outcome finds its earlier messages as duplicates)
    assert first.rows == first.stored + first.duplicates == 300
    again = write_stream(ds, msg_id_col="id", headers_col="headers", js=js)
    assert (again.rows, again.stored, again.duplicates) == (300, 0, 300)
    rows = _rows(js, stream_name)
    assert len(rows) == 300 and len({r["data"] for r in rows}) == 300
    assert {r["subject"] for r in rows} == {"OUT.eu", "OUT.us"}
    one = next(r for r in rows if r["data"] == b"row-7")
    assert '"k": "7"' in one["headers"] and '"Nats-Msg-Id": "r7"' in one["headers"]
    js.delete_stream(stream_name)


def test_derived_ids_make_a_retried_block_safe(js, stream_name):
    js.add_stream(StreamConfig(name=stream_name, subjects=[f"{stream_name}.>"]))
    subject = f"{stream_name}.x"
    table = pa.table({"data": [b"same", b"same", b"other"] * 100})
    spec = WriteSpec(subject_col=None, subject=subject, data_col="data", headers_col=None,
                     msg_id_col=None, id_prefix="", data_dir=str(js.data_dir),
                     timeout=js.timeout)
    msgs = block_messages(table, spec)
    ids = [m[2][H.MSG_ID] for m in msgs]
    assert len(set(ids)) == 300 and ids == [m[2][H.MSG_ID] for m in block_messages(table, spec)]
    # a task that died half way through its block ...
    js.publish_batch(msgs[:130])
    # ... is retried from the start: nothing is stored twice, identical rows all kept
    out = publish_block(table, spec, js=js)
    assert (out["stored"], out["duplicates"]) == (170, 130)
    # the whole write run again (a re-run of the job within the duplicate window)
    result = write_stream(ray.data.from_arrow(table), subject=subject, js=js)
    assert (result.rows, result.stored) == (300, 0)
    rows = _rows(js, stream_name)
    assert len(rows) == 300 and sum(r["data"] == b"same" for r in rows) == 200
    js.delete_stream(stream_name)


def test_write_rejects_bad_input(js, stream_name):
    js.add_stream(StreamConfig(name=stream_name, subjects=[f"{stream_name}.>"]))
    with pytest.raises(BadRequestError):
        write_stream(_dataset(3), subject_col="nope", js=js)
    with pytest.raises(BadRequestError):
        write_stream([1, 2], js=js)
    with pytest.raises(Exception, match="no stream"):
        write_stream(_dataset(3, 1), subject=f"{stream_name}X.a", js=js)
    js.delete_stream(stream_name)


def test_incremental_cursor_reads_each_message_once(js, stream_name):
    s = stream_name
    js.add_stream(StreamConfig(name=s, subjects=[f"{s}.>"], num_replicas=3))
    js.publish_batch([(f"{s}.a", b"%d" % i) for i in range(1, 101)])

    def run(commit=True, expect_start=None):
        ds, cursor = read_stream(s, durable="nightly", js=js)
        seqs = sorted(r["seq"] for r in ds.take_all())
        if expect_start is not None:
            assert cursor.start_seq == expect_start
        if commit:
            cursor.commit()
        return seqs, cursor

    first, c1 = run()
    assert first == list(range(1, 101)) and c1.committed.ack_floor == 100
    assert c1.committed.fetched == 0  # one advance op, no deliveries
    info = js.consumer_info(s, "nightly")
    assert info.config.ack_policy is AckPolicy.ALL and info.ack_floor.stream_seq == 100
    empty, c2 = run()
    assert empty == [] and c2.empty
    js.publish_batch([(f"{s}.a", b"%d" % i) for i in range(101, 151)])
    # a run that fails before commit: the next run reads the same messages again
    failed, _ = run(commit=False)
    assert failed == list(range(101, 151))
    js.publish_batch([(f"{s}.b", b"%d" % i) for i in range(151, 161)])
    second, c3 = run(expect_start=101)
    assert second == list(range(101, 161))
    assert c3.commit().ack_floor == 160  # commit again: a no-op
    third, _ = run()
    assert third == []
    # every message was counted by exactly one committed run
    assert first + second == list(range(1, 161))


def test_cursor_on_interest_stream_acks_through_the_consumer(js, stream_name):
    s = stream_name
    js.add_stream(StreamConfig(name=s, subjects=[f"{s}.>"],
                               retention=RetentionPolicy.INTEREST))
    _, cur = read_stream(s, durable="interest", js=js)  # the consumer exists from here on
    js.publish_batch([(f"{s}.a", b"%d" % i) for i in range(50)])
    ds, cur = read_stream(s, durable="interest", js=js)
    assert len(ds.take_all()) == 50
    result = cur.commit()
    assert (result.ack_floor, result.fetched) == (50, 50)
    # the consumer tells the stream of its acks as it applies them (as nats-server's
    # consumers do): the stream lets the acked messages go soon after, nothing is kept
    deadline = time.monotonic() + 30
    while js.stream_info(s).state.messages:
        assert time.monotonic() < deadline, js.stream_info(s).state
        time.sleep(0.05)
    js.delete_stream(s)


def test_cursor_with_filter_and_start(js, stream_name):
    s = stream_name
    js.add_stream(StreamConfig(name=s, subjects=[f"{s}.>"]))
    js.publish_batch([(f"{s}.{'a' if i % 2 else 'b'}", b"%d" % i) for i in range(1, 41)])
    ds, cur = read_stream(s, subjects=f"{s}.a", durable="odd", start_seq=11, js=js)
    assert sorted(r["seq"] for r in ds.take_all()) == list(range(11, 41, 2))
    cur.commit()
    js.publish_batch([(f"{s}.b", b"x")] * 5)  # nothing for this cursor
    ds, cur = read_stream(s, subjects=f"{s}.a", durable="odd", js=js)
    assert ds.take_all() == []
    cur.commit()
    js.publish(f"{s}.a", b"late")
    ds, cur = read_stream(s, subjects=f"{s}.a", durable="odd", js=js)
    assert [r["data"] for r in ds.take_all()] == [b"late"]
    with pytest.raises(BadRequestError):
        read_stream(s, subjects=f"{s}.b", durable="odd", js=js)  # filters differ
