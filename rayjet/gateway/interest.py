"""Who wants a subject: the subscriptions of every connection, matched by NATS wildcards.

Literal subscriptions are found by a dict lookup; wildcard ones by a token trie, so a
publish costs a few dict lookups however many subscriptions there are. Queue
subscriptions are grouped by queue name: a message goes to one member of each group
(picked at random, as nats-server does) and to every plain subscription.
"""

from __future__ import annotations

import random
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import Any

_CACHE_LIMIT = 4096


def _remember(cache: OrderedDict, key: str, value: Any) -> None:
    """Keep ``value`` under ``key``, the oldest entry making room when full. Most subjects
    are seen once (every reply inbox and ack subject): clearing a full cache each time
    cost more than the lookups it saved."""
    if len(cache) >= _CACHE_LIMIT:
        cache.popitem(last=False)
    cache[key] = value


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
        self._cache: OrderedDict[str, tuple[list[Subscription], list[list[Subscription]]]] = \
            OrderedDict()
        # all tokens but the last -> (wildcard subscriptions matched whatever the last token
        # is, trie nodes the last token is looked up in): replies to inboxes ('_INBOX.x.7')
        # are all different subjects under a few such prefixes
        self._frontiers: OrderedDict[str, tuple[list[Subscription], list[_Node]]] = \
            OrderedDict()
        self._sole: dict[str, bool] = {}  # prefix -> only its own '>' subscription hears it
        self._rng = rng or random.Random()
        self.inserts = self.removes = 0  # counted for /subsz

    def cached(self) -> int:
        """Subjects whose receivers are remembered."""
        return len(self._cache)

    def _changed(self, literal: str | None = None) -> None:
        """Forget what the change of a subscription (a ``literal`` subject's, or a wildcard
        one's) may have made wrong: a literal one leaves the trie, and every prefix it is
        not under, as they were."""
        self._cache.clear()
        if literal is None:
            self._frontiers.clear()
            self._sole.clear()
        elif self._sole:
            for prefix in [p for p in self._sole if literal.startswith(p)]:
                del self._sole[prefix]

    def add(self, sub: Subscription) -> None:
        self.inserts += 1
        toks = sub.subject.split(".")
        if "*" not in toks and toks[-1] != ">":
            self._changed(sub.subject)
            self._literal[sub.subject].append(sub)
            return
        self._changed()
        self._wildcards += 1
        node = self._root
        for tok in toks[:-1]:
            node = node.children.setdefault(tok, _Node())
        if toks[-1] == ">":
            node.rest.append(sub)
        else:
            node.children.setdefault(toks[-1], _Node()).subs.append(sub)

    def remove(self, sub: Subscription) -> None:
        self.removes += 1
        toks = sub.subject.split(".")
        if "*" not in toks and toks[-1] != ">":
            self._changed(sub.subject)
            subs = self._literal.get(sub.subject)
            if subs and sub in subs:
                subs.remove(sub)
                if not subs:
                    del self._literal[sub.subject]
            return
        self._changed()
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
            parent, _, last = subject.rpartition(".")
            front = self._frontiers.get(parent)
            if front is None:
                front = self._frontier(parent)
                _remember(self._frontiers, parent, front)
            found.extend(front[0])
            for node in front[1]:
                found.extend(node.rest)  # '>' takes the last token
                for key in (last, "*"):
                    child = node.children.get(key)
                    if child is not None:
                        found.extend(child.subs)
        plain = [s for s in found if s.queue is None]
        groups: dict[str, list[Subscription]] = {}
        for s in found:
            if s.queue is not None:
                groups.setdefault(s.queue, []).append(s)
        hit = (plain, list(groups.values()))
        _remember(self._cache, subject, hit)
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

    def sole_listener(self, sub: Subscription) -> bool:
        """Whether ``sub``, a ``prefix.>`` subscription, is the only one that any subject
        under its prefix reaches (no client listens there too): a message on such a subject
        can go straight to it. Cached until the subscriptions change."""
        prefix = sub.subject[:-1]  # 'a.b.>' -> 'a.b.'
        hit = self._sole.get(prefix)
        if hit is None:
            hit = self._sole[prefix] = self._reached_under(prefix[:-1]) == [sub]
        return hit

    def _reached_under(self, prefix: str) -> list[Subscription]:
        """Every subscription some subject under ``prefix`` (``prefix.x...``) reaches."""
        found = [s for subject, subs in self._literal.items()
                 if subject.startswith(prefix + ".") for s in subs]
        passed, nodes = self._frontier(prefix)
        found.extend(passed)
        below: list[_Node] = []
        for node in nodes:  # its subs end at the prefix itself; its '>' ones go beyond
            found.extend(node.rest)
            below.extend(node.children.values())
        while below:  # whatever lies deeper: some subject under the prefix matches it
            node = below.pop()
            found.extend(node.subs)
            found.extend(node.rest)
            below.extend(node.children.values())
        return found

    def _frontier(self, parent: str) -> tuple[list[Subscription], list[_Node]]:
        """Follow the tokens of ``parent`` through the trie: the '>' subscriptions passed on
        the way (they match whatever follows) and the nodes reached."""
        passed: list[Subscription] = []
        nodes = [self._root]
        for tok in parent.split(".") if parent else ():
            reached = []
            for node in nodes:
                passed.extend(node.rest)
                for key in (tok, "*"):
                    child = node.children.get(key)
                    if child is not None:
                        reached.append(child)
            nodes = reached
            if not nodes:
                break
        return passed, nodes
