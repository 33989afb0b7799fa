"""Subscriptions to republished messages (a stream's ``republish`` setting).

nats-server republishes a stored message to a core NATS subject; an application reads it
with a plain subscription, at most once and only while subscribed. Here the stream leader
keeps republished messages in a bounded outbox and a subscription long-polls the leaders of
every stream that republishes into its subject: same delivery promise, no replay, and a
subscriber that falls behind the outbox is told how many messages it missed
(:attr:`RepublishSubscription.dropped`, a NATS slow consumer).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from rayjet.actors.router import unwrap
from rayjet.api import headers as H
from rayjet.api.headers import decode_headers
from rayjet.client.buffer import until_quiet
from rayjet.errors import (
    APIError,
    NotFoundError,
    NotLeaderError,
    StreamNotFoundError,
    TimeoutError,
)
from rayjet.subjects import subjects_collide, validate_filter

POLL_WAIT = 1.0  # seconds a leader holds a poll open when it has nothing
POLL_LIMIT = 1000  # messages per poll
RETRY_PAUSE = 0.2  # after a failed poll (leader change, restart)


@dataclass(frozen=True)
class RepublishedMsg:
    """A republished message: its republish subject, data and headers (nats-server's
    ``Nats-Stream``, ``Nats-Subject``, ``Nats-Sequence``, ``Nats-Time-Stamp``,
    ``Nats-Last-Sequence``; ``Nats-Msg-Size`` instead of data with headers_only)."""

    subject: str
    data: bytes
    headers: dict[str, str]

    @property
    def stream(self) -> str:
        return self.headers.get(H.RP_STREAM, "")

    @property
    def sequence(self) -> int:
        return int(self.headers.get(H.RP_SEQUENCE, 0) or 0)


def _pattern(dest: str) -> str:
    """A republish destination as a subject filter (transform tokens match one token)."""
    return ".".join("*" if ("{{" in t or t.startswith("$")) else t for t in dest.split("."))


def republishing_streams(js: Any, subject: str) -> list[str]:
    """Streams whose republish destination can produce a subject matching ``subject``."""
    out = []
    for info in js.streams_info():
        rp = info.config.republish
        if rp and rp.dest and subjects_collide(_pattern(rp.dest), subject):
            out.append(info.config.name)
    return sorted(out)


class RepublishSubscription:
    """Republished messages on ``subject`` (wildcards allowed), from the moment the
    subscription is made. Iterate with :meth:`messages` or call :meth:`next_msg`."""

    def __init__(self, js: Any, subject: str = ">", streams: list[str] | None = None) -> None:
        self.js = js
        self.subject = validate_filter(subject)
        self.streams = list(streams) if streams else republishing_streams(js, self.subject)
        if not self.streams:
            raise NotFoundError(f"no stream republishes to {subject!r}: set a stream's "
                                "republish destination first", spec="STREAM_NOT_FOUND")
        self.dropped = 0
        self.error: BaseException | None = None
        self._queue: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._cursor: dict[str, tuple[str | None, int | None]] = {}
        # fix the starting point on every leader now: what is republished after this
        # constructor returns is seen, nothing from before
        for name in self.streams:
            self._cursor[name] = (None, None)
            self._settle(name, self._poll_now(name))
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"rayjet-republished-{self.subject}")
        self._thread.start()

    # -- polling ----------------------------------------------------------------------------
    def _leader(self, name: str) -> Any:
        return self.js.stream_handle(name).leader_actor()

    def _submit(self, name: str, wait: float) -> Any:
        epoch, offset = self._cursor[name]
        return self._leader(name).republished.remote(epoch, offset, [self.subject],
                                                     POLL_LIMIT, wait)

    def _poll_now(self, name: str) -> dict[str, Any]:
        # the stream call routes to its leader and retries leader changes
        epoch, offset = self._cursor[name]
        return self.js.stream_handle(name).call("republished", epoch, offset,
                                                [self.subject], POLL_LIMIT, 0.0)

    def _settle(self, name: str, answer: dict[str, Any]) -> None:
        self._cursor[name] = (answer["epoch"], answer["next"])
        self.dropped += answer["dropped"]
        for subject, hdr, data in answer["msgs"]:
            self._queue.put(RepublishedMsg(subject, data, decode_headers(hdr)))

    def _failed(self, name: str, err: BaseException) -> None:
        self.error = err
        if isinstance(err, StreamNotFoundError):
            # the stream was deleted: nothing more comes from it
            self.streams = [s for s in self.streams if s != name]
            self._cursor.pop(name, None)
            if not self.streams:
                self._stop.set()
            return
        handle = self.js.stream_handle(name)
        if isinstance(err, NotLeaderError):
            handle.leader_moved(err.fields.get("leader"))
        else:
            handle.forget()  # the replica set may have changed

    def _run(self) -> None:
        inflight: dict[Any, str] = {}
        while not self._stop.is_set():
            busy = set(inflight.values())
            for name in list(self.streams):
                if name not in busy:
                    try:
                        inflight[self._submit(name, POLL_WAIT)] = name
                    except (APIError, RayActorError, ValueError) as err:
                        self._failed(name, err)
            if not inflight:
                self._stop.wait(RETRY_PAUSE)
                continue
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=POLL_WAIT + 1)
            for ref in ready:
                name = inflight.pop(ref)
                if name not in self._cursor:
                    continue  # its stream is gone
                try:
                    self._settle(name, ray.get(ref))
                    self.error = None
                except RayTaskError as exc:
                    self._failed(name, unwrap(exc))
                    self._stop.wait(RETRY_PAUSE)
                except (RayActorError, GetTimeoutError, ValueError) as err:
                    self._failed(name, err)
                    self._stop.wait(RETRY_PAUSE)
        for ref in inflight:
            ray.cancel(ref)
        self._queue.put(None)

    # -- reading ----------------------------------------------------------------------------
    def next_msg(self, timeout: float | None = 1.0) -> RepublishedMsg:
        try:
            msg = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no republished message within {timeout}s") from None
        if msg is None:
            self._queue.put(None)
            if isinstance(self.error, StreamNotFoundError):
                raise self.error
            raise TimeoutError("the subscription ended")
        return msg

    def messages(self, timeout: float | None = 1.0) -> Iterator[RepublishedMsg]:
        """Yield messages until none arrives within ``timeout`` seconds."""
        return until_quiet(self.next_msg, timeout)

    def pending(self) -> int:
        return self._queue.qsize()

    def unsubscribe(self) -> None:
        self._stop.set()
        self._thread.join(timeout=POLL_WAIT + 5)

    def __enter__(self) -> RepublishSubscription:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.unsubscribe()


__all__ = ["RepublishSubscription", "RepublishedMsg", "republishing_streams"]
