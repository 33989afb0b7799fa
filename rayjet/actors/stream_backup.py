"""What a stream backup reads from the leader and a restore asks it to write.

Mixed into :class:`~rayjet.actors.stream.StreamReplica` (kept apart: the replica class is
large enough). Messages themselves are read with ``read_range``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rayjet.engine.restore import prepare_restore

RESTORE_TIMEOUT = 30.0


class StreamBackupCalls:
    async def backup_head(self) -> dict[str, Any]:
        """The stream as a backup begins: its info (config, state, creation time) and its
        positions in its sources."""
        info = await self.info(deleted_details=False)
        info["sources"] = self.engine.sources.to_list()
        return info

    async def restore_msgs(self, after: int, cols: dict[str, Sequence[Any]], first: int = 0,
                           last: int = 0, sources: Sequence[Sequence[Any]] = (),
                           timeout: float = RESTORE_TIMEOUT) -> int:
        """Store one slice of a backup's messages after sequence ``after`` (see
        :mod:`rayjet.engine.restore`); the stream's last sequence afterwards."""
        self._require_writable()
        op = prepare_restore(self.engine, after, cols, first=first, last=last,
                             sources=sources)
        (result,) = await self.propose_ops([op], timeout)
        if not result.ok:
            raise result.error
        return int(result.seq)
