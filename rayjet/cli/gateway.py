"""``rayjet gateway``: serve the NATS client protocol in front of the cluster, so NATS
clients and tools (nats.py, nats.go, the ``nats`` CLI) use rayjet."""

from __future__ import annotations

import signal
import ssl
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

from rayjet.cli import common as c

DEFAULT_HTTP_PORT = 8222  # nats-server's monitoring port


def tls_context(cert: Path | None, key: Path | None, ca: Path | None = None,
                prefix: str = "--") -> ssl.SSLContext | None:
    """The gateway's TLS context from the command's flags (``prefix``: how they are
    spelled, e.g. ``--gateway-``); a usage error when they do not go together or load."""
    from rayjet.gateway.tls import tls_context as load

    if cert is None and key is None:
        if ca is not None:
            c.usage_error(f"{prefix}tls-ca (client certificates) needs {prefix}tls-cert and "
                          f"{prefix}tls-key")
        return None
    if cert is None or key is None:
        c.usage_error(f"TLS needs both {prefix}tls-cert and {prefix}tls-key")
    try:
        return load(str(cert), str(key), str(ca) if ca is not None else None)
    except (OSError, ssl.SSLError) as exc:
        what = "certificate, key and CA" if ca is not None else "certificate and key"
        c.usage_error(f"cannot load the TLS {what}: {exc}")
    return None


def tls_paths(cert: Path | None, key: Path | None, ca: Path | None) -> dict[str, str]:
    """The PEM paths a detached gateway loads on its node (the same files must be there)."""
    paths = {"tls_cert": str(cert.resolve()), "tls_key": str(key.resolve())}
    if ca is not None:
        paths["tls_ca"] = str(ca.resolve())
    return paths


def gateway(
    host: Annotated[str, typer.Option(help="address to listen on (loopback unless told "
                                           "otherwise)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="port (0: any free one)")] = 4222,
    token: Annotated[str | None, typer.Option(help="clients must CONNECT with this "
                                                   "auth_token")] = None,
    user: Annotated[str | None, typer.Option(help="clients must CONNECT as this user")] = None,
    password: Annotated[str | None, typer.Option(help="... with this password")] = None,
    tls_cert: Annotated[Path | None, typer.Option(help="PEM certificate: serve TLS")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="PEM private key of --tls-cert")] = None,
    tls_ca: Annotated[Path | None, typer.Option(
        help="PEM CA certificates: clients must present a certificate they signed "
             "(mutual TLS)")] = None,
    max_payload: Annotated[int, typer.Option(min=1, help="largest message a client may "
                                                         "publish, bytes")] = 1024 * 1024,
    domain: Annotated[str | None, typer.Option(
        help="JetStream domain: the API answers under $JS.<domain>.API too, and INFO and "
             "account info report it")] = None,
    http_port: Annotated[int | None, typer.Option(
        "--http-port", min=0, max=65535, show_default=False,
        help="HTTP monitoring port (/varz, /connz, /jsz, /healthz, ...; 0: any free one). "
             "Default 8222, skipped with a warning when taken")] = None,
    monitor: Annotated[bool, typer.Option(
        "--monitor/--no-monitor", help="serve HTTP monitoring")] = True,
    config: Annotated[Path | None, typer.Option(
        "--config", "-c", help="server configuration in nats-server's syntax: accounts, "
        "users (password, bcrypt, nkey), permissions (see docs/gateway.md)",
        show_default=False)] = None,
    reload: Annotated[bool, typer.Option(
        "--reload", help="make the detached gateway of --port on this node read its "
        "--config file again (users and permissions change for connected clients)")] = False,
    detach: Annotated[bool, typer.Option(
        "--detach", help="run it as a detached Ray actor on this node, kept with the "
                         "cluster after this command returns")] = False,
    stop: Annotated[bool, typer.Option(
        "--stop", help="stop the detached gateway of --port on this node")] = False,
    all_nodes: Annotated[bool, typer.Option(
        "--all-nodes", help="with --detach or --stop: on every alive node of the cluster, "
                            "not only this one")] = False,
) -> None:
    """Serve the NATS client protocol (core NATS and JetStream) until interrupted, or as a
    detached actor with --detach."""
    from rayjet.gateway import GatewayOptions, GatewayThread

    if bool(user) != bool(password):
        c.usage_error("--user and --password go together")
    if token and user:
        c.usage_error("use --token or --user/--password, not both")
    if all_nodes and not (detach or stop or reload):
        c.usage_error("--all-nodes goes with --detach, --stop or --reload")
    if config is not None and (token or user):
        c.usage_error("give users and tokens in the --config file or as options, not both")
    config_path = checked_config(config)
    if http_port is not None and not monitor:
        c.usage_error("--http-port goes with monitoring on, not --no-monitor")
    http = monitoring(http_port, monitor)
    tls = None if stop else tls_context(tls_cert, tls_key, tls_ca)  # checked before Ray
    check_domain(domain)
    js = c.connect()
    nodes = [n["node_id"] for n in js.nodes()] if all_nodes else [None]
    if reload:
        from rayjet.gateway.actor import reload_detached

        done = [reload_detached(port, node) for node in nodes]
        if c.wants_json():
            c.emit_json({"reloaded": sum(done), "port": port})
        else:
            print(f"reloaded {sum(done)} gateway(s) on port {port}" if any(done)
                  else f"no detached gateway runs on port {port}")
        return
    if stop:
        from rayjet.gateway.actor import stop_detached

        stopped = [stop_detached(port, node) for node in nodes]
        if c.wants_json():
            c.emit_json({"stopped": any(stopped), "port": port} if not all_nodes else
                        {"stopped": sum(stopped), "port": port})
        elif all_nodes:
            print(f"stopped {sum(stopped)} gateway(s) on port {port}")
        else:
            print(f"gateway on port {port} {'stopped' if stopped[0] else 'was not running'}")
        return
    if detach:
        from rayjet.gateway.actor import monitor_of, start_detached

        options = {"host": host, "port": port, "token": token, "user": user,
                   "password": password, "max_payload": max_payload, "domain": domain,
                   "config": config_path, **http}
        if tls is not None:  # loadable here; the actor loads the files on its node
            options.update(tls_paths(tls_cert, tls_key, tls_ca))
        started = [start_detached(options, node) for node in nodes]
        urls = [url for _, url in started]
        monitors = [monitor_of(handle) for handle, _ in started]
        if c.wants_json():
            c.emit_json({"url": urls[0], "port": port, "monitor": monitors[0][0],
                         **({"monitor_error": monitors[0][1]} if monitors[0][1] else {})}
                        if not all_nodes else
                        {"urls": urls, "port": port, "monitors": [m for m, _ in monitors]})
        else:
            for url, (murl, why) in zip(urls, monitors, strict=True):
                print(f"rayjet gateway listening on {url} (detached)"
                      + (f", monitoring on {murl}" if murl else ""))
                if why:
                    c.err_console().print(f"[yellow]warning:[/] {c.escape(why)}")
        return
    options = GatewayOptions(host=host, port=port, token=token, user=user, password=password,
                             tls=tls, max_payload=max_payload, domain=domain,
                             config=config_path, **http)
    server = GatewayThread(js, options)
    try:
        server.start()
    except OSError as exc:
        c.usage_error(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    if config_path:  # as nats-server: SIGHUP reads the configuration file again
        signal.signal(signal.SIGHUP, lambda *_: reload_logged(server))
    scheme = "tls" if options.tls else "nats"
    if server.gateway is not None and server.gateway.monitor_error:
        c.err_console().print(f"[yellow]warning:[/] {c.escape(server.gateway.monitor_error)}")
    murl = server.monitor_url()
    # one line a supervisor (or a test) can wait for
    print(f"rayjet gateway listening on {scheme}://{host}:{server.port}"
          + (f", monitoring on {murl}" if murl else ""), flush=True)
    done.wait()
    server.stop()


def checked_config(path: Path | None) -> str | None:
    """The configuration file's absolute path (the gateway may run in another directory),
    once it is known to be usable: a usage error naming the problem otherwise."""
    if path is None:
        return None
    from rayjet.auth import ServerAuth, parse_file
    from rayjet.errors import ServerConfigError
    from rayjet.gateway.accounts import jetstream_accounts, tls_from_config

    try:
        auth = ServerAuth.from_config(parse_file(path))
        jetstream_accounts(auth)
        tls_from_config(auth)  # its certificate files load
    except ServerConfigError as exc:
        c.usage_error(exc.description)
    return str(path.resolve())


def reload_logged(server: Any) -> None:
    from rayjet.errors import ServerConfigError

    try:
        server.reload()
        print("configuration reloaded", flush=True)
    except ServerConfigError as exc:
        c.err_console().print(f"[red]reload refused:[/] {c.escape(exc.description)}")


def monitoring(http_port: int | None, monitor: bool) -> dict[str, Any]:
    """GatewayOptions' monitoring fields from the CLI's flags: the default port 8222 is
    skipped when taken, a port asked for is not."""
    if not monitor:
        return {"http_port": None}
    if http_port is None:
        return {"http_port": DEFAULT_HTTP_PORT, "http_optional": True}
    return {"http_port": http_port}


def check_domain(domain: str | None, flag: str = "--domain") -> None:
    """A usage error (before Ray is joined) for a domain that is not one subject token."""
    if domain is None:
        return
    from rayjet.errors import BadRequestError
    from rayjet.gateway import GatewayOptions

    try:
        GatewayOptions(domain=domain)
    except BadRequestError as exc:
        c.usage_error(f"{flag}: {exc.description}")


def register(app: typer.Typer) -> None:
    c.command(app, "gateway")(gateway)
