"""The faults of the whole-replica simulator (:mod:`rayjet.sim.replica`): crashes, power
cuts, damaged files, disk errors and partitions, drawn from the run's seed. A mixin of
:class:`~rayjet.sim.replica.ReplicaSimulation`, which holds the state it works on."""

from __future__ import annotations

import os
import zlib

from rayjet.sim.faultfs import FAULT_KINDS
from rayjet.sim.replica_faults import DAMAGE_CLASSES
from rayjet.sim.replica_state import SimReplica


class ReplicaChaos:
    """Fault injection for ReplicaSimulation (its attributes: replicas, rng, p, fs, ...)."""

    def _fault(self, name: str, rate: float) -> bool:
        return name in self.faults and rate > 0 and self.rng.random() < rate

    def _chaos(self) -> None:
        p, rng = self.p, self.rng
        if self.io_fault_until and self.now >= self.io_fault_until:
            self.io_fault_until = 0
            for r in self.replicas.values():
                fault = self.fs.clear_fault(r.root)
                if fault is not None:
                    self._log(f"{r.id}: its {fault.kind} fault clears ({fault.hits} calls "
                              "failed)")
        up = [r for _, r in sorted(self.replicas.items()) if r.up]
        if up and self._fault("crash", p.crash_rate):
            r = rng.choice(up)
            self._crash(r, "crash")
        if p.power_rate and rng.random() < p.power_rate:
            every = rng.random() < p.power_all_share
            if ("power-all" if every else "power-one") in self.faults:
                self._power_loss(every)
        if self.sick is None and self._fault_any_damage() and rng.random() < p.damage_rate:
            copying = [r.id for r in self.replicas.values() if r.active and r.group.copying]
            if not copying or "damage-while-copying" in self.faults:
                self._damage(rng.choice(sorted(self.replicas)))
        if self.sick is None and "disk-errors" in self.faults and \
                p.io_fault_rate and rng.random() < p.io_fault_rate:
            cands = [r for _, r in sorted(self.replicas.items()) if r.active]
            if cands:
                r = rng.choice(cands)
                kind = rng.choice(FAULT_KINDS)
                self.fs.set_fault(r.root, kind, partial=rng.random() < 0.5)
                self.io_fault_until = self.now + rng.randint(3, 60)
                self._make_sick(r)
                self._log(f"{r.id}: disk fault {kind} until tick {self.io_fault_until}")
        if self._fault("partition", p.partition_rate):
            self._partition()

    def _fault_any_damage(self) -> bool:
        return any(f in DAMAGE_CLASSES for f in self.faults)

    def _crash(self, r: SimReplica, why: str) -> None:
        """The replica's process dies: its objects are abandoned, its files stay."""
        n = self.fs.abandon(r.root)
        self._release(r)
        r.up = False
        r.group = r.machine = None
        r.failed = None
        r.pending.clear()
        r.held = []
        r.copy = None
        r.serving_since = -1
        r.down_until = self.now + self.rng.randint(1, 40)
        self.stats.crashes += 1
        self._log(f"{r.id} CRASHES ({why}; {n} descriptors abandoned), back at tick "
                  f"{r.down_until}")
        for other in self.replicas.values():
            # a quiet follower watches its leader's actor: Ray reports the death
            if other.active and other.group.quiet and other.group.leader == r.id:
                other.group.report_peer_down(r.id)
                self._turn(other)

    def _release(self, r: SimReplica) -> None:
        """Close what only a dying process would: the raw descriptors of the abandoned
        store's block files and of the log's side file (best effort: the log's private
        fields)."""
        fds = []
        if r.machine is not None:
            store = r.machine.store
            for blk in map(store.block, store.block_numbers()):
                if getattr(blk, "fd", -1) >= 0:
                    fds.append(blk.fd)
                    blk.fd = -1
        if r.group is not None:
            mark = getattr(r.group.storage, "_synced", None)
            if isinstance(getattr(mark, "_fd", None), int):
                fds.append(mark._fd)
                mark._fd = None
        self.fs.release(fds)

    def _power_loss(self, every: bool) -> None:
        rng = self.rng
        victims = sorted(self.replicas) if every else [rng.choice(sorted(self.replicas))]
        torn = "torn" in self.faults and rng.random() < self.p.torn_share
        if "power-loss-during-store-repair" not in self.faults:
            spared = [v for v in victims if self.replicas[v].repairing_store]
            if spared:  # known failing: the cut would undo the repair and hide the damage
                self._log(f"power cut spares {', '.join(spared)} (repairing its store)")
                victims = [v for v in victims if v not in spared]
                if not victims:
                    return
        self.stats.power_losses += 1
        self._log(f"POWER LOSS on {', '.join(victims)}" + (" (torn writes)" if torn else ""))
        for rid in victims:
            r = self.replicas[rid]
            if r.up:
                self._crash(r, "power loss")
            r.claim_stale = True
            lost = self.fs.lose_power(r.root, self._torn_rng if torn else None)
            total = sum(n for n in lost.values() if n > 0)
            self.stats.bytes_lost += total
            if self.trace is not None:
                self._log(f"  {rid} lost {total} unsynced bytes: " + ", ".join(
                    f"{path} {n:+d}" for path, n in sorted(lost.items())))

    def _damage(self, rid: str) -> None:
        """Damage one file of a replica while it is down (crash it first)."""
        rng = self.rng
        r = self.replicas[rid]
        classes = sorted(f for f in self.faults if f in DAMAGE_CLASSES)
        how_what = rng.choice(classes)
        how, what = how_what.split("-", 1)
        if what == "wal" and r.claim_stale and "wal-damage-after-power-loss" not in self.faults:
            # nothing on its disk says how much of wal.log was fsynced (known failing)
            self._log(f"{rid}: no damage to a raft log that has not fsynced since it lost power")
            return
        if r.up:
            self._crash(r, f"to damage its {what} files")
        self.fs.mark_durable(r.root)  # what the OS had is on the disk (then it rots)
        files = self._files(r, what)
        if not files:
            self._log(f"{rid}: no {what} file to damage")
            return
        path = rng.choice(files)
        spare = None
        if what == "wal" and how == "flip":
            if "flip-wal-sealed-bit" not in self.faults:
                spare = _wal_sealed_bits
            elif rng.random() < 0.25:  # asked for: hit it often
                self._flip_sealed_bit(r, path)
                return
        note = self.fs.damage(path, rng, "truncate" if how == "truncate" else "flip", spare)
        r.repairing_store = what in ("store", "aux")
        self.stats.damages += 1
        self._make_sick(r)
        r.down_until = max(r.down_until, self.now + 1)
        self._log(f"DAMAGE {rid}: {os.path.relpath(path, r.root)} {note}")

    def _flip_sealed_bit(self, r: SimReplica, path: str) -> None:
        """Flip the "sealed" bit of one wal.log record's length (known-failing class
        flip-wal-sealed-bit)."""
        with open(path, "rb") as f:
            raw = f.read()
        at, bit = self.rng.choice(sorted(_wal_sealed_bits(raw)))
        note = self.fs.damage(path, self.rng, "flip", lambda _: set(),
                              at=(at, bit))
        self.stats.damages += 1
        self._make_sick(r)
        r.down_until = max(r.down_until, self.now + 1)
        self._log(f"DAMAGE {r.id}: {os.path.relpath(path, r.root)} {note} (a record's "
                  "sealed bit)")

    def _files(self, r: SimReplica, what: str) -> list[str]:
        store = os.path.join(r.dir, "store")
        raft = os.path.join(r.dir, "raft")

        def ls(d: str, pred) -> list[str]:
            try:
                return [os.path.join(d, n) for n in sorted(os.listdir(d)) if pred(n)]
            except FileNotFoundError:
                return []

        if what == "store":
            return ls(store, lambda n: n.endswith(".blk"))
        if what == "wal":
            return ls(raft, lambda n: n == "wal.log")
        if what == "snapshot":
            return ls(raft, lambda n: n == "snapshot.bin")
        return ls(store, lambda n: not n.endswith((".blk", ".tmp")))  # aux: index, checkpoint

    def _make_sick(self, r: SimReplica) -> None:
        self.sick = r.id
        self._sick_target = self._max_commit  # what some replica knew to be committed

    def _update_sick(self) -> None:
        """The sick replica is well again once it is up, its fault gone, and it applied
        everything committed when it fell sick (so it holds it again)."""
        if self.sick is None:
            return
        r = self.replicas[self.sick]
        if not r.active or self.fs.faults.get(r.root) is not None:
            return
        g = r.group
        if g.copying or g.rejoining or g.applied < self._sick_target:
            return
        self._log(f"{r.id} is well again (applied {g.applied})")
        self.sick = None
        r.repairing_store = False

    def _partition(self) -> None:
        rng = self.rng
        net = self.network
        ids = sorted(self.replicas)
        x = rng.random()
        if x < 0.4 or net.blocked and x < 0.6:
            net.heal()
            self._log("network heals")
            return
        self.stats.partitions += 1
        if x < 0.8:
            leaders = [r.id for r in self.replicas.values() if r.active and r.group.is_leader]
            alone = rng.choice(leaders) if leaders and rng.random() < 0.6 else rng.choice(ids)
            net.partition([[alone], [i for i in ids if i != alone]])
            self._log(f"network partition: {alone} alone")
        else:
            a, b = rng.sample(ids, 2)
            net.block_one_way(a, b)
            self._log(f"network drops everything from {a} to {b}")

    # -- checks -----------------------------------------------------------------------------


def _wal_sealed_bits(raw: bytes) -> set[tuple[int, int]]:
    """The (byte, bit) of each wal.log record's "sealed" flag: the top bit of its length
    word, which the record's checksum does not cover (the log checks it otherwise). Records are
    ``u32 length | u32 crc32(payload) | payload``, after whatever header the file starts
    with: the chain starts at the first offset holding a record whose checksum holds."""
    def record_at(pos: int) -> int:
        """The record's end, or 0 when no valid record starts at ``pos``."""
        if pos + 8 > len(raw):
            return 0
        length = int.from_bytes(raw[pos:pos + 4], "little") & 0x7FFFFFFF
        end = pos + 8 + length
        crc = int.from_bytes(raw[pos + 4:pos + 8], "little")
        ok = 0 < length and end <= len(raw) and zlib.crc32(raw[pos + 8:end]) == crc
        return end if ok else 0

    start = next((p for p in range(min(len(raw), 4096)) if record_at(p)), None)
    out: set[tuple[int, int]] = set()
    pos = start if start is not None else len(raw)
    while pos + 8 <= len(raw):
        out.add((pos + 3, 7))
        end = record_at(pos)
        if not end:
            break  # a torn tail
        pos = end
    return out
