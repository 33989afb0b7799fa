"""A replica whose raft log cannot be loaded rejoins empty (rayjet.replication.rejoin): it
keeps its identity, catches up from the leader, and neither votes nor campaigns until its
log holds a committed entry of its leader's term, so its lost log can never help elect a
leader that misses entries it had acknowledged."""

from __future__ import annotations

import random

import pytest

from rayjet.errors import EncryptionKeyError, StoreCorruptionError
from rayjet.raft import Role
from rayjet.replication import FileLogStorage, GroupOptions, ReplicaGroup
from rayjet.replication.rejoin import DAMAGED_SUFFIX, is_damage, open_or_rejoin
from rayjet.replication.wal import REJOINING
from tests.replication.test_group import ListMachine, Net

NAMES = ["a", "b", "c"]


def _group(tmp_path, name: str, items=None) -> tuple[ReplicaGroup, str | None]:
    root = tmp_path / name

    def opener() -> ReplicaGroup:
        return ReplicaGroup(name, FileLogStorage(root / "raft"), ListMachine(items),
                            voters=NAMES, options=GroupOptions(sync_always=True))

    return open_or_rejoin(root, root / "raft", opener, f"replica {name}")


def _cluster(tmp_path) -> Net:
    return Net({n: _group(tmp_path, n)[0] for n in NAMES})


def _flip_bits(path, count: int = 8, seed: int = 1) -> None:
    raw = bytearray(path.read_bytes())
    rng = random.Random(seed)
    for _ in range(count):
        pos = rng.randrange(len(raw) // 4, len(raw))
        raw[pos] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(raw))


def _restart(net: Net, tmp_path, name: str) -> str | None:
    net.groups[name].storage.close()
    group, damage = _group(tmp_path, name)
    net.groups[name] = group
    return damage


def _values(group: ReplicaGroup) -> list[bytes]:
    return [d for _, d in group.sm.items]


def test_a_damaged_log_rejoins_empty_and_catches_up(tmp_path):
    net = _cluster(tmp_path)
    leader = net.elect()
    for i in range(10):
        leader.propose(b"v%d" % i)
    net.run()
    victim = next(n for n in NAMES if n != leader.id)
    net.groups[victim].storage.close()
    _flip_bits(tmp_path / victim / "raft" / "wal.log")
    damage = _restart(net, tmp_path, victim)
    assert damage is not None and "StoreCorruptionError" in damage
    assert (tmp_path / f"{victim}{DAMAGED_SUFFIX}" / "raft" / "wal.log").exists()  # kept aside
    rejoining = net.groups[victim]
    assert rejoining.rejoining and rejoining.status()["rejoining"]
    assert (tmp_path / victim / "raft" / REJOINING).exists()
    leader.propose(b"after")
    net.run()
    assert _values(rejoining) == [b"v%d" % i for i in range(10)] + [b"after"]
    assert not rejoining.rejoining and not (tmp_path / victim / "raft" / REJOINING).exists()
    # caught up, it votes again: with the leader gone, it and the third elect a leader
    net.down.add(leader.id)
    assert net.elect().id != leader.id


def test_a_rejoining_replica_never_votes_for_a_candidate_missing_acked_entries(tmp_path):
    net = _cluster(tmp_path)
    net.groups["b"].opts.seed = 0
    leader = net.elect()
    a, lagger, acker = leader.id, *[n for n in NAMES if n != leader.id]
    net.down.add(lagger)
    for i in range(10):
        leader.propose(b"acked%d" % i)  # committed by the leader and ``acker`` only
    net.run()
    assert _values(net.groups[acker])[-1] == b"acked9"
    # the leader stops; the replica that acknowledged the entries loses its log
    net.down.add(a)
    net.groups[acker].storage.close()
    _flip_bits(tmp_path / acker / "raft" / "wal.log")
    assert _restart(net, tmp_path, acker) is not None
    net.down.discard(lagger)
    # the lagger campaigns: the rejoining replica's empty log would have granted its vote
    for _ in range(200):
        net.tick()
        assert not any(g.is_leader for n, g in net.groups.items() if n != a), \
            "a replica missing acknowledged entries was elected"
    net.down.discard(a)
    winner = net.elect()
    assert winner.id == a  # only the replica holding the acked entries can win
    winner.propose(b"after")
    net.run()
    for g in net.groups.values():
        assert _values(g)[-11:] == [b"acked%d" % i for i in range(10)] + [b"after"]
    assert not net.groups[acker].rejoining


def test_a_replica_that_stops_while_rejoining_still_rejoins(tmp_path):
    net = _cluster(tmp_path)
    leader = net.elect()
    leader.propose(b"x")
    net.run()
    victim = next(n for n in NAMES if n != leader.id)
    net.groups[victim].storage.close()
    (tmp_path / victim / "raft" / "snapshot.bin").write_bytes(b"RJSNAP1\n garbage")
    assert _restart(net, tmp_path, victim) is not None
    # stopped again before it caught up: it opens as rejoining, not as a fresh replica
    net.down.add(victim)
    damage = _restart(net, tmp_path, victim)
    assert damage is None and net.groups[victim].rejoining
    assert net.groups[victim].node.raft.promotable() is False
    net.down.discard(victim)
    leader.propose(b"y")
    net.run()
    assert _values(net.groups[victim]) == [b"x", b"y"] and not net.groups[victim].rejoining


def test_a_hard_state_past_the_log_is_damage(tmp_path):
    net = _cluster(tmp_path)
    leader = net.elect()
    for i in range(5):
        leader.propose(b"v%d" % i)
    net.run()
    victim = next(n for n in NAMES if n != leader.id)
    net.groups[victim].storage.close()
    hs = FileLogStorage(tmp_path / victim / "raft").hard_state
    assert hs.commit >= 5
    # the entries are cut from the log while the hard state that commits them survived
    scratch = FileLogStorage(tmp_path / "scratch")
    scratch.set_hard_state(hs)
    scratch.close()
    (tmp_path / victim / "raft" / "wal.log").write_bytes(
        (tmp_path / "scratch" / "wal.log").read_bytes())
    (tmp_path / victim / "raft" / "wal.synced").unlink()  # (it would tell the cut first)
    damage = _restart(net, tmp_path, victim)
    assert damage is not None and "RaftError" in damage
    leader.propose(b"z")
    net.run()
    assert _values(net.groups[victim]) == [b"v%d" % i for i in range(5)] + [b"z"]


@pytest.mark.parametrize("exc, damage", [
    (StoreCorruptionError(err="crc"), True),
    (EncryptionKeyError(err="wrong key"), False),
    (OSError(5, "Input/output error"), False),
    (PermissionError("no"), False),
])
def test_what_counts_as_damage(exc, damage):
    assert is_damage(exc) is damage


def test_a_wrong_key_moves_nothing(tmp_path):
    root = tmp_path / "r"
    (root / "raft").mkdir(parents=True)
    (root / "raft" / "wal.log").write_bytes(b"keep me")

    def opener():
        raise EncryptionKeyError(err="the stream's key is wrong")

    with pytest.raises(EncryptionKeyError):
        open_or_rejoin(root, root / "raft", opener, "replica r")
    assert (root / "raft" / "wal.log").read_bytes() == b"keep me"
    assert not (tmp_path / f"r{DAMAGED_SUFFIX}").exists()


def test_the_leader_role_is_never_taken_while_rejoining(tmp_path):
    net = _cluster(tmp_path)
    leader = net.elect()
    leader.propose(b"x")
    net.run()
    victim = next(n for n in NAMES if n != leader.id)
    net.groups[victim].storage.close()
    _flip_bits(tmp_path / victim / "raft" / "wal.log")
    _restart(net, tmp_path, victim)
    # everyone else stops: the rejoining replica alone never campaigns
    for n in NAMES:
        if n != victim:
            net.down.add(n)
    for _ in range(100):
        net.tick()
    assert net.groups[victim].role == Role.FOLLOWER
