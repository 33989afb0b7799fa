"""Range reads of a file store: the bulk columnar read against message-at-a-time reads and
a plain sequential read of the same block files, in one run (no Ray: the store alone).

    .venv/bin/python benchmarks/range_read.py                 # 1M messages of 128 B
    .venv/bin/python benchmarks/range_read.py --count 200000 --size 1024

Fills a FileStore (8 MB blocks) with ``--count`` messages on one subject, then reads all of
it three ways, each after the others so the page cache is warm for all of them:
``read_columns`` pages of 20k messages / 16 MB (what ``read_range`` and Ray Data read tasks
use), ``load_next_msg`` one message at a time (the path before), and the block files with
8 MB ``read`` calls (the floor: no decoding, no checksums).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    from rayjet.errors import NotFoundError
    from rayjet.storage import FileStore, StoreConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=128)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rayjet-range-") as d:
        store = FileStore(d, StoreConfig(block_size=8 << 20))
        payload = os.urandom(args.size)
        for done in range(0, args.count, 5000):
            n = min(5000, args.count - done)
            store.store_batch([("replay.data", b"", payload, 0)] * n)
        store.flush()

        t0 = time.perf_counter()
        seq, rows = 1, 0
        while seq:
            batch, seq = store.read_columns(seq, 1 << 62, ">", 20_000, 16 << 20)
            rows += batch.num_rows
        bulk = time.perf_counter() - t0
        assert rows == args.count

        t0 = time.perf_counter()
        seq, rows = 1, 0
        while True:
            try:
                _msg, seq = store.load_next_msg(">", True, seq)
            except NotFoundError:
                break
            rows += 1
            seq += 1
        single = time.perf_counter() - t0
        assert rows == args.count

        t0 = time.perf_counter()
        total = 0
        for path in sorted(Path(d).glob("*.blk")):
            with open(path, "rb", buffering=0) as f:
                while chunk := f.read(8 << 20):
                    total += len(chunk)
        raw = time.perf_counter() - t0
        store.close()

    def rate(seconds: float) -> str:
        return f"{args.count / seconds / 1e3:,.0f}k msg/s"

    print(f"{args.count:,} messages of {args.size} B ({total / 1e6:.0f} MB of blocks)")
    print(f"  read_columns (bulk, Arrow): {bulk:.3f} s  {rate(bulk)}  "
          f"{bulk / args.count * 1e6:.2f} us/msg")
    print(f"  load_next_msg (one by one): {single:.3f} s  {rate(single)}  "
          f"({single / bulk:.1f}x the bulk read's time)")
    print(f"  plain sequential read:      {raw:.3f} s  {total / raw / 1e9:.2f} GB/s  "
          f"(the bulk read takes {bulk / raw:.1f}x that; target within 3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
