"""``meta.json``: what a FileStore must know before it reads a record (its cipher and a value
that tells whether a key is the one it was written with).

The file carries a CRC-32 of its content (``check``; files written before it have none
and are read as they are). A damaged or missing file is rebuilt from the blocks: the first
intact message record says whether the store is encrypted, and a key that decrypts it is
the store's key. A key that cannot be the store's raises ``EncryptionKeyError``.
"""

from __future__ import annotations

import json
import os
import zlib

from rayjet.api.enums import StoreCompression
from rayjet.errors import APIError, EncryptionKeyError
from rayjet.storage import record as rec
from rayjet.storage.block import Frame, block_name, list_blocks, scan
from rayjet.storage.config import CIPHERS, StoreConfig
from rayjet.storage.crypto import BodyCodec
from rayjet.storage.fsutil import fsync_dir

META = "meta.json"
VERSION = 2


def _check(meta: dict) -> str:
    return f"{zlib.crc32(json.dumps(meta, sort_keys=True).encode()):08x}"


def read_meta(path: str) -> dict | None:
    """The meta of a store; None when the file is missing or damaged."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
        meta = json.loads(raw)
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict):
        return None
    check = meta.pop("check", None)
    if (check is None and meta.get("version") == VERSION) or \
            (check is not None and check != _check(meta)):
        return None
    key_check, cipher = meta.get("key_check"), meta.get("cipher")
    if not isinstance(key_check, str | None) or not isinstance(cipher, str | None):
        return None
    if key_check is not None:
        try:
            bytes.fromhex(key_check)
        except ValueError:
            return None
    return meta


def write_meta(directory: str, codec: BodyCodec) -> None:
    meta = {"version": VERSION, "cipher": codec.cipher if codec.encrypted else None,
            "key_check": codec.key_check().hex() if codec.encrypted else None}
    meta["check"] = _check(meta)
    path = os.path.join(directory, META)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(meta, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(directory)


def open_meta(directory: str, cfg: StoreConfig) -> BodyCodec:
    """The codec of the store in ``directory`` for ``cfg``'s key, checking the key against
    the store's meta (written, or rebuilt from the blocks, when it is missing or damaged)."""
    compress = cfg.compression is StoreCompression.S2
    meta = read_meta(os.path.join(directory, META))
    if meta is None:
        codec = _from_blocks(directory, cfg) if list_blocks(directory) else \
            BodyCodec(compress, cfg.encryption_key, cfg.cipher)
        write_meta(directory, codec)
        return codec
    check = bytes.fromhex(meta["key_check"]) if meta.get("key_check") else None
    if check is None:
        if cfg.encryption_key and list_blocks(directory):
            raise EncryptionKeyError(
                err="the store was written without encryption; open it without a key")
    else:
        codec = BodyCodec(compress, cfg.encryption_key, meta.get("cipher") or cfg.cipher)
        codec.verify_key(check)
        if meta.get("version") != VERSION:
            write_meta(directory, codec)  # give it a checksum
        return codec
    codec = BodyCodec(compress, cfg.encryption_key, cfg.cipher)
    write_meta(directory, codec)
    return codec


def _from_blocks(directory: str, cfg: StoreConfig) -> BodyCodec:
    """The codec the first intact message record in the blocks was written with."""
    compress = cfg.compression is StoreCompression.S2
    key = cfg.encryption_key
    found = _first_message(directory)
    if found is None:
        return BodyCodec(compress, key, cfg.cipher)
    buf, f = found
    if not f.flags & rec.F_ENCRYPTED:
        if key:
            raise EncryptionKeyError(
                err="the store was written without encryption; open it without a key")
        return BodyCodec(compress, None, cfg.cipher)
    if not key:
        raise EncryptionKeyError(err="the store is encrypted: give its encryption_key")
    for cipher in dict.fromkeys((cfg.cipher, *CIPHERS)):
        codec = BodyCodec(compress, key, cipher)
        try:
            codec.frame_body(buf, f.offset, f.length, f.flags)
        except APIError:
            continue
        return codec
    raise EncryptionKeyError(err="the key does not open this store")


def _first_message(directory: str) -> tuple[bytes, Frame] | None:
    for no in list_blocks(directory):
        with open(os.path.join(directory, block_name(no)), "rb") as fh:
            buf = fh.read()
        for f in scan(buf):
            if isinstance(f, Frame) and f.kind == rec.K_MSG:
                return buf, f
    return None


__all__ = ["META", "open_meta", "read_meta", "write_meta"]
