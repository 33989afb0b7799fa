"""Configuration of one raft node."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Protocol

from rayjet.raft.errors import RaftError

# Names of safety rules the simulator may switch off to prove it notices; never set them in
# production.
MUTATION_COMMIT_PREVIOUS_TERM = "commit-previous-term"
MUTATION_VOTE_WITHOUT_LOG_CHECK = "vote-without-log-check"
MUTATIONS = (MUTATION_COMMIT_PREVIOUS_TERM, MUTATION_VOTE_WITHOUT_LOG_CHECK)


class Rng(Protocol):
    def randint(self, a: int, b: int) -> int: ...

    def random(self) -> float: ...


@dataclass
class Config:
    """Knobs of a :class:`RawNode`; times are counted in ticks of :meth:`RawNode.tick`.

    ``election_tick`` should be about ten times ``heartbeat_tick``. Each node draws its
    election timeout from ``[election_tick, 2 * election_tick)`` using ``rng`` (an object with
    ``randint``/``random``, e.g. ``random.Random(seed)``); by default one seeded by the id.
    """

    id: str
    election_tick: int = 10
    heartbeat_tick: int = 1
    # Applied index the application restarts from (0: the first index minus one).
    applied: int = 0
    # Batching: one append carries at most this many bytes / entries (at least one entry).
    max_size_per_msg: int | None = 1 << 20
    max_entries_per_msg: int | None = None
    # Flow control: appends in flight to one follower before waiting for acks.
    max_inflight_msgs: int = 256
    max_inflight_bytes: int | None = None
    # Bytes of committed entries handed out per Ready (None: all).
    max_committed_size_per_ready: int | None = None
    # Tell followers about a new commit index at once with an empty append (as etcd does).
    # False leaves it to the next append or heartbeat: half the messages per sparse write,
    # followers apply a little later.
    notify_commit: bool = True
    check_quorum: bool = True
    # Quiescence: a leader whose log has not grown for this many ticks, with every member
    # holding its last entry and everything applied, tells its followers to stop ticking and
    # stops itself (0: never). Any proposal or message wakes a quiet node; the application
    # reports dead peers (``report_peer_down``) since a quiet follower notices no silence.
    quiesce_after: int = 0
    pre_vote: bool = True
    rng: Rng | None = None
    mutations: frozenset[str] = field(default_factory=frozenset)

    def validate(self) -> None:
        if not self.id:
            raise RaftError("a raft node needs a non-empty id")
        if self.heartbeat_tick <= 0:
            raise RaftError("heartbeat_tick must be positive")
        if self.election_tick <= self.heartbeat_tick:
            raise RaftError("election_tick must be larger than heartbeat_tick")
        if self.max_inflight_msgs <= 0:
            raise RaftError("max_inflight_msgs must be positive")
        unknown = set(self.mutations) - set(MUTATIONS)
        if unknown:
            raise RaftError(f"unknown mutation(s) {sorted(unknown)}; known: {list(MUTATIONS)}")
        if self.rng is None:
            self.rng = random.Random(self.id)
