"""FileStore open time, with and without verifying every block, against a raw read.

    python benchmarks/store_open.py [--count N] [--baseline REV] [--reps N] [--dir D]

1. Write N messages of 128 bytes (one subject) into a FileStore (default 8 MiB blocks).
2. Baseline: a plain sequential read of every block file (``cat``-like, 1 MiB reads, warm
   page cache like the opens), measured in the same run.
3. Open the store with this tree's code ("after": it verifies every block's checksum) and
   with the code of git revision ``--baseline`` ("before", default HEAD; extracted with
   ``git archive``, nothing in the repository changes), each in a fresh process, after a
   clean close and after a crash (no close), alternating, best of ``--reps``.

Both codes open the same files; neither closes the store it opened (so neither rewrites
what the other reads). Opening the store written here with the baseline code works
because the files only gained fields older code ignores.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from rayjet.storage import FileStore, StoreConfig  # noqa: E402

PAYLOAD = bytes(range(128))
BATCH = 1000

OPEN = """
import gc, json, sys, time
sys.path.insert(0, {code!r})
import rayjet.storage
assert rayjet.storage.__file__.startswith({code!r}), rayjet.storage.__file__
from rayjet.storage import FileStore, StoreConfig
gc.collect()
t0, c0 = time.perf_counter(), time.process_time()
store = FileStore({d!r}, StoreConfig())
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
st = store.fast_state()
for blk in store._blocks.values():  # no close(): leave the files as they are
    blk.close()
print(json.dumps({{"wall": wall, "cpu": cpu, "msgs": st.msgs, "lost": len(st.lost),
                  "recovery": store.recovery}}))
"""


def fill(d: str, n: int, clean: bool) -> None:
    store = FileStore(d, StoreConfig())
    for start in range(0, n, BATCH):
        store.store_batch([("bench.orders", b"", PAYLOAD)] * (min(n, start + BATCH) - start))
    if clean:
        store.close()
        return
    store.flush()
    for blk in store._blocks.values():
        blk.close()


def raw_read(d: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    total = 0
    for path in sorted(glob.glob(os.path.join(d, "*.blk"))):
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(1 << 20):
                total += len(chunk)
    return time.perf_counter() - t0, total


def baseline_tree(rev: str, into: str) -> str:
    """The ``rayjet`` package of git revision ``rev`` under ``into`` (``git archive``)."""
    tar = os.path.join(into, "baseline.tar")
    with open(tar, "wb") as f:
        subprocess.run(["git", "-C", ROOT, "archive", rev, "rayjet"], stdout=f, check=True)
    code = os.path.join(into, "baseline")
    with tarfile.open(tar) as t:
        t.extractall(code, filter="data")
    return code


def open_in(code: str, d: str) -> dict:
    out = subprocess.run([sys.executable, "-c", OPEN.format(code=code, d=d)],
                         capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(d: str, codes: dict[str, str], reps: int) -> dict:
    best: dict[str, dict] = {}
    raw = float("inf")
    for _ in range(reps):
        raw = min(raw, raw_read(d)[0])
        for name, code in codes.items():
            got = open_in(code, d)
            if name not in best or got["wall"] < best[name]["wall"]:
                best[name] = got
    return {"raw": raw, **best}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--baseline", default="HEAD", help="git revision of the 'before' code")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = ap.parse_args()
    n = args.count
    tmp = tempfile.mkdtemp(prefix="rayjet-open-", dir=args.dir)
    try:
        codes = {"before": baseline_tree(args.baseline, tmp), "after": ROOT}
        for clean in (True, False):
            d = os.path.join(tmp, "clean" if clean else "crash")
            fill(d, n, clean)
            r = measure(d, codes, args.reps)
            size = raw_read(d)[1]
            what = "clean close" if clean else "crash (no close)"
            print(f"{n:,} messages of 128 B, {size / 2**20:,.0f} MiB in "
                  f"{len(glob.glob(os.path.join(d, '*.blk')))} blocks, reopened after a {what}"
                  f" (best of {args.reps}; wall seconds, cpu in brackets)")
            print(f"  plain sequential read of the block files {r['raw']:8.3f} s")
            for name in ("before", "after"):
                got = r[name]
                assert got["msgs"] == n and got["lost"] == 0, got
                label = f"open, {name} ({args.baseline})" if name == "before" else \
                    f"open, {name} (this tree)"
                print(f"  {label:<40} {got['wall']:8.3f} s ({got['cpu']:.3f}) = "
                      f"{got['wall'] / r['raw']:5.1f}x the read")
            print(f"  after / before: {r['after']['wall'] / r['before']['wall']:.2f}x; "
                  f"after: {r['after']['recovery']}")
            shutil.rmtree(d)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
