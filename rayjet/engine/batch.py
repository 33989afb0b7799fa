"""Atomic batch publish (allow_atomic_publish): all messages are stored, or none is.

The leader checks every message against the stream state, the proposals in flight and the
earlier messages of the same batch (:class:`Staged`), then proposes one BatchOp.
:class:`BatchCollector` assembles a batch sent message by message with the NATS headers
Nats-Batch-Id / Nats-Batch-Sequence / Nats-Batch-Commit.
"""

from __future__ import annotations

from rayjet.api import headers as H
from rayjet.errors import error_for

MAX_BATCH_SIZE = 1000  # nats-server's default max atomic batch size
MAX_BATCH_ID_LEN = 64


class Staged:
    """Effects of the batch's earlier messages, seen by the checks of the later ones."""

    __slots__ = ("ids", "subjects", "counters", "msgs", "bytes", "first")

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.subjects: dict[str, int] = {}  # subject -> messages in this batch
        self.counters: dict[str, int] = {}
        self.msgs = 0
        self.bytes = 0
        self.first = True

    def add(self, subject: str, size: int, msg_id: str, counter: int | None) -> None:
        self.subjects[subject] = self.subjects.get(subject, 0) + 1
        if msg_id:
            self.ids.add(msg_id)
        if counter is not None:
            self.counters[subject] = counter
        self.msgs += 1
        self.bytes += size
        self.first = False


def check_batch_id(batch_id: str) -> str:
    if not isinstance(batch_id, str) or not batch_id or len(batch_id) > MAX_BATCH_ID_LEN:
        raise error_for("ATOMIC_PUBLISH_INVALID_BATCH_ID")
    return batch_id


def check_batch_size(n: int) -> None:
    if n > MAX_BATCH_SIZE:
        raise error_for("ATOMIC_PUBLISH_TOO_LARGE", size=MAX_BATCH_SIZE)
    if n == 0:
        raise error_for("ATOMIC_PUBLISH_INCOMPLETE")


class BatchCollector:
    """Collects Nats-Batch-* messages of one batch until the commit.

    ``add`` returns None while the batch is open and the list of (subject, data, headers)
    at the commit; it raises 10179 (bad id), 10175 (no sequence), 10176 (gap), 10200 (bad
    commit value), 10199 (too large). With ``Nats-Batch-Commit: eob`` the commit message
    only ends the batch and is not stored.
    """

    def __init__(self) -> None:
        self.batch_id = ""
        self.msgs: list[tuple[str, bytes, dict[str, str]]] = []

    def add(self, subject: str, data: bytes, headers: dict[str, str]
            ) -> list[tuple[str, bytes, dict[str, str]]] | None:
        batch_id = check_batch_id(headers.get(H.BATCH_ID, ""))
        if self.batch_id and batch_id != self.batch_id:
            raise error_for("ATOMIC_PUBLISH_INVALID_BATCH_ID")
        raw_seq = headers.get(H.BATCH_SEQ, "").strip()
        if not raw_seq.isdigit():
            raise error_for("ATOMIC_PUBLISH_MISSING_SEQ")
        if int(raw_seq) != len(self.msgs) + 1:
            raise error_for("ATOMIC_PUBLISH_INCOMPLETE")
        self.batch_id = batch_id
        commit = headers.get(H.BATCH_COMMIT)
        if commit is not None and commit not in ("1", "eob"):
            raise error_for("ATOMIC_PUBLISH_INVALID_COMMIT")
        clean = {k: v for k, v in headers.items()
                 if k not in (H.BATCH_ID, H.BATCH_SEQ, H.BATCH_COMMIT)}
        if commit != "eob":
            self.msgs.append((subject, data, clean))
        check_batch_size(len(self.msgs))
        if commit is None:
            return None
        out, self.msgs, self.batch_id = self.msgs, [], ""
        return out


__all__ = ["MAX_BATCH_ID_LEN", "MAX_BATCH_SIZE", "BatchCollector", "Staged",
           "check_batch_id", "check_batch_size"]
