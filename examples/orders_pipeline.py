"""Orders pipeline: Ray tasks publish orders, Spark aggregates them, results go to a stream.

1. Ray tasks publish orders (JSON) to the ORDERS stream, each with a Nats-Msg-Id.
2. A nightly job replays what arrived since its last run (a durable cursor) into a Spark
   DataFrame through RayDP, decodes the JSON and aggregates with Spark SQL.
3. The totals are written to the ORDER_TOTALS stream exactly once (message ids), then the
   cursor is committed. A second run only sees the orders published in between.

Run: ``python examples/orders_pipeline.py`` (starts a local Ray when RAY_ADDRESS is not set;
needs Java 17). ``make demo`` runs it after ``examples/demo.py``.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time

import ray

import rayjet
from rayjet import StorageType, StreamConfig
from rayjet.spark import read_stream, read_stream_df, session, stop_session, write_stream

REGIONS = ["eu", "us", "apac"]
PRODUCTS = ["apple", "pear", "plum", "fig"]


@ray.remote(num_cpus=0.25)
def publish_orders(worker: int, first: int, count: int, data_dir: str) -> int:
    """One Ray task's share of the orders, published in one batch (ids make retries safe)."""
    js = rayjet.connect(data_dir=data_dir)  # joins the running Ray and meta group
    rnd = random.Random(first)
    msgs = []
    for n in range(first, first + count):
        order = {"order_id": n, "region": rnd.choice(REGIONS),
                 "product": rnd.choice(PRODUCTS), "qty": rnd.randint(1, 5),
                 "price": round(rnd.uniform(0.5, 9.5), 2), "worker": worker}
        msgs.append((f"ORDERS.{order['region']}", json.dumps(order).encode(),
                     {"Nats-Msg-Id": f"order-{n}"}))
    acks = js.publish_batch(msgs)
    bad = [a for a in acks if isinstance(a, Exception)]
    if bad:
        raise bad[0]
    return len(acks)


def publish_from_tasks(js: rayjet.JetStream, first: int, total: int, tasks: int = 4) -> int:
    per = total // tasks
    refs = [publish_orders.remote(w, first + w * per, per, str(js.data_dir))
            for w in range(tasks)]
    return sum(ray.get(refs))


def nightly_run(js: rayjet.JetStream, spark, run: int) -> None:
    """Replay the new orders into Spark, aggregate, write totals, then commit the cursor."""
    started = time.monotonic()
    df, cursor = read_stream_df(spark, "ORDERS", decoder="json", durable="nightly", js=js)
    print(f"run {run}: cursor covers seqs {cursor.start_seq}..{cursor.end_seq}")
    if cursor.empty:
        print(f"run {run}: nothing new")
        return
    df.createOrReplaceTempView("orders")
    totals = spark.sql("""
        SELECT region, count(*) AS orders, sum(qty) AS items,
               round(sum(qty * price), 2) AS revenue,
               min(seq) AS first_seq, max(seq) AS last_seq
        FROM orders GROUP BY region ORDER BY region""").cache()
    totals.show()
    out = totals.selectExpr(
        "concat('ORDER_TOTALS.', region) AS subject",
        f"to_json(named_struct('run', {run}, 'region', region, 'orders', orders, "
        "'items', items, 'revenue', revenue)) AS data",
        # one id per (cursor range, region): re-running this run never doubles a total
        f"concat('totals-', '{cursor.start_seq}-{cursor.end_seq}-', region) AS id")
    result = write_stream(out, msg_id_col="id", js=js, parallelism=1)
    print(f"run {run}: wrote {result.stored} totals ({result.duplicates} duplicates)")
    done = cursor.commit()
    print(f"run {run}: committed up to seq {done.ack_floor} "
          f"in {time.monotonic() - started:.1f}s")


def main() -> int:
    data_dir = tempfile.mkdtemp(prefix="rayjet-orders-")
    with rayjet.connect(data_dir=data_dir, num_cpus=2) as js:
        js.add_stream(StreamConfig(name="ORDERS", subjects=["ORDERS.*"], num_replicas=3,
                                   storage=StorageType.FILE))
        js.add_stream(StreamConfig(name="ORDER_TOTALS", subjects=["ORDER_TOTALS.*"],
                                   num_replicas=1))
        n = publish_from_tasks(js, 1, 2000)
        print(f"published {n} orders from 4 Ray tasks; ORDERS holds "
              f"{js.stream_info('ORDERS').state.messages}")
        spark = session("orders-pipeline", js=js)
        try:
            nightly_run(js, spark, 1)
            n = publish_from_tasks(js, 2001, 400)
            print(f"published {n} more orders")
            nightly_run(js, spark, 2)
            nightly_run(js, spark, 3)
        finally:
            stop_session()
        rows = read_stream("ORDER_TOTALS", js=js).take_all()
        totals = [json.loads(r["data"]) for r in rows]
        counted = sum(t["orders"] for t in totals)
        print(f"ORDER_TOTALS holds {len(rows)} totals covering {counted} orders")
        if counted != js.stream_info("ORDERS").state.messages:
            print("each order should be counted by exactly one run", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
