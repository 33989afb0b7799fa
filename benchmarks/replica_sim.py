"""A long run of the whole-replica simulator (rayjet.sim.replica): seeds per second, the
failures, and the longest run of consecutive clean seeds.

Seeds are run in order from ``--start`` on ``--jobs`` processes until ``--seconds`` have
passed (the seeds in flight then finish). ``--mutation-seeds N`` first runs seeds 0..N-1
with the mutation no-fsync-before-ack (entries acknowledged before they are fsynced) and
reports how many of them the checker fails: the simulator must notice.

    .venv/bin/python benchmarks/replica_sim.py --seconds 600 --jobs 2
    .venv/bin/python benchmarks/replica_sim.py --seconds 60 --mutation-seeds 100
    .venv/bin/python benchmarks/replica_sim.py --seconds 120 --with damage-while-copying
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

from rayjet.sim.replica import (
    FAULT_CLASSES,
    KNOWN_FAILING,
    ReplicaResult,
    ReplicaStats,
    run_replica_seed,
)


def _run(args: tuple[int, str | None, frozenset[str]]) -> ReplicaResult:
    seed, mutation, faults = args
    return run_replica_seed(seed, mutation=mutation, faults=faults)


def run_for(seconds: float, start: int, jobs: int, faults: frozenset[str],
            mutation: str | None = None, limit: int | None = None
            ) -> tuple[list[ReplicaResult], float]:
    """Seeds from ``start`` on until ``seconds`` pass (or ``limit`` seeds ran); the results
    in seed order and the time taken."""
    t0 = time.perf_counter()
    deadline = t0 + seconds
    results: dict[int, ReplicaResult] = {}
    seed = start
    with ProcessPoolExecutor(jobs) as pool:
        flight = set()
        while True:
            while (len(flight) < jobs * 2 and time.perf_counter() < deadline
                   and (limit is None or seed < start + limit)):
                flight.add(pool.submit(_run, (seed, mutation, faults)))
                seed += 1
            if not flight:
                break
            done, flight = wait(flight, return_when=FIRST_COMPLETED)
            for fut in done:
                r = fut.result()
                results[r.seed] = r
    return [results[s] for s in sorted(results)], time.perf_counter() - t0


def longest_clean(results: list[ReplicaResult]) -> tuple[int, int]:
    """The longest run of consecutive passing seeds: (length, first seed)."""
    best, best_from, run, run_from = 0, 0, 0, 0
    for r in results:
        if r.ok:
            if not run:
                run_from = r.seed
            run += 1
            if run > best:
                best, best_from = run, run_from
        else:
            run = 0
    return best, best_from


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--with", dest="with_", default="", metavar="CLASSES",
                    help=f"add fault classes (known failing: {', '.join(KNOWN_FAILING)})")
    ap.add_argument("--without", default="", metavar="CLASSES")
    ap.add_argument("--mutation-seeds", type=int, default=0,
                    help="first run this many seeds with the mutation no-fsync-before-ack")
    a = ap.parse_args()
    faults = (frozenset(FAULT_CLASSES) - frozenset(KNOWN_FAILING)
              | {c for c in a.with_.split(",") if c}) - {c for c in a.without.split(",") if c}
    flags = "".join(f" --with {c}" for c in sorted(set(KNOWN_FAILING) & faults))
    flags += "".join(f" --without {c}" for c in sorted(
        set(FAULT_CLASSES) - set(KNOWN_FAILING) - faults))

    if a.mutation_seeds:
        results, dt = run_for(1e9, 0, a.jobs, faults, "no-fsync-before-ack",
                              limit=a.mutation_seeds)
        failed = [r for r in results if not r.ok]
        print(f"mutation no-fsync-before-ack: {len(failed)} of {len(results)} seeds fail "
              f"({dt:.1f}s)" + (f"; first: seed {failed[0].seed}: {failed[0].error}"
                                 if failed else "; NOT CAUGHT"))

    results, dt = run_for(a.seconds, a.start, a.jobs, faults)
    total = ReplicaStats()
    for r in results:
        total.add(r.stats)
    failed = [r for r in results if not r.ok]
    best, best_from = longest_clean(results)
    last = results[-1].seed if results else a.start
    print(f"seeds {a.start}..{last}: {len(results)} in {dt:.1f}s on {a.jobs} processes: "
          f"{len(results) / dt:.2f} seeds/s; {len(failed)} failed; longest clean run "
          f"{best} seeds (from seed {best_from})")
    print(f"  per seed: {total.publishes / max(1, len(results)):.0f} published, "
          f"{total.acked / max(1, len(results)):.0f} acknowledged, "
          f"{total.ticks / max(1, len(results)):.0f} ticks; totals: {total.crashes} crashes, "
          f"{total.power_losses} power losses, {total.damages} files damaged, "
          f"{total.rejoins} rejoins, {total.store_damage} stores repaired, "
          f"{total.disk_errors} replicas stopped by disk errors, {total.copies} store copies")
    for r in failed:
        print(f"FAILED seed {r.seed} ({r.phase}, tick {r.tick}): {r.error}")
        print(f"  replay: python -m rayjet.sim --replica --seed {r.seed} --trace{flags}")


if __name__ == "__main__":
    main()
