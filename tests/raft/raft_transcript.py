"""A tiny interpreter for readable raft scenarios (``tests/raft/*.txt``).

A file is a list of blocks::

    # comment
    command arg key=value
    ----
    expected output, one or more lines (``ok`` when there is nothing to say)

separated by blank lines. Set ``RAYJET_REWRITE_TRANSCRIPTS=1`` to rewrite the expected output
from what the code does now (then read the diff before keeping it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rayjet.raft import (
    ConfChange,
    ConfChangeType,
    Config,
    ConfState,
    EntryType,
    MemoryLogStorage,
    Message,
    RawNode,
    Ready,
    bootstrap,
)
from rayjet.raft.messages import describe_conf, describe_entry


class FixedRng:
    """Election timeouts exactly ``election_tick``: transcripts stay short and stable."""

    def randint(self, a: int, b: int) -> int:
        return a

    def random(self) -> float:
        return 0.0


@dataclass
class Block:
    line: int
    command: str
    expected: list[str]
    actual: list[str] = field(default_factory=list)


def parse(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        raw = lines[i].strip()
        if not raw or raw.startswith("#"):
            i += 1
            continue
        start, cmd = i + 1, raw
        i += 1
        if i >= len(lines) or lines[i].strip() != "----":
            raise ValueError(f"line {start}: expected '----' after {cmd!r}")
        i += 1
        out = []
        while i < len(lines) and lines[i].strip():
            out.append(lines[i].rstrip())
            i += 1
        blocks.append(Block(start, cmd, out))
    return blocks


def render(text: str, blocks: list[Block]) -> str:
    """The file with every block's expected output replaced by its actual output."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    by_line = {b.line: b for b in blocks}
    while i < len(lines):
        out.append(lines[i])
        b = by_line.get(i + 1)
        i += 1
        if b is None:
            continue
        out.append(lines[i])  # ----
        i += 1
        while i < len(lines) and lines[i].strip():
            i += 1
        out.extend(b.actual)
    return "\n".join(out) + "\n"


class Env:
    def __init__(self) -> None:
        self.nodes: dict[str, RawNode] = {}
        self.storage: dict[str, MemoryLogStorage] = {}
        self.applied: dict[str, list[bytes]] = {}
        self.conf: dict[str, ConfState] = {}
        self.mailbox: dict[str, list[Message]] = {}
        self.blocked: set[tuple[str, str]] = set()
        self.out: list[str] = []
        self.verbose = True

    # -- plumbing --------------------------------------------------------------------------
    def run(self, command: str) -> list[str]:
        self.out = []
        words = command.split()
        name, args = words[0], words[1:]
        fn = getattr(self, "cmd_" + name.replace("-", "_"), None)
        if fn is None:
            raise ValueError(f"unknown command {name!r}")
        try:
            fn(*args)
        except Exception as exc:  # errors are part of the expected output
            self.out.append(f"error: {type(exc).__name__}: {getattr(exc, 'description', exc)}")
        return self.out or ["ok"]

    def emit(self, text: str) -> None:
        self.out.append(text)

    def trace(self, text: str) -> None:
        # Protocol chatter from process-ready / deliver / stabilize; silenced by verbose=false.
        if self.verbose:
            self.out.append(text)

    def cmd_set(self, *args) -> None:
        """set verbose=false: stop printing Readies and deliveries (for set-up steps)."""
        _, kw = self._opts(args)
        self.verbose = kw.get("verbose", "true") == "true"

    @staticmethod
    def _opts(args) -> tuple[list[str], dict[str, str]]:
        pos, kw = [], {}
        for a in args:
            if "=" in a:
                k, v = a.split("=", 1)
                kw[k] = v
            else:
                pos.append(a)
        return pos, kw

    # -- cluster set-up ------------------------------------------------------------------------
    def cmd_add_nodes(self, *args) -> None:
        """add-nodes N [index=I] [join=true] [prevote=..] [checkquorum=..] [max-entries=K]
        [inflight=K]: new nodes; bootstrapped together unless join=true (empty storage)."""
        pos, kw = self._opts(args)
        n = int(pos[0])
        first = len(self.nodes) + 1
        ids = [str(i) for i in range(first, first + n)]
        flag = {"true": True, "false": False}
        for nid in ids:
            st = MemoryLogStorage()
            if kw.get("join") != "true":
                bootstrap(st, ids, index=int(kw.get("index", 1)))
            cfg = Config(id=nid, election_tick=10, heartbeat_tick=1, rng=FixedRng(),
                         pre_vote=flag[kw.get("prevote", "true")],
                         check_quorum=flag[kw.get("checkquorum", "true")],
                         max_entries_per_msg=int(kw["max-entries"]) if "max-entries" in kw
                         else None,
                         max_inflight_msgs=int(kw.get("inflight", 256)),
                         applied=st.snapshot().index)
            self.storage[nid] = st
            self.nodes[nid] = RawNode(cfg, st)
            self.applied[nid] = []
            self.conf[nid] = st.snapshot().meta.conf_state
            self.mailbox[nid] = []

    # -- inputs ------------------------------------------------------------------------------
    def cmd_campaign(self, nid: str) -> None:
        self.nodes[nid].campaign()

    def cmd_propose(self, nid: str, *data: str) -> None:
        idx = self.nodes[nid].propose_batch([d.encode() for d in data])
        self.emit(f"index {idx}")

    def cmd_propose_conf_change(self, nid: str, *args) -> None:
        _, kw = self._opts(args)
        kinds = {"add-voter": ConfChangeType.ADD_VOTER, "remove": ConfChangeType.REMOVE,
                 "add-learner": ConfChangeType.ADD_LEARNER}
        (k, v), = kw.items()
        idx = self.nodes[nid].propose_conf_change(ConfChange(kinds[k], v))
        self.emit(f"index {idx}")

    def cmd_tick(self, nid: str, times: str = "1") -> None:
        for _ in range(int(times)):
            self.nodes[nid].tick()

    def cmd_tick_heartbeat(self, nid: str) -> None:
        self.cmd_tick(nid, str(self.nodes[nid].raft.cfg.heartbeat_tick))

    def cmd_tick_election(self, nid: str) -> None:
        self.cmd_tick(nid, str(self.nodes[nid].raft.cfg.election_tick))

    def cmd_transfer_leader(self, frm: str, to: str) -> None:
        self.nodes[frm].transfer_leader(to)

    def cmd_read_index(self, nid: str, ctx: str) -> None:
        self.nodes[nid].read_index(ctx.encode())

    def cmd_snapshot(self, nid: str, keep: str = "0") -> None:
        """snapshot X [keep]: snapshot X's applied state and compact its log."""
        st = self.storage[nid]
        applied = self.nodes[nid].raft.log.applied
        data = b",".join(self.applied[nid])
        snap = st.create_snapshot(applied, self.conf[nid], data)
        st.compact(applied - int(keep))
        self.emit(f"snapshot {snap.term}/{snap.index}; log starts at {st.first_index()}")

    # -- the Ready loop and the network ---------------------------------------------------------
    def cmd_process_ready(self, *ids: str) -> None:
        for nid in ids:
            if len(ids) > 1:
                self.trace(f"> {nid} handling Ready")
            self._handle_ready(nid)

    def _handle_ready(self, nid: str) -> None:
        rn = self.nodes[nid]
        if not rn.has_ready():
            self.trace("  <empty Ready>")
            return
        rd = rn.ready()
        self._print_ready(rd)
        st = self.storage[nid]
        if rd.snapshot is not None:
            st.apply_snapshot(rd.snapshot)
        st.append(rd.entries)
        if rd.hard_state is not None:
            st.set_hard_state(rd.hard_state)
        for m in rd.messages:
            if (m.frm, m.to) in self.blocked:
                self.trace(f"  dropped: {m.describe()}")
            else:
                self.mailbox[m.to].append(m)
        if rd.snapshot is not None:
            self.applied[nid] = [d for d in rd.snapshot.data.split(b",") if d]
            self.conf[nid] = rd.snapshot.meta.conf_state
        for e in rd.committed_entries:
            if e.type == EntryType.CONF_CHANGE:
                self.conf[nid] = rn.apply_conf_change(ConfChange.decode(e.data))
                self.trace(f"  {nid} applied conf change: {describe_conf(self.conf[nid])}")
            elif e.data:
                self.applied[nid].append(e.data)
        rn.advance(rd)

    def _print_ready(self, rd: Ready) -> None:
        self.trace(f"  Ready MustSync={str(rd.must_sync).lower()}:")
        if rd.soft_state is not None:
            self.trace(f"  Lead:{rd.soft_state.lead} State:{rd.soft_state.role.value}")
        if rd.hard_state is not None:
            hs = rd.hard_state
            self.trace(f"  HardState Term:{hs.term} Vote:{hs.vote} Commit:{hs.commit}")
        if rd.snapshot is not None:
            s = rd.snapshot.meta
            self.trace(f"  Snapshot {s.term}/{s.index} {describe_conf(s.conf_state)}")
        if rd.entries:
            self.trace("  Entries:")
            self._trace_many("  " + describe_entry(e) for e in rd.entries)
        if rd.messages:
            self.trace("  Messages:")
            self._trace_many("  " + m.describe() for m in rd.messages)
        if rd.committed_entries:
            self.trace("  CommittedEntries:")
            self._trace_many("  " + describe_entry(e) for e in rd.committed_entries)
        for rs in rd.read_states:
            self.trace(f"  ReadState index={rs.index} ctx={rs.request_ctx.decode()}")

    def cmd_deliver(self, *ids: str) -> None:
        for nid in ids or sorted(self.nodes):
            self._deliver(nid)

    def _deliver(self, nid: str) -> bool:
        msgs, self.mailbox[nid] = self.mailbox[nid], []
        for m in msgs:
            if (m.frm, m.to) in self.blocked:
                self.trace(f"  dropped: {m.describe()}")
                continue
            self.trace("  " + m.describe())
            self.nodes[nid].step(m)
        return bool(msgs)

    def cmd_stabilize(self, *ids: str) -> None:
        ids = ids or tuple(sorted(self.nodes))
        for _ in range(100):
            busy = False
            for nid in ids:
                if self.nodes[nid].has_ready():
                    self.trace(f"> {nid} handling Ready")
                    self._handle_ready(nid)
                    busy = True
            for nid in ids:
                if self.mailbox[nid]:
                    self.trace(f"> {nid} receiving messages")
                    self._deliver(nid)
                    busy = True
            if not busy:
                return
        raise RuntimeError("stabilize did not converge")

    def _trace_many(self, lines) -> None:
        for line in lines:
            self.trace(line)

    def cmd_drop(self, link: str) -> None:
        """drop 1->2: lose the messages from 1 to 2 queued right now."""
        frm, to = link.split("->")
        keep = [m for m in self.mailbox[to] if m.frm != frm]
        for m in self.mailbox[to]:
            if m.frm == frm:
                self.trace(f"  dropped: {m.describe()}")
        self.mailbox[to] = keep

    def cmd_partition(self, *args: str) -> None:
        """partition 1 | 2 3: cut every link between the groups (both ways)."""
        groups, cur = [], []
        for a in args:
            if a == "|":
                groups.append(cur)
                cur = []
            else:
                cur.append(a)
        groups.append(cur)
        self.blocked = {(x, y) for i, g in enumerate(groups) for h in groups[:i] + groups[i + 1:]
                        for x in g for y in h}

    def cmd_heal(self) -> None:
        self.blocked = set()

    # -- views ------------------------------------------------------------------------------------
    def cmd_log(self, nid: str) -> None:
        log = self.nodes[nid].raft.log
        ents = log.entries(log.first_index())
        if log.first_index() > 1:
            self.emit(f"(compacted through {log.first_index() - 1})")
        self.out.extend(describe_entry(e) for e in ents)
        if not ents:
            self.emit("(empty)")

    def cmd_status(self, nid: str) -> None:
        s = self.nodes[nid].status()
        self.emit(f"{s.id}: {s.role.value} term={s.term} lead={s.lead} commit={s.commit} "
                  f"applied={s.applied} last={s.last_index} {describe_conf(s.conf_state)}")
        for peer, text in s.progress.items():
            self.emit(f"  {peer}: {text}")

    def cmd_raft_state(self) -> None:
        for nid in sorted(self.nodes):
            r = self.nodes[nid].raft
            self.emit(f"{nid}: {r.role.value} term={r.term} lead={r.lead} "
                      f"commit={r.log.committed} last={r.log.last_index()}")

    def cmd_applied(self, nid: str) -> None:
        self.emit(" ".join(d.decode() for d in self.applied[nid]) or "(nothing)")
