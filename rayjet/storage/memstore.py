"""MemStore: the stream kept in RAM; same behaviour and byte accounting as FileStore."""

from __future__ import annotations

from rayjet.api.enums import StorageType
from rayjet.clock import Clock
from rayjet.errors import InvalidConfigError
from rayjet.storage.base import BaseStore
from rayjet.storage.config import StoreConfig
from rayjet.storage.protocol import StoredMsg


class MemStore(BaseStore):
    # one list aligned with the index arrays: (hdr, data) of each message, None when deleted
    _aux_kinds = (None,)

    def __init__(self, config: StoreConfig | None = None, clock: Clock | None = None) -> None:
        config = config or StoreConfig(storage=StorageType.MEMORY)
        if config.storage is not StorageType.MEMORY:
            raise InvalidConfigError("MemStore needs storage='memory'")
        super().__init__(config, clock)

    def _persist_msgs(self, items: list[tuple]) -> list[list]:
        return [[(hdr, data) for _seq, _ts, _subj, hdr, data, _ttl in items]]

    def _read(self, seq: int) -> StoredMsg:
        idx = self._idx
        i = seq - idx.base
        hdr, data = idx.aux[0][i]
        return StoredMsg(idx.subj_names[idx.sid[i]], hdr, data, seq, idx.ts[i])

    def _commit(self) -> None:
        # drop the bodies of removed messages so RAM follows the state
        if self._removed:
            idx, bodies = self._idx, self._idx.aux[0]
            for seq in self._removed:
                i = seq - idx.base
                if 0 <= i < len(bodies) and not idx.size[i]:
                    bodies[i] = None
            self._removed.clear()


__all__ = ["MemStore"]
