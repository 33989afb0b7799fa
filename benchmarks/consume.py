"""Consuming benchmarks: rayjet beside nats-server (nats-py), measured in one run.

    .venv/bin/python benchmarks/consume.py --quick     # small counts
    .venv/bin/python benchmarks/consume.py             # full counts

1. ``fetch(500)`` + ``ack`` throughput of a durable explicit-ack pull consumer over a
   pre-filled stream, R1 file and R3 file, each beside nats-py's figure for the same setup
   (a 3-server NatsCluster for R3), with the ratio (> 1: rayjet faster): acks message by
   message, per fetched batch, and Arrow record batches (``fetch_batch`` + ``ack_batch``).
   The time includes waiting until the ack floor reaches the count.
2. Ordered replay: an ordered push consumer reading a whole stream (msgs/s), message by
   message and as record batches, with and without the time to create the consumer.
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


ACK_MODES = ("each", "batch", "arrow")  # m.ack() per message, msgs.ack(), fetch_batch+ack_batch


def rj_fetch_ack(js, storage: str, replicas: int, count: int,
                 acks: str = "each") -> nb.Throughput:
    """A durable explicit-ack pull consumer reads ``count`` messages with fetch(500):
    ``each`` acks message by message (as a nats-py loop does), ``batch`` acks each fetched
    batch at once, ``arrow`` reads Arrow record batches (fetch_batch) and acks them with
    ack_batch. The last acks are waited for; the ack floor must reach ``count``."""
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
        while got < count:
            if acks == "arrow":
                rb = sub.fetch_batch(500, timeout=10)
                got += rb.num_rows
                sub.ack_batch(rb)
                continue
            msgs = sub.fetch(500, timeout=10)
            got += len(msgs)
            if acks == "batch":
                msgs.ack()
            else:
                for m in msgs:
                    m.ack()
        floor = wait_floor(sub, count)
        elapsed = time.perf_counter() - started
        sub.unsubscribe()
        return nb.Throughput(f"rayjet {storage} R{replicas} fetch(500)+ack ({acks})", count,
                             SIZE, elapsed, count / elapsed, floor)
    finally:
        js.delete_stream(name)


def wait_floor(sub, count: int, timeout: float = 60.0) -> int:
    """Until every ack is applied (the ack floor reaches ``count``): part of the time."""
    sub.acks.flush()
    deadline = time.perf_counter() + timeout
    while True:
        floor = sub.consumer_info().ack_floor.stream_seq
        if floor >= count or time.perf_counter() > deadline:
            return floor
        time.sleep(0.002)


def rj_ordered_replay(js, count: int, arrow: bool = False) -> tuple[nb.Throughput, float]:
    """An ordered push consumer reads a whole stream: messages one by one, or with
    ``arrow`` as record batches (messages_batches). Also the seconds the subscription took
    to create (included in the throughput; the table shows both)."""
    from rayjet import DeliverPolicy, StorageType

    name = f"REPLAY{int(time.time() * 1000) % 100000}"
    js.add_stream(name=name, subjects=[f"{name}.*"], storage=StorageType.FILE)
    try:
        fill(js, name, count)
        started = time.perf_counter()
        sub = js.subscribe(f"{name}.m", stream=name, ordered_consumer=True,
                           deliver_policy=DeliverPolicy.ALL)
        created = time.perf_counter() - started
        got = 0
        if arrow:
            for rb in sub.messages_batches(timeout=10):
                got += rb.num_rows
                if got >= count:
                    break
        else:
            for _ in sub.messages(timeout=10):
                got += 1
                if got == count:
                    break
        elapsed = time.perf_counter() - started
        sub.unsubscribe()
        what = "rayjet ordered replay" + (" (arrow)" if arrow else "")
        return nb.Throughput(what, count, SIZE, elapsed, count / elapsed, got), created
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

    def row(what: str, ours: float, theirs: float | None, target: float) -> None:
        ratio = nb.ratio(ours, theirs) if theirs else None
        verdict = "-" if ratio is None else ("met" if ratio >= target else "missed")
        rows.append([what, nb.fmt_num(ours, " msg/s"),
                     nb.fmt_num(theirs, " msg/s") if theirs else "-",
                     nb.fmt_ratio(ratio) if ratio is not None else "-",
                     f">= {target:g}x: {verdict}"])

    with tempfile.TemporaryDirectory(prefix="rayjet-bench-") as data_dir:
        with rayjet.connect(data_dir=data_dir, num_cpus=2, timeout=60) as js:
            for setup, (storage, replicas) in ({} if args.replay_only else SETUPS).items():
                theirs = None if args.no_nats else nats_fetch_ack(setup, count)
                target = 3.0 if replicas == 1 else 2.0
                for acks in ACK_MODES:
                    ours = rj_fetch_ack(js, storage, replicas, count, acks)
                    assert ours.stored == count, f"ack floor {ours.stored} != {count}"
                    row(f"{setup}: fetch(500)+ack ({acks})", ours.msgs_per_s,
                        theirs.msgs_per_s if theirs else None, target)
            their_replay = None
            if not args.no_nats:
                with nb.NatsServer() as srv:
                    their_replay, _ = nb.ordered_replay(srv.urls, size=SIZE, count=replay)
            theirs = their_replay.msgs_per_s if their_replay else None
            for arrow in (False, True):
                rp, created = rj_ordered_replay(js, replay, arrow)
                kind = "record batches" if arrow else "messages"
                row(f"ordered replay of {replay} ({kind}), incl. creating the consumer",
                    rp.msgs_per_s, theirs, 1.0)
                row(f"ordered replay of {replay} ({kind}), excl. creating it ({created:.2f} s)",
                    replay / (rp.seconds - created), theirs, 1.0)
    nb.print_table(["what", "rayjet", "nats-server", "ratio", "target"], rows,
                   title=f"Consuming, {SIZE}-byte messages (ratio > 1: rayjet faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
