"""The gateway as a detached Ray actor: it lives with the cluster, not with the shell that
started it (``rayjet gateway --detach``), one per node and port."""

from __future__ import annotations

from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rayjet.actors.names import NAMESPACE
from rayjet.gateway.embedded import GatewayThread
from rayjet.gateway.server import GatewayOptions
from rayjet.gateway.tls import tls_context


class GatewayActor:
    """Plain class; :func:`start_detached` wraps it with ``ray.remote``."""

    def __init__(self, options: dict[str, Any]) -> None:
        import rayjet

        options = dict(options)
        cert, key = options.pop("tls_cert", None), options.pop("tls_key", None)
        ca = options.pop("tls_ca", None)
        if cert or key:  # PEM paths on this node: the context is made here, not shipped
            options["tls"] = tls_context(cert, key, ca)
        self.js = rayjet.connect()  # inside a Ray worker: this worker's session
        self.options = GatewayOptions(**options)
        self.server = GatewayThread(self.js, self.options)
        self.server.start()

    def url(self) -> str:
        scheme = "tls" if self.options.tls else "nats"
        return f"{scheme}://{self.options.host}:{self.server.port}"

    def monitor(self) -> tuple[str | None, str | None]:
        """(the monitoring URL, or why monitoring is off although asked for)."""
        gw = self.server.gateway
        return self.server.monitor_url(), gw.monitor_error if gw is not None else None

    def reload(self) -> None:
        self.server.reload()

    def stop(self) -> None:
        self.server.stop()


def actor_name(node_id: str, port: int) -> str:
    return f"rayjet-gateway-{node_id[:12]}-{port}"


def monitor_of(handle: Any) -> tuple[str | None, str | None]:
    """A detached gateway's monitoring URL, or why it has none although asked for."""
    return tuple(ray.get(handle.monitor.remote(), timeout=60))


def start_detached(options: dict[str, Any], node_id: str | None = None) -> tuple[Any, str]:
    """Start (or find) the gateway actor for ``options['port']`` on ``node_id`` (default:
    this process's node); returns its handle and URL once it listens. ``options`` are
    GatewayOptions fields, with TLS as ``tls_cert``/``tls_key`` PEM paths on that node."""
    node_id = node_id or ray.get_runtime_context().get_node_id()
    name = actor_name(node_id, int(options.get("port", 4222)))
    cls = ray.remote(GatewayActor)
    handle = cls.options(
        name=name, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        num_cpus=0, max_restarts=3, max_task_retries=-1,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
    ).remote(options)
    try:
        return handle, ray.get(handle.url.remote(), timeout=120)
    except Exception:
        ray.kill(handle, no_restart=True)  # e.g. the port was taken: leave no dead name
        raise


def reload_detached(port: int, node_id: str | None = None) -> bool:
    """Make the gateway actor for ``port`` on ``node_id`` read its configuration file again;
    False when none runs (a configuration it cannot use raises, the old one kept)."""
    node_id = node_id or ray.get_runtime_context().get_node_id()
    try:
        handle = ray.get_actor(actor_name(node_id, port), namespace=NAMESPACE)
    except ValueError:
        return False
    ray.get(handle.reload.remote(), timeout=60)
    return True


def stop_detached(port: int, node_id: str | None = None) -> bool:
    """Stop and remove the gateway actor for ``port`` on ``node_id``; False when none ran."""
    node_id = node_id or ray.get_runtime_context().get_node_id()
    try:
        handle = ray.get_actor(actor_name(node_id, port), namespace=NAMESPACE)
    except ValueError:
        return False
    try:
        ray.get(handle.stop.remote(), timeout=30)
    finally:
        ray.kill(handle, no_restart=True)
    return True
