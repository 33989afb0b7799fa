"""nats-py through the rayjet gateway beside nats-py to nats-server, measured in one run.

    .venv/bin/python benchmarks/gateway.py --quick     # small counts
    .venv/bin/python benchmarks/gateway.py             # full counts
    .venv/bin/python benchmarks/gateway.py --only streams   # creation and listing only
    .venv/bin/python benchmarks/gateway.py --only requests  # KV puts, 128 KB publishes
    .venv/bin/python benchmarks/gateway.py --only fast      # a fast batch of 100k messages
    .venv/bin/python benchmarks/gateway.py --only js        # the JavaScript client's consume()

The same nats-py code (benchmarks/natsbase.py) runs against both servers: sync publish
(latency), publish_async (throughput), fetch(500) + ack of a pre-filled stream, an ordered
consumer replaying a stream, a core request/reply round trip (a responder on the same
connection), stream creation (R1 file streams made one after another, as nats.py's
JSMTest makes 300), listing them all (STREAM.LIST pages of 256 infos), and what nats.py's
KV and object store send one request at a time (a KV put of a new key, a 128 KB chunk),
and one fast batch (``allow_batched``) of small messages to its commit; ``--only js`` times
the JavaScript client's ``consume()`` (nats.js 3.x, acks one by one) of a pre-filled stream
(node and the npm packages of tests/differential). R1 file streams on
both sides; the ratio is rayjet / nats-server (> 1: the
gateway is faster). The gateway runs in a process of its own (as `rayjet gateway` does, so
nats-py and the gateway do not share an interpreter), over a local Ray started for the run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import natsbase as nb  # noqa: E402


async def _request_reply(url: str, count: int, size: int) -> nb.Latency:
    import os

    import nats

    nc = await nats.connect(url)
    payload = os.urandom(size)

    async def respond(msg):
        await msg.respond(msg.data)

    await nc.subscribe("bench.echo", cb=respond)
    await nc.flush()
    times = []
    for i in range(count + 50):
        t = time.perf_counter()
        await nc.request("bench.echo", payload, timeout=5)
        if i >= 50:
            times.append((time.perf_counter() - t) * 1e6)
    await nc.close()
    times.sort()
    mean = sum(times) / len(times)
    return nb.Latency("request/reply", count, size, nb.percentile(times, 50),
                      nb.percentile(times, 99), mean, 1e6 / mean)


def request_reply(url: str, count: int, size: int = nb.DEFAULT_SIZE) -> nb.Latency:
    return asyncio.run(_request_reply(url, count, size))


CONSUMERS = 20  # streams that get a durable consumer in the creation run


async def _stream_creation(url: str, count: int) -> tuple[nb.Latency, ...]:
    import nats

    nc = await nats.connect(url)
    jsm = nc.jsm()
    names = [f"bench_create_{i}" for i in range(count)]
    times = []
    for name in names:
        t = time.perf_counter()
        await jsm.add_stream(name=name, subjects=[f"{name}.>"])
        times.append((time.perf_counter() - t) * 1e6)
    t = time.perf_counter()
    listed = 0
    while True:  # nats.py's streams_info asks one page; page on as a tool does
        page = await jsm.streams_info(offset=listed)
        listed += len(page)
        if len(page) < 256:
            break
    list_us = (time.perf_counter() - t) * 1e6
    consumer_times = []  # a durable pull consumer on each of the first streams
    for name in names[:CONSUMERS]:
        t = time.perf_counter()
        await jsm.add_consumer(name, durable_name="bench", ack_policy="explicit")
        consumer_times.append((time.perf_counter() - t) * 1e6)
    for name in names:
        await jsm.delete_stream(name)
    await nc.close()
    times.sort()
    mean = sum(times) / len(times)
    create = nb.Latency("stream create", count, 0, nb.percentile(times, 50),
                        nb.percentile(times, 99), mean, 1e6 / mean)
    listing = nb.Latency(f"stream list ({listed})", 1, 0, list_us, list_us, list_us,
                         listed * 1e6 / list_us)
    consumer_times.sort()
    cmean = sum(consumer_times) / len(consumer_times)
    consumers = nb.Latency("consumer create", len(consumer_times), 0,
                           nb.percentile(consumer_times, 50), nb.percentile(consumer_times, 99),
                           cmean, 1e6 / cmean)
    return create, listing, consumers


async def _requests(url: str, count: int) -> dict[str, nb.Latency]:
    """What nats.py's KV and object store do one request at a time: a KV put of a new key
    each time, and a sync publish of a 128 KB object chunk."""
    import os

    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="bench_requests")
    await js.add_stream(name="bench_chunks", subjects=["bench.chunks"])
    chunk = os.urandom(128 * 1024)
    out = {}
    for name, size, op in (("kv put, new keys", 100, lambda i: kv.put(f"k{i}", b"v" * 100)),
                           ("publish 128 KB", len(chunk),
                            lambda i: js.publish("bench.chunks", chunk))):
        times = []
        for i in range(count + 20):
            t = time.perf_counter()
            await op(i)
            if i >= 20:
                times.append((time.perf_counter() - t) * 1e6)
        times.sort()
        mean = sum(times) / len(times)
        out[name] = nb.Latency(name, count, size, nb.percentile(times, 50),
                               nb.percentile(times, 99), mean, 1e6 / mean)
    await js.delete_key_value("bench_requests")
    await js.delete_stream("bench_chunks")
    await nc.close()
    return out


async def _fast_batch(url: str, count: int, size: int = nb.DEFAULT_SIZE,
                      flow: int = 500) -> nb.Throughput:
    """One fast batch (``allow_batched``, nats-server 2.14+) of ``count`` messages into an
    R1 file stream, as a fast-ingest client sends it: raw publishes with a
    ``<inbox>.<id>.<flow>.fail.<seq>.<op>.$FI`` reply each, at most two flow windows ahead
    of the last flow ack, the last message committing; timed to the commit's PubAck."""
    import json

    import nats

    nc = await nats.connect(url)
    await nc.request("$JS.API.STREAM.CREATE.bench_fast", json.dumps({
        "name": "bench_fast", "subjects": ["bench.fast"], "allow_batched": True,
        "storage": "file"}).encode(), timeout=30)
    acked, window, done = 0, flow, asyncio.get_running_loop().create_future()
    moved = asyncio.Event()

    async def answer(msg):
        nonlocal acked, window
        doc = json.loads(msg.data)
        if doc.get("type") == "ack":
            acked, window = max(acked, doc["seq"]), doc["msgs"]
            moved.set()
        elif not done.done():
            done.set_result(doc)

    inbox = nc.new_inbox()
    await nc.subscribe(inbox + ".>", cb=answer)
    payload = b"x" * size
    started = time.perf_counter()
    for seq in range(1, count + 1):
        while seq - acked > 2 * window and not done.done():
            moved.clear()
            await asyncio.wait_for(moved.wait(), 30)
        op = 2 if seq == count else 0 if seq == 1 else 1
        await nc.publish("bench.fast", payload, reply=f"{inbox}.b.{flow}.fail.{seq}.{op}.$FI")
    ack = await asyncio.wait_for(done, 60)
    seconds = time.perf_counter() - started
    if ack.get("count") != count:
        raise SystemExit(f"the fast batch was not stored whole: {ack}")
    await nc.request("$JS.API.STREAM.DELETE.bench_fast", b"", timeout=30)
    await nc.close()
    return nb.Throughput("fast batch", count, size, seconds, count / seconds, count)


JS_CONSUME = """
import { connect } from "@nats-io/transport-node";
import { AckPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
const [url, count] = process.argv.slice(2);
const N = parseInt(count);
const nc = await connect({ servers: url, timeout: 10000 });
const jsm = await jetstreamManager(nc, { timeout: 20000 });
const js = jetstream(nc, { timeout: 20000 });
const name = "bench_js_consume";
await jsm.streams.add({ name, subjects: [name + ".>"] });
const payload = new Uint8Array(100);
let acks = [];
for (let i = 0; i < N; i++) {
  acks.push(js.publish(name + ".m", payload));
  if (acks.length >= 1000) { await Promise.all(acks); acks = []; }
}
await Promise.all(acks);
await jsm.consumers.add(name, { durable_name: "C", ack_policy: AckPolicy.Explicit });
const c = await js.consumers.get(name, "C");
const started = performance.now();
const msgs = await c.consume({ max_messages: 100 });
let n = 0;
for await (const m of msgs) { m.ack(); n++; if (n >= N) break; }
const seconds = (performance.now() - started) / 1000;
await jsm.streams.delete(name);
console.log(JSON.stringify({ consumed: n, seconds }));
await nc.close();
"""


def js_consume(url: str, counts: dict[str, int]) -> dict[str, object]:
    """nats.js ``consume()`` of ``counts["js"]`` messages of 100 B, acked one by one."""
    import json
    import os
    import shutil

    modules = Path(__file__).resolve().parent.parent / "tests/differential/node_modules"
    node = shutil.which("node")
    if node is None or not (modules / "@nats-io/jetstream").is_dir():
        raise SystemExit("--only js needs node and `npm ci` in tests/differential")
    count = counts["js"]
    with tempfile.TemporaryDirectory(prefix="rayjet-bench-js-") as here:
        os.symlink(modules, Path(here) / "node_modules")  # how node finds the client
        script = Path(here) / "consume.mjs"
        script.write_text(JS_CONSUME)
        done = subprocess.run([node, str(script), url, str(count)], capture_output=True,
                              text=True, timeout=600, check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    if got["consumed"] != count:
        raise SystemExit(f"nats.js consumed {got['consumed']} of {count}")
    return {"nats.js consume()": nb.Throughput("nats.js consume", count, 100, got["seconds"],
                                               count / got["seconds"], count)}


def fast_batch(url: str, counts: dict[str, int]) -> dict[str, object]:
    return {"fast batch": asyncio.run(_fast_batch(url, counts["fast"]))}


def requests(url: str, counts: dict[str, int]) -> dict[str, object]:
    return asyncio.run(_requests(url, counts["requests"]))


def stream_creation(url: str, count: int) -> tuple[nb.Latency, ...]:
    return asyncio.run(_stream_creation(url, count))


SERVE = textwrap.dedent("""
    import logging
    import os
    import sys
    import rayjet
    if os.environ.get("RAYJET_GATEWAY_DEBUG"):
        logging.basicConfig(level=logging.WARNING)
        logging.getLogger("rayjet.gateway").setLevel(logging.DEBUG)
    from rayjet.gateway import GatewayOptions, GatewayThread

    js = rayjet.connect(data_dir=sys.argv[2], hosting=sys.argv[3])
    gw = GatewayThread(js, GatewayOptions(port=int(sys.argv[1])))
    gw.start()
    print("listening", flush=True)
    sys.stdin.read()
    gw.stop()
    js.close()
""")


def measure(url: str, counts: dict[str, int]) -> dict[str, object]:
    return {
        "sync publish": nb.sync_publish_latency([url], count=counts["sync"]),
        "publish_async": nb.async_publish_throughput([url], count=counts["async"]),
        "fetch(500)+ack": nb.fetch_ack_throughput([url], count=counts["fetch"], batch=500),
        "ordered replay": nb.ordered_replay([url], count=counts["replay"])[0],
        "request/reply": request_reply(url, counts["rr"]),
    }


def creation(url: str, counts: dict[str, int]) -> dict[str, object]:
    create, listing, consumers = stream_creation(url, counts["streams"])
    return {"stream create": create, "stream list": listing, "consumer create": consumers}


@contextlib.contextmanager
def _gateway(hosting: str):
    """A gateway in a process of its own over a fresh local Ray; yields its URL."""
    port = nb.free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVE, str(port),
                               tempfile.mkdtemp(prefix="rayjet-bench-gw-"), hosting],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        if "listening" not in line:
            raise SystemExit(f"the gateway did not start: {line!r}")
        yield f"nats://127.0.0.1:{port}"
    finally:
        server.stdin.close()  # the gateway process ends when its stdin does
        server.wait(60)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small counts")
    ap.add_argument("--only", choices=("data", "streams", "requests", "fast", "js"),
                    help="only the data rows, only stream creation and listing, only "
                         "KV puts and 128 KB publishes one request at a time, only a "
                         "fast batch, or only nats.js consume()")
    args = ap.parse_args(argv)
    counts = ({"sync": 300, "async": 5_000, "fetch": 5_000, "replay": 10_000, "rr": 300,
               "streams": 60, "requests": 100, "fast": 20_000, "js": 20_000}
              if args.quick else
              {"sync": 2_000, "async": 50_000, "fetch": 50_000, "replay": 100_000, "rr": 2_000,
               "streams": 300, "requests": 500, "fast": 100_000, "js": 100_000})

    kinds = {"data": ("dedicated", measure), "streams": ("shared", creation),
             "requests": ("dedicated", requests), "fast": ("dedicated", fast_batch),
             "js": ("shared", js_consume)}
    # nats.js only when asked (it needs node and the npm packages)
    parts = [kinds[args.only]] if args.only else [v for k, v in kinds.items() if k != "js"]
    ours, theirs = {}, {}
    # the data path on dedicated replica actors (rayjet's default); stream creation on
    # shared host actors (a process per replica would not fit hundreds of streams here)
    for hosting, run in parts:
        with _gateway(hosting) as url:
            ours.update(run(url, counts))
    with nb.NatsServer() as srv:
        for _, run in parts:
            theirs.update(run(srv.urls[0], counts))

    rows = []
    for name, a in ours.items():
        b = theirs[name]
        if isinstance(a, nb.Latency):
            rows.append([name, f"{a.msgs_per_s:,.0f}/s p50 {a.p50_us:,.0f}us p99 {a.p99_us:,.0f}us",
                         f"{b.msgs_per_s:,.0f}/s p50 {b.p50_us:,.0f}us p99 {b.p99_us:,.0f}us",
                         nb.fmt_ratio(nb.ratio(a.msgs_per_s, b.msgs_per_s))])
        else:
            rows.append([name, f"{a.msgs_per_s:,.0f} msg/s", f"{b.msgs_per_s:,.0f} msg/s",
                         nb.fmt_ratio(nb.ratio(a.msgs_per_s, b.msgs_per_s))])
    nb.print_table(["what", "rayjet gateway", f"nats-server {nb.nats_server_version()}",
                    "ratio"], rows,
                   title=f"nats-py {nb.nats_py_version()}, R1 file, {nb.DEFAULT_SIZE} B "
                         f"messages, counts {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
