"""Choosing the nodes that hold a stream's (or consumer's) replicas.

Rules, in the order they are applied to each server of the target cluster:

1. the node is alive (a dead node is never chosen nor kept) and not listed in ``exclude``;
2. it carries every required placement tag and none of the ``!tag`` excluded ones;
3. it has room for ``max_bytes`` of the stream's storage type, when its capacity is known;
4. with a unique tag (``jetstream.unique_tag``, e.g. ``az``) the node must carry a tag of that
   key (``az:...``) whose value no other chosen replica has; a node without it is not
   eligible. Naming a tag of that key in the placement pins it and turns the rule off;
5. existing peers that still pass the rules are kept (in the order given: put the leader
   first), so a change of replicas or placement adds or removes as few peers as possible;
6. new peers are online, non-draining nodes, fewest replicas (``load``) first, ties broken by
   node id (or an injected ``rng``).

All replicas of a group live in one cluster: ``placement.cluster`` when set, else the cluster
of the existing peers, ``default_cluster``, then every other cluster by name (the first that
fits wins). ``span_clusters=True`` drops the boundary (a stretch group, usually with a unique
tag such as ``rayjet.cluster`` or ``region``). Each replica needs its own node unless
``allow_colocate`` is set, which fills the missing slots on already chosen nodes once distinct
nodes run out (a one-machine Ray running R3). Failing any of this raises
:class:`~rayjet.errors.ClusterNoPeersError` (10005) saying what was asked and what exists.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rayjet.api import Placement
from rayjet.errors import ClusterNoPeersError, error_for
from rayjet.placement.servers import ServerInfo, clusters, normalize_tags

MAX_LISTED_SERVERS = 12
"""Servers listed per cluster in an error message before it says "and N more"."""


class Rng(Protocol):
    def shuffle(self, x: list[Any]) -> None: ...


def quorum(replicas: int) -> int:
    """Raft majority of a group of ``replicas`` voters."""
    return replicas // 2 + 1


def unique_value(server: ServerInfo, unique_tag: str) -> str | None:
    """The tag of ``server`` that the unique tag ``unique_tag`` looks at, if any.

    ``unique_tag`` is a tag key such as ``az`` (matching ``az:us-east-1a``) or a prefix ending
    in ``:`` or ``=``; a plain tag equal to it counts too. The first match in name order wins.
    """
    key = unique_tag.strip().lower()
    for tag in sorted(server.tags):
        if _tag_has_key(tag, key):
            return tag
    return None


def _tag_has_key(tag: str, key: str) -> bool:
    if not key:
        return False
    if key.endswith((":", "=")):
        return tag.startswith(key)
    return tag == key or tag.startswith(key + ":") or tag.startswith(key + "=")


@dataclass
class _Funnel:
    """How many servers of one cluster survived each rule (for the error message)."""

    name: str
    servers: list[ServerInfo]
    available: int = 0
    tagged: int = 0
    stored: int = 0
    unique: int = 0
    eligible: int = 0
    reasons: set[str] = field(default_factory=set)
    missing_tags: set[str] = field(default_factory=set)
    excluded_tags: set[str] = field(default_factory=set)

    def summary(self, unique_tag: str | None, storage: bool) -> str:
        name = "all clusters" if self.name == "*" else f"cluster {self.name!r}"
        text = (f"{name}: {len(self.servers)} servers, {self.available} available, "
                f"{self.tagged} with the tags")
        if storage:
            text += f", {self.stored} with room"
        if unique_tag:
            text += f", {self.unique} distinct {unique_tag!r} values"
        return text + f" -> {self.eligible} usable"


@dataclass(frozen=True)
class _Ask:
    replicas: int
    cluster: str | None
    required: tuple[str, ...]
    excluded: tuple[str, ...]
    unique_tag: str | None
    unique_pinned: bool
    existing: tuple[str, ...]
    exclude: frozenset[str]
    preferred: str | None
    allow_colocate: bool
    span_clusters: bool
    max_bytes: int
    storage: str


def select_peers(
    servers: Iterable[ServerInfo],
    *,
    replicas: int,
    placement: Placement | None = None,
    unique_tag: str | None = None,
    existing: Sequence[str] = (),
    exclude: Iterable[str] = (),
    preferred: str | None = None,
    allow_colocate: bool = False,
    default_cluster: str | None = None,
    span_clusters: bool = False,
    max_bytes: int = 0,
    storage: Any = "file",
    rng: Rng | None = None,
) -> list[str]:
    """Node ids for ``replicas`` replicas, preferred/kept peers first (see the module doc).

    ``preferred`` (or ``placement.preferred``) names a node id or server name to place first
    in the result (the preferred leader) when it is eligible. A node id appears more than once
    only with ``allow_colocate``. Raises :class:`ClusterNoPeersError` when nothing fits.
    """
    if replicas < 1:
        raise ValueError(f"replicas must be at least 1, got {replicas}")
    placement = placement or Placement()
    tags = normalize_tags(placement.tags)
    required = tuple(t for t in tags if not t.startswith("!"))
    excluded = tuple(t[1:] for t in tags if t.startswith("!") and len(t) > 1)
    utag = (unique_tag or "").strip().lower() or None
    pinned = bool(utag and any(_tag_has_key(t, utag) for t in required))
    ask = _Ask(
        replicas=replicas, cluster=placement.cluster or None, required=required,
        excluded=excluded, unique_tag=utag, unique_pinned=pinned, existing=tuple(existing),
        exclude=frozenset(exclude), preferred=preferred or placement.preferred or None,
        allow_colocate=allow_colocate, span_clusters=span_clusters, max_bytes=max(0, max_bytes),
        storage=str(getattr(storage, "value", storage) or "file").lower(),
    )

    pool: dict[str, ServerInfo] = {}
    for server in servers:
        pool.setdefault(server.node_id, server)
    everything = list(pool.values())

    funnels: list[_Funnel] = []
    for name, members in _candidate_pools(everything, ask, default_cluster):
        funnel = _Funnel(name, members)
        chosen = _select_in(members, ask, funnel, rng)
        if chosen is not None:
            return chosen
        funnels.append(funnel)
    raise _no_peers(ask, everything, funnels)


def _candidate_pools(servers: list[ServerInfo], ask: _Ask,
                     default_cluster: str | None) -> list[tuple[str, list[ServerInfo]]]:
    grouped = clusters(servers)
    if ask.cluster:
        return [(ask.cluster, grouped.get(ask.cluster, []))]
    if ask.span_clusters:
        return [("*", sorted(servers, key=lambda s: s.node_id))]
    by_id = {s.node_id: s for s in servers}
    order: list[str] = []
    homes = [by_id[p].cluster for p in ask.existing if p in by_id]
    for home in sorted(set(homes), key=lambda c: (-homes.count(c), c)):
        order.append(home)
    if default_cluster and default_cluster not in order:
        order.append(default_cluster)
    order.extend(name for name in grouped if name not in order)
    return [(name, grouped.get(name, [])) for name in order]


def _matches(server: ServerInfo, ask: _Ask, funnel: _Funnel) -> bool:
    """Rules 1-3 (alive, not excluded, tags, room), counting survivors in ``funnel``."""
    if not server.alive:
        funnel.reasons.add("peer offline")
        return False
    if server.node_id in ask.exclude or server.draining:
        funnel.reasons.add("peer excluded or draining")
        return False
    if server.offline:
        funnel.reasons.add("peer offline")
    funnel.available += 1
    ok = True
    for tag in ask.required:
        if tag not in server.tags:
            funnel.missing_tags.add(tag)
            ok = False
    for tag in ask.excluded:
        if tag in server.tags:
            funnel.excluded_tags.add(tag)
            ok = False
    if not ok:
        return False
    funnel.tagged += 1
    room = server.memory if ask.storage == "memory" else server.disk
    if ask.max_bytes and room is not None and room < ask.max_bytes:
        funnel.reasons.add("insufficient storage")
        return False
    funnel.stored += 1
    return True


def _order(servers: list[ServerInfo], rng: Rng | None) -> list[ServerInfo]:
    ordered = sorted(servers, key=lambda s: s.node_id)
    if rng is not None:
        rng.shuffle(ordered)
    return sorted(ordered, key=lambda s: s.load)  # stable: ties keep the id / rng order


def _select_in(members: list[ServerInfo], ask: _Ask, funnel: _Funnel,
               rng: Rng | None) -> list[str] | None:
    by_id = {s.node_id: s for s in members}
    fits = {s.node_id for s in members if _matches(s, ask, funnel)}
    enforce = bool(ask.unique_tag) and not ask.unique_pinned

    def value(server: ServerInfo) -> str | None:
        return unique_value(server, ask.unique_tag) if enforce and ask.unique_tag else None

    if enforce:
        values = {value(by_id[i]) for i in fits}
        funnel.unique = len(values - {None})
        if None in values:
            funnel.reasons.add("server tag not unique")

    def is_preferred(server: ServerInfo) -> bool:
        return bool(ask.preferred) and ask.preferred in (server.node_id, server.name)

    claimed: set[str] = set()
    chosen: list[str] = []

    def take(server: ServerInfo) -> bool:
        tag = value(server)
        if enforce and (tag is None or tag in claimed):
            funnel.reasons.add("server tag not unique")
            return False
        if tag is not None:
            claimed.add(tag)
        chosen.append(server.node_id)
        return True

    # Keep existing peers that still fit (the preferred one first, then in the order given).
    keep = [p for p in ask.existing if p in fits and by_id[p].keepable]
    keep.sort(key=lambda p: not is_preferred(by_id[p]))
    for peer in keep:
        if len(chosen) >= ask.replicas:
            break
        if peer not in chosen:
            take(by_id[peer])

    # New peers: online and not draining, preferred first, then fewest replicas.
    fresh = [by_id[i] for i in fits if i not in chosen and by_id[i].selectable]
    ordered = _order(fresh, rng)
    ordered.sort(key=lambda s: not is_preferred(s))
    for server in ordered:
        if len(chosen) >= ask.replicas:
            break
        take(server)
    funnel.eligible = len(set(chosen))

    if len(chosen) < ask.replicas and ask.allow_colocate:
        # Distinct nodes first even if the unique tag repeats, then share the least busy.
        for server in ordered:
            if len(chosen) >= ask.replicas:
                break
            if server.node_id not in chosen:
                chosen.append(server.node_id)
        # Replicas the group already had on a shared node stay there before any new sharing.
        for peer in ask.existing:
            if len(chosen) >= ask.replicas:
                break
            if peer in chosen and chosen.count(peer) < ask.existing.count(peer):
                chosen.append(peer)
        hosts = [by_id[i] for i in dict.fromkeys(chosen) if by_id[i].selectable]
        while hosts and len(chosen) < ask.replicas:
            host = min(hosts, key=lambda s: (s.load + chosen.count(s.node_id), s.node_id))
            chosen.append(host.node_id)

    if len(chosen) < ask.replicas:
        return None
    online = sum(1 for i in chosen if not by_id[i].offline)
    if online < quorum(ask.replicas):
        funnel.reasons.add("peer offline")
        return None
    chosen.sort(key=lambda i: not is_preferred(by_id[i]))
    return chosen


def _quote_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(f"'{i}'" for i in sorted(items)) + "]"


def _no_peers(ask: _Ask, servers: list[ServerInfo], funnels: list[_Funnel]) -> ClusterNoPeersError:
    reasons: set[str] = set()
    missing: set[str] = set()
    excluded: set[str] = set()
    for f in funnels:
        reasons |= f.reasons
        missing |= f.missing_tags
        excluded |= f.excluded_tags
    if not servers:
        reasons.add("no servers known")
    head = "no suitable peers for placement"
    for reason in ("peer offline", "peer excluded or draining", "insufficient storage",
                   "server tag not unique", "no servers known"):
        if reason in reasons:
            head += f", {reason}"
    if missing:
        head += f", tags not matched {_quote_list(missing)}"
    if excluded:
        head += f", tags excluded {_quote_list(excluded)}"

    where = f"in cluster {ask.cluster!r}" if ask.cluster else (
        "across all clusters" if ask.span_clusters else "in any one cluster")
    asked = f"asked for {ask.replicas} replica{'s' if ask.replicas != 1 else ''} {where}"
    tag_text = list(ask.required) + [f"!{t}" for t in ask.excluded]
    if tag_text:
        asked += f" with tags {_quote_list(tag_text)}"
    if ask.unique_tag:
        asked += f", unique tag {ask.unique_tag!r}"
        if ask.unique_pinned:
            asked += " (not enforced: a placement tag pins it)"
    if ask.max_bytes:
        asked += f", {ask.max_bytes} bytes of {ask.storage} storage"
    if ask.existing:
        asked += f", existing peers {_quote_list(ask.existing)}"
    if ask.exclude:
        asked += f", excluding {_quote_list(ask.exclude)}"
    asked += ", colocation allowed" if ask.allow_colocate else ", one replica per node"

    steps = "; ".join(f.summary(ask.unique_tag, bool(ask.max_bytes)) for f in funnels)
    listing = []
    for name, members in clusters(servers).items():
        shown = [s.describe() for s in members[:MAX_LISTED_SERVERS]]
        if len(members) > MAX_LISTED_SERVERS:
            shown.append(f"and {len(members) - MAX_LISTED_SERVERS} more")
        listing.append(f"cluster {name!r}: " + ", ".join(shown))
    exists = "servers: " + ("; ".join(listing) if listing else "none")
    text = f"{head}: {asked}; {steps}; {exists}" if steps else f"{head}: {asked}; {exists}"
    err = error_for(
        "CLUSTER_NO_PEERS", err=text,
        replicas=ask.replicas, cluster=ask.cluster, tags=tag_text, unique_tag=ask.unique_tag,
        matched={f.name: f.eligible for f in funnels},
        servers={name: [s.node_id for s in members]
                 for name, members in clusters(servers).items()},
    )
    assert isinstance(err, ClusterNoPeersError)
    return err
