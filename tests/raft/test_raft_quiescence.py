"""Quiescence: an idle group stops ticking and sending; any input wakes it; a dead leader
reported by the application is replaced."""

from __future__ import annotations

from raft_helpers import Cluster

from rayjet.raft import Message, MessageType, Role

QUIET_AFTER = 4


def quiet_cluster(n: int = 3) -> Cluster:
    c = Cluster(n, quiesce_after=QUIET_AFTER)
    c.elect("n1")
    c.nodes["n1"].propose(b"a")
    c.stabilize()
    c.tick_all(QUIET_AFTER + 2)
    return c


def sent_by_ticks(c: Cluster, times: int) -> int:
    sent = 0
    for _ in range(times):
        for nid in c.ids:
            if nid not in c.down:
                c.nodes[nid].tick()
                c.process(nid)
        sent += len(c.deliver_once())
    return sent


def test_an_idle_group_goes_quiet_and_ticks_send_nothing() -> None:
    c = quiet_cluster()
    assert all(c.nodes[n].quiet for n in c.ids)
    assert sent_by_ticks(c, 100) == 0  # ten election timeouts: nobody campaigns
    assert c.leader() == "n1"
    assert all(c.nodes[n].raft.log.committed == c.nodes["n1"].raft.log.last_index()
               for n in c.ids)


def test_without_the_option_a_group_never_goes_quiet() -> None:
    c = Cluster(3)
    c.elect("n1")
    c.tick_all(50)
    assert not any(c.nodes[n].quiet for n in c.ids)


def test_a_proposal_wakes_the_group_which_commits_and_goes_quiet_again() -> None:
    c = quiet_cluster()
    c.nodes["n1"].propose(b"b")
    assert not c.nodes["n1"].quiet
    c.stabilize()
    assert all(c.applied[n] == [b"a", b"b"] for n in c.ids)
    c.tick_all(QUIET_AFTER + 2)
    assert all(c.nodes[n].quiet for n in c.ids)
    # check-quorum does not depose the leader that woke after a long quiet spell
    c.nodes["n1"].propose(b"c")
    c.stabilize()
    c.tick_all(25)
    assert c.leader() == "n1" and c.applied["n3"][-1] == b"c"


def test_a_follower_behind_keeps_the_group_awake() -> None:
    c = Cluster(3, quiesce_after=QUIET_AFTER)
    c.elect("n1")
    c.down.add("n3")
    c.nodes["n1"].propose(b"a")
    c.stabilize()
    c.tick_all(QUIET_AFTER * 3)
    assert not c.nodes["n1"].quiet  # n3 does not hold the last entry
    c.down.discard("n3")
    c.tick_all(QUIET_AFTER * 3)
    assert c.applied["n3"] == [b"a"]
    assert all(c.nodes[n].quiet for n in c.ids)


def test_a_reported_dead_leader_is_replaced_within_an_election_timeout() -> None:
    c = quiet_cluster()
    c.down.add("n1")
    for nid in ("n2", "n3"):
        c.nodes[nid].report_peer_down("n1")
        assert not c.nodes[nid].quiet
    ticks = 0
    while c.leader() in (None, "n1"):
        sent_by_ticks(c, 1)
        c.stabilize()
        ticks += 1
        assert ticks <= 20, "no new leader"
    # no election timeout of silence first: the report makes them campaign (staggered)
    assert ticks < 10
    new = c.leader()
    c.nodes[new].propose(b"after")
    c.stabilize()
    assert c.applied["n2"][-1] == c.applied["n3"][-1] == b"after"


def test_a_report_about_a_follower_or_from_the_leader_changes_nothing() -> None:
    c = quiet_cluster()
    c.nodes["n2"].report_peer_down("n3")
    c.nodes["n1"].report_peer_down("n2")
    assert all(c.nodes[n].quiet for n in c.ids)


def test_a_follower_that_missed_the_quiesce_heartbeat_wakes_the_group_harmlessly() -> None:
    c = Cluster(3, quiesce_after=QUIET_AFTER)
    c.elect("n1")
    c.nodes["n1"].propose(b"a")
    c.stabilize()
    c.down.add("n3")  # it misses the quiesce heartbeat, but holds every entry
    c.tick_all(QUIET_AFTER + 2)
    assert c.nodes["n1"].quiet and c.nodes["n2"].quiet and not c.nodes["n3"].quiet
    c.down.discard("n3")
    sent_by_ticks(c, 60)  # n3 hears nothing, campaigns, which wakes the others
    c.stabilize()
    leader = c.leader()
    assert leader is not None
    c.nodes[leader].propose(b"b")
    c.stabilize()
    assert all(c.applied[n] == [b"a", b"b"] for n in c.ids)


def test_a_heartbeat_response_does_not_wake_a_quiet_leader_but_a_rejection_does() -> None:
    c = quiet_cluster()
    raft = c.nodes["n1"].raft
    raft.step(Message(MessageType.HEARTBEAT_RESP, "n1", "n2", raft.term))
    assert raft.quiet
    raft.step(Message(MessageType.HEARTBEAT_RESP, "n1", "n2", raft.term, reject=True,
                      reject_hint=0))
    assert not raft.quiet and raft.role == Role.LEADER
