"""The data plane: raft messages over direct, authenticated TCP connections (no Ray here).

:class:`DataPlaneServer` receives batches and hands them to a ``deliver(group, messages)``
callable; :class:`DataPlaneSender` sends them, fire and forget, with a bounded queue per
peer. Wire format, security and back-pressure: ``rayjet/dataplane/README.md``.
"""

from rayjet.dataplane.auth import (
    HANDSHAKE_TIMEOUT,
    PROTOCOL_VERSION,
    AuthError,
    client_handshake,
    cluster_secret,
    server_handshake,
)
from rayjet.dataplane.codec import (
    MAX_NAME,
    DataPlaneError,
    FrameError,
    decode_batch,
    encode_batch,
    encode_message,
)
from rayjet.dataplane.frames import (
    MAX_FRAME,
    Frame,
    FrameReader,
    Kind,
    pack_frame,
    read_frame,
)
from rayjet.dataplane.requests import (
    PLAIN,
    ConnectFailed,
    DataPlaneClient,
    RemoteError,
    ValueCodec,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from rayjet.dataplane.tls import DataPlaneTLS, TLSConfigError, tls_from_env
from rayjet.dataplane.transport import (
    PEER_BUDGET,
    Address,
    DataPlaneSender,
    DataPlaneServer,
    Deliver,
)

__all__ = [
    "HANDSHAKE_TIMEOUT",
    "MAX_FRAME",
    "MAX_NAME",
    "PEER_BUDGET",
    "PROTOCOL_VERSION",
    "PLAIN",
    "Address",
    "AuthError",
    "ConnectFailed",
    "DataPlaneClient",
    "DataPlaneError",
    "DataPlaneSender",
    "DataPlaneServer",
    "DataPlaneTLS",
    "Deliver",
    "Frame",
    "FrameError",
    "FrameReader",
    "Kind",
    "RemoteError",
    "TLSConfigError",
    "ValueCodec",
    "client_handshake",
    "cluster_secret",
    "decode_batch",
    "decode_request",
    "decode_response",
    "encode_batch",
    "encode_message",
    "encode_request",
    "encode_response",
    "pack_frame",
    "read_frame",
    "server_handshake",
    "tls_from_env",
]
