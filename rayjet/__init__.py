"""rayjet: durable, replicated streams, a key-value store and an object store on Ray.

``import rayjet`` stays light: the Ray-backed client is imported on first use of
``rayjet.connect``.
"""

from __future__ import annotations

import importlib
from typing import Any

from rayjet import errors
from rayjet.api import (
    AccountLimits,
    AckPolicy,
    ClusterInfo,
    ConsumerConfig,
    ConsumerInfo,
    DeliverPolicy,
    DiscardPolicy,
    ExternalStream,
    KeyValueConfig,
    ObjectInfo,
    ObjectMeta,
    ObjectStoreConfig,
    PeerInfo,
    Placement,
    PubAck,
    RawStreamMsg,
    ReplayPolicy,
    RePublish,
    RetentionPolicy,
    SequenceInfo,
    StorageType,
    StoreCompression,
    StreamConfig,
    StreamInfo,
    StreamSource,
    StreamState,
    SubjectTransform,
)

__version__ = "0.1.0"

_LAZY = {"JetStream"}


_USER_SCHEMES = ("nats://", "tls://")


def connect(address: str | None = None, *, gateway: Any = None, user: str | None = None,
            password: str | None = None, token: str | None = None,
            nkey_seed: str | None = None, **kwargs: Any) -> Any:
    """Connect to rayjet: :func:`rayjet.client.connection.connect` takes ``data_dir``,
    ``num_cpus``, ``timeout``, ``max_pending_async``, ``ray_init_kwargs`` and ``hosting``.
    This path joins Ray and acts with the whole cluster's authority (cluster admin).

    As a user instead: ``address`` a gateway's ``nats://host:port`` (or ``tls://``) with
    ``user``/``password``, ``token`` or ``nkey_seed`` (or credentials in the URL): the
    connection acts within that user's account and permissions, which the gateway enforces
    (a refused publish or subscription raises PermissionViolationError; requests it may not
    make go unanswered and time out, as on nats-server).

    ``gateway`` also serves NATS clients from this process while the connection is open:
    ``True`` (127.0.0.1:4222), a port, or :class:`rayjet.gateway.GatewayOptions` (or a dict
    of its fields); ``js.gateway`` is then the running gateway (``.port``)."""
    as_user = any(v is not None for v in (user, password, token, nkey_seed))
    if (isinstance(address, str) and address.startswith(_USER_SCHEMES)) or as_user:
        if gateway is not None or kwargs:
            raise errors.BadRequestError(
                "a user's connection goes through a gateway: it takes no gateway, data_dir "
                "or Ray options (those are the cluster admin's, without credentials)")
        if not isinstance(address, str) or not address.startswith(_USER_SCHEMES):
            raise errors.BadRequestError("credentials go with a gateway's nats://host:port "
                                         f"address, not {address!r}")
        remote = importlib.import_module("rayjet.remote.jetstream")
        return remote.connect_user(address, user=user, password=password, token=token,
                                   nkey_seed=nkey_seed)
    js = importlib.import_module("rayjet.client").connect(address, **kwargs)
    if gateway is not None and gateway is not False:
        try:
            js.gateway = importlib.import_module("rayjet.gateway.embedded").serve(js, gateway)
        except BaseException:
            js.close()
            raise
    return js


def __getattr__(name: str) -> Any:
    # imported by name so that pure packages importing `rayjet` do not depend on Ray
    if name in _LAZY:
        return getattr(importlib.import_module("rayjet.client"), name)
    raise AttributeError(f"module 'rayjet' has no attribute {name!r}")


__all__ = [
    "AccountLimits",
    "AckPolicy",
    "ClusterInfo",
    "ConsumerConfig",
    "ConsumerInfo",
    "DeliverPolicy",
    "DiscardPolicy",
    "ExternalStream",
    "JetStream",
    "KeyValueConfig",
    "ObjectInfo",
    "ObjectMeta",
    "ObjectStoreConfig",
    "PeerInfo",
    "Placement",
    "PubAck",
    "RawStreamMsg",
    "RePublish",
    "ReplayPolicy",
    "RetentionPolicy",
    "SequenceInfo",
    "StorageType",
    "StoreCompression",
    "StreamConfig",
    "StreamInfo",
    "StreamSource",
    "StreamState",
    "SubjectTransform",
    "connect",
    "errors",
]
