"""Moving a live group from one peer set to another, one raft membership change at a time.

Raft changes membership safely one server at a time. :func:`plan_move` turns "from these
peers to those" into such steps, adding before removing so the group never has fewer members
(and so a smaller quorum to lose) than the smaller of the two sets:

1. grow: while the group is smaller than the target, add a new peer;
2. replace: add a new peer, then remove an old one (the group size goes up by one for a moment);
3. shrink: remove the remaining old peers.

Peers present in both sets never move. The leader, if named, is removed last and its step is
flagged ``stepdown`` so the caller hands leadership over first. Between steps the caller waits
for the added peer to catch up (add new, catch up, remove old), which keeps publishers served.

Peer lists may repeat a node id (colocated replicas, see ``allow_colocate``): they are treated
as multisets, so "add n1" then means one more replica on node n1.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from rayjet.api import Placement
from rayjet.placement.select import select_peers
from rayjet.placement.servers import ServerInfo

ADD: Literal["add"] = "add"
REMOVE: Literal["remove"] = "remove"


@dataclass(frozen=True)
class MoveStep:
    """One membership change: ``op`` ``peer``, leaving the group as ``members``."""

    op: Literal["add", "remove"]
    peer: str
    members: tuple[str, ...]
    stepdown: bool = False  # removing the current leader: transfer leadership first

    def __str__(self) -> str:
        sign = "+" if self.op == ADD else "-"
        note = " (leader steps down first)" if self.stepdown else ""
        return f"{sign}{self.peer}{note} -> [{', '.join(self.members)}]"


def _minus(a: Sequence[str], b: Sequence[str]) -> list[str]:
    """Multiset ``a - b`` keeping ``a``'s order (later duplicates go first)."""
    left = Counter(b)
    out: list[str] = []
    for peer in a:
        if left[peer]:
            left[peer] -= 1
        else:
            out.append(peer)
    return out


def plan_move(current: Sequence[str], target: Sequence[str], *,
              leader: str | None = None) -> list[MoveStep]:
    """Ordered add/remove steps from ``current`` to ``target`` (see the module doc).

    Returns ``[]`` when both hold the same peers. ``target`` must not be empty (deleting a
    group is not a move). The number of steps is the minimum: one per peer that differs.
    """
    if not target:
        raise ValueError("target peers must not be empty")
    adds = _minus(target, current)
    removes = _minus(current, target)
    if leader is not None and leader in removes:
        # Remove the leader last (and only one of its replicas if it hosts several).
        idx = len(removes) - 1 - removes[::-1].index(leader)
        removes.append(removes.pop(idx))
    members = list(current)
    steps: list[MoveStep] = []

    def add() -> None:
        peer = adds.pop(0)
        members.append(peer)
        steps.append(MoveStep(ADD, peer, tuple(members)))

    def remove() -> None:
        peer = removes.pop(0)
        members.reverse()  # drop the last occurrence of a repeated peer
        members.remove(peer)
        members.reverse()
        stepdown = peer == leader and peer not in members
        steps.append(MoveStep(REMOVE, peer, tuple(members), stepdown=stepdown))

    while adds and len(members) < len(target):
        add()
    while adds and removes:
        add()
        remove()
    while removes:
        remove()
    while adds:  # only reachable if the loops above were skipped; kept for safety
        add()
    return steps


def plan_update(
    servers: Iterable[ServerInfo],
    *,
    current: Sequence[str],
    replicas: int,
    placement: Placement | None = None,
    unique_tag: str | None = None,
    leader: str | None = None,
    **options,
) -> tuple[list[str], list[MoveStep]]:
    """New peers for a live group after a change of ``replicas`` or ``placement``, and the
    steps to get there. Existing peers that still fit are kept (the leader first); other
    ``options`` go to :func:`select_peers`."""
    order = list(current)
    if leader is not None and leader in order:
        order.remove(leader)
        order.insert(0, leader)
    target = select_peers(servers, replicas=replicas, placement=placement,
                          unique_tag=unique_tag, existing=order, **options)
    return target, plan_move(current, target, leader=leader)
