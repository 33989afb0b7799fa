"""Batched and multi-subject gets (ADR-31's batch direct get): several stored messages in
one call to one of the stream's replicas."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rayjet.api import RawStreamMsg
from rayjet.api.duration import to_rfc3339
from rayjet.engine import direct_get as DG
from rayjet.errors import (
    BadRequestError,
    ServiceUnavailableError,
    StreamNotFoundError,
    TimeoutError,
    error_for,
)


@dataclass(frozen=True)
class MsgBatch:
    """What :meth:`DirectReadsAPI.get_msgs` found: the messages, in stream order, how many
    more match (``num_pending``: ask again from ``last_seq + 1`` for them), the last
    sequence returned, and for ``multi_last`` the sequence the answer is as of."""

    msgs: list[RawStreamMsg] = field(default_factory=list)
    num_pending: int = 0
    last_seq: int = 0
    up_to_seq: int = 0

    def __iter__(self):
        return iter(self.msgs)

    def __len__(self) -> int:
        return len(self.msgs)


def _time(value: datetime | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return to_rfc3339(value if value.tzinfo else value.replace(tzinfo=UTC))


class DirectReadsAPI:
    """Mixed into :class:`rayjet.client.JetStream`."""

    def get_msgs(self, name: str, seq: int | None = None, *, batch: int | None = None,
                 next_by_subject: str | None = None, start_time: datetime | str | None = None,
                 multi_last: list[str] | None = None, up_to_seq: int | None = None,
                 up_to_time: datetime | str | None = None, max_bytes: int | None = None
                 ) -> MsgBatch:
        """Up to ``batch`` messages from ``seq`` (or ``start_time``), only those on
        ``next_by_subject`` (a filter) when given; or with ``multi_last`` the last message
        of each subject matching those filters, as of ``up_to_seq`` / ``up_to_time``
        (``batch`` then limits how many). ``max_bytes`` stops after the message that
        reaches it. One call to a replica (any, when the stream allows direct gets).
        Raises NotFoundError when nothing matches; BadRequestError for a bad request."""
        body: dict[str, Any] = {"seq": seq, "batch": 1 if batch is None and not multi_last
                                else batch, "next_by_subj": next_by_subject,
                                "start_time": _time(start_time), "multi_last": multi_last,
                                "up_to_seq": up_to_seq, "up_to_time": _time(up_to_time),
                                "max_bytes": max_bytes}
        req = DG.parse_request(json.dumps({k: v for k, v in body.items() if v is not None})
                               .encode())
        if isinstance(req, tuple):
            raise BadRequestError(f"get_msgs: {req[1].lower()}: give seq, start_time, "
                                  "next_by_subject or multi_last, and not several of "
                                  "up_to_seq and up_to_time")
        got = self.direct_read(name, req)
        if got["status"]:
            if got["status"][0] == 413:
                raise error_for("BAD_REQUEST", err=f"multi_last matches more than "
                                f"{DG.MAX_MULTI} subjects")
            raise error_for("NO_MESSAGE_FOUND")
        stream = got.get("stream") or name
        msgs = [RawStreamMsg(subject=s, seq=q, data=d, hdrs=h or None,
                             time=datetime.fromtimestamp(ts / 1e9, tz=UTC), stream=stream)
                for s, q, h, d, ts, _, _ in got["msgs"]]
        pending, last, up_to = got["eob"] or (0, msgs[-1].seq if msgs else 0, 0)
        return MsgBatch(msgs, pending, last, up_to)

    def direct_read(self, name: str, req: dict[str, Any]) -> dict[str, Any]:
        """:func:`rayjet.engine.direct_get.read`'s answer for a parsed request, from a
        replica of ``name`` or, when none answers, of a ``mirror_direct`` mirror (then
        ``stream`` names the mirror)."""
        try:
            return self._stream_call(name, "get_msgs", req, True, any_replica=True)
        except (ServiceUnavailableError, TimeoutError, StreamNotFoundError) as first:
            err: Exception = first
        for a in self._assignments():
            cfg = a["config"]
            if not (cfg.get("mirror_direct") and (cfg.get("mirror") or {}).get("name") == name):
                continue
            try:
                got = self._stream_call(cfg["name"], "get_msgs", req, True, any_replica=True)
            except Exception as e:  # noqa: BLE001 - try the next mirror
                err = e
                continue
            return {**got, "stream": cfg["name"]}
        raise err


__all__ = ["DirectReadsAPI", "MsgBatch"]
