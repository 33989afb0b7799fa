"""Consuming benchmarks: rayjet beside nats-server (nats-py), measured in one run.

    .venv/bin/python benchmarks/consume.py --quick     # small counts
    .venv/bin/python benchmarks/consume.py             # full counts

1. ``fetch(500)`` + ``ack`` throughput of a durable explicit-ack pull consumer over a
   pre-filled stream, R1 file and R3 file, each beside nats-py's figure for the same setup
   (a 3-server NatsCluster for R3), with the ratio (> 1: rayjet faster). The last ack is an
   ``ack_sync`` and the consumer's ack floor must equal the count.
2. Ordered replay: an ordered push consumer reading a whole stream (msgs/s).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import natsbase as nb  # noqa: E402

SIZE = nb.DEFAULT_SIZE
SETUPS = {"R1 file": ("file", 1), "R3 file": ("file", 3)}


def fill(js, name: str, count: int) -> None:
    payload = b"x" * SIZE
    for start in range(0, count, 5000):
        js.publish_batch([(f"{name}.m", payload)] * min(5000, count - start))


def rj_fetch_ack(js, storage: str, replicas: int, count: int) -> nb.Throughput:
    from rayjet import StorageType

    name = f"CONSUME{replicas}{int(time.time() * 1000) % 100000}"
    js.add_stream(name=name, subjects=[f"{name}.*"], num_replicas=replicas,
                  storage=StorageType(storage))
    try:
        fill(js, name, count)
        sub = js.pull_subscribe(f"{name}.m", durable="BENCH", stream=name,
                                max_ack_pending=-1)
        got = 0
        started = time.perf_counter()
        last = None
        while got < count:
            msgs = sub.fetch(500, timeout=10)
            for m in msgs[:-1]:
                m.ack()
            last = msgs[-1]
            got += len(msgs)
            if got < count:
                last.ack()
        last.ack_sync()
        elapsed = time.perf_counter() - started
        floor = sub.consumer_info().ack_floor.stream_seq
        sub.unsubscribe()
        return nb.Throughput(f"rayjet {storage} R{replicas} fetch(500)+ack", count, SIZE,
                             elapsed, count / elapsed, floor)
    finally:
        js.delete_stream(name)


def rj_ordered_replay(js, count: int) -> nb.Throughput:
    from rayjet import DeliverPolicy, StorageType

    name = f"REPLAY{int(time.time() * 1000) % 100000}"
    js.add_stream(name=name, subjects=[f"{name}.*"], storage=StorageType.FILE)
    try:
        fill(js, name, count)
        started = time.perf_counter()
        sub = js.subscribe(f"{name}.m", stream=name, ordered_consumer=True,
                           deliver_policy=DeliverPolicy.ALL)
        got = 0
        for _ in sub.messages(timeout=10):
            got += 1
            if got == count:
                break
        elapsed = time.perf_counter() - started
        sub.unsubscribe()
        return nb.Throughput("rayjet ordered replay", count, SIZE, elapsed, count / elapsed, got)
    finally:
        js.delete_stream(name)


def nats_fetch_ack(setup: str, count: int) -> nb.Throughput:
    storage, replicas = SETUPS[setup]
    ctx = nb.NatsServer() if replicas == 1 else nb.NatsCluster(3)
    with ctx as srv:
        return nb.fetch_ack_throughput(srv.urls, count=count, storage=storage,
                                       replicas=replicas)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-nats", action="store_true")
    ap.add_argument("--replay", type=int, default=None, help="messages for the ordered replay")
    ap.add_argument("--replay-only", action="store_true", help="skip fetch(500)+ack")
    args = ap.parse_args(argv)
    count = 10_000 if args.quick else 50_000
    replay = args.replay or (20_000 if args.quick else 200_000)
    import rayjet

    rows = []
    with tempfile.TemporaryDirectory(prefix="rayjet-bench-") as data_dir:
        with rayjet.connect(data_dir=data_dir, num_cpus=2, timeout=60) as js:
            for setup, (storage, replicas) in ({} if args.replay_only else SETUPS).items():
                theirs = None if args.no_nats else nats_fetch_ack(setup, count)
                ours = rj_fetch_ack(js, storage, replicas, count)
                assert ours.stored == count, f"ack floor {ours.stored} != {count}"
                rows.append([f"{setup}: fetch(500)+ack", nb.fmt_num(ours.msgs_per_s, " msg/s"),
                             nb.fmt_num(theirs.msgs_per_s, " msg/s") if theirs else "-",
                             nb.fmt_ratio(nb.ratio(ours.msgs_per_s, theirs.msgs_per_s))
                             if theirs else "-"])
            rp = rj_ordered_replay(js, replay)
            theirs = None
            if not args.no_nats:
                with nb.NatsServer() as srv:
                    theirs, _ = nb.ordered_replay(srv.urls, size=SIZE, count=replay)
            rows.append([f"ordered replay of {replay} msgs", nb.fmt_num(rp.msgs_per_s, " msg/s"),
                         nb.fmt_num(theirs.msgs_per_s, " msg/s") if theirs else "-",
                         nb.fmt_ratio(nb.ratio(rp.msgs_per_s, theirs.msgs_per_s))
                         if theirs else "-"])
    nb.print_table(["what", "rayjet", "nats-server", "ratio"], rows,
                   title=f"Consuming, {SIZE}-byte messages (ratio > 1: rayjet faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
