"""What reopening a store (:mod:`rayjet.storage.recovery`, :mod:`rayjet.storage.scrub`)
reads and sets of it: the :class:`~rayjet.storage.filestore.FileStore` calls them and they
reach its state only through these, so they need not import the store they rebuild."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from rayjet.storage.block import Block
from rayjet.storage.crypto import BodyCodec
from rayjet.storage.index import Index
from rayjet.storage.lost import LostSeqs


class RecoveringStore(Protocol):
    """A file store being rebuilt from its block files, index files and checkpoint."""

    directory: str
    # what reopening did: checkpoint, blocks_loaded, blocks_replayed, frames_replayed,
    # blocks_scanned
    recovery: dict[str, int]

    @property
    def index(self) -> Index: ...

    @property
    def codec(self) -> BodyCodec: ...

    @property
    def lost(self) -> LostSeqs: ...

    def block(self, no: int) -> Block | None: ...

    def block_numbers(self) -> list[int]: ...

    def ttl_of(self, hdr: bytes, ttl: int = 0) -> int: ...

    def track_ttls(self, no: int, ttls: list[list[int]]) -> None: ...

    def clear_ttl_log(self, no: int) -> None: ...

    def forget_ttls_of_removed(self) -> None: ...

    def trust_index(self, no: int, file_hash: bytes) -> None: ...

    def mark_lost(self, seqs: Iterable[int]) -> None: ...

    def forget_erased(self, seqs: Iterable[int]) -> None: ...

    def note_damage(self, no: int, regions: Iterable[tuple[int, int]]) -> None: ...

    def note_decoded(self, frames: int) -> None: ...

    def reset_recovered(self) -> None: ...
