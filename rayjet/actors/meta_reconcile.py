"""The meta leader's reconciliation, a mixin of :class:`rayjet.actors.meta.MetaMember`:
every RECONCILE_EVERY seconds it re-creates the replicas the catalogue names that do not
run (Ray gave up restarting them, their host is gone), and now and then collects the
replica actors and directories of groups the catalogue no longer has. A new leader runs
the same loop, so a leader that dies between a commit and its replicas' creation or
removal leaves nothing behind for long."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from typing import Any

import ray

from rayjet.actors import consumer_replicas, replica_actors, replica_collection, stream_replicas
from rayjet.actors.names import consumer_actor_name, stream_actor_name
from rayjet.errors import APIError
from rayjet.meta.assignment_dicts import assignment_dict
from rayjet.replication.meta_machine import unsettled

log = logging.getLogger(__name__)

RECONCILE_EVERY = 2.0
COLLECT_EVERY = 60.0  # seconds between orphan collections (and at once on becoming leader)
# after a collection that was skipped, found something or did not hear from every host, the
# next comes this soon, doubling up to COLLECT_EVERY: what it found is checked gone (a
# hosted replica whose removal timed out, one a silent host runs) within seconds
COLLECT_AGAIN = RECONCILE_EVERY


class CatalogueReconciler:
    """Needs the member's ``catalogue``, ``host`` (its RaftHost), ``data_dir``, ``id``,
    ``collected`` counters, the names being changed (``_updating``) or placed
    (``_placing``), and ``_require_leader`` / ``_read``."""

    async def _reconcile_loop(self) -> None:
        next_collect = 0.0  # collect at once on becoming leader (e.g. after a failover)
        again = COLLECT_AGAIN
        while True:
            await asyncio.sleep(RECONCILE_EVERY)
            if not self.host.group.is_leader:
                next_collect, again = 0.0, COLLECT_AGAIN
                continue
            if time.monotonic() >= next_collect:
                soon = True
                try:
                    stats = await self.collect_orphans()
                    soon = bool(stats.get("skipped_now") or stats.get("again_soon"))
                except (APIError, ray.exceptions.RayError) as err:
                    log.info("meta %s: collecting orphan replicas failed: %s", self.id, err)
                except Exception:  # keep reconciling whatever happened here
                    log.exception("meta %s: collecting orphan replicas failed", self.id)
                if soon:
                    next_collect, again = time.monotonic() + again, min(again * 2,
                                                                        COLLECT_EVERY)
                else:
                    next_collect, again = time.monotonic() + COLLECT_EVERY, COLLECT_AGAIN
            if unsettled(self.host.group) is not None:
                continue  # its catalogue may miss committed ops (a delete): wait for them
            try:
                running = await replica_collection.running_replicas(guest_hosts=self._guest_hosts())
            except ray.exceptions.RayError as err:
                log.info("meta %s: listing replicas failed: %s", self.id, err)
                continue
            except Exception:  # keep reconciling whatever happened here
                log.exception("meta %s: listing replicas failed", self.id)
                continue
            for name in list(self.catalogue.streams):
                await self._ensure_replicas(name, running)

    def _guest_hosts(self) -> set[str]:
        """The dedicated stream replicas that may run consumer replicas beside them."""
        return {stream_actor_name(sa.group, rid) for sa in self.catalogue.streams.values()
                if sa.consumers and not sa.config.shared_hosting for rid, _ in sa.peers}

    async def _ensure_replicas(self, name: str, running: set[str]) -> None:
        """Re-create the replicas of stream ``name`` and its consumers that do not run
        (Ray gave up restarting them, or their host is gone). The assignment is read at
        this moment, not at the start of the pass (each step awaits), and a stream whose
        membership is changing is left alone: a replica it just removed must not come back.
        Replicas that run are not called: a restarted one starts itself."""
        sa = self.catalogue.streams.get(name)
        if (sa is None or name in self._updating or name in self._placing
                or not self.host.group.is_leader):
            return
        missing = tuple((rid, node) for rid, node in sa.peers
                        if stream_actor_name(sa.group, rid) not in running)
        if missing:
            with contextlib.suppress(APIError, ray.exceptions.RayError, ValueError):
                await stream_replicas.ensure_stream_replicas(sa, self.data_dir, wait=False,
                                                             peers=missing)
        for consumer in list(sa.consumers):
            sa = self.catalogue.streams.get(name)
            ca = sa.consumers.get(consumer) if sa is not None else None
            if ca is None or name in self._updating:
                continue
            missing = tuple((rid, node) for rid, node in ca.peers
                            if consumer_actor_name(ca.group, rid) not in running)
            if missing:
                with contextlib.suppress(APIError, ray.exceptions.RayError, ValueError):
                    await consumer_replicas.ensure_consumer_replicas(
                        ca, sa, self.data_dir, assignment_dict(sa), wait=False, peers=missing)

    async def collect_orphans(self) -> dict[str, Any]:
        """Kill the replica actors, and delete this node's replica directories, of groups
        the catalogue no longer has (a stream or consumer deleted by a leader that died
        before its teardown), and stream replicas no longer among their group's peers.

        What exists is listed first, then a read barrier makes the catalogue reflect every
        op committed before: a replica is only created after its group's op committed, so
        a group just added is in the catalogue and none of its replicas is collected.

        Nothing is collected unless the catalogue is the committed one (see
        :func:`unsettled`), checked after the barrier and again before anything goes: the
        answer then has ``skipped_now`` (the reconcile loop tries again shortly). It has
        ``again_soon`` when this pass collected something or a host did not answer its
        listing: the next pass, soon, checks that nothing is left."""
        self._require_leader()
        rgroup = self.host.group
        reason = unsettled(rgroup)
        if reason is not None:
            return self._skip_collection(reason)
        unanswered: list[str] = []
        actors = replica_collection.replica_actors(
            await replica_collection.running_replicas(unanswered=unanswered))
        dirs = await asyncio.to_thread(replica_collection.local_group_dirs, self.data_dir)
        await self._read()
        reason, term = unsettled(rgroup), rgroup.term
        if reason is not None:
            return self._skip_collection(reason)
        streams = {sa.group: sa for sa in self.catalogue.streams.values()}
        consumers = {ca.group: ca for sa in streams.values() for ca in sa.consumers.values()}
        doomed: list[str] = []
        strays: dict[str, list[replica_actors.ReplicaActor]] = {}
        for a in actors:
            owner = (streams if a.kind == "stream" else consumers).get(a.group)
            if owner is None:
                doomed.append(a.name)
            elif a.rid not in {rid for rid, _ in owner.peers}:
                if a.kind == "consumer":
                    doomed.append(a.name)  # consumer replica sets never change
                elif owner.name not in self._updating:
                    strays.setdefault(a.group, []).append(a)
        for group, found in strays.items():
            # a replica left out of the catalogue's peers (its removal was cut short) is
            # collected once its group no longer counts it: never one the group still has
            members = await stream_replicas.group_members(streams[group])
            if members is None:
                continue
            for a in found:
                if a.rid in members:
                    log.warning("meta %s: replica %s of %s is a member of its group but not "
                                "in the catalogue; leaving it", self.id, a.rid, group)
                else:
                    doomed.append(a.name)
        gone = [path for kind, group, path in dirs
                if group not in (streams if kind == "stream" else consumers)]
        # still the leader of the term whose catalogue was read (the awaits above yield)
        reason = unsettled(rgroup) or (None if rgroup.term == term else "a new term began")
        if reason is not None:
            return self._skip_collection(reason)
        if doomed:
            log.info("meta %s: collecting %d orphan replica actors: %s", self.id, len(doomed),
                     ", ".join(sorted(doomed)))
            await replica_collection.collect_replicas(doomed)
        for path in gone:
            await asyncio.to_thread(shutil.rmtree, path, True)
        self.collected["runs"] += 1
        self.collected["actors"] += len(doomed)
        self.collected["dirs"] += len(gone)
        if unanswered:
            log.info("meta %s: hosts that did not list their replicas: %s", self.id,
                     ", ".join(sorted(unanswered)))
        return {**self.collected, "again_soon": bool(doomed or gone or unanswered)}

    def _skip_collection(self, reason: str) -> dict[str, Any]:
        log.info("meta %s: not collecting orphan replicas: %s", self.id, reason)
        self.collected["skipped"] += 1
        return {**self.collected, "skipped_now": reason}

