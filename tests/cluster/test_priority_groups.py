"""Pull consumer priority groups on real actors: the pin travels in Nats-Pin-Id, fails over
after priority_timeout or on unpin; overflow and prioritized pulls; refused pulls."""

from __future__ import annotations

import threading

import pytest

from rayjet import AckPolicy, StorageType
from rayjet.errors import (
    APIError,
    BadRequestError,
    InvalidPriorityGroupError,
    NoMessagesError,
    PinIdMismatchError,
)
from tests.waiting import wait_for


@pytest.fixture
def jobs(js, stream_name):
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.*"], storage=StorageType.MEMORY)
    yield stream_name
    js.delete_stream(stream_name)


class Fetcher(threading.Thread):
    """A fetch that blocks in the background (a standby or competing client)."""

    def __init__(self, sub, **kw) -> None:
        super().__init__(daemon=True)
        self.sub, self.kw = sub, kw
        self.msgs: list = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.msgs = self.sub.fetch(**self.kw)
        except BaseException as err:  # noqa: BLE001 - reported by the test
            self.error = err

    def result(self, timeout: float = 20.0) -> list:
        self.join(timeout)
        assert not self.is_alive(), "fetch did not return"
        if self.error is not None:
            raise self.error
        return self.msgs


def subs(js, stream, n: int):
    return [js.pull_subscribe(stream=stream, durable="WORKERS") for _ in range(n)]


def test_pinned_client_and_failover_after_priority_timeout(js, jobs):
    s = jobs
    js.add_consumer(s, durable_name="WORKERS", ack_policy=AckPolicy.EXPLICIT,
                    priority_policy="pinned_client", priority_groups=["jobs"],
                    priority_timeout=3.0)
    a, b, c = subs(js, s, 3)
    try:
        [group] = js.consumer_info(s, "WORKERS").priority_groups
        assert (group.group, group.pinned_client_id) == ("jobs", None)
        js.publish(f"{s}.x", b"1")
        [m] = a.fetch(1, timeout=5, group="jobs")
        m.ack_sync()
        pin = m.headers["Nats-Pin-Id"]
        assert pin and a.pin_id == pin
        [group] = js.consumer_info(s, "WORKERS").priority_groups
        assert group.pinned_client_id == pin and group.pinned_ts is not None

        # b has no pin: it waits as a standby while a keeps pulling
        js.publish(f"{s}.x", b"2")
        with pytest.raises(NoMessagesError):
            b.fetch(1, timeout=0.3, group="jobs")
        [m] = a.fetch(1, timeout=5, group="jobs")
        assert (m.data, m.headers["Nats-Pin-Id"]) == (b"2", pin)
        m.ack_sync()

        # a pull with another pin id is refused (423) and the subscription drops the id
        c.pin_id = "not-the-pin"
        with pytest.raises(PinIdMismatchError) as e:
            c.fetch(1, timeout=1, group="jobs")
        assert e.value.code == 423 and c.pin_id == ""

        # a stops pulling: after priority_timeout the waiting standby gets the pin
        js.publish(f"{s}.x", b"3")
        [m] = b.fetch(1, timeout=15, group="jobs")
        m.ack_sync()
        new = m.headers["Nats-Pin-Id"]
        assert m.data == b"3" and new and new != pin and b.pin_id == new
        assert js.consumer_info(s, "WORKERS").priority_groups[0].pinned_client_id == new
        with pytest.raises(PinIdMismatchError):
            a.fetch(1, timeout=1, group="jobs")
        assert a.pin_id == ""
        kinds = [(body["type"].rsplit(".", 1)[1], body.get("reason"))
                 for _, body in js.consumer_advisories(s, "WORKERS")]
        assert kinds == [("consumer_group_pinned", None), ("consumer_group_unpinned", "timeout"),
                         ("consumer_group_pinned", None)]
    finally:
        for sub in (a, b, c):
            sub.unsubscribe()


def test_unpin_hands_the_pin_to_a_waiting_standby(js, jobs):
    s = jobs
    js.add_consumer(s, durable_name="WORKERS", ack_policy=AckPolicy.EXPLICIT,
                    priority_policy="pinned_client", priority_groups=["jobs"],
                    priority_timeout=60.0)
    a, b = subs(js, s, 2)
    try:
        js.publish(f"{s}.x", b"1")
        [m] = a.fetch(1, timeout=5, group="jobs")
        m.ack_sync()
        old = a.pin_id
        standby = Fetcher(b, batch=1, timeout=15, group="jobs")
        standby.start()
        wait_for(lambda: js.consumer_info(s, "WORKERS").num_waiting == 1, 10, "a standby pull",
                 interval=0.05)
        js.publish(f"{s}.x", b"2")
        with pytest.raises(InvalidPriorityGroupError):
            js.unpin_consumer(s, "WORKERS", "ghost")
        assert js.unpin_consumer(s, "WORKERS", "jobs")
        [m] = standby.result()
        m.ack_sync()
        assert m.data == b"2" and b.pin_id == m.headers["Nats-Pin-Id"] != old
        with pytest.raises(PinIdMismatchError):
            a.fetch(1, timeout=1, group="jobs")
        assert ("consumer_group_unpinned", "admin") in [
            (body["type"].rsplit(".", 1)[1], body.get("reason"))
            for _, body in js.consumer_advisories(s, "WORKERS")]
    finally:
        for sub in (a, b):
            sub.unsubscribe()


def test_overflow_thresholds_and_refused_pulls(js, jobs):
    s = jobs
    js.add_consumer(s, durable_name="WORKERS", ack_policy=AckPolicy.EXPLICIT,
                    priority_policy="overflow", priority_groups=["jobs"])
    [sub] = subs(js, s, 1)
    try:
        for i in range(5):
            js.publish(f"{s}.x", str(i).encode())
        with pytest.raises(NoMessagesError):
            sub.fetch(1, timeout=0.5, group="jobs", min_pending=10)
        for i in range(5, 10):
            js.publish(f"{s}.x", str(i).encode())
        # 10 pending, then 9: one message, then the pull is held back again
        msgs = sub.fetch(5, timeout=1, group="jobs", min_pending=10)
        assert [m.data for m in msgs] == [b"0"]
        [m] = sub.fetch(1, timeout=1, group="jobs", min_pending=100, min_ack_pending=1)
        assert m.data == b"1"
        assert len(sub.fetch(3, timeout=1, group="jobs")) == 3  # no conditions
        with pytest.raises(BadRequestError, match="Priority Group missing"):
            sub.fetch(1, timeout=1)
        with pytest.raises(InvalidPriorityGroupError):
            sub.fetch(1, timeout=1, group="ghost")
    finally:
        sub.unsubscribe()


def test_prioritized_pulls_and_push_refusal(js, jobs):
    s = jobs
    with pytest.raises(APIError) as e:
        js.add_consumer(s, durable_name="PUSHED", deliver_subject=f"deliver.{s}",
                        priority_policy="overflow", priority_groups=["jobs"])
    assert e.value.err_code == 10178
    js.add_consumer(s, durable_name="WORKERS", ack_policy=AckPolicy.EXPLICIT,
                    priority_policy="prioritized", priority_groups=["jobs"])
    high_sub, low_sub = subs(js, s, 2)
    try:
        high = Fetcher(high_sub, batch=1, timeout=15, group="jobs", priority=5)
        high.start()
        wait_for(lambda: js.consumer_info(s, "WORKERS").num_waiting == 1, 10, "high's pull",
                 interval=0.05)
        low = Fetcher(low_sub, batch=1, timeout=15, group="jobs", priority=0)
        low.start()
        wait_for(lambda: js.consumer_info(s, "WORKERS").num_waiting == 2, 10, "low's pull",
                 interval=0.05)
        js.publish(f"{s}.x", b"first")
        assert [m.data for m in low.result()] == [b"first"]
        assert high.is_alive()  # still waiting: the lower number went first
        js.publish(f"{s}.x", b"second")
        assert [m.data for m in high.result()] == [b"second"]
    finally:
        for sub in (high_sub, low_sub):
            sub.unsubscribe()
