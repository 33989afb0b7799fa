from __future__ import annotations

import random

import pytest
from raft_helpers import Cluster

from rayjet.errors import NotLeaderError
from rayjet.raft import (
    ConfChange,
    ConfChangeType,
    Config,
    MemoryLogStorage,
    Message,
    MessageType,
    ProgressState,
    ProposalDroppedError,
    RaftError,
    RawNode,
    Role,
    bootstrap,
)


def test_single_voter_commits_alone() -> None:
    c = Cluster(1)
    c.elect("n1")
    idx = c.nodes["n1"].propose(b"a")
    c.stabilize()
    assert c.applied["n1"] == [b"a"]
    assert c.nodes["n1"].status().commit == idx


def test_election_and_replication() -> None:
    c = Cluster(3)
    c.elect("n1")
    c.nodes["n1"].propose_batch([b"a", b"b"])
    c.stabilize()
    assert all(c.applied[n] == [b"a", b"b"] for n in c.ids)
    assert {c.nodes[n].raft.lead for n in c.ids} == {"n1"}


def test_follower_refuses_proposals_and_names_the_leader() -> None:
    c = Cluster(3)
    c.elect("n1")
    with pytest.raises(ProposalDroppedError) as err:
        c.nodes["n2"].propose(b"x")
    assert isinstance(err.value, NotLeaderError)
    assert err.value.leader == "n1"


def test_elections_happen_from_ticks_alone() -> None:
    c = Cluster(5, seed=7)
    c.tick_all(60)
    leader = c.leader()
    assert leader is not None
    assert sum(c.nodes[n].raft.role == Role.LEADER for n in c.ids) == 1


def test_isolated_node_with_prevote_keeps_its_term() -> None:
    c = Cluster(3)
    c.elect("n1")
    term = c.nodes["n1"].raft.term
    c.down.add("n3")
    for _ in range(100):
        c.nodes["n3"].tick()
        c.nodes["n3"].ready()  # drop everything it sends
        c.nodes["n3"].advance(c.nodes["n3"].ready())
    assert c.nodes["n3"].raft.term == term
    c.down.discard("n3")
    c.tick_all(3)
    assert c.leader() == "n1" and c.nodes["n1"].raft.term == term


def test_check_quorum_leader_steps_down() -> None:
    c = Cluster(3)
    c.elect("n1")
    c.down.update({"n2", "n3"})
    for _ in range(25):
        c.nodes["n1"].tick()
        c.stabilize()
    assert c.nodes["n1"].raft.role == Role.FOLLOWER


def test_vote_refused_to_a_stale_log_and_given_once_per_term() -> None:
    st = MemoryLogStorage()
    bootstrap(st, ["a", "b", "c"])
    rn = RawNode(Config("a", rng=random.Random(1), pre_vote=False, check_quorum=False), st)
    rn.step(Message(MessageType.VOTE, "a", "b", term=5, log_term=0, index=0))
    assert rn.ready().messages[0].reject  # b's log ends before a's bootstrap entry
    rn.step(Message(MessageType.VOTE, "a", "b", term=5, log_term=1, index=1))
    rd = rn.ready()
    assert not rd.messages[0].reject and rd.hard_state.vote == "b" and rd.must_sync
    rn.advance(rd)
    rn.step(Message(MessageType.VOTE, "a", "c", term=5, log_term=1, index=1))
    assert rn.ready().messages[0].reject


def test_ready_must_sync_only_for_entries_term_or_vote() -> None:
    c = Cluster(3)
    c.elect("n1")
    n2 = c.nodes["n2"]
    c.nodes["n1"].propose(b"x")
    c.process("n1")
    c.deliver_once()
    rd = n2.ready()
    assert rd.entries and rd.must_sync
    c.handle("n2", rd)
    n2.step(Message(MessageType.HEARTBEAT, "n2", "n1", term=n2.raft.term, commit=3))
    rd = n2.ready()
    assert rd.hard_state is not None and rd.hard_state.commit == 3 and not rd.must_sync
    assert [e.data for e in rd.committed_entries] == [b"x"]


def test_batching_respects_max_entries_per_message() -> None:
    c = Cluster(3, max_entries_per_msg=10)
    c.elect("n1")
    c.nodes["n1"].propose_batch([b"%d" % i for i in range(95)])
    rd = c.nodes["n1"].ready()
    apps = [m for m in rd.messages if m.type == MessageType.APP]
    assert apps and all(len(m.entries) <= 10 for m in apps)
    c.handle("n1", rd)
    c.stabilize()
    assert len(c.applied["n3"]) == 95


@pytest.mark.parametrize("notify", [True, False])
def test_commit_notification_is_optional(notify: bool) -> None:
    c = Cluster(3, notify_commit=notify)
    c.elect("n1")
    c.stabilize()
    leader = c.nodes["n1"]
    idx = leader.propose(b"a")
    c.process("n1")
    c.deliver_once()  # the appends reach the followers
    for nid in ("n2", "n3"):
        c.process(nid)
    c.deliver_once()  # their answers reach the leader, which commits
    rd = leader.ready()
    assert idx in [e.index for e in rd.committed_entries]
    empty_apps = [m for m in rd.messages if m.type == MessageType.APP and not m.entries]
    assert len(empty_apps) == (2 if notify else 0)
    c.handle("n1", rd)
    c.stabilize()
    if not notify:  # followers have the entry but learn that it committed on a heartbeat
        assert c.applied["n2"] == [] and c.nodes["n2"].status().commit < idx
        for _ in range(leader.raft.cfg.heartbeat_tick):
            leader.tick()
        c.stabilize()
    assert all(c.applied[n] == [b"a"] for n in c.ids)


def test_flow_control_caps_inflight_appends() -> None:
    c = Cluster(3, max_inflight_msgs=2, max_entries_per_msg=1)
    c.elect("n1")
    c.down.add("n3")
    leader = c.nodes["n1"]
    c.nodes["n1"].propose_batch([b"a", b"b", b"c", b"d", b"e"])
    rd = leader.ready()
    to_n3 = [m for m in rd.messages if m.to == "n3" and m.type == MessageType.APP]
    assert len(to_n3) == 2
    assert leader.raft.prs["n3"].state == ProgressState.REPLICATE
    assert leader.raft.prs["n3"].is_paused()


def test_leader_transfer_and_proposals_refused_meanwhile() -> None:
    c = Cluster(3)
    c.elect("n1")
    c.nodes["n1"].transfer_leader("n3")
    with pytest.raises(ProposalDroppedError):
        c.nodes["n1"].propose(b"x")
    c.stabilize()
    assert c.leader() == "n3"


def test_leader_transfer_to_a_dead_node_is_abandoned() -> None:
    c = Cluster(3)
    c.elect("n1")
    c.down.add("n3")
    c.nodes["n1"].transfer_leader("n3")
    for _ in range(12):
        c.nodes["n1"].tick()
        c.stabilize()
    assert c.nodes["n1"].raft.lead_transferee is None
    c.nodes["n1"].propose(b"ok")


def test_read_index_waits_for_a_commit_in_the_leaders_term() -> None:
    c = Cluster(3)
    n1 = c.nodes["n1"]
    n1.campaign()
    # Run the election but stop before the new leader's empty entry commits.
    for _ in range(4):
        for nid in c.ids:
            c.process(nid)
        msgs, c.queue = c.queue, []
        for m in msgs:
            c.nodes[m.to].step(m)
    assert n1.raft.role == Role.LEADER and n1.status().commit < n1.status().last_index
    n1.read_index(b"r1")
    assert n1.raft.pending_reads == [b"r1"]
    c.stabilize()
    assert [(rs.index, rs.request_ctx) for rs in c.reads["n1"]] == [(2, b"r1")]


def test_read_index_single_voter_is_immediate() -> None:
    c = Cluster(1)
    c.elect("n1")
    c.nodes["n1"].read_index(b"r")
    c.stabilize()
    assert [rs.request_ctx for rs in c.reads["n1"]] == [b"r"]
    with pytest.raises(RaftError):
        c.nodes["n1"].read_index(b"")


def test_restart_recovers_term_vote_and_commit() -> None:
    c = Cluster(3)
    c.elect("n1")
    c.nodes["n1"].propose(b"a")
    c.stabilize()
    st = c.storage["n2"]
    again = RawNode(Config("n2", applied=1), st)
    s = again.status()
    assert (s.term, s.vote, s.commit) == (c.nodes["n2"].raft.term, "n1", 3)
    rd = again.ready()
    assert [e.data for e in rd.committed_entries] == [b"", b"a"]


def test_lagging_follower_gets_a_snapshot_and_catches_up() -> None:
    c = Cluster(3)
    c.elect("n1")
    c.down.add("n3")
    c.nodes["n1"].propose_batch([b"a", b"b", b"c"])
    c.stabilize()
    st = c.storage["n1"]
    applied = c.nodes["n1"].raft.log.applied
    st.create_snapshot(applied, c.nodes["n1"].raft.conf_state(), b"a,b,c")
    st.compact(applied)
    c.down.discard("n3")
    c.nodes["n1"].propose(b"d")
    c.stabilize()
    c.tick_all(2)
    assert c.storage["n3"].snapshot().index == applied
    assert c.applied["n3"] == [b"a", b"b", b"c", b"d"]  # a, b, c via the snapshot
    assert c.nodes["n1"].raft.prs["n3"].match == c.nodes["n1"].status().last_index


def test_snapshot_state_recovers_when_the_snapshot_is_lost() -> None:
    c = Cluster(3)
    c.elect("n1")
    c.down.add("n3")
    c.nodes["n1"].propose(b"a")
    c.stabilize()
    st = c.storage["n1"]
    st.create_snapshot(3, c.nodes["n1"].raft.conf_state(), b"a")
    st.compact(3)
    c.down.discard("n3")
    leader = c.nodes["n1"]
    snaps = []
    for _ in range(10):
        leader.tick()
        for nid in c.ids:
            c.process(nid)
        snaps = [m for m in c.queue if m.type == MessageType.SNAP]
        if snaps:
            break
        c.deliver_once()
    assert snaps and leader.raft.prs["n3"].state == ProgressState.SNAPSHOT
    c.queue = [m for m in c.queue if m.type != MessageType.SNAP]
    leader.report_snapshot("n3", ok=False)  # the transport lost it
    assert leader.raft.prs["n3"].state == ProgressState.PROBE
    c.stabilize()
    c.tick_all(3)
    assert c.storage["n3"].snapshot().index == 3
    assert c.applied["n3"] == [b"a"]


def test_membership_add_then_remove_one_at_a_time() -> None:
    c = Cluster(3)
    c.elect("n1")
    leader = c.nodes["n1"]
    leader.propose_conf_change(ConfChange(ConfChangeType.REMOVE, "n3"))
    with pytest.raises(ProposalDroppedError):
        leader.propose_conf_change(ConfChange(ConfChangeType.REMOVE, "n2"))
    c.stabilize()
    assert leader.status().conf_state.voters == ("n1", "n2")
    with pytest.raises(RaftError):
        leader.propose_conf_change(ConfChange(ConfChangeType.REMOVE, "n1"))
    with pytest.raises(RaftError):
        leader.propose_conf_change(ConfChange(ConfChangeType.ADD_VOTER, "n2"))


def test_removed_leader_hands_over_before_leaving() -> None:
    c = Cluster(3)
    c.elect("n1")
    c.nodes["n1"].propose_conf_change(ConfChange(ConfChangeType.REMOVE, "n1"))
    c.stabilize()
    c.tick_all(3)
    new = c.leader()
    assert new in ("n2", "n3")
    assert c.nodes[new].status().conf_state.voters == ("n2", "n3")
    c.nodes[new].propose(b"after")
    c.stabilize()
    assert c.applied["n2"][-1] == b"after" and c.applied["n3"][-1] == b"after"


def test_config_validation() -> None:
    with pytest.raises(RaftError):
        Config("a", mutations=frozenset({"no-such-rule"})).validate()
    with pytest.raises(RaftError):
        Config("a", election_tick=1, heartbeat_tick=1).validate()
    with pytest.raises(RaftError):
        Config("").validate()


def test_a_follower_claiming_more_log_than_the_leader_does_not_break_it() -> None:
    """After every replica lost power, a follower may hold entries the new leader lost;
    its answers must not move the leader's view of it past the leader's own log."""
    c = Cluster(3)
    c.elect("n1")
    c.nodes["n1"].propose(b"a")
    c.stabilize()
    raft = c.nodes["n1"].raft
    last, term = raft.log.last_index(), raft.term
    for reject in (False, True):
        raft.step(Message(MessageType.APP_RESP, "n1", "n2", term, index=last + 10,
                          reject=reject, reject_hint=last + 10))
        assert raft.prs["n2"].match <= last and raft.prs["n2"].next <= last + 1
    c.nodes["n1"].propose(b"b")
    c.stabilize()
    assert c.applied["n2"] == [b"a", b"b"]
