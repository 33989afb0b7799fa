"""Async acks that do not reach the consumer's leader are sent again, in order."""

from __future__ import annotations

import threading
import time

import pytest

from rayjet.client import messages
from rayjet.client.messages import AckSender
from rayjet.engine.consumer.delivery_batch import expand_ranges
from rayjet.errors import BadRequestError, NotLeaderError, ServiceUnavailableError
from tests.waiting import wait_for


class FlakyRouter:
    """Answers ``ack`` calls; the first ``fail`` calls raise ``error``."""

    def __init__(self, fail: int, error: Exception) -> None:
        self.fail, self.error = fail, error
        self.delivered: list[tuple] = []
        self.calls = 0
        self.lock = threading.Lock()

    def call(self, method, batch, sync, timeout, ranges=()):
        assert method == "ack"
        with self.lock:
            self.calls += 1
            if self.calls <= self.fail:
                raise self.error
            self.delivered.extend(batch)
            self.delivered.extend(("ack", seq, None) for seq in expand_ranges(ranges))
        return [True] * len(batch)


@pytest.mark.parametrize("error", [NotLeaderError("electing"), ServiceUnavailableError("x"),
                                   TimeoutError("slow")], ids=type)
def test_a_batch_that_failed_goes_again_ahead_of_newer_acks(monkeypatch, error):
    monkeypatch.setattr(messages, "ACK_RETRY_PAUSE", 0.01)
    router = FlakyRouter(fail=3, error=error)
    sender = AckSender(router, timeout=1.0)
    try:
        for seq in range(1, 6):
            sender.send("ack", seq)
        wait_for(lambda: router.calls > 1, 10, "a retry", interval=0.01)
        for seq in range(6, 9):
            sender.send("ack", seq)
        wait_for(lambda: len(router.delivered) == 8, 10, "8 acks delivered", interval=0.01)
        assert [seq for _kind, seq, _arg in router.delivered] == list(range(1, 9))
    finally:
        sender.stop()


def test_a_batch_is_given_up_after_the_retry_window(monkeypatch):
    monkeypatch.setattr(messages, "ACK_RETRY_PAUSE", 0.01)
    monkeypatch.setattr(messages, "ACK_RETRY_FOR", 0.2)
    router = FlakyRouter(fail=10**9, error=NotLeaderError("gone"))
    sender = AckSender(router, timeout=1.0)
    try:
        sender.send("ack", 1)
        wait_for(lambda: router.calls > 3, 10, "the failing calls made", interval=0.01)
        time.sleep(0.3)
        router.fail = 0  # the leader is back: a new ack goes, the old batch was given up
        sender.send("ack", 2)
        wait_for(lambda: router.delivered, 10, "an ack delivered", interval=0.01)
        time.sleep(0.05)
        assert [seq for _kind, seq, _arg in router.delivered] == [2]
    finally:
        sender.stop()


def test_a_refused_batch_is_not_sent_again():
    router = FlakyRouter(fail=1, error=BadRequestError("bad"))
    sender = AckSender(router, timeout=1.0)
    sender._stopped = True  # drive flush by hand
    sender._thread.join()
    sender.send("ack", 1)
    with pytest.raises(BadRequestError):
        sender.flush()
    sender.flush()
    assert router.delivered == [] and router.calls == 1


def test_stop_sends_what_is_queued_through_a_brief_failure(monkeypatch):
    monkeypatch.setattr(messages, "ACK_RETRY_PAUSE", 0.01)
    router = FlakyRouter(fail=0, error=NotLeaderError("electing"))
    sender = AckSender(router, timeout=5.0)
    sender._stopped = True
    sender._thread.join()
    sender._stopped = False
    router.fail = router.calls + 2
    sender.send("ack", 1)
    sender.stop()
    assert [seq for _kind, seq, _arg in router.delivered] == [1]


def test_plain_acks_cross_as_ranges_beside_the_other_answers():
    router = FlakyRouter(fail=0, error=NotLeaderError("x"))
    sender = AckSender(router, timeout=1.0)
    sender._stopped = True  # drive flush by hand
    sender._thread.join()
    calls = []
    real = router.call
    router.call = lambda *a, **kw: calls.append(kw.get("ranges")) or real(*a, **kw)
    sender.send_many(range(1, 501))
    sender.send("nak", 600, 1.0)
    sender.send("ack", 700)
    sender.flush()
    assert [r.tolist() for r in calls] == [[1, 500, 700, 700]]
    assert router.delivered == [("nak", 600, 1.0), *(("ack", s, None) for s in range(1, 501)),
                                ("ack", 700, None)]


def test_taken_answers_go_back_ahead_of_newer_ones():
    router = FlakyRouter(fail=0, error=NotLeaderError("x"))
    sender = AckSender(router, timeout=1.0)
    sender._stopped = True  # drive flush by hand
    sender._thread.join()
    sender.send_many([1, 2, 3, 7])
    sender.send("term", 9, "bad")
    batch, ranges = sender.take()
    assert batch == [("term", 9, "bad")] and ranges.tolist() == [1, 3, 7, 7]
    sender.flush()
    assert router.calls == 0  # nothing left queued
    sender.send("ack", 20)
    sender.put_back(batch, ranges)  # the call they went with failed
    sender.flush()
    assert router.delivered == [("term", 9, "bad"), *(("ack", s, None) for s in (1, 2, 3, 7, 20))]
