"""A push subscription over a scripted consumer: polls arrive as batches, an ordered one
hands out what precedes a gap and re-creates its consumer after the last message shown."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from rayjet import AckPolicy, ConsumerConfig, DeliverPolicy
from rayjet.client.consumers import PushSubscription
from rayjet.engine.consumer.delivery_batch import DeliveryBatch
from rayjet.engine.consumer.types import Delivery, DeliveryRun
from rayjet.errors import ConsumerNotFoundError, NoMessagesError
from rayjet.storage.protocol import StoredMsg


def run(first_cseq: int, seqs: list[int], consumer: str, cseqs: list[int] | None = None):
    msgs = [StoredMsg("S.a", b"", b"%d" % s, s, 1_000 + s) for s in seqs]
    if cseqs is None:
        return DeliveryBatch.of([DeliveryRun(msgs, "S", consumer, first_cseq, 0)])
    # consumer seqs as given (a gap where they jump)
    return DeliveryBatch.of([Delivery(m.subject, m.hdr, m.data, "S", consumer, m.seq, c, 1,
                                      m.ts, 0) for m, c in zip(msgs, cseqs, strict=True)])


class ScriptedJS:
    """Each consumer name answers its scripted polls (a tuple: an empty poll ending with
    that status), then empty ones."""

    timeout = 1.0

    def __init__(self, polls: dict[str, list]) -> None:
        self.polls = polls
        self.created: list[ConsumerConfig] = []
        self.deleted: list[str] = []
        self.lock = threading.Lock()

    def _consumer_router(self, stream, name):
        js = self

        class Router:
            def call(self, method, *args, **kwargs):
                assert method == "fetch"
                with js.lock:
                    left = js.polls.get(name, [])
                    batch = left.pop(0) if left else DeliveryBatch.of([], stream, name)
                if isinstance(batch, tuple):  # an empty poll that ended with this status
                    return {"batch": DeliveryBatch.of([], stream, name), "status": batch}
                return {"batch": batch, "status": None}
        return Router()

    def delete_consumer(self, stream, name):
        self.deleted.append(name)

    def add_consumer(self, stream, cfg):
        self.created.append(cfg)
        return SimpleNamespace(name=f"C{len(self.created) + 1}")


def test_an_ordered_subscription_stops_at_a_gap_and_resumes_after_the_last_shown():
    js = ScriptedJS({
        "C1": [run(1, [1, 2, 3], "C1"), run(0, [4, 6, 7], "C1", cseqs=[4, 6, 7])],
        "C2": [run(1, [5, 6, 7, 8], "C2")],
    })
    cfg = ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL)
    sub = PushSubscription(js, "S", "C1", cfg, ordered=True, ephemeral=True, cb=None,
                           manual_ack=False)
    sub.start()
    try:
        got = [m.metadata.sequence.stream for m in sub.messages(timeout=2.0)]
        assert got == [1, 2, 3, 4, 5, 6, 7, 8]
        assert js.deleted[0] == "C1" and sub.name == "C2"
        assert js.created[0].opt_start_seq == 5  # after the last message shown
        assert sub.pending() == 0
    finally:
        sub._stop.set()


def test_batches_and_messages_read_from_the_same_queue():
    js = ScriptedJS({"C1": [run(1, [1, 2, 3], "C1"), run(4, [4, 5], "C1")]})
    cfg = ConsumerConfig(ack_policy=AckPolicy.NONE)
    sub = PushSubscription(js, "S", "C1", cfg, ordered=False, ephemeral=False, cb=None,
                           manual_ack=False)
    sub.start()
    try:
        first = sub.next_msg(timeout=2.0)
        rest = sub.next_batch(timeout=2.0)  # what is left of the first poll
        last = next(sub.messages_batches(timeout=2.0))
        assert first.data == b"1"
        assert [m.data for m in rest] == [b"2", b"3"]
        assert last.column("stream_seq").to_pylist() == [4, 5]
        assert sub.pending() == 0
    finally:
        sub._stop.set()


def test_a_leadership_change_keeps_the_subscription_and_a_deletion_ends_it():
    js = ScriptedJS({"C1": [run(1, [1, 2], "C1"), (409, "Leadership Change"),
                            (409, "Server Shutdown"), run(3, [3], "C1"),
                            (409, "Consumer Deleted")]})
    cfg = ConsumerConfig(ack_policy=AckPolicy.NONE)
    sub = PushSubscription(js, "S", "C1", cfg, ordered=False, ephemeral=False, cb=None,
                           manual_ack=False)
    sub.start()
    try:
        got = [sub.next_msg(timeout=2.0).data for _ in range(3)]
        assert got == [b"1", b"2", b"3"]
        with pytest.raises(ConsumerNotFoundError):
            sub.next_msg(timeout=2.0)
        assert isinstance(sub.error, ConsumerNotFoundError)
        assert not isinstance(sub.error, NoMessagesError)
    finally:
        sub._stop.set()
