"""FileStore restart after a crash, as ratios against a baseline measured in the same run.

    python benchmarks/store_restart.py [--count N] [--distinct N]

1. Write N messages of 128 bytes (one subject) into a FileStore (default 8 MiB blocks) and
   drop it without close(), as a killed actor would.
2. Baseline: a raw sequential read of every block file (warm page cache, like the reopens).
3. Crash reopen (index files + checkpoint + the tail after it) vs a full replay of every
   block (the same directory with the index files and checkpoint moved aside) vs a reopen
   after a clean close.
4. Index bytes per message after the crash reopen (tracemalloc, retained), with one subject
   and with ``--distinct`` distinct subjects (one message each).
"""

from __future__ import annotations

import argparse
import gc
import glob
import os
import shutil
import sys
import tempfile
import time
import tracemalloc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from rayjet.storage import FileStore, StoreConfig  # noqa: E402

PAYLOAD = bytes(range(128))
BATCH = 1000


def fill(d: str, n: int, distinct: bool) -> float:
    store = FileStore(d, StoreConfig())
    t0 = time.perf_counter()
    for start in range(0, n, BATCH):
        if distinct:
            batch = [(f"bench.k.{i}", b"", PAYLOAD) for i in range(start, min(n, start + BATCH))]
        else:
            batch = [("bench.orders", b"", PAYLOAD)] * (min(n, start + BATCH) - start)
        store.store_batch(batch)
    took = time.perf_counter() - t0
    crash(store)
    return took


def crash(store: FileStore) -> None:
    """What a SIGKILL leaves: the written blocks, no close()."""
    store.flush()
    for blk in store._blocks.values():
        blk.close()
    store._closed = True


def raw_read(d: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    total = 0
    for path in sorted(glob.glob(os.path.join(d, "*.blk"))):
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(1 << 20):
                total += len(chunk)
    return time.perf_counter() - t0, total


def reopen(d: str, reps: int = 3, before=None) -> tuple[float, float, dict]:
    """Best (wall, cpu) seconds of ``reps`` crash reopens (the machine is shared), and what
    the last one did."""
    best_wall = best_cpu = float("inf")
    for _ in range(reps):
        if before is not None:
            before()
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        store = FileStore(d, StoreConfig())
        best_wall = min(best_wall, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
        stats = dict(store.recovery)
        crash(store)
    return best_wall, best_cpu, stats


def _drop_index_files(d: str) -> None:
    for path in glob.glob(os.path.join(d, "*.idx")) + glob.glob(os.path.join(d, "*.dat")):
        os.unlink(path)


def full_replay(d: str) -> tuple[float, float, dict]:
    aside = d + ".aside"
    os.makedirs(aside)
    for path in glob.glob(os.path.join(d, "*.idx")) + [os.path.join(d, "checkpoint.dat")]:
        shutil.move(path, aside)
    out = reopen(d, before=lambda: _drop_index_files(d))
    _drop_index_files(d)
    for name in os.listdir(aside):
        shutil.move(os.path.join(aside, name), os.path.join(d, name))
    os.rmdir(aside)
    return out


def index_bytes(d: str, n: int) -> tuple[float, float, float]:
    """(retained bytes/msg, peak bytes/msg, seconds) of a crash reopen under tracemalloc."""
    gc.collect()
    tracemalloc.start()
    t0 = time.perf_counter()
    store = FileStore(d, StoreConfig())
    took = time.perf_counter() - t0
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    crash(store)
    return current / n, peak / n, took


def run(tmp: str, n: int) -> dict:
    d = os.path.join(tmp, "one")
    out = {"write": fill(d, n, distinct=False)}
    out["raw"], out["disk"] = min(raw_read(d) for _ in range(3))
    # the first reopen after the crash replays the tail and checkpoints; later ones alike
    out["crash"], out["crash_cpu"], out["crash_stats"] = reopen(d)
    out["full"], out["full_cpu"], out["full_stats"] = full_replay(d)
    store = FileStore(d, StoreConfig())
    assert store.fast_state().msgs == n
    store.close()
    out["clean"], out["clean_cpu"], _ = reopen(d, before=lambda: FileStore(d).close())
    out["bpm"], out["peak"], _ = index_bytes(d, n)
    shutil.rmtree(d)
    return out


def run_distinct(tmp: str, n: int) -> dict:
    d = os.path.join(tmp, "distinct")
    fill(d, n, distinct=True)
    bpm, peak, took = index_bytes(d, n)
    crash_t, crash_cpu, _ = reopen(d)
    store = FileStore(d, StoreConfig())
    assert store.fast_state().num_subjects == n
    crash(store)
    shutil.rmtree(d)
    return {"bpm": bpm, "peak": peak, "crash": crash_t, "crash_cpu": crash_cpu, "traced": took}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--distinct", type=int, default=None,
                    help="messages for the distinct-subjects memory figure (default: --count)")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = ap.parse_args()
    n = args.count
    tmp = tempfile.mkdtemp(prefix="rayjet-restart-", dir=args.dir)
    try:
        r = run(tmp, n)
        print(f"{n:,} messages of 128 B, one subject: {r['disk'] / 2**20:,.0f} MiB in "
              f"{r['crash_stats']['blocks_loaded'] + r['crash_stats']['blocks_replayed']} "
              f"blocks, written in {r['write']:.1f} s")
        print("  (best of 3 each; wall and CPU seconds)")
        print(f"  raw sequential read of the blocks (baseline) {r['raw']:8.3f} s")
        for key, what in (("crash", "crash reopen (checkpoint + tail)"),
                          ("full", "full replay reopen"), ("clean", "clean close reopen")):
            print(f"  {what:<44} {r[key]:8.3f} s (cpu {r[key + '_cpu']:.3f}) "
                  f"= {r[key] / r['raw']:.1f}x raw read  {r.get(key + '_stats', '')}")
        print(f"  crash reopen is {r['full'] / r['crash']:.1f}x faster than a full replay; "
              f"{r['crash'] / n * 1e7:.2f} s per 10M messages at this rate")
        print(f"  index: {r['bpm']:.1f} B/msg retained, {r['peak']:.1f} B/msg peak while loading")
        m = args.distinct if args.distinct is not None else n
        if m:
            dd = run_distinct(tmp, m)
            print(f"{m:,} messages on {m:,} distinct subjects: index {dd['bpm']:.1f} B/msg "
                  f"retained, {dd['peak']:.1f} B/msg peak; crash reopen {dd['crash']:.3f} s "
                  f"(cpu {dd['crash_cpu']:.3f})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
