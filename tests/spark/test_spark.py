"""One Spark round trip through RayDP: stream -> DataFrame -> Spark SQL -> stream."""

from __future__ import annotations

import json
import re

import pytest
import ray

from rayjet import StreamConfig
from rayjet.spark import (
    from_spark,
    read_stream,
    read_stream_df,
    session,
    stop_session,
    write_stream,
)

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark(js):
    try:
        yield session("rayjet-tests", js=js)
    finally:
        stop_session()


def test_round_trip(js, spark, stream_name):
    src, out = f"{stream_name}IN", f"{stream_name}OUT"
    js.add_stream(StreamConfig(name=src, subjects=[f"{src}.>"], num_replicas=3))
    js.add_stream(StreamConfig(name=out, subjects=[f"{out}.>"]))
    regions = ["eu", "us", "apac"]
    orders = [{"id": i, "region": regions[i % 3], "amount": i % 7 + 1} for i in range(3000)]
    js.publish_batch([(f"{src}.{o['region']}", json.dumps(o).encode()) for o in orders])

    df = read_stream_df(spark, src, decoder="json", js=js).cache()
    assert df.count() == 3000
    assert {"stream", "subject", "seq", "ts", "headers", "data", "region", "amount"} <= set(
        df.columns)
    df.createOrReplaceTempView("orders")
    totals = spark.sql(f"""
        SELECT concat('{out}.', region) AS subject,
               to_json(named_struct('region', region, 'orders', count(*),
                                    'amount', sum(amount))) AS data,
               concat('totals-', region) AS id
        FROM orders GROUP BY region""")
    first = write_stream(totals, msg_id_col="id", js=js, parallelism=1)
    assert (first.rows, first.stored) == (3, 3)
    # the same Spark job run again (or a retried task) stores nothing twice
    again = write_stream(from_spark(totals, 1).materialize(), msg_id_col="id", js=js)
    assert (again.stored, again.duplicates) == (0, 3)

    got = {json.loads(r["data"])["region"]: json.loads(r["data"])
           for r in read_stream(out, js=js).take_all()}
    for region in regions:
        mine = [o["amount"] for o in orders if o["region"] == region]
        assert got[region]["orders"] == len(mine) and got[region]["amount"] == sum(mine)


def test_round_trip_100k_counts_and_checksums(js, spark, stream_name):
    """100k messages stream -> Spark -> stream: same count, same bytes (order-free checksum)."""
    import hashlib

    from rayjet import StorageType

    src, out = f"{stream_name}SRC", f"{stream_name}DST"
    js.add_stream(StreamConfig(name=src, subjects=[f"{src}.>"], storage=StorageType.MEMORY))
    js.add_stream(StreamConfig(name=out, subjects=[f"{out}.>"], storage=StorageType.MEMORY))
    n = 100_000
    payloads = [b"%08d-" % i + bytes([i % 251]) * 115 for i in range(n)]
    for start in range(0, n, 10_000):
        js.publish_batch([(f"{src}.p{i % 10}", payloads[i]) for i in range(start, start + 10_000)])

    def digest(datas) -> str:
        acc = 0
        for d in datas:  # a sum of per-message hashes: equal sets give equal digests
            acc = (acc + int.from_bytes(hashlib.blake2b(d, digest_size=8).digest(), "big"))
        return f"{acc:x}"

    df = read_stream_df(spark, src, js=js)
    assert df.count() == n
    moved = df.selectExpr(f"concat('{out}.', substring(subject, {len(src) + 2}, 10)) AS subject",
                          "data", "cast(seq AS string) AS id")
    result = write_stream(moved, msg_id_col="id", js=js, parallelism=4)
    # a retried write task re-sends its block: the stream's dedup answers those as duplicates
    assert result.rows == n and result.stored + result.duplicates == n
    assert js.stream_info(out).state.messages == n
    copied = read_stream(out, js=js)
    assert copied.count() == n
    assert digest(r["data"] for r in copied.iter_rows()) == digest(payloads)


def test_read_tasks_of_many_pages_reach_spark(js, spark, stream_name):
    """A read task builds its block from many pages (here 17 of 300 messages); Spark gets
    every row."""
    js.add_stream(StreamConfig(name=stream_name, subjects=[f"{stream_name}.>"]))
    js.publish_batch([(f"{stream_name}.a", b"%d" % i) for i in range(5000)])
    df = read_stream_df(spark, stream_name, js=js, parallelism=1, page_msgs=300)
    assert df.count() == 5000
    assert sorted(int(r["data"]) for r in df.select("data").collect()) == list(range(5000))
    js.delete_stream(stream_name)


# Ray Data's console lines: execution start/plan/finish, progress blocks and bars
RAY_DATA_OUTPUT = re.compile(r"Running Dataset|Starting execution of Dataset|Execution plan of"
                             r"|execution finished in|Total Progress|Progress will be logged"
                             r"|Progress bars disabled|logging_progress|streaming_executor")


def test_reads_and_writes_print_nothing_of_ray_data(js, spark, stream_name, capfd,
                                                    ray_data_console):
    src, out = f"{stream_name}IN", f"{stream_name}OUT"
    js.add_stream(StreamConfig(name=src, subjects=[f"{src}.>"]))
    js.add_stream(StreamConfig(name=out, subjects=[f"{out}.>"]))
    js.publish_batch([(f"{src}.a", b"%d" % i) for i in range(500)])
    capfd.readouterr()
    ray_data_console.take()

    df = read_stream_df(spark, src, js=js)                   # stream -> Spark
    assert df.count() == 500
    moved = df.selectExpr(f"'{out}.b' AS subject", "data", "cast(seq AS string) AS id")
    assert write_stream(moved, msg_id_col="id", js=js).stored == 500   # Spark -> stream
    assert len(read_stream(out, js=js).take_all()) == 500    # stream -> Ray Data
    seen = capfd.readouterr()
    noise = [line for line in (seen.out + seen.err).splitlines() if RAY_DATA_OUTPUT.search(line)]
    assert not noise, "\n".join(noise)
    # nothing Ray Data's console handler would print
    assert not [line for line in ray_data_console.take() if RAY_DATA_OUTPUT.search(line)]
    # only rayjet's datasets were quieted: the process-wide settings are the user's
    assert ray.data.DataContext.get_current().enable_progress_bars

    # progress=True keeps Ray Data's own output (and shows the check would have seen it)
    assert len(read_stream(out, js=js, progress=True).take_all()) == 500
    assert any(RAY_DATA_OUTPUT.search(line) for line in ray_data_console.take())
