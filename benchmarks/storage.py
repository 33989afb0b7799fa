"""Storage engine benchmarks, printed as ratios against baselines measured in the same run.

    python benchmarks/storage.py [--quick]

1. FileStore append of 128-byte messages in batches of 1000 vs a loop of ``f.write`` of
   the same record bytes (raw/unbuffered FileIO, and buffered for reference).
2. ``sync_interval="always"`` with batches: fsync calls per batch.
3. load by seq and last-by-subject at 10k vs N messages (flat = no scan).
4. index memory per message at N messages (tracemalloc).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import sys
import tempfile
import time
import tracemalloc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from rayjet.storage import FileStore, StoreConfig  # noqa: E402
from rayjet.storage import record as rec  # noqa: E402

PAYLOAD = bytes(range(128))
SUBJECTS = [f"bench.orders.{i}" for i in range(1000)]
BATCH = 1000


def batches(n: int):
    for start in range(0, n, BATCH):
        yield [(SUBJECTS[i % len(SUBJECTS)], b"", PAYLOAD) for i in range(start, min(n, start + BATCH))]


def fill(store: FileStore, n: int) -> None:
    for b in batches(n):
        store.store_batch(b)


def bench_append(tmp: str, n: int) -> dict:
    records = [rec.encode_msg(i + 1, 1_700_000_000_000_000_000 + i,
                              SUBJECTS[i % len(SUBJECTS)].encode(), b"", PAYLOAD)
               for i in range(n)]
    out = {}
    for name, buffering in (("raw", 0), ("buffered", -1)):
        path = os.path.join(tmp, f"baseline-{name}.bin")
        t0 = time.perf_counter()
        with open(path, "wb", buffering=buffering) as f:
            w = f.write
            for r in records:
                w(r)
        out[name] = time.perf_counter() - t0
        os.unlink(path)
    work = list(batches(n))
    d = os.path.join(tmp, "append")
    store = FileStore(d, StoreConfig(block_size=64 * 1024 * 1024))
    t0 = time.perf_counter()
    for b in work:
        store.store_batch(b)
    out["store"] = time.perf_counter() - t0
    disk = sum(os.path.getsize(os.path.join(d, p)) for p in os.listdir(d) if p.endswith(".blk"))
    assert disk == sum(map(len, records)), "the store writes exactly the seed 001 records"
    store.close()
    shutil.rmtree(d)
    return out


def bench_always(tmp: str, nbatches: int) -> dict:
    d = os.path.join(tmp, "always")
    store = FileStore(d, StoreConfig(sync_interval="always", block_size=64 * 1024 * 1024))
    base = store.sync_count
    work = list(batches(nbatches * BATCH))
    t0 = time.perf_counter()
    for b in work:
        store.store_batch(b)
    took = time.perf_counter() - t0
    fsyncs = store.sync_count - base
    store.close()
    shutil.rmtree(d)
    return {"batches": nbatches, "fsyncs": fsyncs, "seconds": took}


def time_loads(store: FileStore, n: int, probes: int = 20000) -> tuple[float, float]:
    rng = random.Random(7)
    seqs = [rng.randrange(1, n + 1) for _ in range(probes)]
    subs = [rng.choice(SUBJECTS) for _ in range(probes)]
    t0 = time.perf_counter()
    for s in seqs:
        store.load_msg(s)
    by_seq = (time.perf_counter() - t0) / probes
    t0 = time.perf_counter()
    for s in subs:
        store.load_last_msg(s)
    by_subject = (time.perf_counter() - t0) / probes
    return by_seq, by_subject


def bench_loads_and_memory(tmp: str, small: int, large: int) -> dict:
    out = {}
    d = os.path.join(tmp, "small")
    store = FileStore(d, StoreConfig())
    fill(store, small)
    out["small"] = time_loads(store, small)
    store.close()
    shutil.rmtree(d)

    d = os.path.join(tmp, "large")
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    store = FileStore(d, StoreConfig())
    fill(store, large)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    out["index_bytes_per_msg"] = (after - before) / large
    out["large"] = time_loads(store, large)
    store.close()
    shutil.rmtree(d)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes (about 20 s)")
    args = ap.parse_args()
    n_append = 100_000 if args.quick else 500_000
    large = 200_000 if args.quick else 1_000_000
    tmp = tempfile.mkdtemp(prefix="rayjet-bench-")
    try:
        a = bench_append(tmp, n_append)
        print(f"append {n_append} x 128 B in batches of {BATCH}:")
        print(f"  store              {n_append / a['store']:>12,.0f} msg/s")
        print(f"  raw f.write loop   {n_append / a['raw']:>12,.0f} msg/s   "
              f"store/raw = {a['raw'] / a['store']:.0%}  (target >= 50%)")
        print(f"  buffered f.write   {n_append / a['buffered']:>12,.0f} msg/s   "
              f"store/buffered = {a['buffered'] / a['store']:.0%}")
        al = bench_always(tmp, 20 if args.quick else 50)
        print(f"sync_interval='always', {al['batches']} batches of {BATCH}: "
              f"{al['fsyncs']} fsyncs = {al['fsyncs'] / al['batches']:.2f} per batch, "
              f"{al['batches'] * BATCH / al['seconds']:,.0f} msg/s")
        lm = bench_loads_and_memory(tmp, 10_000, large)
        (s1, l1), (s2, l2) = lm["small"], lm["large"]
        print(f"load_msg(seq):        10k {s1 * 1e6:.2f} us   {large // 1000}k {s2 * 1e6:.2f} us"
              f"   ratio {s2 / s1:.2f}")
        print(f"load_last_msg(subj):  10k {l1 * 1e6:.2f} us   {large // 1000}k {l2 * 1e6:.2f} us"
              f"   ratio {l2 / l1:.2f}")
        print(f"index memory at {large:,} msgs: {lm['index_bytes_per_msg']:.1f} bytes/msg "
              f"(target <= 64)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
