"""A meta member in-process (no Ray): a real MetaMember ``m0`` whose raft host is pumped by
an in-memory network, with two plain replica groups of the catalogue as its peers.

A member whose files are damaged rejoins empty and catches up from the leader; one that
cannot open them at all stays up, says why, and opens them once it can; and orphan
collection (which deletes replica actors and directories) runs only on a leader whose
catalogue is the committed one."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from rayjet.actors import host_pools, meta_reconcile, metrics, replica_collection
from rayjet.actors import meta as meta_mod
from rayjet.actors.meta import MetaMember
from rayjet.actors.raft_host import META_COMPACT_ENV, meta_group_options
from rayjet.api.account import AccountLimits
from rayjet.errors import NotLeaderError
from rayjet.meta import Catalogue
from rayjet.meta.catalogue import encode_meta_op
from rayjet.raft import MessageType
from rayjet.replication import MemoryLog, ReplicaGroup
from rayjet.replication.meta_machine import MetaMachine, unsettled
from rayjet.replication.rejoin import DAMAGED_SUFFIX
from rayjet.replication.wal import REJOINING

MEMBERS = ["m0", "m1", "m2"]


class QuietSender:
    """Stands for PeerSender: no Ray here (a Cluster routes the member's messages)."""

    def __init__(self, _name_of) -> None:
        pass

    def __call__(self, peer, messages) -> None:
        pass

    async def watch(self, peer) -> None:
        await asyncio.Event().wait()

    async def handle(self, peer):
        raise ValueError(f"no actor for {peer} here")


@pytest.fixture(autouse=True)
def in_process(monkeypatch):
    monkeypatch.setattr(metrics, "_SINK", metrics.NullSink())
    monkeypatch.setattr(meta_mod, "PeerSender", QuietSender)
    monkeypatch.setattr(host_pools, "start_host_pool", lambda *a, **k: [])
    monkeypatch.setattr(meta_reconcile, "RECONCILE_EVERY", 3600.0)
    monkeypatch.setenv(META_COMPACT_ENV, "3")  # snapshots after 3 entries


class Cluster:
    def __init__(self, data_dir: Path, peers: dict[str, ReplicaGroup] | None = None) -> None:
        self.member = MetaMember("m0", MEMBERS, str(data_dir))
        if self.member.host is not None:
            self.member._started = True  # no tick loop: the test drives raft
            self.member.host.send = self.deliver
        self.peers = peers or {m: ReplicaGroup(m, MemoryLog(), MetaMachine(Catalogue()),
                                               voters=MEMBERS, options=meta_group_options())
                               for m in MEMBERS[1:]}
        self.drop: set[MessageType] = set()  # message types lost on the way
        self.step_only = False  # the member's raft takes messages but is not pumped

    @property
    def group(self) -> ReplicaGroup:
        return self.member.host.group

    def deliver(self, to: str, messages) -> None:
        messages = [m for m in messages if m.type not in self.drop]
        if messages:
            asyncio.get_running_loop().call_soon(self._arrive, to, messages)

    def _arrive(self, to: str, messages) -> None:
        if to == "m0":
            if self.step_only:
                self.group.step(messages)
            else:
                self.member.host.receive(messages)
            return
        peer = self.peers[to]
        peer.step(messages)
        out = peer.process()
        for name in out.snapshots_sent:
            peer.report_snapshot(name, True)
        for m in out.messages:
            self.deliver(m.to, [m])

    async def settle(self) -> None:
        for _ in range(200):
            await asyncio.sleep(0)

    async def elect(self) -> None:
        """m0 stands for election."""
        self.group.campaign()
        self.member.host.pump()
        await self.settle()

    async def tick_peers(self, until) -> None:
        """The peers' clocks run (elections, heartbeats) until ``until()``."""
        for _ in range(300):
            if until():
                return
            for peer in self.peers.values():
                peer.tick()
                for m in peer.process().messages:
                    self.deliver(m.to, [m])
            await self.settle()
        raise AssertionError("not within 300 ticks")

    async def commit_ops(self, n: int) -> None:
        for _ in range(n):
            await self.member.set_limits(AccountLimits().to_dict())


silent_hosts: list[str] = []  # hosts the listing in `orphan` reports as not answering


@pytest.fixture
def orphan(tmp_path, monkeypatch):
    """A replica directory of a group the catalogue does not have; listing replicas and
    directories is recorded."""
    silent_hosts.clear()
    path = tmp_path / "streams" / "GONE-7" / "r0"
    path.mkdir(parents=True)
    listed: list[str] = []

    async def running_replicas(unanswered=None, **_kwargs):
        listed.append("actors")
        if silent_hosts and unanswered is not None:
            unanswered += silent_hosts
        return set()

    def local_group_dirs(_data_dir):
        listed.append("dirs")
        return [("stream", "GONE-7", path)] if path.exists() else []

    monkeypatch.setattr(replica_collection, "running_replicas", running_replicas)
    monkeypatch.setattr(replica_collection, "local_group_dirs", local_group_dirs)
    return path, listed


def test_a_settled_leader_collects_an_orphan_directory(tmp_path, orphan):
    path, listed = orphan

    async def main():
        c = Cluster(tmp_path / "data")
        await c.elect()
        assert c.group.is_leader and unsettled(c.group) is None
        stats = await c.member.collect_orphans()
        assert not stats.get("skipped_now") and stats["dirs"] == 1
        assert not path.exists() and listed == ["actors", "dirs"]
        assert stats["again_soon"]  # it collected: the next pass comes soon to check
        stats = await c.member.collect_orphans()
        assert stats["dirs"] == 1 and not stats["again_soon"]  # nothing left

    asyncio.run(main())


def test_a_collection_that_did_not_hear_from_a_host_asks_for_another_soon(tmp_path, orphan):
    path, _ = orphan
    path.rmdir()
    silent_hosts.append("rayjet.host.n1.0")  # its replicas may be orphans: unknown

    async def main():
        c = Cluster(tmp_path / "data")
        await c.elect()
        stats = await c.member.collect_orphans()
        assert stats["dirs"] == 0 and stats["actors"] == 0 and stats["again_soon"]
        silent_hosts.clear()  # it answers again
        assert not (await c.member.collect_orphans())["again_soon"]

    asyncio.run(main())


def test_a_leader_without_an_entry_of_its_term_committed_collects_nothing(tmp_path, orphan):
    path, listed = orphan

    async def main():
        c = Cluster(tmp_path / "data")
        c.drop = {MessageType.APP}  # elected, but its first entry reaches no one
        await c.elect()
        assert c.group.is_leader
        assert "committed" in unsettled(c.group)
        stats = await c.member.collect_orphans()
        assert "committed" in stats["skipped_now"] and stats["skipped"] == 1
        assert path.exists() and listed == []  # not even listed

    asyncio.run(main())


def test_a_leader_that_has_not_applied_its_log_collects_nothing(tmp_path, orphan):
    path, listed = orphan

    async def main():
        c = Cluster(tmp_path / "data")
        await c.elect()
        await c.commit_ops(2)
        # an entry commits (the followers' answers are taken) but is not applied yet
        c.step_only = True
        c.group.propose(encode_meta_op(c.member.catalogue.prepare_set_limits(
            AccountLimits(max_streams=5))))
        c.member.host.pump()
        await c.settle()
        assert c.group.node.raft.log.committed > c.group.applied
        assert "applied" in unsettled(c.group)
        stats = await c.member.collect_orphans()
        assert "applied" in stats["skipped_now"]
        assert path.exists() and listed == []
        # applied: now it collects
        c.step_only = False
        c.member.host.pump()
        await c.settle()
        assert unsettled(c.group) is None
        assert (await c.member.collect_orphans())["dirs"] == 1 and not path.exists()

    asyncio.run(main())


def _flip_bits(path: Path, count: int = 8, seed: int = 3) -> None:
    raw = bytearray(path.read_bytes())
    rng = random.Random(seed)
    for _ in range(count):
        pos = rng.randrange(len(raw) // 4, len(raw))
        raw[pos] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(raw))


def test_a_member_with_a_damaged_snapshot_rejoins_empty_and_catches_up(tmp_path):
    data = tmp_path / "data"
    root = data / "meta" / "m0"

    async def main():
        c = Cluster(data)
        await c.elect()
        await c.commit_ops(6)
        digest = c.member.catalogue.digest()
        await c.member.shutdown()
        assert (root / "snapshot.bin").exists()
        _flip_bits(root / "snapshot.bin")

        again = Cluster(data, peers=c.peers)  # its peers hold the catalogue
        member = again.member
        assert member.damage and "StoreCorruptionError" in member.damage
        assert (root / REJOINING).exists()
        assert (data / "meta" / f"m0{DAMAGED_SUFFIX}" / "snapshot.bin").exists()
        st = await member.status()
        assert st["rejoining"] and st["damage"] == member.damage
        assert st["catalogue"]["applied"] == 0
        # it neither stands for election nor (leaderless) collects anything
        await again.elect()
        assert not again.group.is_leader and unsettled(again.group) is not None
        with pytest.raises(NotLeaderError):
            await member.collect_orphans()
        # a peer leads and brings it up to date; then it votes again
        await again.tick_peers(lambda: not again.group.rejoining)
        st = await member.status()
        assert not st["rejoining"] and not (root / REJOINING).exists()
        assert st["catalogue"]["applied"] > 0
        leader = next(p for p in again.peers.values() if p.is_leader)
        assert leader.sm.catalogue.digest() == st["catalogue"]["digest"] == digest
        await member.shutdown()

    asyncio.run(main())


def test_a_member_that_cannot_open_its_files_stays_up_and_opens_them_later(
        tmp_path, monkeypatch):
    monkeypatch.setattr(meta_mod, "REOPEN_EVERY", 0.01)
    data = tmp_path / "data"
    blocker = data / "meta" / "m0"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("not a directory")  # an OSError, not damage: nothing is moved

    async def main():
        member = MetaMember("m0", MEMBERS, str(data))
        assert member.host is None and "m0" in member.failure
        st = await member.status()
        assert st["role"] is None and st["failure"] == member.failure
        with pytest.raises(NotLeaderError, match="cannot open its files"):
            await member.ping()  # connect() and clients go on to the other members
        await member.receive([])  # raft messages to it are dropped
        assert blocker.read_text() == "not a directory"
        blocker.unlink()
        for _ in range(500):
            if member.host is not None:
                break
            await asyncio.sleep(0.01)
        assert member.host is not None and member.failure is None
        assert await member.ping() == "m0"
        assert (await member.status())["failure"] is None
        await member.shutdown()

    asyncio.run(main())
