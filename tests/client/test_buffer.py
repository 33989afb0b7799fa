"""MsgBuffer: a poll's messages handed to a reader thread in order, with timeouts."""

from __future__ import annotations

import threading

import pytest

from rayjet.client.buffer import MsgBuffer


def test_order_and_length():
    buf = MsgBuffer()
    buf.put_many([1, 2, 3])
    buf.put(4)
    assert len(buf) == 4
    assert [buf.get(0) for _ in range(4)] == [1, 2, 3, 4]
    with pytest.raises(TimeoutError):
        buf.get(0.01)


def test_put_back_goes_first():
    buf = MsgBuffer()
    buf.put_many(["a", "b"])
    assert buf.get(0) == "a"
    buf.put_back("end")
    assert buf.get(0) == "end" and buf.get(0) == "b"


def test_a_waiting_reader_wakes_for_a_batch_from_another_thread():
    buf = MsgBuffer()
    got: list[int] = []
    started = threading.Event()

    def reader() -> None:
        started.set()
        got.extend(buf.get(10) for _ in range(1000))

    t = threading.Thread(target=reader)
    t.start()
    started.wait(5)
    for i in range(0, 1000, 100):
        buf.put_many(range(i, i + 100))
    t.join(10)
    assert got == list(range(1000))


def test_until_quiet_stops_at_the_first_wait_in_vain():
    from rayjet.client.buffer import until_quiet
    from rayjet.errors import TimeoutError as RayjetTimeout

    buf = MsgBuffer()
    buf.put_many(["a", "b"])

    def next_msg(timeout):
        try:
            return buf.get(timeout)
        except TimeoutError:
            raise RayjetTimeout("nothing") from None

    assert list(until_quiet(next_msg, 0.01)) == ["a", "b"]
