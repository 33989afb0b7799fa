"""The gateway's links to consumers, kept for reuse between pulls, pushes and acks. A link
points at one consumer's replicas: a stream or consumer deleted and made again under the
same names has new ones, so the link is dropped when the gateway sees that happen."""

from __future__ import annotations

from typing import Any

MAX_LINKS = 10_000  # consumer links kept for reuse
_STREAM_GONE = "$JS.EVENT.ADVISORY.STREAM.DELETED."
_CONSUMER_EVENTS = ("$JS.EVENT.ADVISORY.CONSUMER.DELETED.",
                    "$JS.EVENT.ADVISORY.CONSUMER.CREATED.")


class ConsumerLinks:
    def __init__(self, js: Any) -> None:
        self.js = js
        self._links: dict[tuple[str, str], Any] = {}
        # (last consumer seq, last stream seq) delivered through this gateway, for the
        # Nats-Last-Consumer / Nats-Last-Stream headers of a pull's heartbeats
        self._last: dict[tuple[str, str], tuple[int, int]] = {}
        # consumers that answered a call through this gateway since their link was made
        self._answered: set[tuple[str, str]] = set()

    def cached(self, stream: str, consumer: str) -> Any:
        return self._links.get((stream, consumer))

    def link(self, stream: str, consumer: str) -> Any:
        """The consumer's link: cached, else looked up (a blocking catalogue call)."""
        key = (stream, consumer)
        link = self._links.get(key)
        if link is None:
            if len(self._links) >= MAX_LINKS:
                self._links.clear()  # ephemeral consumers come and go: keep the cache bounded
            link = self._links[key] = self.js.consumer_link(stream, consumer)
        return link

    def answered(self, stream: str, consumer: str) -> bool:
        """Did the consumer answer through this link (so it exists)?"""
        return (stream, consumer) in self._answered

    def mark_answered(self, stream: str, consumer: str) -> None:
        if len(self._answered) >= MAX_LINKS:
            self._answered.clear()
        self._answered.add((stream, consumer))

    def forget(self, stream: str, consumer: str) -> None:
        self._links.pop((stream, consumer), None)
        self._answered.discard((stream, consumer))

    def drop(self, stream: str, consumer: str) -> None:
        """The consumer was deleted or made again: nothing about it holds any more."""
        self._links.pop((stream, consumer), None)
        self._last.pop((stream, consumer), None)
        self._answered.discard((stream, consumer))

    def forget_stream(self, stream: str) -> None:
        for key in [k for k in self._links if k[0] == stream]:
            del self._links[key]
        for key in [k for k in self._last if k[0] == stream]:
            del self._last[key]
        self._answered = {k for k in self._answered if k[0] != stream}

    def delivered(self, stream: str, consumer: str, got: Any) -> None:
        if not len(got):
            return
        if len(self._last) >= MAX_LINKS:
            self._last.clear()
        cseq, sseq = self._last.get((stream, consumer), (0, 0))
        # a redelivery takes a new consumer seq but leaves the stream position
        self._last[(stream, consumer)] = (max(cseq, int(got.consumer_seq.max())),
                                          max(sseq, int(got.stream_seq.max())))

    def last(self, stream: str, consumer: str) -> tuple[int, int]:
        return self._last.get((stream, consumer), (0, 0))

    def after_api(self, tokens: list[str]) -> None:
        """A ``$JS.API`` request that succeeded through this gateway (tokens after the
        prefix): the links it may have made stale go."""
        if tokens[0] == "STREAM" and len(tokens) >= 3 and tokens[1] in ("DELETE", "CREATE"):
            self.forget_stream(tokens[2])
        elif tokens[0] == "CONSUMER" and tokens[1] in ("DELETE", "CREATE") and len(tokens) >= 4:
            self.drop(tokens[2], tokens[3])
        elif tokens[:3] == ["CONSUMER", "DURABLE", "CREATE"] and len(tokens) >= 5:
            self.drop(tokens[3], tokens[4])
        elif tokens[:2] == ["CONSUMER", "RESET"] and len(tokens) >= 4:
            # delivered sequences start again (the heartbeats' last ones with them)
            self._last.pop((tokens[2], tokens[3]), None)

    def after_event(self, subject: str) -> None:
        """An advisory from the cluster (changes made through other clients or gateways)."""
        if subject.startswith(_STREAM_GONE):
            self.forget_stream(subject[len(_STREAM_GONE):])
            return
        for prefix in _CONSUMER_EVENTS:
            if subject.startswith(prefix):
                stream, _, consumer = subject[len(prefix):].partition(".")
                self.drop(stream, consumer)
