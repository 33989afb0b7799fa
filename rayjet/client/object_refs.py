"""Objects as Ray object refs: a Ray task reads an object's chunks from its bucket's stream.

``ObjectStore.get_ref`` (which imports no Ray) calls ``js.object_ref``; the task started
here connects with the ``connect`` it is given (``rayjet.connect``, reusing the worker's Ray
session: passed in by the connection, which imports this module), reads the version of the
object the caller looked up with the object store's paged ``read_range`` and checks its
size and SHA-256, so the bytes go from the stream replicas into Ray's object store without
passing through the client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rayjet.api import ObjectInfo
from rayjet.objectstore import ObjectStore

DEFAULT_OPTIONS: dict[str, Any] = {"num_cpus": 0, "max_retries": 3}
_connections: dict[tuple[str, float], Any] = {}  # per worker process: connect once


def _connection(connect: Callable[..., Any], data_dir: str, timeout: float) -> Any:
    key = (data_dir, timeout)
    js = _connections.get(key)
    if js is None or js.closed:
        js = connect(data_dir=data_dir, timeout=timeout)
        _connections[key] = js
    return js


def read_object(connect: Callable[..., Any], data_dir: str, timeout: float, bucket: str,
                stream: str, info: ObjectInfo) -> bytes:
    """The bytes of the object version ``info`` (run as a Ray task); ``connect`` as
    ``rayjet.connect`` takes ``data_dir`` and ``timeout``."""
    js = _connection(connect, data_dir, timeout)
    return ObjectStore(js, bucket, stream)._read_version(info)


_read_object_task = ray.remote(read_object)


def _leader_node(js: Any, stream: str) -> str | None:
    """The Ray node of the stream's leader as last seen (else of its first replica)."""
    try:
        return js.stream_handle(stream).leader_node()
    except Exception:  # noqa: BLE001 - placement is only a preference
        return None


def object_ref(js: Any, bucket: str, stream: str, info: ObjectInfo, *,
               connect: Callable[..., Any],
               ray_remote_args: dict[str, Any] | None = None) -> ray.ObjectRef:
    """Start the task that reads ``info``'s version of an object; its ref, at once. The task
    connects with ``connect`` (a module-level function: Ray sends it by name)."""
    options = dict(DEFAULT_OPTIONS)
    node = _leader_node(js, stream)
    if node:
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=node, soft=True)
    options.update(ray_remote_args or {})
    return _read_object_task.options(**options).remote(
        connect, str(js.data_dir), float(js.timeout), bucket, stream, info)
