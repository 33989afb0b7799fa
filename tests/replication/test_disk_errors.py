"""A replica whose disk fails (an apply or an fsync raises OSError) stops taking part in
its group instead of answering the error as a refusal and diverging: it applies,
acknowledges and votes no more, says why, and the others go on. A refusal every replica
makes alike (an APIError) still answers the proposer."""

from __future__ import annotations

import asyncio
import contextlib
import errno

import pytest

from rayjet.actors.raft_host import RaftHost
from rayjet.errors import StoreLimitError
from rayjet.replication import GroupOptions, MemoryLog, ReplicaGroup
from rayjet.replication.group import ReplicaFailedError, is_local_failure
from tests.replication.test_group import ListMachine, make


def _values(g):
    return [d for _, d in g.sm.items]


def test_a_disk_error_while_applying_stops_that_replica_and_the_group_goes_on():
    net = make(["a", "b", "c"])
    leader = net.elect()
    leader.propose(b"v0")
    net.run()
    sick = next(g for g in net.groups.values() if g is not leader)
    sick.sm.fail_with = OSError(errno.ENOSPC, "No space left on device")
    leader.propose(b"v1")
    with pytest.raises(ReplicaFailedError):
        net.run()
    assert sick.failure and "ENOSPC" not in sick.failure or "No space" in sick.failure
    assert sick.status()["failure"] == sick.failure
    net.down.add(sick.id)  # it answers nothing any more: what its peers see
    for i in range(2, 6):
        leader.propose(b"v%d" % i)
    net.run()
    healthy = [g for g in net.groups.values() if g is not sick]
    for g in healthy:
        assert _values(g) == [b"v0", b"v1", b"v2", b"v3", b"v4", b"v5"]
    assert _values(sick) == [b"v0"]  # never a wrong answer recorded as applied
    with pytest.raises(ReplicaFailedError):
        sick.process()


@pytest.mark.parametrize("exc, local", [
    (OSError(errno.EIO, "Input/output error"), True),
    (MemoryError(), True),
    (StoreLimitError(err="maximum messages exceeded"), False),
    (ReplicaFailedError(spec="STREAM_STORE_FAILED", description="x"), True),
])
def test_which_errors_stop_a_replica(exc, local):
    assert is_local_failure(exc) is local


@contextlib.asynccontextmanager
async def _leading_host(storage):
    """A group of one over ``storage`` under its RaftHost, once it leads."""
    group = ReplicaGroup("a", storage, ListMachine(), voters=["a"],
                         options=GroupOptions(sync_always=True))
    host = RaftHost(group, lambda peer, msgs: None, tick_seconds=0.01)
    host.start(lead_at_once=True)
    try:
        for _ in range(200):
            if group.is_leader:
                break
            await asyncio.sleep(0.01)
        yield group, host
    finally:
        await host.stop()


class FailingSyncLog(MemoryLog):
    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    def sync(self) -> None:
        if self.fail:
            raise OSError(errno.EIO, "Input/output error")


def test_a_failed_fsync_answers_no_proposer_and_stops_the_replica():
    async def run():
        storage = FailingSyncLog()
        async with _leading_host(storage) as (group, host):
            assert await host.propose(b"ok", timeout=5) == 1
            storage.fail = True
            with pytest.raises(ReplicaFailedError, match="fsync"):
                await host.propose(b"lost", timeout=5)
            assert group.failure and "fsync" in group.failure
            with pytest.raises(ReplicaFailedError):
                await host.propose(b"after", timeout=5)

    asyncio.run(run())


class FailingWriteLog(MemoryLog):
    """A raft log whose writes fail on demand (what ENOSPC does to a full disk)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    def save(self, hard_state, entries, snapshot=None) -> None:
        if self.fail and entries:
            raise OSError(errno.ENOSPC, "No space left on device")
        super().save(hard_state, entries, snapshot)


def test_a_failed_log_write_stops_the_replica_and_fails_its_waiters():
    """A write of the raft log that fails leaves the log unsure of what it holds: the
    replica stops (failure set, its proposers answered) rather than log it and go on."""
    async def run():
        storage = FailingWriteLog()
        async with _leading_host(storage) as (group, host):
            assert await host.propose(b"ok", timeout=5) == 1
            storage.fail = True
            with pytest.raises(ReplicaFailedError, match="No space"):
                await host.propose(b"lost", timeout=5)
            assert group.failure and "disk error" in group.failure
            assert [d for _, d in group.sm.items] == [b"ok"]
            with pytest.raises(ReplicaFailedError):
                await host.propose(b"after", timeout=5)

    asyncio.run(run())


def test_a_disk_error_in_a_store_copy_stops_the_replica():
    net = make(["a"])
    group = net.groups["a"]
    with pytest.raises(ReplicaFailedError), group.stop_on_disk_error():
        raise OSError(errno.EIO, "Input/output error")
    assert group.failure == "disk error: OSError: [Errno 5] Input/output error"
    with pytest.raises(ReplicaFailedError):
        group.process()
    with pytest.raises(ValueError), group.stop_on_disk_error():  # not a disk error: no stop
        raise ValueError("bad chunk")
