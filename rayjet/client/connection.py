"""``rayjet.connect()``: join a Ray cluster (or start a local one) and hold the session."""

from __future__ import annotations

import copy
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import AuthenticationError

from rayjet.actors.meta import ensure_meta
from rayjet.actors.names import NAMESPACE
from rayjet.actors.router import meta_router
from rayjet.api import ObjectInfo
from rayjet.api.account_names import GLOBAL as GLOBAL_ACCOUNT
from rayjet.api.stream import HOSTING_KINDS
from rayjet.client.backups import BackupsAPI
from rayjet.client.buckets import KeyValueAPI
from rayjet.client.consumers import ConsumersAPI
from rayjet.client.direct_reads import DirectReadsAPI
from rayjet.client.event_hub import ensure_event_hub
from rayjet.client.object_refs import object_ref
from rayjet.client.publish import PublishAPI
from rayjet.client.ray_join import RAY_SYSTEM_CONFIG, TOKEN_HINT, join_address, prepare_join
from rayjet.client.streams import StreamsAPI
from rayjet.errors import AuthorizationError, BadRequestError, ServiceUnavailableError

DATA_DIR_ENV = "RAYJET_DATA_DIR"
DEFAULT_TIMEOUT = 10.0
_TOKEN_NOTE_LOGGER = "ray._private.authentication.authentication_token_setup"


@contextmanager
def _embedded_start_notes_hidden() -> Iterator[None]:
    """Hide Ray's note that the local Ray it starts uses token authentication (a Ray
    started for this process, reached by nothing else): the note tells how to turn the
    security off. Ray's other warnings stay visible."""
    note = logging.getLogger(_TOKEN_NOTE_LOGGER)
    level = note.level
    if level < logging.ERROR:
        note.setLevel(logging.ERROR)
    try:
        yield
    finally:
        note.setLevel(level)


def default_data_dir() -> Path:
    """Where replicas keep their logs when no ``data_dir`` is given (like nats' store_dir)."""
    env = os.environ.get(DATA_DIR_ENV)
    return Path(env) if env else Path(tempfile.gettempdir()) / "rayjet-data"


class JetStream(StreamsAPI, PublishAPI, ConsumersAPI, KeyValueAPI, DirectReadsAPI,
                BackupsAPI):
    """A connection to rayjet on a Ray cluster. Use ``rayjet.connect()`` to make one."""

    def __init__(self, *, address: str | None, data_dir: Path, started_ray: bool,
                 timeout: float = DEFAULT_TIMEOUT, max_pending_async: int = 4000,
                 hosting: str | None = None) -> None:
        self.address = address
        self.hosting = hosting
        self.data_dir = data_dir
        self.timeout = timeout
        self.max_pending_async = max_pending_async
        self._started_ray = started_ray
        self._closed = False
        self._on_close: list[Callable[[], None]] = []
        self.gateway: object | None = None  # rayjet.connect(gateway=...): its GatewayThread
        # the account whose subjects publishes are routed by (streams of other accounts
        # may capture the same subjects: see rayjet.api.account_names)
        self.account = GLOBAL_ACCOUNT
        self._meta = meta_router()
        self._init_streams()
        self._init_publish()
        self._init_consumers()

    @property
    def closed(self) -> bool:
        return self._closed

    def for_account(self, account: str) -> JetStream:
        """This connection routing publishes by ``account``'s streams (the names it takes
        are still the cluster's: see :class:`rayjet.client.account_view.AccountJetStream`
        for an account's own view)."""
        view = copy.copy(self)
        view.account = account
        view._init_publish()
        return view

    def cluster_resources(self) -> dict[str, float]:
        self._check_open()
        return dict(ray.cluster_resources())

    def nodes(self) -> list[dict]:
        """Alive Ray nodes with their labels (rayjet's servers)."""
        self._check_open()
        return [
            {"node_id": n["NodeID"], "address": n.get("NodeManagerAddress"),
             "labels": dict(n.get("Labels") or {}), "resources": dict(n.get("Resources") or {})}
            for n in ray.nodes() if n.get("Alive")
        ]

    def meta_cluster(self) -> dict:
        """The meta group as its leader sees it: ``name``, ``leader``, ``term``,
        ``cluster_size`` and ``replicas`` (each member's ``name``, ``current``, ``active``,
        ``lag``), like nats-server's ``meta_cluster``."""
        return self._meta_call("cluster_info")

    def object_ref(self, bucket: str, stream: str, info: ObjectInfo, *,
                   ray_remote_args: dict[str, Any] | None = None) -> Any:
        """A Ray object ref to the bytes of the object version ``info`` (for
        ``ObjectStore.get_ref``): a Ray task reads and checks them; returned at once."""
        self._check_open()
        # the task connects as this module's connect() does (object_refs cannot import it:
        # this module imports the API mixins that use object stores)
        return object_ref(self, bucket, stream, info, connect=connect,
                          ray_remote_args=ray_remote_args)

    def close(self) -> None:
        """Close the connection; a Ray started by ``connect()`` is shut down with it."""
        if self._closed:
            return
        self._close_publish()
        for fn in reversed(self._on_close):
            fn()  # e.g. a gateway serving this connection: it stops before Ray does
        self._on_close.clear()
        self._closed = True
        if self._started_ray and ray.is_initialized():
            ray.shutdown()

    def on_close(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` when this connection closes (before a Ray it started stops)."""
        self._on_close.append(fn)

    def _check_open(self) -> None:
        if self._closed:
            raise BadRequestError("the connection is closed: call rayjet.connect() again")

    def __enter__(self) -> JetStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(
    address: str | None = None,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    num_cpus: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    max_pending_async: int = 4000,
    ray_init_kwargs: dict | None = None,
    hosting: str | None = None,
) -> JetStream:
    """Connect to rayjet.

    ``address=None`` joins the cluster named by ``RAY_ADDRESS`` or starts a local Ray (the
    embedded default, even when another Ray runs on this machine); ``"auto"`` or ``"host:port"`` joins a running cluster and fails with
    ServiceUnavailableError when there is none, AuthorizationError when it refuses this
    process's Ray token (found as Ray's tools find it: ``RAY_AUTH_TOKEN``,
    ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``). When this process already runs Ray (a
    driver or a task), that session is reused.

    Ray is started or joined with ``log_to_driver=False`` (the actors' own output stays in
    Ray's log files) and ``logging_level=logging.WARNING`` (no start-up banner; Ray's
    warnings and errors show); ``ray_init_kwargs`` overrides either, e.g.
    ``{"logging_level": logging.INFO}`` for the dashboard's address.

    ``hosting`` ("dedicated" or "shared") is the default for the streams and buckets this
    connection creates without a ``hosting`` of their own; unset, shared: replicas run in
    each node's replica hosts, beside other streams' ("dedicated": an actor per replica).
    """
    if hosting is not None and hosting not in HOSTING_KINDS:
        raise BadRequestError(f"hosting must be one of {', '.join(HOSTING_KINDS)}, "
                              f"not {hosting!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise BadRequestError(f"timeout must be a positive number of seconds, not {timeout!r}")
    if address is not None and (not isinstance(address, str) or not address.strip()):
        raise BadRequestError(f"invalid address {address!r}: use None, 'auto' or 'host:port'")
    directory = Path(data_dir) if data_dir is not None else default_data_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadRequestError(f"data_dir {str(directory)!r} cannot be used: {exc}") from exc

    started = False
    if not ray.is_initialized():
        kwargs = {"namespace": NAMESPACE, "log_to_driver": False,
                  "logging_level": logging.WARNING, **(ray_init_kwargs or {})}
        target = join_address(address)
        if target is None and num_cpus is not None:
            kwargs["num_cpus"] = num_cpus
        if target is None:  # a cluster joined keeps the settings its head started with
            kwargs["_system_config"] = {**RAY_SYSTEM_CONFIG,
                                        **kwargs.get("_system_config", {})}
        if target is not None:
            target = prepare_join(target, timeout)
        try:
            if target is None:
                # "local": a Ray of our own, even when `ray start` left a cluster on this
                # machine (ray.init() without an address would join that one)
                with _embedded_start_notes_hidden():
                    ray.init(address="local", **kwargs)
            else:
                ray.init(address=target, **kwargs)
        except ConnectionError as exc:
            raise ServiceUnavailableError(
                f"no Ray cluster at {target!r} ({exc}); start one with `ray start --head` "
                "or `ray up ray_cluster.yaml`, or call rayjet.connect() for a local one"
            ) from exc
        except AuthenticationError as exc:
            raise AuthorizationError(str(exc).splitlines()[0], hint=TOKEN_HINT) from exc
        started = target is None
    # the meta group keeps its log in the data_dir of whoever starts it first
    ensure_meta(str(directory))
    ensure_event_hub()  # advisories go there: gateways and capturing streams read them
    return JetStream(address=address, data_dir=directory, started_ray=started, timeout=timeout,
                     max_pending_async=max_pending_async, hosting=hosting)
