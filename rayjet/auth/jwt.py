"""NATS JWTs: decentralised users, as nats-server's operator mode reads them.

A JWT is ``base64url(header).base64url(claims).base64url(signature)`` without padding;
the header names ``ed25519-nkey`` (``ed25519`` in version 1 tokens) and the signature is
the issuer's Ed25519 signature of ``header.claims`` (of the claims alone in version 1
tokens). The chain of trust: an operator JWT
the configuration trusts (self-signed) signs account JWTs (its key or one of its
``signing_keys``); an account (or one of its signing keys) signs user JWTs. A client proves
its user by signing the server's nonce with the user's nkey (the user JWT's ``sub``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from rayjet.auth import nkeys

ALGORITHMS = ("ed25519-nkey", "ed25519")


class JWTError(ValueError):
    """A token that cannot be read or is not signed by its issuer."""


def _b64decode(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise JWTError("not base64url") from None


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


@dataclass
class Claims:
    """A verified token's claims: who signed it (``issuer``), whom it is about
    (``subject``), its kind (user, account, operator) and its ``nats`` section."""

    issuer: str
    subject: str
    kind: str
    nats: dict[str, Any]
    name: str = ""
    expires: int = 0
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def signing_keys(self) -> set[str]:
        keys = set()
        for k in self.nats.get("signing_keys") or ():
            if isinstance(k, str):
                keys.add(k)
            elif isinstance(k, dict) and isinstance(k.get("key"), str):
                keys.add(k["key"])  # a scoped signing key
        return keys


def decode(token: Any, now: float | None = None) -> Claims:
    """The claims of ``token``, its signature checked against the issuer it names (whether
    that issuer is trusted is the caller's question); expired tokens are refused."""
    if not isinstance(token, str) or token.count(".") != 2:
        raise JWTError("a JWT has three dot-separated parts")
    head_b64, body_b64, sig_b64 = token.split(".")
    try:
        header = json.loads(_b64decode(head_b64))
        body = json.loads(_b64decode(body_b64))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise JWTError("the header or the claims are not JSON") from None
    if not isinstance(header, dict) or header.get("alg") not in ALGORITHMS:
        raise JWTError(f"unsupported JWT algorithm {header.get('alg') if isinstance(header, dict) else header!r}")
    if not isinstance(body, dict):
        raise JWTError("the claims are not an object")
    issuer, subject = body.get("iss"), body.get("sub")
    if not isinstance(issuer, str) or not isinstance(subject, str):
        raise JWTError("a JWT names its issuer and subject")
    nats_section = body.get("nats") if isinstance(body.get("nats"), dict) else {}
    # version 1 tokens sign their claims alone, version 2 the header and the claims
    version = nats_section.get("version", 1)
    signed = body_b64 if not isinstance(version, int) or version <= 1 else \
        f"{head_b64}.{body_b64}"
    if issuer[:1] not in nkeys.PREFIX or not nkeys.verify(issuer, signed.encode(), sig_b64):
        raise JWTError("the signature is not its issuer's")
    claim_type = nats_section.get("type") or body.get("type") or ""
    expires = body.get("exp") or 0
    if isinstance(expires, int) and expires and (now or time.time()) > expires:
        raise JWTError("the JWT has expired")
    return Claims(issuer, subject, str(claim_type), nats_section,
                  str(body.get("name") or ""), expires if isinstance(expires, int) else 0,
                  body)


def issue(claims: dict[str, Any], issuer: nkeys.KeyPair) -> str:
    """A version 2 JWT of ``claims`` (``sub`` and ``nats`` given) signed by ``issuer``: what
    an operator's tool makes; the server only reads them."""
    body = {**claims, "iss": issuer.public_key, "iat": int(time.time())}
    body.pop("jti", None)
    body["jti"] = base64.b32encode(hashlib.sha512(
        json.dumps(body, sort_keys=True).encode()).digest()[:32]).decode().rstrip("=")
    head = _b64encode(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    payload = _b64encode(json.dumps(body).encode())
    raw_sig = issuer.sign(f"{head}.{payload}".encode())
    return f"{head}.{payload}.{raw_sig}"


def creds(user_jwt: str, seed: str) -> str:
    """A ``.creds`` file's text: the user JWT and its nkey seed, as clients read them."""
    return (f"-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n"
            "************************* IMPORTANT *************************\n"
            "NKEY Seed printed below can be used to sign and prove identity.\n\n"
            f"-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n")


def permissions_doc(nats_section: dict[str, Any]) -> dict[str, Any]:
    """A user JWT's permissions in the configuration's shape (rayjet.auth.permissions)."""
    out: dict[str, Any] = {}
    for key, name in (("pub", "publish"), ("sub", "subscribe")):
        rules = nats_section.get(key)
        if isinstance(rules, dict):
            doc = {k: list(rules[k]) for k in ("allow", "deny")
                   if isinstance(rules.get(k), list) and rules[k]}
            if doc:
                out[name] = doc
    resp = nats_section.get("resp")
    if isinstance(resp, dict):
        ttl = resp.get("ttl")
        out["allow_responses"] = {"max": int(resp.get("max") or 0),
                                  **({"expires": f"{int(ttl) / 1e9}s"}
                                     if isinstance(ttl, int) and ttl > 0 else {})}
    return out
