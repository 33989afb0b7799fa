"""A small in-process cluster with a perfect network, for unit tests."""

from __future__ import annotations

import random

from rayjet.raft import (
    ConfChange,
    Config,
    EntryType,
    MemoryLogStorage,
    Message,
    RawNode,
    Role,
    bootstrap,
)


class Cluster:
    def __init__(self, n: int = 3, seed: int = 0, **cfg) -> None:
        self.ids = [f"n{i}" for i in range(1, n + 1)]
        self.storage = {}
        self.nodes = {}
        self.applied: dict[str, list[bytes]] = {}
        self.reads: dict[str, list] = {}
        self.down: set[str] = set()
        self.queue: list[Message] = []
        for nid in self.ids:
            st = MemoryLogStorage()
            bootstrap(st, self.ids)
            self.storage[nid] = st
            self.nodes[nid] = RawNode(Config(nid, rng=random.Random(f"{seed}{nid}"), **cfg), st)
            self.applied[nid] = []
            self.reads[nid] = []

    def process(self, nid: str) -> None:
        rn = self.nodes[nid]
        while rn.has_ready():
            self.handle(nid, rn.ready())

    def deliver_once(self) -> list[Message]:
        """Step every queued message once (no Ready handling); returns them."""
        msgs, self.queue = self.queue, []
        for m in msgs:
            if m.to in self.nodes and m.to not in self.down and m.frm not in self.down:
                self.nodes[m.to].step(m)
        return msgs

    def handle(self, nid: str, rd) -> None:
        """The application's side of one Ready: persist, send, apply, advance."""
        rn, st = self.nodes[nid], self.storage[nid]
        if rd.snapshot is not None:
            st.apply_snapshot(rd.snapshot)
            self.applied[nid] = [d for d in rd.snapshot.data.split(b",") if d]
        st.append(rd.entries)
        if rd.hard_state is not None:
            st.set_hard_state(rd.hard_state)
        self.queue.extend(rd.messages)
        for e in rd.committed_entries:
            if e.type == EntryType.CONF_CHANGE:
                rn.apply_conf_change(ConfChange.decode(e.data))
            elif e.data:
                self.applied[nid].append(e.data)
        self.reads[nid].extend(rd.read_states)
        rn.advance(rd)

    def stabilize(self, limit: int = 10_000) -> None:
        for _ in range(limit):
            for nid in self.ids:
                if nid not in self.down:
                    self.process(nid)
            if not self.queue:
                return
            self.deliver_once()
        raise AssertionError("cluster did not settle")

    def elect(self, nid: str = "n1") -> RawNode:
        self.nodes[nid].campaign()
        self.stabilize()
        assert self.nodes[nid].raft.role == Role.LEADER
        return self.nodes[nid]

    def tick_all(self, times: int = 1) -> None:
        for _ in range(times):
            for nid in self.ids:
                if nid not in self.down:
                    self.nodes[nid].tick()
            self.stabilize()

    def leader(self) -> str | None:
        leads = [n for n in self.ids if n not in self.down
                 and self.nodes[n].raft.role == Role.LEADER]
        return max(leads, key=lambda n: self.nodes[n].raft.term) if leads else None
