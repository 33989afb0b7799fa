"""Stream engine benchmarks, printed as msgs/s and as ratios against the store's own raw
``store_batch`` of the same messages measured in the same run.

    python benchmarks/engine.py [--quick] [--n N] [--repeat R]

Every figure is the best of R runs (default 3): the VM this runs on is shared and noisy.

1. Leader: ``prepare_publish`` of 128-byte messages (no headers), applied in batches of
   1000 so the proposals in flight stay bounded (only the prepare time is counted); and
   ``prepare_columns`` of the same messages as pyarrow batches of 1000 rows (one MsgRunOp
   each), in µs per message.
2. Wire: ``encode_op`` + ``decode_op`` of the same ops.
3. Replica: ``apply_batch`` of runs of 1000 MsgOps on MemStore, FileStore (default sync)
   and FileStore with ``sync_interval="always"``; each against ``store_batch`` of 1000
   messages on a fresh store of the same kind; then the same with one MsgRunOp per 1000.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from rayjet.api import StreamConfig  # noqa: E402
from rayjet.clock import ManualClock  # noqa: E402
from rayjet.engine import StreamEngine, decode_op, encode_op, store_config  # noqa: E402
from rayjet.storage import FileStore, MemStore  # noqa: E402

PAYLOAD = bytes(range(128))
SUBJECTS = [f"bench.orders.{i}" for i in range(1000)]
BATCH = 1000
BLOCK = 64 * 1024 * 1024


def stream_config(storage: str) -> StreamConfig:
    return StreamConfig(name="BENCH", subjects=["bench.>"], storage=storage)


def new_store(kind: str, tmp: str, tag: str):
    clock = ManualClock()
    if kind == "memory":
        cfg = stream_config("memory")
        return cfg, MemStore(store_config(cfg), clock=clock), clock
    cfg = stream_config("file")
    opts = {"block_size": BLOCK}
    if kind == "file-always":
        opts["sync_interval"] = "always"
    d = os.path.join(tmp, tag)
    return cfg, FileStore(d, store_config(cfg, **opts), clock=clock), clock


def close(store) -> None:
    store.close()
    if isinstance(store, FileStore):
        shutil.rmtree(store.directory, ignore_errors=True)


def make_ops(n: int) -> tuple[list[list], float]:
    """The MsgOps of ``n`` publishes in runs of BATCH, and the seconds spent preparing them."""
    cfg = stream_config("memory")
    clock = ManualClock()
    leader = StreamEngine(cfg, MemStore(store_config(cfg), clock=clock), clock)
    leader.set_leader(1)
    prep = leader.prepare_publish
    runs, took = [], 0.0
    for start in range(0, n, BATCH):
        subjects = [SUBJECTS[i % len(SUBJECTS)] for i in range(start, min(n, start + BATCH))]
        t0 = time.perf_counter()
        run = [prep(s, PAYLOAD) for s in subjects]
        took += time.perf_counter() - t0
        leader.apply_batch(run)
        runs.append(run)
        clock.advance(0.001)
    leader.store.close()
    return runs, took


def make_run_ops(n: int) -> tuple[list[list], float]:
    """:func:`make_ops` through ``prepare_columns``: one MsgRunOp per BATCH rows."""
    import pyarrow as pa

    cfg = stream_config("memory")
    clock = ManualClock()
    leader = StreamEngine(cfg, MemStore(store_config(cfg), clock=clock), clock)
    leader.set_leader(1)
    runs, took = [], 0.0
    for start in range(0, n, BATCH):
        rows = range(start, min(n, start + BATCH))
        table = pa.record_batch({"subject": [SUBJECTS[i % len(SUBJECTS)] for i in rows],
                                 "data": pa.array([PAYLOAD] * len(rows), pa.binary())})
        t0 = time.perf_counter()
        ops = leader.prepare_columns(table).ops
        took += time.perf_counter() - t0
        leader.apply_batch(ops)
        runs.append(ops)
        clock.advance(0.001)
    leader.store.close()
    return runs, took


def bench_wire(runs: list[list]) -> tuple[float, float]:
    t0 = time.perf_counter()
    encoded = [[encode_op(op) for op in run] for run in runs]
    t1 = time.perf_counter()
    decoded = [[decode_op(b) for b in run] for run in encoded]
    t2 = time.perf_counter()
    assert decoded[0][0] == runs[0][0]
    return t1 - t0, t2 - t1


def bench_store_batch(kind: str, tmp: str, n: int) -> float:
    _cfg, store, _clock = new_store(kind, tmp, f"raw-{kind}")
    work = [[(SUBJECTS[i % len(SUBJECTS)], b"", PAYLOAD) for i in range(s, min(n, s + BATCH))]
            for s in range(0, n, BATCH)]
    gc.collect()
    t0 = time.perf_counter()
    for b in work:
        store.store_batch(b)
    took = time.perf_counter() - t0
    assert store.fast_state().msgs == n
    close(store)
    return took


def bench_apply(kind: str, tmp: str, runs: list[list], n: int) -> tuple[float, int]:
    cfg, store, clock = new_store(kind, tmp, f"apply-{kind}")
    replica = StreamEngine(cfg, store, clock)
    syncs0 = getattr(store, "sync_count", 0)
    gc.collect()
    t0 = time.perf_counter()
    for run in runs:
        replica.apply_batch(run)
    took = time.perf_counter() - t0
    assert store.fast_state().msgs == n and replica.last_seq == n
    syncs = getattr(store, "sync_count", 0) - syncs0
    close(store)
    return took, syncs


def bench_consumer(n: int, fetch: int = 500) -> dict[str, float]:
    """The consumer leader's CPU per message for fetch(``fetch``) + ack of every message,
    as in a pull loop (an explicit-ack durable over a MemStore stream, each decision
    answered from a read-ahead window as the actor offers it): us/msg of the decision, the
    raft entry's encoding, the columns the client gets, and the acks."""
    from rayjet.api import ConsumerConfig
    from rayjet.engine.consumer.delivery_batch import DeliveryBatch
    from rayjet.engine.consumer.engine import ConsumerEngine
    from rayjet.engine.consumer.reader import ReadAhead, StoreReader
    from rayjet.engine.consumer.types import PullRequest
    from rayjet.replication.consumer_machine import encode_entry

    cfg, store, clock = new_store("memory", "", "consumer")
    for start in range(0, n, BATCH):
        store.store_raw_batch([("bench.a", b"", PAYLOAD, start + i + 1, clock.now_ns(), 0)
                               for i in range(min(BATCH, n - start))])
    inner = StoreReader(store)
    reader = ReadAhead(inner)
    engine = ConsumerEngine(ConsumerConfig(durable_name="D", ack_policy="explicit",
                                           max_ack_pending=-1), cfg, reader, clock)
    for op in engine.set_leader():
        engine.apply(op)
    spent = {"decision": 0.0, "raft entry": 0.0, "columns": 0.0, "acks": 0.0}
    got = 0
    while got < n:
        reader.offer(inner.read_window(tuple(engine.filters), engine.read_position(), fetch))
        t0 = time.perf_counter()
        batch = engine.request(PullRequest(reply=f"r{got}", batch=fetch, no_wait=True,
                                           expires=5.0))
        t1 = time.perf_counter()
        encode_entry(batch.ops)
        for op in batch.ops:
            engine.apply(op)
        t2 = time.perf_counter()
        cols = DeliveryBatch.of([d for _, d in batch.sends])
        t3 = time.perf_counter()
        out = engine.prepare_acks(cols.stream_seq.tolist())
        if out.op is not None:
            engine.apply(out.op)
        t4 = time.perf_counter()
        reader.drop()
        for key, a, b in (("decision", t0, t1), ("raft entry", t1, t2), ("columns", t2, t3),
                          ("acks", t3, t4)):
            spent[key] += b - a
        got += len(cols)
    return {key: secs / got * 1e6 for key, secs in spent.items()}


def rate(n: int, secs: float) -> str:
    return f"{n / secs:>12,.0f} msg/s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100k messages instead of 500k")
    ap.add_argument("--n", type=int, default=0, help="number of messages")
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    args = ap.parse_args()
    best = args.repeat
    n = args.n or (100_000 if args.quick else 500_000)
    print(f"{n:,} messages of {len(PAYLOAD)} B, runs of {BATCH}, {len(SUBJECTS)} subjects, "
          f"Python {sys.version.split()[0]}")
    tmp = tempfile.mkdtemp(prefix="rayjet-engine-bench-")
    try:
        runs, prep = make_ops(n)
        prep = min([prep] + [make_ops(n)[1] for _ in range(best - 1)])
        raw_mem = min(bench_store_batch("memory", tmp, n) for _ in range(best))
        print(f"leader prepare_publish       {rate(n, prep)}   "
              f"{raw_mem / prep:6.0%} of MemStore store_batch")
        wire = [bench_wire(runs) for _ in range(best)]
        enc, dec = min(w[0] for w in wire), min(w[1] for w in wire)
        print(f"encode_op                    {rate(n, enc)}")
        print(f"decode_op                    {rate(n, dec)}")
        print(f"encode + decode              {rate(n, enc + dec)}")
        col_runs, col_prep = make_run_ops(n)
        col_prep = min([col_prep] + [make_run_ops(n)[1] for _ in range(best - 1)])
        print(f"leader prepare_columns       {rate(n, col_prep)}   "
              f"{col_prep / n * 1e6:.3f} us/msg against {prep / n * 1e6:.3f} us/msg per message")
        col_wire = [bench_wire(col_runs) for _ in range(best)]
        print(f"encode + decode of MsgRunOps {rate(n, min(w[0] + w[1] for w in col_wire))}")
        for kind, label in (("memory", "MemStore"), ("file", "FileStore (sync default)"),
                            ("file-always", 'FileStore (sync "always")')):
            raw = raw_mem if kind == "memory" else min(
                bench_store_batch(kind, tmp, n) for _ in range(best))
            applied = [bench_apply(kind, tmp, runs, n) for _ in range(best)]
            took, syncs = min(applied)
            extra = f"   {syncs / len(runs):.2f} fsync/batch" if kind == "file-always" else ""
            print(f"{label:<28} store_batch {rate(n, raw)}   apply_batch {rate(n, took)}   "
                  f"apply/store {raw / took:6.0%}{extra}")
            col_took, _ = min(bench_apply(kind, tmp, col_runs, n) for _ in range(best))
            print(f"{'  the same as MsgRunOps':<28} apply_batch {rate(n, col_took)}   "
                  f"apply/store {raw / col_took:6.0%}   {col_took / n * 1e6:.3f} us/msg")
        costs = [bench_consumer(min(n, 100_000)) for _ in range(best)]
        print("consumer leader, fetch(500) + ack of each, us/msg: " + ", ".join(
            f"{key} {min(c[key] for c in costs):.2f}" for key in costs[0]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
