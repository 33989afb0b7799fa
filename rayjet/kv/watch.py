"""Watching keys: an ordered consumer over the bucket's subjects, as nats-py's KeyWatcher.

The watcher first delivers the current values (or the whole history), then a single None
marking the end of those initial values, then every change as it happens.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from rayjet.api import ConsumerConfig, DeliverPolicy, KeyValueOp
from rayjet.api.stream_access import StreamAccess
from rayjet.errors import TimeoutError


class KeyWatcher:
    def __init__(self, kv: Any, sub: Any, initial: int, *, ignore_deletes: bool,
                 entry_of) -> None:
        self._kv = kv
        self._sub = sub
        self._left = initial  # initial values still to come
        self._marked = False
        self._ignore_deletes = ignore_deletes
        self._entry_of = entry_of

    def updates(self, timeout: float | None = 5.0):
        """The next entry (None once, after the initial values); raises TimeoutError when
        nothing arrives within ``timeout`` seconds."""
        while True:
            if self._left <= 0 and not self._marked:
                self._marked = True
                return None
            msg = self._sub.next_msg(timeout)
            if self._left > 0:
                self._left = msg.metadata.num_pending
            entry = self._entry_of(msg)
            if self._ignore_deletes and entry.operation is not KeyValueOp.PUT:
                continue
            return entry

    def __iter__(self) -> Iterator:
        while True:
            try:
                yield self.updates(None)
            except TimeoutError:
                return

    def stop(self) -> None:
        self._sub.unsubscribe()

    def __enter__(self) -> KeyWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_watch(js: StreamAccess, stream: str, subjects: list[str], *, include_history: bool,
                updates_only: bool, meta_only: bool) -> tuple[Any, int]:
    """Subscribe an ordered consumer; returns it and how many initial messages it owes."""
    if updates_only:
        policy = DeliverPolicy.NEW
    elif include_history:
        policy = DeliverPolicy.ALL
    else:
        policy = DeliverPolicy.LAST_PER_SUBJECT
    if len(subjects) == 1:
        cfg = ConsumerConfig(filter_subject=subjects[0])
    else:
        cfg = ConsumerConfig(filter_subjects=subjects)
    sub = js.subscribe(stream=stream, ordered_consumer=True, deliver_policy=policy,
                       headers_only=meta_only, config=cfg)
    info = sub.created_info or sub.consumer_info()
    initial = 0 if updates_only else info.num_pending
    return sub, initial


def msg_time(msg: Any) -> datetime:
    ts = msg.metadata.timestamp
    return ts if isinstance(ts, datetime) else datetime.fromtimestamp(ts / 1e9, tz=UTC)
