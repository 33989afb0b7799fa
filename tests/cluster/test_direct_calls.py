"""Clients reach leaders over the data plane (rayjet.actors.direct): publishes, fetches,
acks and infos are data-plane requests; the actor call remains the fallback; a cut
connection and a killed leader lose nothing, double nothing and keep each publisher's
order."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from rayjet import StorageType
from rayjet.actors import data_plane, direct
from rayjet.actors.router import stream_router
from tests.replicas import kill, stream_replicas


def _direct_count() -> int:
    return direct.stats()["direct"]


def _until_direct(js, subject, timeout=30.0):
    """Publish until one publish travels on the data plane (a new replica publishes its
    address a moment after it starts; until then requests take the actor call)."""
    deadline = time.monotonic() + timeout
    while True:
        before = direct.stats()
        js.publish(subject, b"warm")
        after = direct.stats()  # a catalogue request on the way counts as direct too
        if after["direct"] > before["direct"] and after["not_direct"] == before["not_direct"]:
            return
        assert time.monotonic() < deadline, f"nothing went direct: {direct.stats()}"
        time.sleep(0.05)


def _leader(js, name):
    """The leader's replica id and actor name."""
    assignment = js._meta_call("stream_assignment", name)
    router = stream_router(assignment)
    router.call("info")  # finds the leader
    return router.leader, router.names[router.leader]


def test_publish_fetch_ack_and_info_travel_as_data_plane_requests(js, stream_name):
    name = stream_name
    js.add_stream(name=name, subjects=[f"{name}.>"], num_replicas=1)
    try:
        _until_direct(js, f"{name}.warm")
        base = js.stream_info(name).state.messages
        before = _direct_count()
        for i in range(20):
            js.publish(f"{name}.a", b"m%d" % i)
        js.publish_batch([(f"{name}.b", b"x%d" % i) for i in range(500)])
        assert js.stream_info(name).state.messages == base + 520
        assert js.get_msg(name, base + 3).data == b"m2"
        sub = js.pull_subscribe(f"{name}.a", durable="D", stream=name)
        got = sub.fetch(20, timeout=10)
        assert [m.data for m in got] == [b"m%d" % i for i in range(20)]
        for m in got:
            m.ack()
        used = _direct_count() - before
        # a request per publish, the batch, info and get, and the fetch
        assert used >= 24, direct.stats()
    finally:
        js.delete_stream(name)


def test_the_actor_call_answers_when_no_connection_can_be_made(js, stream_name, monkeypatch):
    name = stream_name
    js.add_stream(name=name, subjects=[f"{name}.>"], num_replicas=1)
    try:
        js.publish(f"{name}.a", b"first")
        _, replica = _leader(js, name)
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            dead = s.getsockname()
        monkeypatch.setattr(data_plane, "address_of", lambda _name: dead)
        for known in [replica, *direct._shared.addresses]:  # the meta members' too
            direct._shared.forget(known)
        not_direct = direct.stats()["not_direct"]
        direct_before = _direct_count()
        for i in range(5):
            assert js.publish(f"{name}.a", b"by actor call %d" % i).seq == i + 2
        assert js.stream_info(name).state.messages == 6
        assert direct.stats()["not_direct"] >= not_direct + 6
        assert _direct_count() == direct_before
        monkeypatch.undo()  # the real address again: requests go direct once it is read
        deadline = time.monotonic() + 30
        while _direct_count() == direct_before:
            assert time.monotonic() < deadline, "never back on the data plane"
            js.publish(f"{name}.a", b"again")
            time.sleep(0.1)
    finally:
        js.delete_stream(name)


def test_a_cut_connection_recovers_and_retried_publishes_are_stored_once(js, stream_name):
    name = stream_name
    js.add_stream(name=name, subjects=[f"{name}.>"], num_replicas=3, storage=StorageType.FILE)
    try:
        js.publish(f"{name}.a", b"warm")
        acks, errors = [], []
        stop = threading.Event()

        def publisher():
            i = 0
            while not stop.is_set() or i < 300:
                try:
                    ack = js.publish(f"{name}.a", b"%d" % i,
                                     headers={"Nats-Msg-Id": f"cut-{i}"}, timeout=20)
                    acks.append((i, ack.seq))
                except Exception as err:  # noqa: BLE001 - counted: the test fails on any
                    errors.append(err)
                i += 1

        t = threading.Thread(target=publisher)
        t.start()
        cuts = 0
        deadline = time.monotonic() + 30
        while cuts < 10 and time.monotonic() < deadline:
            time.sleep(0.02)
            cuts += direct.drop_connections() > 0
        stop.set()
        t.join(60)
        assert not t.is_alive()
        assert cuts >= 5
        assert errors == []
        seqs = [seq for _, seq in acks]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)  # order kept, no double
        assert js.stream_info(name).state.messages == len(acks) + 1  # each stored once
        assert direct.stats()["lost"] >= 1
    finally:
        js.delete_stream(name)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("hosting", ["shared", "dedicated"])
def test_killing_the_leader_with_4000_publishes_in_flight_loses_and_doubles_nothing(
        js, stream_name, hosting):
    name = stream_name
    js.add_stream(name=name, subjects=[f"{name}.>"], num_replicas=3, storage=StorageType.FILE,
                  hosting=hosting)
    try:
        js.publish(f"{name}.a", b"warm")
        futures = []
        for i in range(4000):
            futures.append(js.publish_async(f"{name}.a", b"%d" % i,
                                            headers={"Nats-Msg-Id": f"k-{i}"}))
            if i == 1000:
                rid, _ = _leader(js, name)
                kill(stream_replicas(js, name)[rid])
        acks = [f.result(timeout=120) for f in futures]
        seqs = [a.seq for a in acks]
        assert seqs == sorted(seqs), "a publisher's messages were stored out of order"
        assert len(set(seqs)) == 4000, "two publishes acked at one sequence"
        info = js.stream_info(name)
        assert info.state.messages == 4001  # none lost, none stored twice
        stored = js.get_msg(name, seqs[-1])
        assert stored.data == b"3999"
    finally:
        js.delete_stream(name)


def test_a_listing_asks_each_host_over_the_data_plane(js, stream_name, monkeypatch):
    from rayjet.actors import host

    names = [f"{stream_name}L{i}" for i in range(4)]
    asked = []
    real = host._infos_over_data_plane

    def recording(host_name, replicas):
        answer = real(host_name, replicas)
        asked.append(answer)
        return answer

    monkeypatch.setattr(host, "_infos_over_data_plane", recording)
    try:
        for i, name in enumerate(names):
            js.add_stream(name=name, subjects=[f"{name}.>"], hosting="shared")
            js.publish_batch([(f"{name}.a", b"x")] * (i + 1))
        # a host publishes its address a moment after its first replica starts
        deadline = time.monotonic() + 30
        while not any(asked):
            assert time.monotonic() < deadline, f"no host answered directly: {asked}"
            js.stream_infos(names)
            time.sleep(0.05)
        asked.clear()
        infos = js.stream_infos(names)
        assert [infos[n].state.messages for n in names] == [1, 2, 3, 4]
        answered = {name for answer in asked if answer for name in answer}
        assert len(answered) >= 2  # hosts answered for several streams at once
    finally:
        for name in names:
            js.delete_stream(name)


def test_the_catalogue_is_asked_and_changed_over_the_data_plane(js, stream_name):
    """Stream and consumer creation, listings and assignments are data-plane requests to
    the meta leader; after its leadership moves, the not-leader answer's hint is followed
    on the data plane too."""
    from rayjet import ConsumerConfig

    name = stream_name
    deadline = time.monotonic() + 30
    while True:  # a meta member publishes its address a moment after it starts
        before = _direct_count()
        js.stream_names()
        if _direct_count() > before:
            break
        assert time.monotonic() < deadline, f"no meta call went direct: {direct.stats()}"
        time.sleep(0.05)
    before = direct.stats()
    js.add_stream(name=name, subjects=[f"{name}.>"], num_replicas=1)
    try:
        assert name in js.stream_names()
        js.add_consumer(name, ConsumerConfig(durable_name="D"))
        assert js.consumer_names(name) == ["D"]
        js.meta_leader_stepdown()
        assert name in js.stream_names()  # the new leader found by its hint
        js.delete_consumer(name, "D")
        after = direct.stats()
        # create, names, consumer create and names, names after the step-down, delete
        assert after["direct"] - before["direct"] >= 6, (before, after)
    finally:
        js.delete_stream(name)
