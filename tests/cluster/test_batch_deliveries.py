"""Deliveries in batches on real actors: a fetch is one batch of lazily made messages,
Arrow record batches for bulk consumers, acks as ranges, ordered push in batches."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from rayjet import AckPolicy, DeliverPolicy, StorageType
from rayjet.client.messages import MsgBatch
from rayjet.errors import BadRequestError, NoMessagesError


def ack_floor_reaches(sub, seq: int, timeout: float = 20.0) -> None:
    """The acks sent so far are applied: the floor comes up to ``seq``."""
    sub.acks.flush()
    deadline = time.monotonic() + timeout
    while (floor := sub.consumer_info().ack_floor.stream_seq) < seq:
        assert time.monotonic() < deadline, f"ack floor {floor}, wanted {seq}"
        time.sleep(0.05)


@pytest.fixture(params=[1, 3], ids=["R1", "R3"])
def filled(request, js, stream_name):
    s = stream_name
    js.add_stream(name=s, subjects=[f"{s}.*"], storage=StorageType.FILE,
                  num_replicas=request.param)
    js.publish_batch([(f"{s}.{'a' if i % 3 else 'b'}", b"m%d" % i) for i in range(1, 301)])
    js.publish(f"{s}.a", b"with header", headers={"K": "v"})
    yield s
    js.delete_stream(s)


def test_a_fetch_is_a_batch_that_acks_as_ranges(js, filled):
    s = filled
    sub = js.pull_subscribe(stream=s, durable="BULK", ack_wait=30.0)
    got = sub.fetch(120, timeout=5)
    assert isinstance(got, MsgBatch) and len(got) == 120
    assert [m.data for m in got[:3]] == [b"m1", b"m2", b"m3"]
    assert got[-1].metadata.sequence.stream == 120 and got[-1] is got[119]
    assert got[0].reply.startswith(f"$JS.ACK.{s}.BULK.1.1.1.")
    got[0].ack()
    got.ack()  # the other 119, once; the first is not answered twice
    with pytest.raises(BadRequestError):
        got[5].ack()
    rb = sub.fetch_batch(200, timeout=5)
    assert rb.num_rows == 181
    assert rb.column("stream_seq").to_pylist() == list(range(121, 302))
    assert rb.column("data")[0].as_py() == b"m121"
    assert rb.schema.metadata[b"consumer"] == b"BULK"
    last = rb.slice(180).to_pylist()[0]
    assert last["data"] == b"with header" and b"K: v" in last["headers"]
    assert rb.column("headers").null_count == 180
    sub.ack_batch(rb)
    with pytest.raises(NoMessagesError):
        sub.fetch(1, timeout=0.5)
    ack_floor_reaches(sub, 301)
    assert sub.consumer_info().num_ack_pending == 0
    sub.unsubscribe()


def test_bulk_acks_leave_the_unacked_for_redelivery(js, filled):
    s = filled
    sub = js.pull_subscribe(stream=s, durable="HALF", ack_wait=1.0)
    rb = sub.fetch_batch(400, timeout=5)
    assert rb.num_rows == 301
    sub.ack_batch(rb.filter(pa.compute.not_equal(rb.column("stream_seq"), 50)))
    again = sub.fetch(1, timeout=10)
    assert [(m.metadata.sequence.stream, m.metadata.num_delivered) for m in again] == [(50, 2)]
    with pytest.raises(BadRequestError):
        sub.ack_batch(pa.table({"data": [b"x"]}))
    with pytest.raises(BadRequestError):
        sub.ack_batch([0])
    sub.unsubscribe()


def test_messages_batches_read_the_stream_once(js, filled):
    s = filled
    sub = js.pull_subscribe(f"{s}.a", stream=s, durable="ONLY_A")
    seqs = []
    for rb in sub.messages_batches(batch=64, timeout=0.5):
        assert set(rb.column("subject").to_pylist()) == {f"{s}.a"}
        seqs += rb.column("stream_seq").to_pylist()
        sub.ack_batch(rb)
    assert seqs == [i for i in range(1, 302) if i % 3 or i == 301]
    sub.unsubscribe()


def test_an_ordered_push_subscription_reads_in_batches(js, filled):
    s = filled
    sub = js.subscribe(stream=s, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
    first = sub.next_msg(timeout=5)
    rest = []
    for rb in sub.messages_batches(timeout=1.0):
        rest += rb.column("stream_seq").to_pylist()
    assert [first.metadata.sequence.stream, *rest] == list(range(1, 302))
    assert sub.pending() == 0
    js.publish(f"{s}.b", b"late")
    assert sub.next_msg(timeout=5).data == b"late"
    sub.unsubscribe()


def test_a_push_batch_is_acked_at_once(js, filled):
    s = filled
    sub = js.subscribe(stream=s, durable="PUSHED", ack_policy=AckPolicy.EXPLICIT,
                       manual_ack=True)
    seen = 0
    while seen < 301:
        got = sub.next_batch(timeout=5)
        seen += len(got)
        sub.ack_batch(got)
    ack_floor_reaches(sub, 301)
    sub.unsubscribe()


def test_queued_acks_travel_with_the_next_fetch_and_make_room(js, filled):
    s = filled
    sub = js.pull_subscribe(stream=s, durable="ROOM", max_ack_pending=10, ack_wait=30.0)
    first = sub.fetch(50, timeout=5)
    assert len(first) == 10  # max_ack_pending
    first.ack()  # queued: the sender thread may not have sent them yet
    second = sub.fetch(50, timeout=5)
    assert [m.metadata.sequence.stream for m in second] == list(range(11, 21))
    assert sub.consumer_info().ack_floor.stream_seq == 10
    sub.unsubscribe()


def test_acks_riding_on_a_poll_of_a_push_consumer_are_applied(js, filled):
    s = filled
    js.add_consumer(s, durable_name="PUSHPOLL", deliver_subject="_INBOX.pp",
                    ack_policy=AckPolicy.EXPLICIT, ack_wait=30.0)
    sub = js.pull_subscribe(stream=s, durable="PUSHPOLL")
    got = sub.fetch(50, timeout=5)
    got.ack()  # queued, then carried by the next poll
    more = sub.fetch(50, timeout=5)
    assert more[0].metadata.sequence.stream == got[-1].metadata.sequence.stream + 1
    ack_floor_reaches(sub, got[-1].metadata.sequence.stream)
    sub.unsubscribe()


def test_malformed_answers_are_refused_whole(js, filled):
    s = filled
    sub = js.pull_subscribe(stream=s, durable="BADACKS", ack_wait=30.0)
    got = sub.fetch(5, timeout=5)
    first = got[0].metadata.sequence.stream
    for bad in ([("ack", first, None), ("ack", "x", None)], [("ack", first, None), ("zap", 1, None)],
                [("ack", first)], [["ack"], 1, None]):
        with pytest.raises(BadRequestError):
            sub.router.call("ack", bad, True, timeout=10)
    with pytest.raises(BadRequestError):
        sub.router.call("ack", [], True, timeout=10, ranges=[first, first - 1])
    assert sub.consumer_info().ack_floor.stream_seq == 0  # the good ack went with the bad
    got.ack()
    ack_floor_reaches(sub, got[-1].metadata.sequence.stream)
    sub.unsubscribe()
