"""A user's publish and subscribe permissions, decided as nats-server decides them.

Rules are lists of subjects (with ``*`` and ``>``); subscribe entries may name a queue
group (``"orders.* workers"``). A subject being checked is taken token by token as written,
so a wildcard subscription ``orders.*`` is allowed by ``orders.*`` or ``orders.>`` but not
by ``orders.new``. The allow list (absent: everything) is checked first, then the deny list:

- publish: allowed when some allow entry matches and no deny entry does; when that fails
  and ``allow_responses`` is on, a reply subject this connection was handed may still be
  answered (at most ``max`` times within ``expires``: see :class:`Replies`);
- subscribe: plain entries decide plain subscriptions; for a queue subscription, queue
  entries matching the subject decide by the queue name instead (``foo v1`` alone permits
  only queue group ``v1`` on ``foo``, no plain subscription);
- a wildcard (or queue) subscription allowed although a deny entry overlaps it is not given
  the messages that deny entry matches (:meth:`Permissions.filters_deliveries`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rayjet.errors import ServerConfigError
from rayjet.subjects import is_subset, is_valid_filter, subjects_collide

RESPONSE_MAX_MSGS = 1  # nats-server's defaults for allow_responses: true
RESPONSE_EXPIRES = 120.0
REPLY_LIMIT = 10_000  # reply subjects remembered per connection before the old ones go
_CACHE_LIMIT = 1024


@dataclass(frozen=True, slots=True)
class Entry:
    subject: str
    queue: str | None = None

    def text(self) -> str:
        return f"{self.subject} {self.queue}" if self.queue else self.subject


def token_match(tokens: list[str], pattern: tuple[str, ...]) -> bool:
    """Does ``pattern`` match these tokens, each taken literally (a ``*`` token of the
    subject is matched only by a ``*`` or ``>`` of the pattern)?"""
    n = len(tokens)
    for i, p in enumerate(pattern):
        if p == ">":
            return n > i
        if i >= n:
            return False
        if p != "*" and p != tokens[i]:
            return False
    return n == len(pattern)


def _queue_matches(queue: str, entries: list[Entry]) -> bool:
    for e in entries:
        q = e.queue or ""
        if queue == q or (_has_wildcard(q) and is_subset(queue, q)):
            return True
    return False


def _has_wildcard(subject: str) -> bool:
    return any(t in ("*", ">") for t in subject.split("."))


@dataclass(frozen=True)
class Rules:
    """An allow list (None: no list, everything allowed) and a deny list."""

    allow: tuple[Entry, ...] | None = None
    deny: tuple[Entry, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "_allow", _compiled(self.allow))
        object.__setattr__(self, "_deny", _compiled(self.deny))

    def matching(self, which: str, tokens: list[str]) -> tuple[list[Entry], list[Entry]]:
        """The plain and the queue entries of ``allow``/``deny`` matching these tokens."""
        plain: list[Entry] = []
        queued: list[Entry] = []
        for entry, pattern in getattr(self, "_" + which) or ():
            if token_match(tokens, pattern):
                (queued if entry.queue else plain).append(entry)
        return plain, queued

    def to_doc(self) -> dict[str, list[str]]:
        out = {}
        if self.allow is not None:
            out["allow"] = [e.text() for e in self.allow]
        if self.deny is not None:
            out["deny"] = [e.text() for e in self.deny]
        return out


def _compiled(entries: tuple[Entry, ...] | None) -> list[tuple[Entry, tuple[str, ...]]] | None:
    if entries is None:
        return None
    return [(e, tuple(e.subject.split("."))) for e in entries]


@dataclass(frozen=True)
class ResponseRule:
    max_msgs: int = RESPONSE_MAX_MSGS  # <= 0: no limit
    expires: float = RESPONSE_EXPIRES  # seconds; <= 0: no limit


@dataclass
class Permissions:
    publish: Rules = field(default_factory=Rules)
    subscribe: Rules = field(default_factory=Rules)
    responses: ResponseRule | None = None
    _pub_cache: dict[str, bool] = field(default_factory=dict, repr=False, compare=False)

    @property
    def restricts_publish(self) -> bool:
        return self.publish.allow is not None or self.publish.deny is not None

    def can_publish(self, subject: str) -> bool:
        """The static decision (without the reply subjects ``allow_responses`` opens)."""
        if not self.restricts_publish:
            return True
        hit = self._pub_cache.get(subject)
        if hit is not None:
            return hit
        tokens = subject.split(".")
        allowed = True
        if self.publish.allow is not None:
            allowed = bool(self.publish.matching("allow", tokens)[0])
        if allowed and self.publish.deny is not None:
            allowed = not self.publish.matching("deny", tokens)[0]
        if len(self._pub_cache) >= _CACHE_LIMIT:
            self._pub_cache.clear()
        self._pub_cache[subject] = allowed
        return allowed

    def can_subscribe(self, subject: str, queue: str | None = None) -> bool:
        tokens = subject.split(".")
        allowed = True
        if self.subscribe.allow is not None:
            plain, queued = self.subscribe.matching("allow", tokens)
            allowed = bool(plain)
            if queue and queued:
                allowed = _queue_matches(queue, queued)
        if allowed and self.subscribe.deny is not None:
            plain, queued = self.subscribe.matching("deny", tokens)
            allowed = not plain
            if allowed and queue and queued:
                allowed = not _queue_matches(queue, queued)
        return allowed

    def filters_deliveries(self, subject: str, queue: str | None = None) -> bool:
        """Must this (allowed) subscription's messages be checked against the deny list?"""
        if not self.subscribe.deny or not (queue or _has_wildcard(subject)):
            return False
        return any(subjects_collide(e.subject, subject) for e in self.subscribe.deny)

    def delivery_denied(self, subject: str) -> bool:
        """Is a message on this subject kept from a subscription that filters deliveries?"""
        if not self.subscribe.deny:
            return False
        return bool(self.subscribe.matching("deny", subject.split("."))[0])

    def to_doc(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.publish.to_doc():
            out["publish"] = self.publish.to_doc()
        if self.subscribe.to_doc():
            out["subscribe"] = self.subscribe.to_doc()
        if self.responses is not None:
            out["responses"] = {"max": self.responses.max_msgs,
                                "ttl": int(self.responses.expires * 1e9)}
        return out

    # -- from a configuration ---------------------------------------------------------------
    @classmethod
    def from_config(cls, doc: Any, where: str = "permissions") -> Permissions:
        if not isinstance(doc, dict):
            raise ServerConfigError(f"{where}: expected a map, got {doc!r}")
        publish = subscribe = Rules()
        responses = None
        for key, value in doc.items():
            k = key.lower()
            if k in ("pub", "publish", "import"):
                publish = _rules(value, f"{where}.{key}", queues=False)
            elif k in ("sub", "subscribe", "export"):
                subscribe = _rules(value, f"{where}.{key}", queues=True)
            elif k in ("allow_responses", "publish_allow_responses"):
                responses = _responses(value, f"{where}.{key}")
            else:
                raise ServerConfigError(f"{where}: unknown field {key!r} (publish, subscribe "
                                        f"or allow_responses)")
        if responses is not None and publish.allow is None:
            # as nats-server: responses alone turn off the blanket publish allowance
            publish = Rules(allow=(), deny=publish.deny)
        return cls(publish, subscribe, responses)


def _rules(value: Any, where: str, queues: bool) -> Rules:
    if isinstance(value, dict):
        allow = deny = None
        for key, v in value.items():
            if key.lower() == "allow":
                allow = _entries(v, where, queues)
            elif key.lower() == "deny":
                deny = _entries(v, where, queues)
            else:
                raise ServerConfigError(f"{where}: unknown field {key!r}: only 'allow' or "
                                        f"'deny' are permitted")
        return Rules(allow, deny)
    return Rules(allow=_entries(value, where, queues))


def _entries(value: Any, where: str, queues: bool) -> tuple[Entry, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise ServerConfigError(f"{where}: expected a subject or a list of subjects, got "
                                f"{value!r}")
    out = []
    for item in items:
        if not isinstance(item, str):
            raise ServerConfigError(f"{where}: {item!r} is not a subject")
        if is_valid_filter(item):
            out.append(Entry(item))
            continue
        parts = item.split()
        if not queues or len(parts) != 2:
            raise ServerConfigError(f"{where}: subject {item!r} is not a valid subject")
        if not is_valid_filter(parts[0]):
            raise ServerConfigError(f"{where}: subject {parts[0]!r} is not a valid subject")
        if not is_valid_filter(parts[1]):
            raise ServerConfigError(f"{where}: queue {parts[1]!r} is not a valid queue")
        out.append(Entry(parts[0], parts[1]))
    return tuple(out)


def _responses(value: Any, where: str) -> ResponseRule | None:
    if isinstance(value, bool):
        return ResponseRule() if value else None
    if not isinstance(value, dict):
        raise ServerConfigError(f"{where}: expected a boolean or a map")
    max_msgs, expires = RESPONSE_MAX_MSGS, RESPONSE_EXPIRES
    for key, v in value.items():
        k = key.lower()
        if k in ("max", "max_msgs", "max_messages", "max_responses"):
            if not isinstance(v, int) or isinstance(v, bool):
                raise ServerConfigError(f"{where}.{key}: expected an integer")
            max_msgs = v or RESPONSE_MAX_MSGS  # 0: the default, negative: no limit
        elif k in ("expires", "expiration", "ttl"):
            if not isinstance(v, str):
                raise ServerConfigError(f"{where}.{key}: expected a duration string such "
                                        f"as \"1m\"")
            secs = parse_duration(v, f"{where}.{key}")
            expires = secs or RESPONSE_EXPIRES
        else:
            raise ServerConfigError(f"{where}: unknown field {key!r}")
    return ResponseRule(max_msgs, expires)


_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str, where: str) -> float:
    """A Go duration string (``1h30m``, ``250ms``, ``-1s``) in seconds."""
    import re

    s = text.strip()
    sign = -1.0 if s.startswith("-") else 1.0
    s = s.lstrip("+-")
    if s == "0":
        return 0.0
    parts = re.findall(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)", s)
    if not parts or "".join(n + u for n, u in parts) != s:
        raise ServerConfigError(f"{where}: {text!r} is not a duration (e.g. \"2m\", "
                                f"\"30s\", \"1h30m\")")
    return sign * sum(float(n) * _UNITS[u] for n, u in parts)


class Replies:
    """The reply subjects a connection with ``allow_responses`` was handed, each of which
    it may publish to while the rule lets it."""

    def __init__(self, rule: ResponseRule, clock: Any = time.monotonic) -> None:
        self.rule = rule
        self.clock = clock
        self._seen: dict[str, list[float]] = {}  # reply -> [when handed, answers sent]

    def handed(self, reply: str) -> None:
        if reply not in self._seen and len(self._seen) >= REPLY_LIMIT:
            self._prune()
        self._seen[reply] = [self.clock(), 0]

    def answer(self, subject: str) -> bool:
        """May this connection publish to ``subject`` as a response (counts the answer)?"""
        entry = self._seen.get(subject)
        if entry is None:
            return False
        entry[1] += 1
        rule = self.rule
        if (rule.max_msgs > 0 and entry[1] > rule.max_msgs) or (
                rule.expires > 0 and self.clock() - entry[0] > rule.expires):
            del self._seen[subject]
            return False
        return True

    def _prune(self) -> None:
        rule, now = self.rule, self.clock()
        self._seen = {r: e for r, e in self._seen.items()
                      if not (rule.max_msgs > 0 and e[1] >= rule.max_msgs)
                      and not (rule.expires > 0 and now - e[0] > rule.expires)}
        while len(self._seen) >= REPLY_LIMIT:  # still full: the oldest go
            self._seen.pop(next(iter(self._seen)))
