"""``python -m rayjet.sim``: run simulator seeds, or replay one with a trace.

``--replica`` runs the whole-replica simulator (three real stream replicas on real files,
see README.md) instead of the raft-core one.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from rayjet.raft import MUTATIONS
from rayjet.sim.replica_faults import FAULT_CLASSES, KNOWN_FAILING
from rayjet.sim.replica_faults import MUTATIONS as REPLICA_MUTATIONS
from rayjet.sim.runner import CHAOS_TICKS, LIVENESS_TICKS, Result, Stats, run_seed


def _run(args: tuple[int, str | None, int, int]) -> Result:
    seed, mutation, chaos, liveness = args
    return run_seed(seed, mutation, chaos_ticks=chaos, liveness_ticks=liveness)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rayjet.sim", description=__doc__)
    ap.add_argument("--seeds", type=int, default=1000, help="run this many seeds (default 1000)")
    ap.add_argument("--start", type=int, default=0, help="first seed of the range")
    ap.add_argument("--seed", type=int, help="run only this seed")
    ap.add_argument("--trace", action="store_true", help="print every step of --seed")
    ap.add_argument("--mutation", metavar="NAME",
                    help="switch off one safety rule (expect failures): in the raft core "
                    f"({', '.join(MUTATIONS)}), or with --replica in the replica shell "
                    f"({', '.join(REPLICA_MUTATIONS)})")
    ap.add_argument("--ticks", type=int, default=CHAOS_TICKS, help="ticks of the chaos phase")
    ap.add_argument("--liveness-ticks", type=int, default=LIVENESS_TICKS,
                    help="ticks allowed for progress after healing")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--keep-going", action="store_true", help="do not stop at the first failure")
    rep = ap.add_argument_group("whole replicas (--replica)")
    rep.add_argument("--replica", action="store_true",
                     help="simulate three real stream replicas (store, raft log, state "
                     "machine on real files) under crashes, power loss and disk faults")
    rep.add_argument("--with", dest="with_", action="append", default=[], metavar="CLASS",
                     help="also inject these fault classes (comma-separated), e.g. the "
                     f"known-failing ones: {', '.join(KNOWN_FAILING) or 'none'}")
    rep.add_argument("--without", action="append", default=[], metavar="CLASS",
                     help="leave these fault classes out (comma-separated); classes: "
                     + ", ".join(FAULT_CLASSES))
    rep.add_argument("--publishes", default="100-300", metavar="LO-HI",
                     help="messages published per seed, drawn in this range (default 100-300)")
    a = ap.parse_args(argv)
    if a.replica:
        return replica_main(ap, a)
    if a.mutation is not None and a.mutation not in MUTATIONS:
        ap.error(f"--mutation: choose from {', '.join(MUTATIONS)}")

    if a.seed is not None:
        trace = print if a.trace else None
        r = run_seed(a.seed, a.mutation, trace, chaos_ticks=a.ticks,
                     liveness_ticks=a.liveness_ticks)
        if r.ok:
            print(f"seed {a.seed}: ok ({r.tick} ticks, {r.stats.leaders} terms with a leader, "
                  f"{r.stats.committed} committed)")
            return 0
        print(f"seed {a.seed}: FAILED in the {r.phase} phase at tick {r.tick}: {r.error}")
        return 1

    seeds = range(a.start, a.start + a.seeds)
    work = [(s, a.mutation, a.ticks, a.liveness_ticks) for s in seeds]
    t0 = time.perf_counter()
    total, failures = Stats(), []
    if a.jobs > 1:
        with ProcessPoolExecutor(a.jobs) as pool:
            results = pool.map(_run, work, chunksize=8)
            for r in results:
                total.add(r.stats)
                if not r.ok:
                    failures.append(r)
                    if not a.keep_going:
                        break
    else:
        for w in work:
            r = _run(w)
            total.add(r.stats)
            if not r.ok:
                failures.append(r)
                if not a.keep_going:
                    break
    dt = time.perf_counter() - t0
    label = f" with mutation {a.mutation!r}" if a.mutation else ""
    ran = len(work) if (a.keep_going or not failures) else None
    print(f"seeds {a.start}..{a.start + a.seeds - 1}{label}: "
          f"{'all ran' if ran else 'stopped at first failure'} in {dt:.1f}s")
    print(f"  totals: {total.leaders} terms with a leader, {total.committed} entries committed, "
          f"{total.proposals} proposals, {total.crashes} crashes, {total.partitions} partitions, "
          f"{total.snapshots_sent} snapshots sent, {total.conf_changes} membership changes, "
          f"{total.transfers} transfers, {total.reads} reads checked, {total.messages} messages "
          f"({total.dropped} lost), {total.quiet_ticks} node-ticks quiescent")
    for r in failures:
        print(f"FAILED seed {r.seed} ({r.phase} phase, tick {r.tick}): {r.error}")
        print(f"  replay: python -m rayjet.sim --seed {r.seed} --trace"
              + (f" --mutation {a.mutation}" if a.mutation else ""))
    if not failures:
        print("  zero invariant violations")
    return 1 if failures else 0


def _replica_faults(ap: argparse.ArgumentParser, a: argparse.Namespace) -> frozenset[str]:
    def names(values: list[str]) -> set[str]:
        out = {n.strip() for v in values for n in v.split(",") if n.strip()}
        unknown = out - set(FAULT_CLASSES)
        if unknown:
            ap.error(f"unknown fault classes {sorted(unknown)}; classes: "
                     + ", ".join(FAULT_CLASSES))
        return out

    return frozenset((set(FAULT_CLASSES) - set(KNOWN_FAILING) | names(a.with_))
                     - names(a.without))


def _run_replica(args: tuple[int, str | None, frozenset[str], tuple[int, int]]):
    from rayjet.sim.replica import run_replica_seed  # the store, the log: only if asked

    seed, mutation, faults, publishes = args
    return run_replica_seed(seed, mutation=mutation, faults=faults, publishes=publishes)


def replica_main(ap: argparse.ArgumentParser, a: argparse.Namespace) -> int:
    from rayjet.sim.replica import ReplicaStats, run_replica_seed

    if a.mutation is not None and a.mutation not in REPLICA_MUTATIONS:
        ap.error(f"--mutation with --replica: choose from {', '.join(REPLICA_MUTATIONS)}")
    faults = _replica_faults(ap, a)
    try:
        lo, _, hi = a.publishes.partition("-")
        publishes = (int(lo), int(hi or lo))
    except ValueError:
        ap.error("--publishes: LO-HI, e.g. 100-300")
    flags = ""
    if a.mutation:
        flags += f" --mutation {a.mutation}"
    extra = sorted(faults - (set(FAULT_CLASSES) - set(KNOWN_FAILING)))
    missing = sorted((set(FAULT_CLASSES) - set(KNOWN_FAILING)) - faults)
    if extra:
        flags += f" --with {','.join(extra)}"
    if missing:
        flags += f" --without {','.join(missing)}"
    if a.publishes != "100-300":
        flags += f" --publishes {a.publishes}"
    if a.seed is not None:
        trace = print if a.trace else None
        r = run_replica_seed(a.seed, trace, mutation=a.mutation, faults=faults,
                             publishes=publishes)
        s = r.stats
        if r.ok:
            print(f"seed {a.seed}: ok ({r.tick} ticks, {s.publishes} published, {s.acked} "
                  f"acknowledged, {s.stored} stored on every replica)")
            return 0
        print(f"seed {a.seed}: FAILED in the {r.phase} phase at tick {r.tick}: {r.error}")
        return 1
    work = [(s, a.mutation, faults, publishes) for s in range(a.start, a.start + a.seeds)]
    t0 = time.perf_counter()
    total, failures, ran = ReplicaStats(), [], 0
    pool = ProcessPoolExecutor(a.jobs) if a.jobs > 1 else None
    try:
        results = pool.map(_run_replica, work, chunksize=2) if pool else \
            map(_run_replica, work)
        for r in results:
            ran += 1
            total.add(r.stats)
            if not r.ok:
                failures.append(r)
                if not a.keep_going:
                    break
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    dt = time.perf_counter() - t0
    label = f" with mutation {a.mutation!r}" if a.mutation else ""
    print(f"replica seeds {a.start}..{a.start + a.seeds - 1}{label}: "
          f"{'all ran' if ran == len(work) else f'stopped at first failure after {ran}'} "
          f"in {dt:.1f}s ({ran / dt if dt else 0:.2f} seeds/s)")
    print(f"  totals: {total.publishes} published, {total.acked} acknowledged, "
          f"{total.duplicates} duplicate PubAcks, {total.leaders} leaderships, "
          f"{total.crashes} crashes, {total.power_losses} power losses "
          f"({total.bytes_lost} unsynced bytes lost), {total.damages} files damaged, "
          f"{total.rejoins} rejoins, {total.store_damage} stores repaired, "
          f"{total.disk_errors} replicas stopped by disk errors, {total.copies} store "
          f"copies, {total.snapshots_sent} snapshots sent, {total.partitions} partitions, "
          f"{total.messages} messages ({total.dropped} lost)")
    if extra or missing:
        print(f"  fault classes: {', '.join(sorted(faults))}")
    for r in failures:
        print(f"FAILED seed {r.seed} ({r.phase} phase, tick {r.tick}): {r.error}")
        print(f"  replay: python -m rayjet.sim --replica --seed {r.seed} --trace{flags}")
    if not failures:
        print("  zero invariant violations")
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # e.g. `--trace | head`
        sys.stderr.close()
        sys.exit(0)
