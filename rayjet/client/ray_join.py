"""Joining a running Ray cluster from any process: find it, check it answers, use its token.

Ray 2.60 starts heads with token authentication whenever a token exists
(``~/.ray/auth_token``, ``RAY_AUTH_TOKEN`` or ``RAY_AUTH_TOKEN_PATH``), but a process that
joins by ``host:port`` leaves ``RAY_AUTH_MODE`` disabled, is refused, and only reports a
generic ``ConnectionError`` after ~20 s. rayjet asks the head's control store first, with a
short deadline: when it refuses a caller without credentials, the token found the way Ray's
tools find it is used (token mode for this process); a missing or wrong token then fails at
once with a typed error. A head without authentication leaves the mode as it was, so nodes
this process starts later match their cluster.
"""

from __future__ import annotations

import os
import socket

AUTH_MODE_ENV = "RAY_AUTH_MODE"
TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"

# Settings of a Ray that rayjet starts (a local one, `rayjet server start`'s head): a call
# argument or result up to this size crosses inline in the call instead of through the
# shared-memory object store, so a NATS message (1 MB max_payload) or an object-store chunk
# (128 KB) skips a put and a get on its way to the stream (a 128 KB publish: 4.4 -> 2.5 ms)
RAY_SYSTEM_CONFIG = {"max_direct_call_object_size": 2 << 20}

NO_CLUSTER_HINT = ("start one with `rayjet server start` (or `ray start --head`), or point "
                   "--address / RAY_ADDRESS at a running cluster")
TOKEN_HINT = ("copy the head's ~/.ray/auth_token to this machine (or set RAY_AUTH_TOKEN / "
              "RAY_AUTH_TOKEN_PATH); `ray get-auth-token` on the head prints it")


def join_address(address: str | None) -> str | None:
    """The cluster this process joins: ``address``, else ``$RAY_ADDRESS``; None starts one
    (as ``"local"`` does, Ray's name for a Ray of this process's own)."""
    target = address if address is not None else os.environ.get("RAY_ADDRESS") or None
    return None if target is not None and target.strip() == "local" else target


def resolve_address(address: str, timeout: float) -> str:
    """host:port of a running Ray head, checked to accept connections (Ray itself retries
    for minutes against an address where nothing listens)."""
    from ray._private import services

    from rayjet.errors import ServiceUnavailableError

    try:
        resolved = services.canonicalize_bootstrap_address(address)
    except (ConnectionError, ValueError) as exc:
        raise ServiceUnavailableError(f"no Ray cluster found at {address!r}: {exc}",
                                      hint=NO_CLUSTER_HINT) from None
    if resolved is None:
        raise ServiceUnavailableError(f"no Ray cluster found at {address!r}",
                                      hint=NO_CLUSTER_HINT)
    target = resolved.split("://", 1)[-1]
    host, _, port = target.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=min(timeout, 5)):
            pass
    except (OSError, ValueError) as exc:
        raise ServiceUnavailableError(f"no Ray cluster answers at {target} ({exc})",
                                      hint=NO_CLUSTER_HINT) from None
    return target


def use_available_token(target: str, timeout: float) -> bool:
    """Turn on token mode for this process (and the processes it starts) when the head at
    ``target`` requires a token, a token is available and ``RAY_AUTH_MODE`` was not set; True
    when this process sends a token. A head without authentication leaves the mode alone:
    nodes this process may start later (``ray.cluster_utils``) must match their cluster."""
    from ray._raylet import AuthenticationTokenLoader

    mode = os.environ.get(AUTH_MODE_ENV)
    if mode is not None:
        return mode.strip().lower() == "token"
    if not AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True):
        return False
    if not _requires_token(target, timeout):
        return False
    set_auth_mode("token")
    return True


def _requires_token(target: str, timeout: float) -> bool:
    """Whether the head refuses a caller without credentials."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=min(timeout, 10))
        except grpc.RpcError as exc:
            return exc.code() == grpc.StatusCode.UNAUTHENTICATED
    return False


def set_auth_mode(mode: str) -> None:
    """Set ``RAY_AUTH_MODE`` for this process and the processes it starts."""
    from ray._raylet import Config

    os.environ[AUTH_MODE_ENV] = mode
    Config.initialize("")  # Ray caches its config: make it see the new mode


def check_access(target: str, timeout: float) -> None:
    """Ask the head's control store for its cluster id with this process's credentials;
    raise AuthorizationError when it refuses them, ServiceUnavailableError when it does
    not answer."""
    import grpc
    from ray._raylet import AuthenticationTokenLoader
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    from rayjet.errors import AuthorizationError, ServiceUnavailableError

    sends_token = os.environ.get(AUTH_MODE_ENV, "").strip().lower() == "token"
    metadata = None
    if sends_token:
        loader = AuthenticationTokenLoader.instance()
        if not loader.has_token(ignore_auth_mode=True):
            raise AuthorizationError(
                f"RAY_AUTH_MODE=token but no Ray token was found to join {target}",
                hint=TOKEN_HINT)
        metadata = list(loader.get_token_for_http_header().items())
    with grpc.insecure_channel(target) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(),
                              timeout=min(timeout, 10), metadata=metadata)
        except grpc.RpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.UNAUTHENTICATED:
                if sends_token:
                    raise AuthorizationError(
                        f"the Ray cluster at {target} refused this machine's token",
                        hint=TOKEN_HINT) from None
                raise AuthorizationError(
                    f"the Ray cluster at {target} requires a token and none is set here"
                    + (" (RAY_AUTH_MODE is 'disabled')" if os.environ.get(AUTH_MODE_ENV)
                       else ""),
                    hint=TOKEN_HINT + ", and leave RAY_AUTH_MODE unset or set it to 'token'"
                ) from None
            raise ServiceUnavailableError(
                f"the Ray cluster at {target} does not answer ({code.name}: "
                f"{exc.details()})", hint=NO_CLUSTER_HINT) from None


def prepare_join(address: str, timeout: float) -> str:
    """Resolve ``address`` ("auto" or host:port), choose the auth mode and check the head
    accepts this process; returns host:port for ``ray.init``."""
    target = resolve_address(address, timeout)
    use_available_token(target, timeout)
    check_access(target, timeout)
    return target
