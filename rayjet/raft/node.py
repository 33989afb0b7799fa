"""The raft state machine: roles, terms, elections, replication, membership.

Pure and single-threaded: inputs are :meth:`Raft.step` (a message from a peer),
:meth:`Raft.tick` (logical time) and the local calls (propose, transfer, read index);
outputs accumulate in ``msgs`` and ``read_states`` and are drained by :class:`RawNode`.
"""

from __future__ import annotations

from rayjet.raft.config import (
    MUTATION_COMMIT_PREVIOUS_TERM,
    MUTATION_VOTE_WITHOUT_LOG_CHECK,
    Config,
)
from rayjet.raft.errors import CompactedError, ProposalDroppedError, RaftError
from rayjet.raft.log import RaftLog
from rayjet.raft.messages import (
    ConfChange,
    ConfChangeType,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Message,
    ReadState,
    Role,
    SoftState,
)
from rayjet.raft.messages import MessageType as MT
from rayjet.raft.progress import Progress, ProgressState
from rayjet.raft.readonly import ReadOnly
from rayjet.raft.storage import LogStorage

# Votes requested on behalf of a leader transfer bypass the leader lease.
TRANSFER_CTX = b"transfer"

_WON, _LOST, _PENDING = "won", "lost", "pending"


class Raft:
    def __init__(self, cfg: Config, storage: LogStorage) -> None:
        cfg.validate()
        self.cfg = cfg
        self.id = cfg.id
        self.rng = cfg.rng
        self._any_term_commit = MUTATION_COMMIT_PREVIOUS_TERM in cfg.mutations
        self._skip_log_check = MUTATION_VOTE_WITHOUT_LOG_CHECK in cfg.mutations
        self.log = RaftLog(storage, cfg.max_committed_size_per_ready)
        self.term = 0
        self.vote: str | None = None
        self.role = Role.FOLLOWER
        self.lead: str | None = None
        self.voters: list[str] = []
        self.learners: list[str] = []
        self.prs: dict[str, Progress] = {}
        self.votes: dict[str, bool] = {}
        self.msgs: list[Message] = []
        self.read_states: list[ReadState] = []
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_election_timeout = cfg.election_tick
        self.lead_transferee: str | None = None
        self.pending_conf_index = 0
        self.read_only = ReadOnly()
        self.pending_reads: list[bytes] = []
        self._bcast_pending = False
        # the application turns this off while its state machine is not usable (a replica
        # copying its state from a peer): such a node votes but never stands for election
        self.campaign_allowed = True
        # a replica that lost its log (damage) rejoins empty: what it acknowledged and
        # voted for before is gone, so it neither votes nor stands for election until its
        # log holds a committed entry of its leader's term (then it holds every entry
        # committed before that leader was elected)
        self.rejoining = False
        # the application fsyncs in batches after entries leave (see persisted_to): then a
        # leader counts its own copy toward a commit only up to what is durable
        self.persist_async = False
        self._persisted = (0, 0)  # (index, term) of the last entry known durable here
        self.quiet = False  # quiescent: ticks do nothing until something wakes it
        self._idle_ticks = 0  # leader: ticks since its log last grew
        self._idle_mark = 0

        hs, cs = storage.initial_state()
        self._set_conf_state(cs)
        if hs != HardState():
            if not (self.log.committed <= hs.commit <= self.log.last_index()):
                raise RaftError(f"hard state commit {hs.commit} outside "
                                f"[{self.log.committed}, {self.log.last_index()}]")
            self.log.committed = hs.commit
            self.term, self.vote = hs.term, hs.vote
        if cfg.applied:
            self.log.applied_to(cfg.applied)
        self.become_follower(self.term, None)

    # -- state views -----------------------------------------------------------------------
    def hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.log.committed)

    def soft_state(self) -> SoftState:
        return SoftState(self.lead, self.role)

    def conf_state(self) -> ConfState:
        return ConfState(tuple(self.voters), tuple(self.learners))

    def quorum(self) -> int:
        return len(self.voters) // 2 + 1

    def promotable(self) -> bool:
        return self.id in self.prs and self.id in self.voters and \
            self.log.unstable.snapshot is None and self.campaign_allowed and not self.rejoining

    # -- role changes ----------------------------------------------------------------------
    def _reset(self, term: int) -> None:
        if self.term != term:
            self.term = term
            self.vote = None
        self.lead = None
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        et = self.cfg.election_tick
        self.randomized_election_timeout = et + self.rng.randint(0, et - 1)
        self.lead_transferee = None
        self.votes = {}
        self._reset_progress()
        self.pending_conf_index = 0
        self.read_only = ReadOnly()
        self.pending_reads = []
        self._bcast_pending = False

    def _new_progress(self, learner: bool) -> Progress:
        return Progress(self.log.last_index() + 1, self.cfg.max_inflight_msgs,
                        self.cfg.max_inflight_bytes, learner)

    def _reset_progress(self) -> None:
        prs = {}
        for nid, old in self.prs.items():
            pr = self._new_progress(old.is_learner)
            if nid == self.id:
                pr.match = self.log.last_index()
            prs[nid] = pr
        self.prs = prs

    def become_follower(self, term: int, lead: str | None) -> None:
        self._reset(term)
        self.lead = lead
        self.role = Role.FOLLOWER

    def _become_pre_candidate(self) -> None:
        # Pre-vote leaves term and vote alone: a node that cannot win disturbs nobody.
        self.votes = {}
        self.lead = None
        self.role = Role.PRE_CANDIDATE

    def _become_candidate(self) -> None:
        self._reset(self.term + 1)
        self.vote = self.id
        self.role = Role.CANDIDATE

    def _become_leader(self) -> None:
        self._reset(self.term)
        self.lead = self.id
        self.role = Role.LEADER
        self.prs[self.id].become_replicate()
        # A conf change may be proposed only after everything before this term is applied;
        # this closes the single-server membership change bug (Ongaro, raft-dev 2015).
        self.pending_conf_index = self.log.last_index()
        self._append([Entry(self.term, 0)])
        self.bcast_append()

    # -- ticking -------------------------------------------------------------------------------
    def tick(self) -> None:
        if self.quiet:
            return
        if self.role == Role.LEADER:
            self._tick_heartbeat()
            if self.cfg.quiesce_after and self.role == Role.LEADER:
                self._maybe_quiesce()
        else:
            self.election_elapsed += 1
            if self.promotable() and self.election_elapsed >= self.randomized_election_timeout:
                self.election_elapsed = 0
                self.hup()

    def _tick_heartbeat(self) -> None:
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.election_elapsed >= self.cfg.election_tick:
            self.election_elapsed = 0
            if self.cfg.check_quorum and not self._quorum_active():
                self.become_follower(self.term, None)
                return
            self.lead_transferee = None
            if self.id not in self.prs:
                self._hand_off()
        for pr in self.prs.values():
            if pr.state == ProgressState.SNAPSHOT:
                # The application may never report a lost snapshot; retry by probing.
                pr.snapshot_ticks += 1
                if pr.snapshot_ticks >= self.cfg.election_tick:
                    pr.become_probe()
        if self.heartbeat_elapsed >= self.cfg.heartbeat_tick:
            self.heartbeat_elapsed = 0
            self.bcast_heartbeat()

    # -- quiescence ------------------------------------------------------------------------------
    def _maybe_quiesce(self) -> None:
        last = self.log.last_index()
        if last != self._idle_mark:
            self._idle_mark, self._idle_ticks = last, 0
            return
        self._idle_ticks += 1
        if (self._idle_ticks < self.cfg.quiesce_after or self.log.committed != last
                or self.log.applied != last or self.lead_transferee is not None
                or self.pending_reads or self.read_only.last_pending_ctx()
                or self.pending_conf_index > self.log.applied
                or any(pr.match != last for nid, pr in self.prs.items() if nid != self.id)):
            return
        for nid in self.prs:
            if nid != self.id:
                # the heartbeat carries the commit index: followers learn it as they go quiet
                self._send(MT.HEARTBEAT, nid, commit=last, quiesce=True)
        self.quiet = True

    def wake(self) -> None:
        """Leave quiescence: tick again, from a fresh election timeout (and, as leader,
        with every member counted active, so check-quorum does not depose it at once)."""
        if not self.quiet:
            return
        self.quiet = False
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self._idle_ticks = 0
        if self.role == Role.LEADER:
            for pr in self.prs.values():
                pr.recent_active = True

    def report_peer_down(self, nid: str) -> None:
        """The application saw ``nid``'s process die. A follower of it wakes, forgets it
        as leader (so it grants votes) and campaigns within a quarter of an election
        timeout, staggered at random so that the followers who heard of the death
        together seldom split their votes."""
        if nid != self.lead or self.role == Role.LEADER or nid == self.id:
            return
        self.wake()
        self.lead = None
        stagger = self.rng.randint(1, max(1, self.cfg.election_tick // 4))
        self.election_elapsed = max(self.election_elapsed,
                                    self.randomized_election_timeout - stagger)

    def _quorum_active(self) -> bool:
        active = 0
        for nid in self.voters:
            pr = self.prs[nid]
            if nid == self.id or pr.recent_active:
                active += 1
        for nid, pr in self.prs.items():
            if nid != self.id:
                pr.recent_active = False
        return active >= self.quorum()

    # -- elections -------------------------------------------------------------------------------
    def hup(self, transfer: bool = False) -> None:
        self.wake()
        if self.role == Role.LEADER or not self.promotable():
            return
        if self._has_unapplied_conf_change():
            # Our idea of the membership may be stale; we might count the wrong majority.
            return
        if self.cfg.pre_vote and not transfer:
            self._campaign(pre=True)
        else:
            self._campaign(pre=False, transfer=transfer)

    def _has_unapplied_conf_change(self) -> bool:
        lo = max(self.log.applied + 1, self.log.first_index())
        if lo > self.log.committed:
            return False
        return any(e.type == EntryType.CONF_CHANGE
                   for e in self.log.slice(lo, self.log.committed + 1))

    def _campaign(self, pre: bool, transfer: bool = False) -> None:
        if pre:
            self._become_pre_candidate()
            kind, term = MT.PRE_VOTE, self.term + 1
        else:
            self._become_candidate()
            kind, term = MT.VOTE, self.term
        if self._poll(self.id, True) == _WON:
            if pre:
                self._campaign(pre=False)
            else:
                self._become_leader()
            return
        li, lt = self.log.last_index(), self.log.last_term()
        ctx = TRANSFER_CTX if transfer else b""
        for nid in self.voters:
            if nid != self.id:
                self.msgs.append(Message(kind, nid, self.id, term, log_term=lt, index=li,
                                         context=ctx))

    def _poll(self, nid: str, granted: bool) -> str:
        if nid in self.voters:
            self.votes.setdefault(nid, granted)
        yes = sum(1 for v in self.votes.values() if v)
        no = len(self.votes) - yes
        q = self.quorum()
        if yes >= q:
            return _WON
        if no > len(self.voters) - q:
            return _LOST
        return _PENDING

    # -- the message entry point ---------------------------------------------------------------
    def step(self, m: Message) -> None:
        if self.quiet and not (m.type == MT.HEARTBEAT and m.quiesce) and not (
                m.type == MT.HEARTBEAT_RESP and not m.reject):
            self.wake()
        if m.term > self.term:
            if m.type in (MT.VOTE, MT.PRE_VOTE):
                in_lease = (self.cfg.check_quorum and self.lead is not None
                            and self.election_elapsed < self.cfg.election_tick)
                if in_lease and m.context != TRANSFER_CTX:
                    # We heard from a live leader recently: ignore a disruptive candidate.
                    return
            if m.type == MT.PRE_VOTE or (m.type == MT.PRE_VOTE_RESP and not m.reject):
                pass  # pre-vote never moves terms
            elif m.type in (MT.APP, MT.HEARTBEAT, MT.SNAP):
                self.become_follower(m.term, m.frm)
            else:
                self.become_follower(m.term, None)
        elif m.term < self.term:
            if (self.cfg.check_quorum or self.cfg.pre_vote) and m.type in (MT.APP, MT.HEARTBEAT):
                # A deposed leader may not see higher-term votes (pre-vote, lease); tell it.
                self._send(MT.APP_RESP, m.frm)
            elif m.type == MT.PRE_VOTE:
                self._send(MT.PRE_VOTE_RESP, m.frm, reject=True)
            return

        if m.type in (MT.VOTE, MT.PRE_VOTE):
            self._handle_vote_request(m)
        elif self.role == Role.LEADER:
            self._step_leader(m)
        elif self.role == Role.FOLLOWER:
            self._step_follower(m)
        else:
            self._step_candidate(m)

    def _handle_vote_request(self, m: Message) -> None:
        can_vote = not self.rejoining and (self.vote == m.frm
                    or (self.vote is None and self.lead is None)
                    or (m.type == MT.PRE_VOTE and m.term > self.term))
        resp = MT.VOTE_RESP if m.type == MT.VOTE else MT.PRE_VOTE_RESP
        if can_vote and (self._skip_log_check or self.log.is_up_to_date(m.index, m.log_term)):
            # Answer with the request's term: a pre-candidate has not moved its term yet.
            self.msgs.append(Message(resp, m.frm, self.id, m.term))
            if m.type == MT.VOTE:
                self.election_elapsed = 0
                self.vote = m.frm
        else:
            self._send(resp, m.frm, reject=True)

    def _send(self, kind: MT, to: str, **fields) -> None:
        self.msgs.append(Message(kind, to, self.id, self.term, **fields))

    # -- follower / candidate ----------------------------------------------------------------
    def _step_follower(self, m: Message) -> None:
        if m.type in (MT.APP, MT.HEARTBEAT, MT.SNAP):
            self.election_elapsed = 0
            self.lead = m.frm
            self._handle_leader_message(m)
            if self.rejoining:
                self._check_rejoined()
        elif m.type == MT.TIMEOUT_NOW:
            self.hup(transfer=True)

    def _check_rejoined(self) -> None:
        committed = self.log.committed
        if committed > 0 and self.log.term_or_zero(committed) == self.term:
            self.rejoining = False

    def _step_candidate(self, m: Message) -> None:
        if m.type in (MT.APP, MT.HEARTBEAT, MT.SNAP):
            self.become_follower(m.term, m.frm)
            self._handle_leader_message(m)
            return
        want = MT.PRE_VOTE_RESP if self.role == Role.PRE_CANDIDATE else MT.VOTE_RESP
        if m.type != want:
            return
        result = self._poll(m.frm, not m.reject)
        if result == _WON:
            if self.role == Role.PRE_CANDIDATE:
                self._campaign(pre=False)
            else:
                self._become_leader()
        elif result == _LOST:
            self.become_follower(self.term, None)

    def _handle_leader_message(self, m: Message) -> None:
        if m.type == MT.APP:
            self._handle_append(m)
        elif m.type == MT.HEARTBEAT:
            last = self.log.last_index()
            if m.commit > last:
                # the leader counts entries this log no longer has (a replaced disk): tell it
                # where the log ends instead of committing what is not here
                self._send(MT.HEARTBEAT_RESP, m.frm, context=m.context, reject=True,
                           reject_hint=last)
                return
            self.log.commit_to(m.commit)
            if m.quiesce and self.log.committed == last == m.commit:
                self.quiet = True  # we hold the leader's last entry: nothing to answer
                return
            self._send(MT.HEARTBEAT_RESP, m.frm, context=m.context)
        else:
            self._handle_snapshot(m)

    def _handle_append(self, m: Message) -> None:
        log = self.log
        if m.index < log.committed:
            self._send(MT.APP_RESP, m.frm, index=log.committed)
            return
        last_new = log.maybe_append(m.index, m.log_term, m.commit, m.entries)
        if last_new is not None:
            self._send(MT.APP_RESP, m.frm, index=last_new)
            return
        hint, hint_term = log.find_conflict_by_term(min(m.index, log.last_index()), m.log_term)
        self._send(MT.APP_RESP, m.frm, index=m.index, reject=True, reject_hint=hint,
                   log_term=hint_term)

    def _handle_snapshot(self, m: Message) -> None:
        snap = m.snapshot
        if snap is not None and self._restore(snap):
            self._send(MT.APP_RESP, m.frm, index=self.log.last_index())
        else:
            self._send(MT.APP_RESP, m.frm, index=self.log.committed)

    def _restore(self, snap) -> bool:
        if snap.index <= self.log.committed:
            return False
        if self.log.match_term(snap.index, snap.term):
            # We already hold that prefix: just learn that it is committed.
            self.log.commit_to(snap.index)
            return False
        self.log.restore(snap)
        self._set_conf_state(snap.meta.conf_state)
        return True

    # -- leader ------------------------------------------------------------------------------
    def _step_leader(self, m: Message) -> None:
        pr = self.prs.get(m.frm)
        if pr is None:
            return
        if m.type == MT.APP_RESP:
            self._handle_append_response(m, pr)
        elif m.type == MT.HEARTBEAT_RESP:
            pr.recent_active = True
            pr.probe_sent = False
            if m.reject and m.reject_hint < pr.match and pr.state != ProgressState.SNAPSHOT:
                pr.restart_from(m.reject_hint)  # it lost its log: an idle group learns it here
                if pr.state == ProgressState.REPLICATE:
                    pr.become_probe()
            if pr.state == ProgressState.REPLICATE and pr.inflights.full():
                pr.inflights.free_first_one()
            if pr.match < self.log.last_index() or pr.state == ProgressState.PROBE:
                self.send_append(m.frm)
            elif m.frm == self.lead_transferee:
                # The target may have refused the last TimeoutNow (e.g. an unapplied
                # membership change); ask again every heartbeat until the transfer expires.
                self._send(MT.TIMEOUT_NOW, m.frm)
            if m.context:
                self._handle_read_ack(m.frm, m.context)

    def _handle_append_response(self, m: Message, pr: Progress) -> None:
        pr.recent_active = True
        # a follower may hold more than this leader (all replicas lost power and this one
        # kept less of its log): never believe it matches past our own last index
        last = self.log.last_index()
        if m.reject:
            hint = min(m.reject_hint, last)
            if m.log_term > 0:
                hint, _ = self.log.find_conflict_by_term(m.reject_hint, m.log_term)
            if pr.maybe_decr_to(m.index, hint):
                if pr.state == ProgressState.REPLICATE:
                    pr.become_probe()
                self.send_append(m.frm)
            return
        was_paused = pr.is_paused()
        updated = pr.maybe_update(min(m.index, last))
        if not updated and not (pr.state == ProgressState.PROBE and pr.match == m.index):
            return
        if pr.state == ProgressState.PROBE:
            pr.become_replicate()
        elif pr.state == ProgressState.SNAPSHOT and pr.match + 1 >= self.log.first_index():
            pr.become_probe()
            pr.become_replicate()
        elif pr.state == ProgressState.REPLICATE:
            pr.inflights.free_le(m.index)
        if self.maybe_commit():
            if self.cfg.notify_commit:
                self.bcast_append()
            elif was_paused:
                self.send_append(m.frm, send_if_empty=False)
        elif was_paused:
            self.send_append(m.frm)
        while self.send_append(m.frm, send_if_empty=False):
            pass
        if m.frm == self.lead_transferee and pr.match == self.log.last_index():
            self._send(MT.TIMEOUT_NOW, m.frm)

    def persisted_to(self, index: int, term: int) -> None:
        """The application made the log durable up to entry ``index`` of ``term``: with
        ``persist_async`` the leader's own copy counts toward a commit from here."""
        self._persisted = (index, term)
        if self.role == Role.LEADER and self.maybe_commit() and self.cfg.notify_commit:
            self.bcast_append()

    def _own_match(self, match: int) -> int:
        """The leader's own match as a commit may count it (durable entries only)."""
        if not self.persist_async:
            return match
        index, term = self._persisted
        if index > match:
            return match
        if self.log.term_or_zero(index) != term:
            return 0  # the log was cut and rewritten past what was synced: wait for a sync
        return index

    def maybe_commit(self) -> bool:
        matches = sorted((self._own_match(self.prs[v].match) if v == self.id else
                          self.prs[v].match for v in self.voters if v in self.prs),
                         reverse=True)
        if len(matches) < self.quorum():
            return False
        mci = matches[self.quorum() - 1]
        if not self.log.maybe_commit(mci, self.term, self._any_term_commit):
            return False
        if self.pending_reads and self.log.term_or_zero(self.log.committed) == self.term:
            pending, self.pending_reads = self.pending_reads, []
            for ctx in pending:
                self._send_read_index(ctx)
        return True

    def send_append(self, to: str, send_if_empty: bool = True) -> bool:
        pr = self.prs[to]
        if pr.is_paused():
            return False
        log = self.log
        try:
            prev_term = log.term(pr.next - 1)
            hi = log.last_index() + 1
            if self.cfg.max_entries_per_msg is not None:
                hi = min(hi, pr.next + self.cfg.max_entries_per_msg)
            ents = log.slice(pr.next, hi, self.cfg.max_size_per_msg)
        except CompactedError:
            return self._send_snapshot(to, pr)
        if not ents and not send_if_empty:
            return False
        self.msgs.append(Message(MT.APP, to, self.id, self.term, log_term=prev_term,
                                 index=pr.next - 1, entries=ents, commit=log.committed))
        pr.sent_entries(len(ents), sum(e.size() for e in ents) if ents else 0)
        return True

    def _send_snapshot(self, to: str, pr: Progress) -> bool:
        if not pr.recent_active:
            return False
        snap = self.log.snapshot()
        if snap.index == 0:
            return False
        pr.become_snapshot(snap.index)
        self.msgs.append(Message(MT.SNAP, to, self.id, self.term, snapshot=snap))
        return True

    def bcast_append(self) -> None:
        for nid in self.prs:
            if nid != self.id:
                self.send_append(nid)

    def bcast_heartbeat(self) -> None:
        ctx = self.read_only.last_pending_ctx()
        committed = self.log.committed
        for nid, pr in self.prs.items():
            if nid != self.id:
                # Never claim more is committed than the follower is known to hold.
                self._send(MT.HEARTBEAT, nid, commit=min(pr.match, committed), context=ctx)

    def flush(self) -> None:
        """Send appends for proposals accepted since the last Ready, as one batch per peer."""
        if self._bcast_pending:
            self._bcast_pending = False
            if self.role == Role.LEADER:
                for nid in self.prs:
                    if nid != self.id:
                        while self.send_append(nid, send_if_empty=False):
                            pass

    # -- local requests ----------------------------------------------------------------------
    def _append(self, ents: list[Entry]) -> int:
        li = self.log.last_index()
        ents = [Entry(self.term, li + 1 + i, e.data, e.type) for i, e in enumerate(ents)]
        last = self.log.append(ents)
        self.prs[self.id].maybe_update(last)
        self.maybe_commit()
        return last

    def _check_can_propose(self) -> None:
        if self.role != Role.LEADER:
            raise ProposalDroppedError(f"{self.id} is not the leader", self.lead)
        if self.lead_transferee is not None:
            raise ProposalDroppedError(f"leadership is moving to {self.lead_transferee}",
                                       self.lead_transferee)
        if self.id not in self.prs:
            raise ProposalDroppedError(f"{self.id} is no longer a member")

    def propose(self, datas: list[bytes]) -> int:
        self.wake()
        self._check_can_propose()
        last = self._append([Entry(0, 0, d) for d in datas])
        self._bcast_pending = True
        return last

    def propose_conf_change(self, cc: ConfChange) -> int:
        self.wake()
        self._check_can_propose()
        if self.pending_conf_index > self.log.applied:
            raise ProposalDroppedError(
                f"a membership change at index {self.pending_conf_index} is not applied yet",
                self.lead)
        if cc.type == ConfChangeType.REMOVE:
            if cc.node_id not in self.prs:
                raise RaftError(f"{cc.node_id} is not a member")
            if self.voters == [cc.node_id]:
                raise RaftError("cannot remove the last voter")
            if cc.node_id == self.id and len(self.voters) == 2:
                # The survivor would need our vote to learn the change: move leadership first.
                raise RaftError("cannot remove the leader of a two-voter group; "
                                "transfer leadership to the other voter first")
        elif cc.type == ConfChangeType.ADD_VOTER and cc.node_id in self.voters:
            raise RaftError(f"{cc.node_id} is already a voter")
        elif cc.type == ConfChangeType.ADD_LEARNER and cc.node_id in self.prs:
            raise RaftError(f"{cc.node_id} is already a member")
        last = self._append([Entry(0, 0, cc.encode(), EntryType.CONF_CHANGE)])
        self.pending_conf_index = last
        self._bcast_pending = True
        return last

    def apply_conf_change(self, cc: ConfChange) -> ConfState:
        nid = cc.node_id
        if cc.type == ConfChangeType.ADD_VOTER:
            if nid in self.learners:
                self.learners.remove(nid)
                self.prs[nid].is_learner = False
            if nid not in self.voters:
                self.voters.append(nid)
        elif cc.type == ConfChangeType.ADD_LEARNER:
            if nid not in self.voters and nid not in self.learners:
                self.learners.append(nid)
        else:
            for group in (self.voters, self.learners):
                if nid in group:
                    group.remove(nid)
            self.prs.pop(nid, None)
        self._rebuild_tracker()
        if self.role != Role.LEADER:
            return self.conf_state()
        if self.lead_transferee is not None and self.lead_transferee not in self.voters:
            self.lead_transferee = None
        if self.id not in self.prs:
            # Removed leader: keep leading the new configuration (without counting itself)
            # until a remaining voter has caught up and takes over; stepping down at once
            # could strand followers that have not learned the removal is committed.
            self._hand_off()
        if self.maybe_commit():
            self.bcast_append()
        else:
            for other in self.prs:
                if other != self.id:
                    # Probe a newly added member right away instead of at the next heartbeat.
                    self.send_append(other, send_if_empty=other == nid)
        return self.conf_state()

    def _set_conf_state(self, cs: ConfState) -> None:
        self.voters = list(cs.voters)
        self.learners = [n for n in cs.learners if n not in cs.voters]
        self.prs = {}
        self._rebuild_tracker()
        me = self.prs.get(self.id)
        if me is not None:
            me.match = self.log.last_index()

    def _rebuild_tracker(self) -> None:
        # Keep ids sorted: iteration order decides message order, which must be reproducible.
        self.voters.sort()
        self.learners.sort()
        prs = {}
        for nid in sorted(self.voters + self.learners):
            pr = self.prs.get(nid) or self._new_progress(nid in self.learners)
            pr.is_learner = nid in self.learners
            prs[nid] = pr
        self.prs = prs

    def _hand_off(self) -> None:
        if not self.voters:
            self.become_follower(self.term, None)
            return
        to = max(self.voters, key=lambda v: (self.prs[v].match, v))
        self.lead_transferee = to
        if self.prs[to].match == self.log.last_index():
            self._send(MT.TIMEOUT_NOW, to)
        else:
            self.send_append(to)

    def transfer_leader(self, to: str) -> None:
        self.wake()
        if self.role != Role.LEADER:
            raise ProposalDroppedError(f"{self.id} is not the leader", self.lead)
        if to == self.id or to == self.lead_transferee:
            return
        if to not in self.voters:
            raise RaftError(f"cannot transfer leadership to {to}: not a voter")
        # The transfer must finish within one election timeout or it is abandoned.
        self.election_elapsed = 0
        self.lead_transferee = to
        if self.prs[to].match == self.log.last_index():
            self._send(MT.TIMEOUT_NOW, to)
        else:
            self.send_append(to)

    def read_index(self, ctx: bytes) -> None:
        self.wake()
        if self.role != Role.LEADER:
            raise ProposalDroppedError(f"{self.id} is not the leader", self.lead)
        if not ctx:
            raise RaftError("a read index request needs a non-empty, unique context")
        if self.voters == [self.id]:
            self.read_states.append(ReadState(self.log.committed, ctx))
        elif self.log.term_or_zero(self.log.committed) != self.term:
            # Until an entry of our term commits we do not know the true commit index.
            self.pending_reads.append(ctx)
        else:
            self._send_read_index(ctx)

    def _send_read_index(self, ctx: bytes) -> None:
        self.read_only.add_request(self.log.committed, ctx)
        self.read_only.recv_ack(self.id, ctx)
        self.bcast_heartbeat()

    def _handle_read_ack(self, frm: str, ctx: bytes) -> None:
        acks = self.read_only.recv_ack(frm, ctx)
        if acks is None:
            return
        if sum(1 for v in self.voters if v in acks) >= self.quorum():
            self.read_states.extend(self.read_only.advance(ctx))

    def report_unreachable(self, nid: str) -> None:
        pr = self.prs.get(nid)
        if self.role == Role.LEADER and pr is not None and pr.state == ProgressState.REPLICATE:
            pr.become_probe()

    def report_snapshot(self, nid: str, ok: bool) -> None:
        pr = self.prs.get(nid)
        if self.role != Role.LEADER or pr is None or pr.state != ProgressState.SNAPSHOT:
            return
        if not ok:
            pr.pending_snapshot = 0
        pr.become_probe()
        # Wait for the next heartbeat response before probing again.
        pr.probe_sent = True
