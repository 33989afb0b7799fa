"""NATS nkeys: Ed25519 keys written as base32 with a type prefix and a CRC-16.

A public key is ``base32(prefix byte + 32 key bytes + crc16)`` without padding; its first
letter names the kind (``U`` user, ``A`` account, ``O`` operator, ``N`` server). A seed
(``SU...``) holds the private key the same way behind two prefix bytes. The server hands
each client a nonce; an nkey user proves itself by signing it (the CONNECT ``sig``).
"""

from __future__ import annotations

import base64
import binascii

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

PREFIX = {"A": 0 << 3, "C": 2 << 3, "N": 13 << 3, "O": 14 << 3, "U": 20 << 3}
SEED = 18 << 3


def crc16(data: bytes) -> int:
    """CRC-16/XMODEM, the checksum nkeys carry."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def _b32decode(text: str) -> bytes | None:
    if not isinstance(text, str) or not text.isascii():
        return None
    try:
        return base64.b32decode(text + "=" * (-len(text) % 8))
    except (binascii.Error, ValueError):
        return None


def _encode(raw: bytes) -> str:
    body = raw + crc16(raw).to_bytes(2, "little")
    return base64.b32encode(body).decode().rstrip("=")


def decode_public(key: str, kind: str = "U") -> bytes | None:
    """The 32 key bytes of a public nkey of this kind, or None when it is not one."""
    raw = _b32decode(key)
    if raw is None or len(raw) != 35 or raw[0] != PREFIX[kind]:
        return None
    if crc16(raw[:-2]) != int.from_bytes(raw[-2:], "little"):
        return None
    return raw[1:33]


def is_public_key(key: object, kind: str = "U") -> bool:
    return isinstance(key, str) and decode_public(key, kind) is not None


def verify(public_key: str, nonce: bytes, signature: str) -> bool:
    """Did the holder of ``public_key``'s seed sign ``nonce``? ``signature`` is base64
    (URL-safe without padding, or standard), as clients send it."""
    raw = decode_public(public_key, public_key[:1] if public_key[:1] in PREFIX else "U")
    if raw is None or not isinstance(signature, str):
        return False
    sig = None
    for decoder in (base64.urlsafe_b64decode, base64.b64decode):
        try:
            sig = decoder(signature + "=" * (-len(signature) % 4))
            break
        except (binascii.Error, ValueError):
            continue
    if sig is None or len(sig) != 64:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(raw).verify(sig, nonce)
    except InvalidSignature:
        return False
    return True


class KeyPair:
    """A seed and its public key (for clients and tests; servers only verify)."""

    def __init__(self, seed: str) -> None:
        raw = _b32decode(seed)
        if raw is None or len(raw) != 36 or crc16(raw[:-2]) != int.from_bytes(
                raw[-2:], "little"):
            raise ValueError("not an nkey seed")
        kind_byte = ((raw[0] & 7) << 5) | ((raw[1] & 0xF8) >> 3)
        if raw[0] & 0xF8 != SEED or kind_byte not in PREFIX.values():
            raise ValueError("not an nkey seed")
        self.kind = next(k for k, v in PREFIX.items() if v == kind_byte)
        self.seed = seed
        self._key = Ed25519PrivateKey.from_private_bytes(raw[2:34])

    @classmethod
    def create(cls, kind: str = "U") -> KeyPair:
        key = Ed25519PrivateKey.generate().private_bytes(
            Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        prefix = PREFIX[kind]
        head = bytes([SEED | (prefix >> 5), (prefix & 31) << 3])
        return cls(_encode(head + key))

    @property
    def public_key(self) -> str:
        raw = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return _encode(bytes([PREFIX[self.kind]]) + raw)

    def sign(self, data: bytes) -> str:
        """The signature as clients send it: URL-safe base64 without padding."""
        return base64.urlsafe_b64encode(self._key.sign(data)).decode().rstrip("=")
