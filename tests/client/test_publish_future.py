"""publish_async's futures: standard Futures to their users, cheap to hold by the thousand."""

import asyncio
import concurrent.futures
import gc
import threading

import numpy as np
import pytest

from rayjet.api import PubAck
from rayjet.client.column_publish import PubAcks
from rayjet.client.publish import AsyncPublisher
from rayjet.client.publish_future import PublishFuture
from rayjet.errors import BadRequestError, WrongLastSequenceError

MSG = ("S.a", b"x", None)


def _acks(stream, first, count, rows=None):
    acks = PubAcks(count)
    acks.take(stream, 0, {"count": count, "refused": None,
                          "runs": [(np.arange(count, dtype="<u4").tobytes(), first)],
                          "rows": rows or {}})
    return acks


def test_a_pending_future_times_out_and_cannot_be_cancelled():
    fut = PublishFuture(threading.Condition(), MSG)
    assert fut.running() and not fut.done()
    assert fut.cancel() is False  # a queued publish is under way
    with pytest.raises(concurrent.futures.TimeoutError):
        fut.result(timeout=0.05)
    with pytest.raises(concurrent.futures.TimeoutError):
        fut.exception(timeout=0.05)


def test_a_waiter_is_not_fooled_by_another_futures_answer():
    shared = threading.Condition()
    mine, other = PublishFuture(shared, MSG), PublishFuture(shared, MSG)
    got = []
    waiter = threading.Thread(target=lambda: got.append(mine.result(timeout=10)))
    waiter.start()
    other.set_result("not mine")  # wakes the waiter: it must keep waiting
    waiter.join(0.2)
    assert waiter.is_alive() and not got
    mine.set_result("mine")
    waiter.join(10)
    assert got == ["mine"]


def test_the_standard_helpers_work_on_them():
    shared = threading.Condition()
    futs = [PublishFuture(shared, MSG) for _ in range(3)]
    called = []
    futs[0].add_done_callback(lambda f: called.append(f.result()))
    threading.Timer(0.05, lambda: [f.set_result(i) for i, f in enumerate(futs)]).start()
    done, not_done = concurrent.futures.wait(futs, timeout=10)
    assert len(done) == 3 and not not_done
    assert sorted(f.result() for f in concurrent.futures.as_completed(futs)) == [0, 1, 2]
    assert called == [0]
    late = PublishFuture(shared, MSG)
    late.set_exception(BadRequestError("no"))

    async def awaited():
        return await asyncio.wrap_future(futs[2]), await asyncio.gather(
            asyncio.wrap_future(late), return_exceptions=True)

    value, (err,) = asyncio.run(awaited())
    assert value == 2 and isinstance(err, BadRequestError)


def test_a_row_of_column_answers_becomes_its_puback_when_read():
    acks = _acks("S", 10, 4, rows={2: PubAck(stream="S", seq=5, duplicate=True)})
    futs = [PublishFuture(threading.Condition(), MSG) for _ in range(4)]
    for row, fut in enumerate(futs):
        fut.set_row(acks, row)
    assert [f.result() for f in futs] == [PubAck.stored("S", 10), PubAck.stored("S", 11),
                                          PubAck(stream="S", seq=5, duplicate=True),
                                          PubAck.stored("S", 13)]
    assert all(f.exception() is None for f in futs)


def test_holding_many_makes_few_objects_for_the_collector():
    def tracked_per_future(make):
        gc.collect()
        before = len(gc.get_objects())
        held = [make() for _ in range(5000)]
        per = (len(gc.get_objects()) - before) / len(held)
        del held
        return per

    shared = threading.Condition()
    ours = tracked_per_future(lambda: PublishFuture(shared, MSG))
    standard = tracked_per_future(concurrent.futures.Future)
    assert ours <= 4 < standard, (ours, standard)


class _Stream:
    """What AsyncPublisher asks of its client: a route per subject and a send per run."""

    timeout = 5.0

    def __init__(self, answer):
        self.answer = answer
        self.sent = []

    def _stream_for(self, subject):
        if subject.startswith("NONE."):
            raise BadRequestError("no stream captures it")
        return "S"

    def _send(self, stream, msgs, timeout, columns=False):
        self.sent.append(list(msgs))
        return self.answer(msgs)


def test_the_publisher_answers_each_future_from_column_answers_and_refusals():
    refused = WrongLastSequenceError("wrong last sequence: 9")
    js = _Stream(lambda msgs: _acks("S", 1, len(msgs), rows={1: refused}))
    pub = AsyncPublisher(js, window=1000)
    try:
        futs = [pub.submit(("S.a", b"%d" % i, None), None) for i in range(3)]
        futs.append(pub.submit(("NONE.x", b"", None), None))
        pub.drain(10)
        assert pub.pending == 0
        assert isinstance(futs[3].exception(), BadRequestError)
        assert all(f.message is None for f in futs)  # the payloads are not kept
        # every message was sent once, in order, and each future has its own row's answer
        # (the dispatcher takes what is queued when it wakes: one run or several)
        sent = [m for run in js.sent for m in run]
        assert [m[1] for m in sent] == [b"0", b"1", b"2"]
        rows = [(run, i) for run in js.sent for i in range(len(run))]
        for fut, (_run, row) in zip(futs[:3], rows, strict=True):
            if row == 1:
                assert fut.exception() is refused
            else:
                assert fut.result().seq == row + 1
    finally:
        pub.stop()
