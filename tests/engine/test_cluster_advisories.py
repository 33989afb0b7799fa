"""When a replica's role change calls for LEADER_ELECTED or QUORUM_LOST, and the bodies of
those and of the API audit in nats-server's field names (no Ray)."""

from __future__ import annotations

import json

from rayjet.engine import cluster_advisories as adv


def test_leader_watch_elects_and_reports_lost_quorum_as_nats_server():
    watch = adv.LeaderWatch(replicas=3, created=0.0)
    assert watch.changed(leader=True, term=2, leader_known=True, now=1.0) == "elected"
    # deposed by a newer term's leader: nothing to report
    assert watch.changed(leader=False, term=3, leader_known=True, now=2.0) is None
    assert watch.changed(leader=True, term=4, leader_known=True, now=3.0) == "elected"
    # young groups do not report lost quorum (nats-server: 5 s)
    assert watch.changed(leader=False, term=4, leader_known=False, now=4.0) is None
    assert watch.changed(leader=True, term=5, leader_known=True, now=6.0) == "elected"
    assert watch.changed(leader=False, term=5, leader_known=False, now=7.0) == "quorum_lost"
    # at most once in 10 s
    watch.changed(leader=True, term=6, leader_known=True, now=8.0)
    assert watch.changed(leader=False, term=6, leader_known=False, now=9.0) is None
    watch.changed(leader=True, term=7, leader_known=True, now=18.0)
    assert watch.changed(leader=False, term=7, leader_known=False, now=18.0) == "quorum_lost"
    # a follower that was never leader, and single-replica groups, report nothing
    assert watch.changed(leader=False, term=8, leader_known=False, now=40.0) is None
    single = adv.LeaderWatch(replicas=1, created=0.0)
    assert single.changed(leader=True, term=1, leader_known=True, now=9.0) is None


def test_bodies_have_nats_servers_fields():
    peers = adv.peers("r1", [{"name": "r2", "current": True, "active": 0.25, "lag": 0},
                             {"name": "r3", "current": False, "active": 1.0, "lag": 4,
                              "offline": True}])
    assert peers == [
        {"name": "r1", "current": True, "active": 0, "peer": "r1"},
        {"name": "r2", "current": True, "active": 250_000_000, "peer": "r2"},
        {"name": "r3", "current": False, "offline": True, "active": 1_000_000_000, "lag": 4,
         "peer": "r3"}]
    subject, body = adv.leader_elected("S", None, "r1", peers, 1_700_000_000_000_000_001)
    assert subject == "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.S"
    assert list(body) == ["type", "id", "timestamp", "account", "stream", "leader", "replicas"]
    assert body["timestamp"] == "2023-11-14T22:13:20.000000001Z"
    subject, body = adv.quorum_lost("S", "C", peers, 0, domain="hub")
    assert subject == "$JS.EVENT.ADVISORY.CONSUMER.QUORUM_LOST.S.C"
    assert body["type"] == "io.nats.jetstream.advisory.v1.consumer_quorum_lost"
    assert (body["consumer"], body["domain"]) == ("C", "hub") and "leader" not in body
    audit = adv.api_audit(server="gw", client=None, subject="$JS.API.INFO", request=b"",
                          response=b'{"x":"\xff"}', now_ns=0)
    assert list(audit) == ["type", "id", "timestamp", "server", "client", "subject",
                           "response"]
    assert audit["client"] is None and json.dumps(audit)
