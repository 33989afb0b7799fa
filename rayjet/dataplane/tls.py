"""TLS for the data plane from the environment of the processes that run replicas.

``RAYJET_DATA_PLANE_TLS_CERT`` and ``RAYJET_DATA_PLANE_TLS_KEY`` (PEM files: this process's
certificate and key) with ``RAYJET_DATA_PLANE_TLS_CA`` (the CA that signed every
process's certificate) turn on mutual TLS: each server asks its clients for a certificate
signed by that CA and each client checks the server's. Peers connect by IP address, so a
certificate names its node's IP (a SAN), unless ``RAYJET_DATA_PLANE_TLS_SERVER_NAME`` names
what every certificate carries instead (one certificate for the whole cluster). The HMAC
handshake still runs inside TLS: a certificate alone does not join a raft group.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass

CERT_ENV = "RAYJET_DATA_PLANE_TLS_CERT"
KEY_ENV = "RAYJET_DATA_PLANE_TLS_KEY"
CA_ENV = "RAYJET_DATA_PLANE_TLS_CA"
SERVER_NAME_ENV = "RAYJET_DATA_PLANE_TLS_SERVER_NAME"


class TLSConfigError(ValueError):
    """The TLS settings are incomplete or their files unusable."""


@dataclass(frozen=True)
class DataPlaneTLS:
    server: ssl.SSLContext
    client: ssl.SSLContext
    server_hostname: str | None


def tls_from_env(environ: Mapping[str, str]) -> DataPlaneTLS | None:
    """The contexts the settings in ``environ`` ask for; None when none is set. Raises
    TLSConfigError when some are set but not all, or a file cannot be used."""
    cert, key, ca = (environ.get(k, "").strip() for k in (CERT_ENV, KEY_ENV, CA_ENV))
    name = environ.get(SERVER_NAME_ENV, "").strip() or None
    if not (cert or key or ca or name):
        return None
    missing = [env for env, value in ((CERT_ENV, cert), (KEY_ENV, key), (CA_ENV, ca))
               if not value]
    if missing:
        raise TLSConfigError(f"data-plane TLS needs {', '.join(missing)} as well")
    try:
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=ca)
        server.verify_mode = ssl.CERT_REQUIRED
        server.load_cert_chain(cert, key)
        client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
        client.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise TLSConfigError(f"data-plane TLS files unusable: {exc}") from exc
    return DataPlaneTLS(server, client, name)
