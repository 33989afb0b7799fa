"""The gateway's server-side TLS context, from PEM files (the ``tls_cert``/``tls_key``
options, a configuration file's ``tls`` block, the CLI)."""

from __future__ import annotations

import ssl


def tls_context(cert: str, key: str, ca: str | None = None) -> ssl.SSLContext:
    """A server-side TLS context from PEM files (OSError or ssl.SSLError when they cannot be
    loaded). ``ca``: mutual TLS, as nats-server's ``verify``: every client must present a
    certificate these CA certificates signed, or its handshake fails."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert), str(key))
    if ca:
        ctx.load_verify_locations(cafile=str(ca))
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx
