"""Who wants a subject: the subscriptions of every connection, matched by NATS wildcards.

Literal subscriptions are found by a dict lookup; wildcard ones by a token trie, so a
publish costs a few dict lookups however many subscriptions there are. Queue
subscriptions are grouped by queue name: a message goes to one member of each group
(picked at random, as nats-server does) and to every plain subscription.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

_CACHE_LIMIT = 4096


@dataclass(eq=False)  # identity: two subscriptions are never "the same"
class Subscription:
    owner: Any  # the connection (or internal handler) it delivers to
    sid: str
    subject: str
    queue: str | None = None
    max_msgs: int = 0  # 0: no limit (UNSUB with a count sets it)
    delivered: int = 0


@dataclass
class _Node:
    children: dict[str, _Node] = field(default_factory=dict)
    subs: list[Subscription] = field(default_factory=list)  # ending exactly here
    rest: list[Subscription] = field(default_factory=list)  # ending with ">" here


class Interest:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._literal: dict[str, list[Subscription]] = defaultdict(list)
        self._root = _Node()
        self._wildcards = 0
        self._cache: dict[str, tuple[list[Subscription], list[list[Subscription]]]] = {}
        self._rng = rng or random.Random()

    def add(self, sub: Subscription) -> None:
        self._cache.clear()
        toks = sub.subject.split(".")
        if "*" not in toks and toks[-1] != ">":
            self._literal[sub.subject].append(sub)
            return
        self._wildcards += 1
        node = self._root
        for tok in toks[:-1]:
            node = node.children.setdefault(tok, _Node())
        if toks[-1] == ">":
            node.rest.append(sub)
        else:
            node.children.setdefault(toks[-1], _Node()).subs.append(sub)

    def remove(self, sub: Subscription) -> None:
        self._cache.clear()
        toks = sub.subject.split(".")
        if "*" not in toks and toks[-1] != ">":
            subs = self._literal.get(sub.subject)
            if subs and sub in subs:
                subs.remove(sub)
                if not subs:
                    del self._literal[sub.subject]
            return
        path = [self._root]
        for tok in toks[:-1]:
            node = path[-1].children.get(tok)
            if node is None:
                return
            path.append(node)
        last = path[-1]
        if toks[-1] == ">":
            if sub in last.rest:
                last.rest.remove(sub)
                self._wildcards -= 1
        else:
            leaf = last.children.get(toks[-1])
            if leaf is not None and sub in leaf.subs:
                leaf.subs.remove(sub)
                self._wildcards -= 1

    def match(self, subject: str) -> tuple[list[Subscription], list[list[Subscription]]]:
        """The plain subscriptions matching ``subject`` and its queue groups (each a list
        of members)."""
        hit = self._cache.get(subject)
        if hit is not None:
            return hit
        found = list(self._literal.get(subject, ()))
        if self._wildcards:
            self._walk(self._root, subject.split("."), 0, found)
        plain = [s for s in found if s.queue is None]
        groups: dict[str, list[Subscription]] = {}
        for s in found:
            if s.queue is not None:
                groups.setdefault(s.queue, []).append(s)
        hit = (plain, list(groups.values()))
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[subject] = hit
        return hit

    def receivers(self, subject: str) -> list[Subscription]:
        """Every subscription a message on ``subject`` goes to: all plain ones and one
        member of each queue group."""
        plain, groups = self.match(subject)
        if not groups:
            return plain
        return plain + [self.pick(g) for g in groups]

    def pick(self, group: list[Subscription]) -> Subscription:
        """One member of a queue group, at random."""
        return group[0] if len(group) == 1 else self._rng.choice(group)

    def has_interest(self, subject: str) -> bool:
        plain, groups = self.match(subject)
        return bool(plain or groups)

    def _walk(self, node: _Node, toks: list[str], i: int, out: list[Subscription]) -> None:
        if i == len(toks):
            return
        out.extend(node.rest)  # ">" matches one or more remaining tokens
        last = i == len(toks) - 1
        for key in (toks[i], "*"):
            child = node.children.get(key)
            if child is None:
                continue
            if last:
                out.extend(child.subs)
            else:
                self._walk(child, toks, i + 1, out)
