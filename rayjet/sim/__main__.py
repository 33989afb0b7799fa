"""``python -m rayjet.sim``: run simulator seeds, or replay one with a trace."""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from rayjet.raft import MUTATIONS
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
    ap.add_argument("--mutation", choices=MUTATIONS,
                    help="switch off one safety rule in the raft core (expect failures)")
    ap.add_argument("--ticks", type=int, default=CHAOS_TICKS, help="ticks of the chaos phase")
    ap.add_argument("--liveness-ticks", type=int, default=LIVENESS_TICKS,
                    help="ticks allowed for progress after healing")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--keep-going", action="store_true", help="do not stop at the first failure")
    a = ap.parse_args(argv)

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


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # e.g. `--trace | head`
        sys.stderr.close()
        sys.exit(0)
