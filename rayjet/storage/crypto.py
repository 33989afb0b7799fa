"""Compression and encryption of record bodies (FileStore only).

Compression is raw Snappy (``cramjam.snappy.compress_raw``), the format nats-server's
``s2`` option reads, applied per record and kept only when it makes the body smaller.

Encryption is per record with an AEAD (ChaCha20-Poly1305 by default, or AES-256-GCM from
``cryptography``): a fresh 12-byte nonce, the record's length/seq/ts header as associated
data, so a record moved to another seq or a body from another key fails authentication.
The data key is BLAKE2b(key) so any non-empty secret works. A store remembers a check value
made with its key: opening it with another key raises ``EncryptionKeyError`` instead of
returning garbage.

:class:`RecordCipher` seals whole records of files kept beside a store (the raft log and its
snapshots) with the same secret under a separate derived key, so the two never share a
nonce space.
"""

from __future__ import annotations

import hashlib
import os

import cramjam
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

from rayjet.errors import EncryptionKeyError, StoreCorruptionError
from rayjet.storage import record as rec

NONCE_LEN = 12
TAG_LEN = 16
_CHECK_PLAIN = b"rayjet store key check v1"


def _aead(key: bytes, cipher: str, person: bytes = b"rayjet.store"):
    dk = hashlib.blake2b(key, digest_size=32, person=person).digest()
    return AESGCM(dk) if cipher == "aes-256-gcm" else ChaCha20Poly1305(dk)


class BodyCodec:
    """Turns a plain message body into the stored body and back."""

    def __init__(self, compress: bool, key: bytes | None, cipher: str) -> None:
        self.compress = compress
        self.cipher = cipher
        self._key = key
        self._aead = _aead(key, cipher) if key else None

    @property
    def encrypted(self) -> bool:
        return self._aead is not None

    @property
    def transforms(self) -> bool:
        return self.compress or self._aead is not None

    def record_cipher(self) -> RecordCipher | None:
        """A cipher for files kept beside the store, or None when it is not encrypted."""
        return RecordCipher(self._key, self.cipher) if self._aead is not None else None

    def key_check(self) -> bytes:
        nonce = os.urandom(NONCE_LEN)
        return nonce + self._aead.encrypt(nonce, _CHECK_PLAIN, None)

    def verify_key(self, check: bytes) -> None:
        if self._aead is None:
            raise EncryptionKeyError(err="the store is encrypted: give its encryption_key")
        try:
            ok = self._aead.decrypt(check[:NONCE_LEN], check[NONCE_LEN:], None) == _CHECK_PLAIN
        except InvalidTag:
            ok = False
        if not ok:
            raise EncryptionKeyError(err="the key does not open this store")

    def encode(self, flags: int, seq_kind: int, ts: int, body: bytes) -> bytes:
        """A complete frame for a message body (flags carries F_HDR)."""
        if self.compress:
            packed = bytes(cramjam.snappy.compress_raw(body))
            if len(packed) < len(body):
                body, flags = packed, flags | rec.F_COMPRESSED
        if self._aead is not None:
            flags |= rec.F_ENCRYPTED
            head = rec.head_for(flags, seq_kind, ts, NONCE_LEN + len(body) + TAG_LEN)
            nonce = os.urandom(NONCE_LEN)
            return rec.seal(head, nonce + self._aead.encrypt(nonce, body, head))
        return rec.encode_frame(flags, seq_kind, ts, body)

    def seal_blob(self, data: bytes, aad: bytes) -> bytes:
        """``data`` encrypted with the store key (index files of an encrypted store)."""
        nonce = os.urandom(NONCE_LEN)
        return nonce + self._aead.encrypt(nonce, data, aad)

    def open_blob(self, blob: bytes, aad: bytes) -> bytes:
        if self._aead is None:
            raise EncryptionKeyError(err="index file is encrypted and no key was given")
        try:
            return self._aead.decrypt(blob[:NONCE_LEN], blob[NONCE_LEN:], aad)
        except InvalidTag:
            raise EncryptionKeyError(err="index file does not decrypt with this key") from None

    def frame_body(self, buf, off: int, length: int, flags: int) -> bytes:
        """The plain body of the stored frame at ``off`` in ``buf``."""
        body = rec.body_of(buf, off, length)
        if flags & (rec.F_COMPRESSED | rec.F_ENCRYPTED):
            body = self.decode(flags, bytes(buf[off:off + rec.HEAD_LEN]), body)
        return body

    def decode(self, flags: int, head: bytes, body: bytes) -> bytes:
        """The plain body of a stored frame."""
        if flags & rec.F_ENCRYPTED:
            if self._aead is None:
                raise EncryptionKeyError(err="record is encrypted and no key was given")
            try:
                body = self._aead.decrypt(body[:NONCE_LEN], body[NONCE_LEN:], head)
            except InvalidTag:
                raise EncryptionKeyError(err="record does not decrypt with this key") from None
        if flags & rec.F_COMPRESSED:
            try:
                body = bytes(cramjam.snappy.decompress_raw(body))
            except Exception as exc:  # cramjam raises its own DecompressionError
                raise StoreCorruptionError(err=f"record does not decompress: {exc}") from None
        return body


class RecordCipher:
    """Seals whole records: a fresh nonce, then the AEAD of the record bound to ``aad``."""

    overhead = NONCE_LEN + TAG_LEN

    def __init__(self, key: bytes, cipher: str) -> None:
        self._aead = _aead(key, cipher, b"rayjet.raftlog")

    def seal(self, plain: bytes, aad: bytes) -> bytes:
        nonce = os.urandom(NONCE_LEN)
        return nonce + self._aead.encrypt(nonce, plain, aad)

    def open(self, sealed: bytes, aad: bytes) -> bytes:
        """The plain record; a record that does not authenticate was sealed with another
        key (callers check a crc first, so torn or flipped bytes never reach here)."""
        try:
            return self._aead.decrypt(bytes(sealed[:NONCE_LEN]), bytes(sealed[NONCE_LEN:]), aad)
        except InvalidTag:
            raise EncryptionKeyError(err="record does not decrypt with this key") from None


__all__ = ["BodyCodec", "RecordCipher"]
