"""rayjet demo: runs on an embedded local Ray (started for you).

Run with `make demo`. Each part prints what it did; a failure exits non-zero.
"""

from __future__ import annotations

import sys
import tempfile
import time

import ray

import rayjet
from rayjet import StorageType, StreamConfig, errors
from rayjet.actors.host import HostedHandle, find_replica
from rayjet.actors.names import stream_actor_name
from rayjet.subjects import SubjectTransform, subject_matches, subjects_collide


def section(title: str) -> None:
    print(f"\n== {title} ==")


def subjects_demo() -> None:
    section("subjects")
    for subject, filt in [("ORDERS.new", "ORDERS.*"), ("ORDERS.eu.new", "ORDERS.*"),
                          ("ORDERS.eu.new", "ORDERS.>")]:
        print(f"{subject!r:18} matches {filt!r:11}: {subject_matches(subject, filt)}")
    print("'ORDERS.*' and '*.new' overlap:", subjects_collide("ORDERS.*", "*.new"))
    mapping = SubjectTransform("foo.*.>", "foo.>")
    print("transform foo.*.> -> foo.>:  foo.west.test ->", mapping.transform("foo.west.test"))


def streams_demo(js: rayjet.JetStream) -> None:
    section("a replicated stream (R3, file storage)")
    js.add_stream(StreamConfig(name="ORDERS", subjects=["ORDERS.*"], num_replicas=3,
                               storage=StorageType.FILE))
    ack = js.publish("ORDERS.new", b"order 1", headers={"Nats-Msg-Id": "o-1"})
    info = js.stream_info("ORDERS")  # its replicas elected a leader to take that publish
    print(f"created {info.config.name}: leader {info.cluster.leader}, "
          f"followers {[r.name for r in info.cluster.replicas]}")
    print("publish:", ack)
    print("same Nats-Msg-Id again:", js.publish("ORDERS.new", b"order 1",
                                                headers={"Nats-Msg-Id": "o-1"}))
    acks = js.publish_batch([("ORDERS.new", b"order %d" % i) for i in range(2, 1002)])
    print(f"publish_batch: {len(acks)} acks, last seq {acks[-1].seq}")
    try:
        js.publish("ORDERS.new", b"x", headers={"Nats-Expected-Last-Sequence": "1"})
    except errors.WrongLastSequenceError as err:
        print("optimistic concurrency refused:", err)

    section("failover: kill the leader while publishing")
    assignment, _ = js._stream("ORDERS", refresh=True)
    leader = info.cluster.leader
    # the process the leader runs in (a replica host, with other streams' replicas, as a
    # nats-server process serves many streams): Ray starts it again
    handle = find_replica(stream_actor_name(assignment["group"], leader))
    ray.kill(handle.host if isinstance(handle, HostedHandle) else handle, no_restart=False)
    started = time.monotonic()
    ack = js.publish("ORDERS.new", b"after the kill", headers={"Nats-Msg-Id": "o-after"},
                     timeout=30)
    print(f"killed {leader}; next publish acked at seq {ack.seq} after "
          f"{time.monotonic() - started:.2f}s")
    state = js.stream_info("ORDERS").state
    print(f"stream state: {state.messages} messages, seq {state.first_seq}..{state.last_seq}, "
          f"{state.bytes} bytes")
    print("last message:", js.get_msg("ORDERS", last_by_subject="ORDERS.new").data)

    section("bad input gets a typed error with the NATS err_code")
    for label, call in [
        ("stream name with a dot", lambda: js.add_stream(name="bad.name")),
        ("overlapping subjects", lambda: js.add_stream(name="ALL", subjects=["ORDERS.>"])),
        ("unknown stream", lambda: js.stream_info("NOPE")),
        ("invalid subject", lambda: js.publish("ORDERS..new", b"x")),
    ]:
        try:
            call()
        except errors.APIError as err:
            print(f"{label:24} -> {type(err).__name__} err_code={err.err_code}")
    js.delete_stream("ORDERS")


def main() -> int:
    subjects_demo()
    with tempfile.TemporaryDirectory(prefix="rayjet-demo-") as data_dir:
        section("connect (a local Ray is started for you)")
        with rayjet.connect(data_dir=data_dir, num_cpus=2, timeout=30) as js:
            print(f"{len(js.nodes())} node(s), data_dir={js.data_dir}")
            streams_demo(js)
    print("\ndemo finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
