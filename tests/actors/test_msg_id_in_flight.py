"""A publish whose Nats-Msg-Id meets an earlier copy still in flight waits for that copy's
outcome: the copy's PubAck marked duplicate once it is stored, its own admission when the
copy never is, 10158 only when its timeout runs out first. The first copy's proposal is held
back by hand, so the later copies are sure to arrive while it is in flight."""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pytest

from rayjet.actors.stream import StreamReplica
from rayjet.api import PubAck, StorageType, StreamConfig
from rayjet.errors import DuplicateInProcessError, NotLeaderError
from tests.actors.test_dropped_proposal import leading, no_metrics  # noqa: F401 - a fixture


class HeldProposals:
    """Holds the next proposal of ``replica`` until :meth:`release` (or fails it)."""

    def __init__(self, replica: StreamReplica) -> None:
        self.host = replica.host
        self.real = replica.host.propose
        self.arrived = asyncio.Event()
        self.go = asyncio.Event()
        self.fail: Exception | None = None
        self.held = 0
        replica.host.propose = self.propose

    async def propose(self, data: bytes, timeout: float):
        if self.held == 0:
            self.held += 1
            self.arrived.set()
            await self.go.wait()
            if self.fail is not None:
                raise self.fail
        return await self.real(data, timeout)

    def release(self, fail: Exception | None = None) -> None:
        self.fail = fail
        self.go.set()


def _replica(tmp_path) -> StreamReplica:
    cfg = StreamConfig(name="S", subjects=["S.>"], storage=StorageType.MEMORY,
                       duplicate_window=60)
    return StreamReplica(cfg.to_dict(), "G", "r0", ["r0"], str(tmp_path))


async def _until_waiting(replica: StreamReplica, tasks: list[asyncio.Task]) -> None:
    """Let ``tasks`` run until each has met the copy in flight and waits on an apply."""
    for _ in range(200):
        await asyncio.sleep(0)
    assert not any(t.done() for t in tasks), "a copy did not wait for the one in flight"


def test_concurrent_copies_of_one_id_are_acked_as_duplicates(tmp_path):
    async def run():
        replica = _replica(tmp_path)
        await leading(replica)
        try:
            held = HeldProposals(replica)
            msg = ("S.a", b"payload", {"Nats-Msg-Id": "order-1"})
            first = asyncio.create_task(replica.publish([msg]))
            await held.arrived.wait()
            others = [asyncio.create_task(replica.publish([msg], timeout=10))
                      for _ in range(3)]
            await _until_waiting(replica, others)
            held.release()
            assert await first == [1]
            answers = [(await t)[0] for t in others]
            assert all(isinstance(a, PubAck) for a in answers), answers
            assert [(a.seq, a.duplicate) for a in answers] == [(1, True)] * 3
            assert replica.machine.store.fast_state().msgs == 1
        finally:
            await replica.shutdown()

    asyncio.run(run())


def test_a_copy_whose_original_failed_is_stored_itself(tmp_path):
    async def run():
        replica = _replica(tmp_path)
        await leading(replica)
        try:
            held = HeldProposals(replica)
            msg = ("S.a", b"payload", {"Nats-Msg-Id": "order-2"})
            first = asyncio.create_task(replica.publish([msg]))
            await held.arrived.wait()
            retry = asyncio.create_task(replica.publish([msg], timeout=10))
            await _until_waiting(replica, [retry])
            # the original's proposal is dropped: the projection starts again without it
            held.release(NotLeaderError("dropped by raft", group="G"))
            with pytest.raises(NotLeaderError):
                await first
            assert await retry == [1]  # the retry is the copy that is stored
            got = await replica.read_range(1, 10)
            assert got["seq"] == [1] and got["data"] == [b"payload"]
        finally:
            await replica.shutdown()

    asyncio.run(run())


def test_a_copy_that_outwaits_its_timeout_gets_10158(tmp_path):
    async def run():
        replica = _replica(tmp_path)
        await leading(replica)
        try:
            held = HeldProposals(replica)
            msg = ("S.a", b"payload", {"Nats-Msg-Id": "order-3"})
            first = asyncio.create_task(replica.publish([msg]))
            await held.arrived.wait()
            (answer,) = await replica.publish([msg], timeout=0.2)
            assert isinstance(answer, DuplicateInProcessError) and answer.err_code == 10158
            held.release()
            assert await first == [1]
            # the copy may be sent again: now it is the stored message's duplicate
            (again,) = await replica.publish([msg])
            assert (again.seq, again.duplicate) == (1, True)
        finally:
            await replica.shutdown()

    asyncio.run(run())


def test_table_rows_meeting_a_copy_in_flight_wait_for_it(tmp_path):
    async def run():
        replica = _replica(tmp_path)
        await leading(replica)
        try:
            held = HeldProposals(replica)
            first = asyncio.create_task(
                replica.publish([("S.a", b"x", {"Nats-Msg-Id": "t-1"})]))
            await held.arrived.wait()
            table = pa.table({"subject": ["S.b", "S.c"],
                              "data": pa.array([b"x", b"y"], pa.binary()),
                              "msg_id": ["t-1", "t-1"]})
            rows = asyncio.create_task(replica.publish_columns(table, timeout=10))
            await _until_waiting(replica, [rows])
            held.release()
            assert await first == [1]
            answer = await rows
            assert answer["runs"] == []
            assert [(a.seq, a.duplicate) for a in answer["rows"].values()] == [(1, True)] * 2
            assert replica.machine.store.fast_state().msgs == 1
        finally:
            await replica.shutdown()

    asyncio.run(run())
