"""Many idle streams: what an idle R3 stream costs, quiescent or not, and a quiet failover.

    .venv/bin/python benchmarks/density.py                # 10 R3 streams, both settings
    .venv/bin/python benchmarks/density.py --streams 20 --json out.json
    .venv/bin/python benchmarks/density.py --streams 1000 --settings quiet --failovers 3 \
        --ephemerals 0 --watches 0                      # 1,000 idle R3 streams
    .venv/bin/python benchmarks/density.py --hosting dedicated   # an actor per replica

For each setting (quiescence on, the default; and off, ``RAYJET_RAFT_QUIESCE_TICKS=0``, the
baseline) a fresh local Ray (``num_cpus=2``) and data dir: create N R3 file streams (time
per stream), publish one message to each, let them idle, then measure over 20 s the CPU of
every Ray worker process on the machine (cores busy = CPU seconds / wall seconds), their
count and memory (USS). With quiescence on, also the failover of a quiet group: kill the
process of one stream's leader (its host, with the replicas of other streams in it; or its
dedicated actor) and time the kill to the next acknowledged publish (several times,
median reported).

With quiescence on, then ``--ephemerals`` ephemeral consumers on one stream (they run in the
stream leader's actor) and ``--watches`` KV watches on an R3 bucket: the time to create
each, and the processes, memory and idle CPU with them in place.

``--buckets N`` instead measures N R3 KV buckets on shared hosts (the buckets' default) in
a fresh Ray: creation time per bucket, then processes, memory and idle CPU.

``--durables N`` instead measures one dedicated R3 stream with N R3 durable consumers (their
replicas run inside the stream's replica actors) in a fresh Ray: creation time per
consumer, then processes, memory and idle CPU.

``--pushers N`` instead measures one dedicated R3 stream with N idle push subscriptions: the
idle CPU of the stream alone (the baseline) and with them, then the time from a publish to
its arrival at a subscriber.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

IDLE_SECONDS = 20.0


def ray_workers():
    import psutil

    out = []
    for p in psutil.process_iter(["name", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if cmd.startswith("ray::"):
            out.append(p)
    return out


def cpu_seconds(procs) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except Exception:  # noqa: BLE001 - gone
            pass
    return total


def uss(procs) -> int:
    total = 0
    for p in procs:
        try:
            total += p.memory_full_info().uss
        except Exception:  # noqa: BLE001 - gone
            pass
    return total


def idle_cost(seconds: float = IDLE_SECONDS) -> dict:
    """Cores the Ray worker processes keep busy over ``seconds``, in all and by process
    title (``ray::MetaMember`` ...: several processes of a kind are summed)."""
    procs = ray_workers()
    c0 = {p.pid: cpu_seconds([p]) for p in procs}
    t0 = time.perf_counter()
    time.sleep(seconds)
    wall = time.perf_counter() - t0
    by_title: dict[str, float] = {}
    for p in procs:
        title = " ".join(p.info["cmdline"] or []).split(" ")[0]
        by_title[title] = by_title.get(title, 0.0) + (cpu_seconds([p]) - c0[p.pid]) / wall
    return {"workers": len(procs), "uss_mb": round(uss(procs) / 1e6),
            "idle_cores": round(sum(by_title.values()), 3),
            "idle_cores_by_process": {t: round(c, 3) for t, c in sorted(by_title.items())}}


def ms(values: list[float], q: float) -> float:
    return round(1000 * sorted(values)[min(len(values) - 1, int(q * len(values)))], 1)


def add_ephemerals(js, n: int, watches: int) -> dict:
    """``n`` ephemeral consumers on stream D0 and ``watches`` KV watches: creation times,
    then the idle cost with them in place."""
    from rayjet import ConsumerConfig
    from rayjet.api import AckPolicy

    out: dict = {}
    made = []
    for i in range(n):
        t = time.perf_counter()
        js.add_consumer("D0", ConsumerConfig(ack_policy=AckPolicy.NONE,
                                             filter_subject=f"d0.{i}"))
        made.append(time.perf_counter() - t)
    if made:
        out.update(ephemerals=n, ephemeral_create_ms_median=ms(made, 0.5),
                   ephemeral_create_ms_p95=ms(made, 0.95))
    kv = js.create_key_value(bucket="W", replicas=3)
    kv.put("k", b"v")
    watchers, took = [], []
    for _ in range(watches):
        t = time.perf_counter()
        watchers.append(kv.watch("k"))
        took.append(time.perf_counter() - t)
    if took:
        out.update(watches=watches, watch_create_ms_median=ms(took, 0.5),
                   watch_create_ms_p95=ms(took, 0.95))
    time.sleep(5.0)
    out.update({f"{k}_with_ephemerals": v for k, v in idle_cost().items()})
    for w in watchers:
        w.stop()
    return out


def run_setting(n: int, failovers: int, ephemerals: int = 0, watches: int = 0,
                hosting: str | None = None) -> dict:
    import rayjet
    from rayjet.api import StorageType
    from tests.cluster.test_faults import leader_id, replica_handles
    from tests.replicas import kill

    data_dir = Path(tempfile.mkdtemp(prefix="rayjet-density-"))
    out: dict = {}
    try:
        with rayjet.connect(data_dir=str(data_dir), num_cpus=2, timeout=60,
                            hosting=hosting) as js:
            created = []
            for i in range(n):
                t = time.perf_counter()
                js.add_stream(name=f"D{i}", subjects=[f"d{i}.>"], num_replicas=3,
                              storage=StorageType.FILE)
                created.append(time.perf_counter() - t)
                js.publish(f"d{i}.x", b"hello")
            out["create_ms_median"] = ms(created, 0.5)
            out["create_ms_p95"] = ms(created, 0.95)
            time.sleep(5.0)  # idle long enough to go quiet (1 s) and settle
            out.update(idle_cost())
            out["idle_pct_core_per_stream"] = round(100 * out["idle_cores"] / n, 2)
            times = []
            for k in range(failovers):
                name = f"D{k % n}"
                time.sleep(3.0)  # quiet again
                victim = replica_handles(js, name)[leader_id(js, name)]
                t = time.perf_counter()
                kill(victim)  # its process: a dedicated actor, or the host it runs in
                while True:
                    try:
                        js.publish(f"d{k % n}.x", b"after", timeout=10,
                                   headers={"Nats-Msg-Id": f"fo-{k}"})
                        break
                    except Exception:  # noqa: BLE001 - electing
                        time.sleep(0.02)
                times.append(time.perf_counter() - t)
            if times:
                out["failover_s"] = [round(x, 2) for x in times]
                out["failover_s_median"] = round(statistics.median(times), 2)
            if ephemerals or watches:
                out.update(add_ephemerals(js, ephemerals, watches))
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    return out


def run_buckets(n: int) -> dict:
    import rayjet

    data_dir = Path(tempfile.mkdtemp(prefix="rayjet-buckets-"))
    out: dict = {"buckets": n}
    try:
        with rayjet.connect(data_dir=str(data_dir), num_cpus=2, timeout=60) as js:
            made = []
            for i in range(n):
                t = time.perf_counter()
                kv = js.create_key_value(bucket=f"B{i}", replicas=3)
                made.append(time.perf_counter() - t)
                kv.put("k", b"v")
            out.update(bucket_create_ms_median=ms(made, 0.5), bucket_create_ms_p95=ms(made, 0.95),
                       first_bucket_create_s=round(made[0], 2))
            time.sleep(5.0)
            out.update(idle_cost())
            out["idle_pct_core_per_bucket"] = round(100 * out["idle_cores"] / n, 3)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    return out


def run_durables(n: int) -> dict:
    import rayjet
    from rayjet import ConsumerConfig
    from rayjet.api import AckPolicy

    data_dir = Path(tempfile.mkdtemp(prefix="rayjet-durables-"))
    out: dict = {"durables": n}
    try:
        with rayjet.connect(data_dir=str(data_dir), num_cpus=2, timeout=60) as js:
            js.add_stream(name="S", subjects=["s.>"], num_replicas=3, hosting="dedicated")
            js.publish("s.x", b"hello")
            time.sleep(5.0)
            out.update({f"{k}_stream_alone": v for k, v in idle_cost().items()})
            made = []
            for i in range(n):
                t = time.perf_counter()
                js.add_consumer("S", ConsumerConfig(durable_name=f"C{i}", num_replicas=3,
                                                    ack_policy=AckPolicy.EXPLICIT))
                made.append(time.perf_counter() - t)
            out.update(durable_create_ms_median=ms(made, 0.5),
                       durable_create_ms_p95=ms(made, 0.95))
            time.sleep(5.0)
            out.update(idle_cost())
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    return out


def run_pushers(n: int, publishes: int = 50) -> dict:
    """One R3 stream with ``n`` idle push subscriptions (durable, R3 consumers): the idle
    cost of the stream alone and with them, then the time from a publish to its arrival
    at a subscriber (``publishes`` one at a time, median and p95)."""
    import rayjet

    data_dir = Path(tempfile.mkdtemp(prefix="rayjet-pushers-"))
    out: dict = {"pushers": n}
    try:
        with rayjet.connect(data_dir=str(data_dir), num_cpus=2, timeout=60) as js:
            js.add_stream(name="P", subjects=["p.>"], num_replicas=3, hosting="dedicated")
            js.publish("p.x", b"hello")
            time.sleep(5.0)
            out.update({f"{k}_stream_alone": v for k, v in idle_cost().items()})
            subs = [js.subscribe(stream="P", durable=f"S{i}") for i in range(n)]
            for sub in subs:
                sub.next_msg(timeout=60)
            time.sleep(5.0)
            out.update(idle_cost())
            took = []
            for i in range(publishes):
                t = time.perf_counter()
                js.publish("p.x", b"%d" % i)
                for sub in subs[:1]:
                    sub.next_msg(timeout=30)
                took.append(time.perf_counter() - t)
            out.update(publish_to_push_ms_median=ms(took, 0.5),
                       publish_to_push_ms_p95=ms(took, 0.95))
            for sub in subs:
                sub.unsubscribe()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=10)
    ap.add_argument("--failovers", type=int, default=3)
    ap.add_argument("--ephemerals", type=int, default=200)
    ap.add_argument("--watches", type=int, default=20)
    ap.add_argument("--buckets", type=int, default=0,
                    help="measure this many R3 KV buckets on shared hosts instead")
    ap.add_argument("--durables", type=int, default=0,
                    help="measure one R3 stream with this many R3 durable consumers instead")
    ap.add_argument("--pushers", type=int, default=0,
                    help="measure one R3 stream with this many idle push subscriptions instead")
    ap.add_argument("--hosting", choices=("shared", "dedicated"),
                    help="the streams' hosting (default: rayjet's default, shared)")
    ap.add_argument("--settings", default="quiet,awake",
                    help="which settings to measure, comma-separated (quiet, awake)")
    ap.add_argument("--setting", choices=("quiet", "awake"), help=argparse.SUPPRESS)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if args.buckets or args.durables or args.pushers:
        res = (run_buckets(args.buckets) if args.buckets else run_durables(args.durables)
               if args.durables else run_pushers(args.pushers))
        print(json.dumps(res))
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=2))
        return
    if args.setting:  # one setting, in a process of its own (the actors inherit its env)
        quiet = args.setting == "quiet"
        res = run_setting(args.streams, args.failovers if quiet else 0,
                          args.ephemerals if quiet else 0, args.watches if quiet else 0,
                          args.hosting)
        print(json.dumps(res))
        return
    results = {}
    root = Path(__file__).resolve().parent.parent
    for setting in args.settings.split(","):
        env = {**os.environ, "PYTHONPATH": str(root)}
        env.pop("RAY_ADDRESS", None)
        env["RAYJET_RAFT_QUIESCE_TICKS"] = "20" if setting == "quiet" else "0"
        proc = subprocess.run([sys.executable, __file__, "--streams", str(args.streams),
                               "--failovers", str(args.failovers), "--ephemerals",
                               str(args.ephemerals), "--watches", str(args.watches),
                               "--setting", setting]
                              + (["--hosting", args.hosting] if args.hosting else []),
                              capture_output=True, text=True, env=env, cwd=root, timeout=1800)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-3000:])
        results[setting] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"{setting:6}: {results[setting]}", flush=True)
    q, a = results.get("quiet"), results.get("awake")
    if q and a and a["idle_cores"]:
        print(f"idle CPU, quiescent vs always ticking: {q['idle_cores']} vs {a['idle_cores']} "
              f"cores ({a['idle_cores'] / max(q['idle_cores'], 1e-6):.1f}x less)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
