"""Streams at real size: memory per message, restart time, catch-up speed, publish rate.

    .venv/bin/python benchmarks/bigstream.py --quick    # R1 to 1M, R3 300k: a few minutes
    .venv/bin/python benchmarks/bigstream.py            # R1 to 10M, R3 2M: ~20 minutes
    .venv/bin/python benchmarks/bigstream.py --r1 1000000,5000000 --r3 0 --json out.json

1. R1 file stream, 128-byte messages published with ``publish_batch`` (1000 a call): at each
   size, the replica process's resident memory (USS) and its growth per message since the
   empty stream, the publish rate of the last segment, and the restart-to-serving time (kill
   the replica actor; Ray restarts it over its disk; time until it is writable again and
   ``get_msg`` answers for the last message).
2. R3 file stream of the R3 size: a follower's data directory is deleted and its actor
   killed; it comes back empty, installs the leader's (state-only) snapshot and copies the
   store (the default compaction, every 16 MB of raft entries, leaves it far behind). Reported: wall time to caught-up, copied MB/s, beside a raw sequential write with
   fsync of the same number of bytes to the same disk, measured in the same run.

Ray is started by ``rayjet.connect`` (``num_cpus=2``, a temporary data_dir) and shut down at
the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil
import ray

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rayjet  # noqa: E402
from rayjet.actors.names import NAMESPACE, stream_actor_name  # noqa: E402
from rayjet.api import StorageType  # noqa: E402

SIZE = 128
BATCH = 1000


def handles(js, name):
    assignment, _ = js._stream(name, refresh=True)
    return {rid: ray.get_actor(stream_actor_name(assignment["group"], rid), namespace=NAMESPACE)
            for rid, _node in assignment["peers"]}, assignment["group"]


def pid_of(handle) -> int:
    return ray.get(handle.__ray_call__.remote(lambda self: os.getpid()), timeout=30)


def uss(pid: int) -> int:
    return psutil.Process(pid).memory_full_info().uss


def status(handle) -> dict:
    return ray.get(handle.status.remote(), timeout=30)


def publish(js, subject: str, count: int, payload: bytes) -> float:
    """Publish ``count`` messages; returns messages per second."""
    batch = [(subject, payload)] * BATCH
    start = time.perf_counter()
    left = count
    while left > 0:
        n = min(BATCH, left)
        acks = js.publish_batch(batch[:n], timeout=60)
        bad = [a for a in acks if isinstance(a, Exception)]
        if bad:
            raise bad[0]
        left -= n
    return count / (time.perf_counter() - start)


def kill_and_wait(handle, until, timeout: float = 600.0) -> float:
    """Kill the actor (Ray restarts it) and time until ``until(status)`` holds."""
    old = pid_of(handle)
    start = time.perf_counter()
    ray.kill(handle, no_restart=False)
    deadline = time.monotonic() + timeout
    while True:
        try:
            if pid_of(handle) != old and until(status(handle)):
                return time.perf_counter() - start
        except Exception:  # noqa: BLE001 - dying or restarting
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("the replica did not come back")
        time.sleep(0.05)


def raw_write_mb_s(directory: Path, nbytes: int) -> float:
    """Sequential 8 MB writes with one fsync at the end: the disk's own pace here."""
    path = directory / "raw-write.bin"
    chunk = os.urandom(8 << 20)
    start = time.perf_counter()
    with open(path, "wb") as f:
        left = nbytes
        while left > 0:
            f.write(chunk[:min(left, len(chunk))])
            left -= len(chunk)
        f.flush()
        os.fsync(f.fileno())
    secs = time.perf_counter() - start
    path.unlink()
    return nbytes / secs / 1e6


def run_r1(js, sizes: list[int]) -> list[dict]:
    js.add_stream(name="BIG1", subjects=["big1.>"], num_replicas=1, storage=StorageType.FILE)
    (rid, handle), = handles(js, "BIG1")[0].items()
    payload = os.urandom(SIZE)
    base = uss(pid_of(handle))
    rows, have = [], 0
    for size in sizes:
        rate = publish(js, "big1.x", size - have, payload)
        have = size
        mem = uss(pid_of(handle))
        restart = kill_and_wait(handle, lambda st, n=size: st["writable"] and st["last_seq"] == n)
        assert js.get_msg("BIG1", seq=size).data == payload
        after = uss(pid_of(handle))
        rows.append({"messages": size, "publish_msg_s": round(rate),
                     "uss_mb": round(mem / 1e6, 1),
                     "bytes_per_msg": round((mem - base) / size, 1),
                     "restart_s": round(restart, 2),
                     "uss_after_restart_mb": round(after / 1e6, 1)})
        print(f"R1 {size:>10,}: {rows[-1]}", flush=True)
    js.delete_stream("BIG1")
    return rows


def run_r3(js, size: int, data_dir: Path) -> dict:
    js.add_stream(name="BIG3", subjects=["big3.>"], num_replicas=3, storage=StorageType.FILE)
    rate = publish(js, "big3.x", size, os.urandom(SIZE))
    reps, group = handles(js, "BIG3")
    lead = next(r for r, h in reps.items() if status(h)["role"] == "Leader")
    rid = next(r for r in reps if r != lead)
    follower = reps[rid]
    store_bytes = status(reps[lead])
    shutil.rmtree(data_dir / "streams" / group / rid)  # the disk is lost
    secs = kill_and_wait(follower,
                         lambda st: not st["copying"] and st["last_seq"] == size, timeout=1800)
    copied = status(follower)["store_copy"]
    info = js.stream_info("BIG3")
    raw = raw_write_mb_s(data_dir, max(info.state.bytes, 64 << 20))
    mb_s = copied["bytes"] / max(copied["seconds"], 1e-9) / 1e6
    row = {"messages": size, "publish_msg_s": round(rate), "store_mb": round(info.state.bytes / 1e6, 1),
           "caught_up_s": round(secs, 2), "copy_s": copied["seconds"],
           "copy_mb_s": round(mb_s, 1), "raw_write_mb_s": round(raw, 1),
           "copy_vs_raw": round(mb_s / raw, 3), "chunks": copied["chunks"],
           "leader_applied": store_bytes["applied"]}
    print(f"R3 {size:>10,}: {row}", flush=True)
    js.delete_stream("BIG3")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (tests)")
    ap.add_argument("--r1", default="1000000,5000000,10000000")
    ap.add_argument("--r3", type=int, default=2_000_000)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if args.quick:
        args.r1, args.r3 = "200000,500000,1000000", 300_000
    if args.smoke:
        args.r1, args.r3 = "3000,6000", 3000
    sizes = [int(s) for s in args.r1.split(",") if s.strip() and int(s) > 0]
    if args.smoke:
        # replica actors (which inherit this environment) compact their raft log every
        # other entry, so even the tiny emptied R3 follower must copy the store; at real
        # sizes the default compaction (16 MB of entries) does that
        os.environ.setdefault("RAYJET_RAFT_COMPACT_ENTRIES", "2")
    data_dir = Path(tempfile.mkdtemp(prefix="rayjet-bigstream-"))
    out: dict = {"r1": [], "r3": None}
    try:
        with rayjet.connect(data_dir=str(data_dir), num_cpus=2, timeout=60) as js:
            if sizes:
                out["r1"] = run_r1(js, sizes)
            if args.r3:
                out["r3"] = run_r3(js, args.r3, data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
