"""Replay a stream into a Spark DataFrame: rayjet (replicas -> Ray Data -> RayDP) against
nats-server read by nats-py (an ordered consumer into ``spark.createDataFrame``).

Both sides hold the same number of 128-byte messages on one subject, in a file stream,
and both end in the same Spark session with ``df.count()`` checked against the count:

* rayjet: ``read_stream_df(spark, stream).count()``: read tasks read the replicas in large
  Arrow batches, RayDP hands the Ray blocks to Spark;
* nats: an ordered push consumer (nats-py ``js.subscribe(ordered_consumer=True)``) collects
  ``(subject, seq, ts, data)`` rows, then ``spark.createDataFrame(rows, schema).count()``.

Filling the streams is not timed. The rayjet replay is also split into its two halves
(``read_stream(...).materialize()``: the time spent in rayjet; ``to_spark(ds).count()``:
the hand-over to Spark), printed beside the Spark session's start-up time.

    .venv/bin/python benchmarks/spark_replay.py              # 1M messages (~6 min here)
    .venv/bin/python benchmarks/spark_replay.py --count 100000 --no-nats
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import natsbase as nb  # noqa: E402

SIZE = 128
SUBJECT = "replay.data"
PUBLISH_CHUNK = 5000


def fill_rayjet(js, name: str, count: int, payload: bytes) -> float:
    from rayjet import StorageType, StreamConfig

    js.add_stream(StreamConfig(name=name, subjects=["replay.>"], storage=StorageType.FILE))
    t0 = time.perf_counter()
    done = 0
    while done < count:
        n = min(PUBLISH_CHUNK, count - done)
        acks = js.publish_batch([(SUBJECT, payload)] * n)
        bad = [a for a in acks if isinstance(a, Exception)]
        if bad:
            raise bad[0]
        done += n
    elapsed = time.perf_counter() - t0
    stored = js.stream_info(name).state.messages
    assert stored == count, f"stored {stored} of {count}"
    return elapsed


def rayjet_replay(js, spark, name: str, count: int) -> dict[str, float]:
    from rayjet.spark import read_stream, read_stream_df, to_spark

    t0 = time.perf_counter()
    n = read_stream_df(spark, name, js=js).count()
    total = time.perf_counter() - t0
    assert n == count, f"Spark counted {n} of {count}"
    # the same replay in two halves: rayjet's read, then RayDP's hand-over and the count
    # the read as read_stream_df makes it: one block per read task, one chunk per column
    st = js.stream_info(name).state
    t0 = time.perf_counter()
    ds = read_stream(name, js=js, parallelism=max(1, min(16, st.bytes // (64 << 20) + 1)),
                     block_rows=1 << 62, block_bytes=1 << 62).materialize()
    read = time.perf_counter() - t0
    t0 = time.perf_counter()
    n = to_spark(ds, spark, blocks=None).count()
    handover = time.perf_counter() - t0
    assert n == count, f"Spark counted {n} of {count}"
    return {"total": total, "read": read, "handover": handover}


def raw_file_read(data_dir: str, js, name: str) -> tuple[float, int]:
    """Seconds to read the stream's block files with plain sequential reads (8 MB at a
    time, the page cache warm as for rayjet's read), and the bytes read: the floor a
    replica's range reads are measured against."""
    group = js._stream(name, refresh=True)[0]["group"]
    files = sorted(Path(data_dir, "streams", group).glob("*/store/*.blk"))
    t0 = time.perf_counter()
    total = 0
    for path in files:
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(8 << 20):
                total += len(chunk)
    return time.perf_counter() - t0, total


def nats_replay(spark, count: int, payload: bytes) -> dict[str, float]:
    from pyspark.sql.types import (
        BinaryType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    schema = StructType([StructField("subject", StringType()), StructField("seq", LongType()),
                         StructField("ts", TimestampType()), StructField("data", BinaryType())])
    with nb.NatsServer() as srv:
        thr, rows = nb.ordered_replay(srv.urls, size=len(payload), count=count, keep_rows=True)
    read = thr.seconds
    t0 = time.perf_counter()
    n = spark.createDataFrame(rows, schema).count()
    handover = time.perf_counter() - t0
    assert n == count, f"Spark counted {n} of {count}"
    return {"total": read + handover, "read": read, "handover": handover}


def warm_up(js, spark) -> None:
    """One small replay through each path first: the JVM, RayDP and Ray Data start lazily,
    and whichever side ran first would pay for it."""
    from pyspark.sql.types import LongType, StructField, StructType

    fill_rayjet(js, "WARMUP", 1000, b"w" * SIZE)
    rayjet_replay(js, spark, "WARMUP", 1000)
    js.delete_stream("WARMUP")
    schema = StructType([StructField("n", LongType())])
    assert spark.createDataFrame([(i,) for i in range(1000)], schema).count() == 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--no-nats", action="store_true", help="skip the nats-server baseline")
    ap.add_argument("--driver-memory", default="3g", help="Spark driver heap (the baseline's "
                    "createDataFrame of 1M rows needs about 2 GB)")
    args = ap.parse_args(argv)
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    import rayjet
    from rayjet.spark import session, stop_session

    payload = os.urandom(SIZE)
    with tempfile.TemporaryDirectory(prefix="rayjet-bench-") as data_dir:
        with rayjet.connect(data_dir=data_dir, num_cpus=2, timeout=60) as js:
            t0 = time.perf_counter()
            # the driver heap is for the baseline: createDataFrame ships its local rows
            # through the driver (rayjet's blocks go from Ray's object store to executors)
            spark = session("rayjet-replay-bench", executor_memory="1G",
                            configs={"spark.driver.memory": args.driver_memory})
            startup = time.perf_counter() - t0
            try:
                warm_up(js, spark)
                filled = fill_rayjet(js, "REPLAY", args.count, payload)
                ours = rayjet_replay(js, spark, "REPLAY", args.count)
                raw_s, raw_bytes = raw_file_read(data_dir, js, "REPLAY")
                js.delete_stream("REPLAY")
                theirs = None if args.no_nats else nats_replay(spark, args.count, payload)
            finally:
                stop_session()

    def rate(seconds: float) -> str:
        return nb.fmt_num(args.count / seconds, " msg/s")

    rows = [["replay -> DataFrame.count()", f"{ours['total']:.1f} s ({rate(ours['total'])})",
             f"{theirs['total']:.1f} s ({rate(theirs['total'])})" if theirs else "-",
             nb.fmt_ratio(theirs["total"] / ours["total"]) if theirs else "-"],
            ["  read (rayjet: Ray Dataset; nats: ordered consumer)", f"{ours['read']:.1f} s",
             f"{theirs['read']:.1f} s" if theirs else "-",
             nb.fmt_ratio(theirs["read"] / ours["read"]) if theirs else "-"],
            ["  to Spark + count (RayDP; createDataFrame)", f"{ours['handover']:.1f} s",
             f"{theirs['handover']:.1f} s" if theirs else "-",
             nb.fmt_ratio(theirs["handover"] / ours["handover"]) if theirs else "-"]]
    nb.print_table(["what", "rayjet", "nats-py + Spark", "ratio"], rows,
                   title=f"Replay of {args.count} {SIZE}-byte messages into Spark "
                         "(ratio > 1: rayjet faster)")
    print(f"Plain sequential read of the same stream's block files ({raw_bytes / 1e6:.0f} MB): "
          f"{raw_s:.2f} s; rayjet's read takes {ours['read'] / raw_s:.1f}x that "
          "(target: within 3x).")
    share = ours["read"] / (ours["read"] + ours["handover"] + startup)
    print(f"Spark session start-up: {startup:.1f} s; filling the rayjet stream: {filled:.1f} s. "
          f"Of start-up + replay, rayjet's read is {share:.0%}, RayDP + Spark "
          f"{(ours['handover'] + startup) / (ours['read'] + ours['handover'] + startup):.0%}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
