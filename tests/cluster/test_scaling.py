"""Changing the replica count of a live stream while a publisher runs loses nothing."""

from __future__ import annotations

import threading

from rayjet import StorageType, StreamConfig
from tests.cluster.test_faults import replica_handles, wait_replicas_equal


def test_scale_up_and_down_while_publishing(js, stream_name):
    name = stream_name
    cfg = StreamConfig(name=name, subjects=[f"{name}.*"], num_replicas=1,
                       storage=StorageType.FILE)
    js.add_stream(cfg)
    acked: dict[int, bytes] = {}
    errors: list[BaseException] = []
    stop = threading.Event()

    def publisher():
        i = 0
        while not stop.is_set():
            data = b"m%d" % i
            try:
                ack = js.publish(f"{name}.a", data, headers={"Nats-Msg-Id": f"{i}"}, timeout=60)
                acked[ack.seq] = data
            except BaseException as err:  # recorded: the test fails on any error
                errors.append(err)
                return
            i += 1

    thread = threading.Thread(target=publisher)
    thread.start()
    try:
        seen = []
        for replicas in (3, 5, 3, 1):
            info = js.update_stream(StreamConfig(**{**cfg.__dict__, "num_replicas": replicas}))
            assert info.config.num_replicas == replicas
            assert len(replica_handles(js, name)) == replicas
            seen.append(len(acked))
    finally:
        stop.set()
        thread.join(timeout=120)
    assert not errors, errors
    assert seen == sorted(seen) and len(acked) > seen[0]  # publishing went on throughout
    last = js.stream_info(name).state.last_seq
    stored = dict(wait_replicas_equal(js, name, last))
    assert stored == acked  # every acked message, once, at its sequence
    js.delete_stream(name)
