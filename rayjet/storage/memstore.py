"""MemStore: the stream kept in RAM; same behaviour and byte accounting as FileStore."""

from __future__ import annotations

from rayjet.api.enums import StorageType
from rayjet.clock import Clock
from rayjet.errors import InvalidConfigError
from rayjet.storage.base import BaseStore
from rayjet.storage.config import StoreConfig
from rayjet.storage.protocol import StoredMsg


class MemStore(BaseStore):
    # two lists aligned with the index arrays: the hdr and the data of each message (both
    # None once it is deleted)
    _aux_kinds = (None, None)

    def __init__(self, config: StoreConfig | None = None, clock: Clock | None = None) -> None:
        config = config or StoreConfig(storage=StorageType.MEMORY)
        if config.storage is not StorageType.MEMORY:
            raise InvalidConfigError("MemStore needs storage='memory'")
        super().__init__(config, clock)

    def _persist_cols(self, seqs, tss, subjects, hdrs, datas) -> list:
        return [hdrs, datas]

    def _read(self, seq: int) -> StoredMsg:
        idx = self._idx
        i = seq - idx.base
        return StoredMsg(idx.subj_names[idx.sid[i]], idx.aux[0][i], idx.aux[1][i], seq,
                         idx.ts[i])

    def _commit(self) -> None:
        # drop the bodies of removed messages so RAM follows the state
        if self._removed:
            idx = self._idx
            hdrs, datas = idx.aux
            size, base, n = idx.size, idx.base, len(datas)
            for seq in self._removed:
                i = seq - base
                if 0 <= i < n and not size[i]:
                    hdrs[i] = datas[i] = None
            self._removed.clear()


__all__ = ["MemStore"]
