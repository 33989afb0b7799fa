"""``rayjet server start|stop|status``: the Ray head with rayjet's meta group, and health."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from rayjet.cli import common as c
from rayjet.cli import ray_head
from rayjet.cli.gateway import check_domain, checked_config, monitoring, tls_context, tls_paths
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


def head_environment(auth: bool) -> dict[str, str]:
    """The environment of `ray start --head`: token authentication on (a token is made when
    this machine has none, as a local `ray.init()` does) unless ``auth`` is off, so the
    head, its workers and every rayjet command agree on the mode."""
    env = dict(os.environ)
    if not auth:
        env["RAY_AUTH_MODE"] = "disabled"
        return env
    if env.get("RAY_AUTH_MODE", "token").strip().lower() != "token":
        c.usage_error("RAY_AUTH_MODE is set to something other than 'token': unset it, or "
                      "pass --no-auth to start a head without token authentication")
    env["RAY_AUTH_MODE"] = "token"
    if not has_token():
        done = _run([ray_binary(), "get-auth-token", "--generate"])
        if done.returncode != 0 or not has_token():
            from rayjet.errors import ServerError

            raise ServerError("could not create a Ray auth token: " +
                              (done.stderr or done.stdout).strip()[-300:],
                              hint="create one with `ray get-auth-token --generate`")
    return env


def has_token() -> bool:
    from ray._raylet import AuthenticationTokenLoader

    loader = AuthenticationTokenLoader.instance()
    loader.reset_cache()
    return loader.has_token(ignore_auth_mode=True)


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
    dashboard: Annotated[bool, typer.Option(
        "--dashboard/--no-dashboard",
        help="start Ray's dashboard (metrics, and Prometheus' service discovery file)")] = True,
    dashboard_port: Annotated[int | None, typer.Option(
        "--dashboard-port", min=1, max=65535, show_default=False,
        help="the dashboard's HTTP port (default 8265, or a free one when taken)")] = None,
    auth: Annotated[bool, typer.Option(
        "--auth/--no-auth", help="Ray token authentication (the token is ~/.ray/auth_token; "
        "made if missing)")] = True,
    client_port: Annotated[int | None, typer.Option(
        "--client-port", min=1, max=65535, show_default=False,
        help="the Ray client server's port (default 10001, or a free one when taken)")] = None,
    agent_port: Annotated[int | None, typer.Option(
        "--agent-port", min=1, max=65535, show_default=False,
        help="the HTTP port of Ray's dashboard agent (metrics, jobs; default 52365, or a "
             "free one when taken)")] = None,
    gateway: Annotated[bool, typer.Option(
        "--gateway/--no-gateway", help="serve NATS clients (a detached gateway actor on "
        "this node); `rayjet` commands then go through it")] = True,
    gateway_port: Annotated[int, typer.Option(
        "--gateway-port", min=1, max=65535, help="the gateway's port")] = 4222,
    gateway_host: Annotated[str, typer.Option(
        "--gateway-host", help="the address the gateway listens on")] = "127.0.0.1",
    gateway_token: Annotated[str | None, typer.Option(
        "--gateway-token", help="NATS clients must CONNECT with this auth_token",
        show_default=False)] = None,
    gateway_tls_cert: Annotated[Path | None, typer.Option(
        "--gateway-tls-cert", help="PEM certificate: the gateway serves TLS",
        show_default=False)] = None,
    gateway_tls_key: Annotated[Path | None, typer.Option(
        "--gateway-tls-key", help="PEM private key of --gateway-tls-cert",
        show_default=False)] = None,
    gateway_tls_ca: Annotated[Path | None, typer.Option(
        "--gateway-tls-ca", help="PEM CA certificates: NATS clients must present a "
                                 "certificate they signed (mutual TLS)",
        show_default=False)] = None,
    gateway_domain: Annotated[str | None, typer.Option(
        "--gateway-domain", help="JetStream domain the gateway serves (as `rayjet gateway "
                                 "--domain`)", show_default=False)] = None,
    gateway_http_port: Annotated[int | None, typer.Option(
        "--gateway-http-port", min=0, max=65535, show_default=False,
        help="the gateway's HTTP monitoring port (as `rayjet gateway --http-port`; default "
             "8222, skipped with a warning when taken)")] = None,
    gateway_monitor: Annotated[bool, typer.Option(
        "--gateway-monitor/--no-gateway-monitor",
        help="the gateway serves HTTP monitoring")] = True,
    config: Annotated[Path | None, typer.Option(
        "--config", "-c", help="the gateway's server configuration in nats-server's syntax "
        "(accounts, users, permissions); `rayjet server reload` reads it again",
        show_default=False)] = None,
) -> None:
    """Start a Ray head on this machine (`ray start --head`), rayjet's meta group and a NATS
    gateway."""
    node_labels = parse_labels(labels)
    check_domain(gateway_domain, "--gateway-domain")
    if config is not None and gateway_token:
        c.usage_error("give users and tokens in the --config file or as options, not both")
    config_path = checked_config(config)
    if gateway_http_port is not None and not gateway_monitor:
        c.usage_error("--gateway-http-port goes with monitoring on, not --no-gateway-monitor")
    gateway_options: dict[str, Any] = {"host": gateway_host, "port": gateway_port,
                                       "token": gateway_token, "domain": gateway_domain,
                                       "config": config_path,
                                       **monitoring(gateway_http_port, gateway_monitor)}
    if gateway and tls_context(gateway_tls_cert, gateway_tls_key, gateway_tls_ca,
                               prefix="--gateway-") is not None:
        gateway_options.update(tls_paths(gateway_tls_cert, gateway_tls_key, gateway_tls_ca))
    from rayjet.client.ray_join import RAY_SYSTEM_CONFIG

    ports = head_ports(port, client_port, dashboard_port if dashboard else None, agent_port,
                       dashboard)
    client_port, agent_port = ports["client"], ports["agent"]
    dashboard_port = ports.get("dashboard", 8265)
    cmd = [ray_binary(), "start", "--head", f"--port={port}",
           f"--ray-client-server-port={client_port}",
           f"--dashboard-agent-listen-port={agent_port}",
           f"--include-dashboard={str(dashboard).lower()}", f"--dashboard-port={dashboard_port}",
           "--disable-usage-stats", "--system-config=" + json.dumps(RAY_SYSTEM_CONFIG)]
    if num_cpus is not None:
        cmd.append(f"--num-cpus={num_cpus}")
    if node_labels:
        cmd.append("--labels=" + ",".join(f"{k}={v}" for k, v in node_labels.items()))
    st = c.state()
    if data_dir is not None:
        st.data_dir = data_dir
    env = head_environment(auth)
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env,
                          start_new_session=True)  # the head outlives this shell's job
    if done.returncode != 0:
        from rayjet.errors import ServiceUnavailableError

        # leave no half-started head behind (its control store may already run)
        left = ray_head.find_head(port)
        if left is not None:
            ray_head.stop_head(left, grace=5, force=True)
            ray_head.forget_current_cluster(port)
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise ServiceUnavailableError(
            "`ray start --head` failed: " + " / ".join(tail),
            hint="what it started was stopped; `rayjet server status` reports on a head "
                 "already running here, `rayjet server stop --port N` stops one")
    from rayjet.client.ray_join import set_auth_mode

    set_auth_mode(env["RAY_AUTH_MODE"])  # this process joins as the others will
    ray_head.remember_last_head(port)
    st.address = f"127.0.0.1:{port}"
    js = c.connect()  # creates the meta group, which keeps its log in --data-dir
    url, monitor, problem = start_gateway(gateway_options) if gateway else (None, None, None)
    if c.wants_json():
        c.emit_json({"address": st.address, "data_dir": str(js.data_dir),
                     "nodes": len(js.nodes()), "auth": "token" if auth else "disabled",
                     "ports": ports,
                     "gateway": url, "monitor": monitor,
                     **({"gateway_error": problem} if problem else {})})
        return
    out = c.console()
    out.print(f"Ray head started at {st.address}, rayjet meta group ready "
              f"(data in {c.escape(js.data_dir)})")
    if url:
        out.print(f"NATS clients connect to {url}; `rayjet` commands use it")
        if monitor:
            out.print(f"Monitoring (/varz, /jsz, /healthz, ...) on {monitor}")
    if problem:
        lead = "" if url else "no gateway: "
        c.err_console().print(f"[yellow]warning:[/] {lead}{c.escape(problem)}")
    out.print(f"Use it from other shells with: export RAY_ADDRESS={st.address}")
    if auth:
        out.print("Token authentication is on: other machines need this machine's "
                  "~/.ray/auth_token (or RAY_AUTH_TOKEN)")


def start_gateway(options: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """The detached gateway's URL and monitoring URL, and what went wrong (the gateway could
    not start, or serves without monitoring; the head runs either way)."""
    from rayjet.gateway.actor import monitor_of, start_detached

    try:
        handle, url = start_detached(options)
    except Exception as exc:  # noqa: BLE001 - e.g. the port is taken: say so, keep the head
        text = str(exc).strip().splitlines()
        return None, None, (f"port {options['port']} on {options['host']} could not be had "
                            f"({text[-1] if text else exc}); start one with "
                            "`rayjet gateway --detach --port N`")
    monitor, why = monitor_of(handle)
    return url, monitor, why


@c.command(app, "reload")
def reload(gateway_port: Annotated[int, typer.Option(
        "--gateway-port", min=1, max=65535, help="the port of the gateway to reload")] = 4222,
) -> None:
    """Make this node's gateway read its --config file again, as nats-server's reload:
    users and permissions change for connected clients, removed users are disconnected."""
    from rayjet.errors import ServerConfigError
    from rayjet.gateway.actor import reload_detached

    c.connect()
    try:
        done = reload_detached(gateway_port)
    except Exception as exc:  # noqa: BLE001 - the actor's error comes wrapped by Ray
        cause = getattr(exc, "cause", None)
        if isinstance(cause, ServerConfigError):
            c.usage_error(f"reload refused, the old configuration stays: {cause.description}")
        raise
    if not done:
        c.usage_error(f"no gateway runs on port {gateway_port} on this node")
    if c.wants_json():
        c.emit_json({"reloaded": True, "port": gateway_port})
    else:
        print(f"gateway on port {gateway_port} reloaded its configuration")


@c.command(app, "stop")
def stop(port: Annotated[int | None, typer.Option(
             "--port", min=1, max=65535, show_default=False,
             help="the GCS port of the head to stop (default: the port of --address / "
                  "$RAY_ADDRESS, else the head the last `server start` here made)")] = None,
         every: Annotated[bool, typer.Option(
             "--all", help="stop every Ray process of this machine (`ray stop`), not only "
                           "one head")] = False,
         force: Annotated[bool, typer.Option("--force", "-f", help="kill Ray's processes "
                                             "(SIGKILL)")] = False,
         grace: Annotated[int, typer.Option("--grace-period", min=0, help="seconds to wait "
                                            "for processes to exit")] = 16) -> None:
    """Stop the Ray head started by `server start` on this machine; data stays in the data
    dir."""
    if every:
        cmd = [ray_binary(), "stop", f"--grace-period={grace}"] + (["--force"] if force else [])
        done = _run(cmd)
        if done.returncode != 0:
            from rayjet.errors import ServerError

            raise ServerError("`ray stop` failed: " + (done.stderr or done.stdout).strip(),
                              hint="retry with --force")
        stopped = {"stopped": True, "all": True}
    else:
        if port is None:
            # the head named by --address / $RAY_ADDRESS, else the last one started here
            named = c.state().address or os.environ.get("RAY_ADDRESS")
            if named and named != "auto":
                port = address_port(named)
            else:
                port = ray_head.last_head_port() or 6379
        found = ray_head.find_head(port)
        if found is None:
            from rayjet.errors import ServiceUnavailableError

            raise ServiceUnavailableError(
                f"no Ray head listens on port {port} on this machine",
                hint="pass the --port given to `rayjet server start`, or --all to stop every "
                     "Ray process here")
        count = ray_head.stop_head(found, grace=grace, force=force)
        ray_head.forget_current_cluster(port)
        ray_head.forget_last_head(port)
        stopped = {"stopped": True, "port": port, "session": found.session_name,
                   "processes": count}
    if c.wants_json():
        c.emit_json(stopped)
    else:
        what = "every Ray process" if every else f"the Ray head on port {stopped['port']}"
        c.console().print(f"Stopped {what} on this machine; `rayjet server start` with the "
                          "same --data-dir brings every stream back")


def head_ports(gcs: int, client: int | None, dashboard: int | None, agent: int | None,
               with_dashboard: bool) -> dict[str, int]:
    """The ports a new head listens on: those asked for (a usage error when taken), else
    Ray's defaults, else free ones. A control store port already in use is a usage error
    that names the head there."""
    if ray_head.port_taken(gcs):
        there = ray_head.find_head(gcs)
        c.usage_error(f"port {gcs} is taken" + (
            f" by the Ray head of session {there.session_name}: `rayjet server stop --port "
            f"{gcs}` stops it" if there else " by another program") +
            "; choose another with --port")
    try:
        out = {"gcs": gcs,
               "client": ray_head.choose_port("--client-port", client, 10001),
               "agent": ray_head.choose_port("--agent-port", agent, 52365)}
        if with_dashboard:
            out["dashboard"] = ray_head.choose_port("--dashboard-port", dashboard, 8265)
    except ValueError as exc:
        c.usage_error(str(exc))
    return out


def address_port(address: str | None) -> int:
    """The port of a host:port address; 6379 (Ray's default) otherwise."""
    _, sep, port = (address or "").rpartition(":")
    return int(port) if sep and port.isdigit() else 6379


@c.command(app, "status")
def status() -> None:
    """Ray nodes with their labels; every stream with its size, sequences, leader and replica
    lag; every consumer with its pending, ack pending and redelivered counts and ack floor."""
    js = c.connect()
    nodes = js.nodes()
    from rayjet.client import report

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

    from rayjet.client import report
    from rayjet.errors import APIError

    js = c.connect()
    reports = report.gather(js)
    try:
        meta = js.meta_cluster()
    except APIError as err:
        meta = {"name": "meta", "leader": None, "error": err.description}
    doc = report.jsz(reports, meta, now=datetime.now(tz=UTC),
                     server_id=ray.get_runtime_context().gcs_address or "",
                     store_dir=meta.get("data_dir") or str(js.data_dir), config=config)
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
