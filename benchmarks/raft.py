"""Proposals per second through a 3-node raft group, in process, on a perfect network.

Every Ready is handled the way a replica would (persist into MemoryLogStorage, send,
apply, advance), so the figures include the application's side of the loop. The baseline
is one proposal per round trip (propose, then run the group until it is applied everywhere);
the other rows batch many proposals per round trip. Ratios are against that baseline,
measured in the same run.

    .venv/bin/python benchmarks/raft.py [--quick]
"""

from __future__ import annotations

import argparse
import random
import time

from rayjet.raft import Config, MemoryLogStorage, RawNode, bootstrap

PAYLOAD = b"x" * 100


class Group:
    def __init__(self, n: int = 3, **cfg) -> None:
        self.ids = [f"n{i}" for i in range(1, n + 1)]
        self.storage = {}
        self.nodes = {}
        self.applied = dict.fromkeys(self.ids, 0)
        for nid in self.ids:
            st = MemoryLogStorage()
            bootstrap(st, self.ids)
            self.storage[nid] = st
            self.nodes[nid] = RawNode(Config(nid, rng=random.Random(nid), **cfg), st)
        self.nodes["n1"].campaign()
        self.run()

    def run(self) -> None:
        queue = []
        while True:
            for nid in self.ids:
                rn, st = self.nodes[nid], self.storage[nid]
                while rn.has_ready():
                    rd = rn.ready()
                    st.append(rd.entries)
                    if rd.hard_state is not None:
                        st.set_hard_state(rd.hard_state)
                    queue.extend(rd.messages)
                    self.applied[nid] += len(rd.committed_entries)
                    rn.advance(rd)
            if not queue:
                return
            msgs, queue = queue, []
            for m in msgs:
                self.nodes[m.to].step(m)


def measure(total: int, per_round: int, singles: bool = False, **cfg) -> float:
    g = Group(**cfg)
    leader = g.nodes["n1"]
    start = g.applied["n3"]
    t0 = time.perf_counter()
    done = 0
    while done < total:
        k = min(per_round, total - done)
        if singles:
            for _ in range(k):
                leader.propose(PAYLOAD)
        else:
            leader.propose_batch([PAYLOAD] * k)
        g.run()
        done += k
    dt = time.perf_counter() - t0
    assert g.applied["n3"] - start == total
    return total / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller counts (a smoke run)")
    a = ap.parse_args()
    scale = 1 if not a.quick else 10
    rows = [
        ("1 proposal per round trip (baseline)", dict(total=4000 // scale, per_round=1)),
        ("10 propose() calls per round trip", dict(total=20000 // scale, per_round=10,
                                                   singles=True)),
        ("batch of 100 per round trip", dict(total=100000 // scale, per_round=100)),
        ("batch of 1000 per round trip", dict(total=200000 // scale, per_round=1000)),
        ("batch of 1000, max 64 entries/append", dict(total=200000 // scale, per_round=1000,
                                                      max_entries_per_msg=64)),
        ("batch of 1000, 64 KiB/append, 4 in flight",
         dict(total=200000 // scale, per_round=1000, max_size_per_msg=64 * 1024,
              max_inflight_msgs=4)),
    ]
    base = None
    print(f"{'workload (3 voters, 100-byte payloads)':45s} {'proposals/s':>12s} {'ratio':>8s}")
    for label, kw in rows:
        rate = max(measure(**kw) for _ in range(3))
        base = base or rate
        print(f"{label:45s} {rate:12,.0f} {rate / base:7.1f}x")


if __name__ == "__main__":
    main()
