"""``rayjet server start|stop|status``: the Ray head with rayjet's meta group, and health."""

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from rayjet.cli import common as c
from rayjet.cli import report
from rayjet.cli.streams import replicas_cell

app = typer.Typer(no_args_is_help=True)


def ray_binary() -> str:
    """The `ray` script of this environment (next to the interpreter), else from $PATH."""
    here = Path(sys.executable).parent / "ray"
    found = str(here) if here.exists() else shutil.which("ray")
    if not found:
        c.usage_error("the `ray` command was not found: install rayjet's dependencies")
    return found  # type: ignore[return-value]


def parse_labels(values: list[str] | None) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in values or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or "," in item or key.startswith("ray.io/"):
            c.usage_error(f"invalid --label {item!r}: use key=value, e.g. "
                          "rayjet.cluster=west")
        labels[key.strip()] = value.strip()
    return labels


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


@c.command(app, "start")
def start(
    data_dir: Annotated[str | None, typer.Option(
        "--data-dir", help="where replicas keep their data (default: $RAYJET_DATA_DIR, else "
        "<tmp>/rayjet-data)", show_default=False)] = None,
    port: Annotated[int, typer.Option("--port", min=1, max=65535,
                                      help="the Ray head's GCS port")] = 6379,
    num_cpus: Annotated[int | None, typer.Option("--num-cpus", min=1, help="CPUs Ray may use",
                                                 show_default=False)] = None,
    labels: Annotated[list[str] | None, typer.Option(
        "--label", help="node label key=value (repeatable), e.g. rayjet.cluster=west",
        show_default=False)] = None,
    dashboard: Annotated[bool, typer.Option("--dashboard/--no-dashboard",
                                            help="start Ray's dashboard")] = False,
) -> None:
    """Start a Ray head on this machine (`ray start --head`) and rayjet's meta group."""
    node_labels = parse_labels(labels)
    cmd = [ray_binary(), "start", "--head", f"--port={port}",
           f"--include-dashboard={str(dashboard).lower()}", "--disable-usage-stats"]
    if num_cpus is not None:
        cmd.append(f"--num-cpus={num_cpus}")
    if node_labels:
        cmd.append("--labels=" + ",".join(f"{k}={v}" for k, v in node_labels.items()))
    st = c.state()
    if data_dir is not None:
        st.data_dir = data_dir
    done = _run(cmd)
    if done.returncode != 0:
        from rayjet.errors import ServiceUnavailableError

        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise ServiceUnavailableError(
            "`ray start --head` failed: " + " / ".join(tail),
            hint="is a Ray head already running here? `rayjet server status` reports on it, "
                 "`rayjet server stop` stops it")
    st.address = f"127.0.0.1:{port}"
    js = c.connect()  # creates the meta group, which keeps its log in --data-dir
    if c.wants_json():
        c.emit_json({"address": st.address, "data_dir": str(js.data_dir),
                     "nodes": len(js.nodes())})
        return
    out = c.console()
    out.print(f"Ray head started at {st.address}, rayjet meta group ready "
              f"(data in {c.escape(js.data_dir)})")
    out.print(f"Use it from other shells with: export RAY_ADDRESS={st.address}")


@c.command(app, "stop")
def stop(force: Annotated[bool, typer.Option("--force", "-f", help="kill Ray's processes "
                                             "(SIGKILL)")] = False,
         grace: Annotated[int, typer.Option("--grace-period", min=0, help="seconds to wait "
                                            "for processes to exit")] = 16) -> None:
    """Stop the Ray processes of this machine (`ray stop`); data stays in the data dir."""
    cmd = [ray_binary(), "stop", f"--grace-period={grace}"] + (["--force"] if force else [])
    done = _run(cmd)
    if done.returncode != 0:
        from rayjet.errors import ServerError

        raise ServerError("`ray stop` failed: " + (done.stderr or done.stdout).strip(),
                          hint="retry with --force")
    if c.wants_json():
        c.emit_json({"stopped": True})
    else:
        c.console().print("Ray stopped on this machine; `rayjet server start` with the same "
                          "--data-dir brings every stream back")


@c.command(app, "status")
def status() -> None:
    """Ray nodes with their labels; every stream with its size, sequences, leader and replica
    lag; every consumer with its pending, ack pending and redelivered counts and ack floor."""
    js = c.connect()
    nodes = js.nodes()
    streams, consumers = report.status_rows(report.gather(js))
    if c.wants_json():
        c.emit_json({"nodes": nodes, "streams": streams, "consumers": consumers})
        return
    node_rows = []
    for n in nodes:
        labels = {k: v for k, v in n["labels"].items() if not k.startswith("ray.io/")}
        res = n["resources"]
        node_rows.append((n["node_id"][:12], n["address"] or "",
                          ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "-",
                          f"{res.get('CPU', 0):g}",
                          c.human_bytes(res.get("memory", 0))))
    tables = [c.list_table(["Node", "Address", "Labels", "CPUs", "Memory"], node_rows,
                           title=f"Ray nodes ({len(nodes)})", right=[3, 4])]
    tables += _stream_tables(streams, consumers)
    c.print_renderables(*tables)


def _stream_tables(streams: list[dict], consumers: list[dict]) -> list:
    if not streams:
        return ["No streams defined"]
    tables = [c.list_table(
        ["Stream", "Replicas", "Messages", "Bytes", "First seq", "Last seq",
         "Leader and replicas (* leader, ~ behind, ! offline)"],
        [(r["stream"], "-", "-", "-", "-", "-", f"error: {r['error']}") if "error" in r else
         (r["stream"], str(r["replicas"]), f"{r['messages']:,}", c.human_bytes(r["bytes"]),
          f"{r['first_seq']:,}", f"{r['last_seq']:,}", replicas_cell(r))
         for r in streams], title=f"Streams ({len(streams)})", right=[1, 2, 3, 4, 5])]
    if consumers:
        tables.append(c.list_table(
            ["Stream", "Consumer", "Pending", "Ack pending", "Redelivered", "Waiting",
             "Ack floor (stream seq)", "Leader"],
            [(r["stream"], r["consumer"], "-", "-", "-", "-", "-", f"error: {r['error']}")
             if "error" in r else
             (r["stream"], r["consumer"], f"{r['num_pending']:,}",
              f"{r['num_ack_pending']:,}", f"{r['num_redelivered']:,}",
              f"{r['num_waiting']:,}", f"{r['ack_floor_stream_seq']:,}", r["leader"] or "-")
             for r in consumers], title=f"Consumers ({len(consumers)})",
            right=[2, 3, 4, 5, 6]))
    return tables


@c.command(app, "report")
def server_report(config: Annotated[bool, typer.Option(
        "--config", help="include stream and consumer configurations (JSON)")] = False,
        ) -> None:
    """JetStream-wide numbers: totals, the meta group, every stream and consumer
    (`--json`: a document shaped like nats-server's /jsz?streams=true&consumers=true)."""
    from datetime import UTC, datetime

    import ray

    from rayjet.errors import APIError

    js = c.connect()
    reports = report.gather(js)
    try:
        meta = js.meta_cluster()
    except APIError as err:
        meta = {"name": "meta", "leader": None, "error": err.description}
    doc = report.jsz(reports, meta, now=datetime.now(tz=UTC),
                     server_id=ray.get_runtime_context().gcs_address or "",
                     store_dir=str(js.data_dir), config=config)
    if c.wants_json():
        c.emit_json(doc)
        return
    mc = doc["meta_cluster"]
    summary = c.kv_table([
        ("Ray cluster", doc["server_id"]), ("Data dir", doc["config"].get("store_dir")),
        ("Streams", f"{doc['streams']:,}"), ("Consumers", f"{doc['consumers']:,}"),
        ("Messages", f"{doc['messages']:,}"), ("Bytes", c.human_bytes(doc["bytes"])),
        ("Memory", c.human_bytes(doc["memory"])), ("File storage",
                                                   c.human_bytes(doc["storage"])),
        ("Meta leader", mc.get("leader") or f"none ({meta.get('error', 'no leader')})"),
        ("Meta replicas", ", ".join(
            f"{p['name']}{'' if p['current'] else '~'}" + (f" (lag {p['lag']})"
                                                          if p["lag"] else "")
            for p in mc.get("replicas", ())) or "-"),
        ("Meta cluster size", str(mc["cluster_size"]))], title="JetStream report")
    streams, consumers = report.status_rows(reports)
    c.print_renderables(summary, *_stream_tables(streams, consumers))
