"""A client routes a publish by the subject filters of the streams it has looked up: a new
subject one of them captures (a KV key, an order id) needs no catalogue call, and a route
that went stale (another client changed the streams) is looked up again."""

from __future__ import annotations

import rayjet
from rayjet import StorageType


def _counting_lookups(js, monkeypatch) -> list[str]:
    looked_up: list[str] = []
    real = js._meta_call

    def counting(method, *args, **kwargs):
        if method == "lookup_subject":
            looked_up.append(args[0])
        return real(method, *args, **kwargs)

    monkeypatch.setattr(js, "_meta_call", counting)
    return looked_up


def test_new_subjects_of_a_known_stream_need_no_lookup(js, stream_name, monkeypatch):
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"], storage=StorageType.MEMORY)
    try:
        looked_up = _counting_lookups(js, monkeypatch)
        acks = [js.publish(f"{stream_name}.key{i}", b"x") for i in range(30)]
        acks += js.publish_batch([(f"{stream_name}.batch{i}", b"y") for i in range(100)])
        assert [a.seq for a in acks] == list(range(1, 131))
        assert {a.stream for a in acks} == {stream_name}
        assert len(looked_up) <= 1  # the first subject, unless an earlier test taught it
        assert js.stream_info(stream_name).state.num_subjects == 130
    finally:
        js.delete_stream(stream_name)


def test_a_route_gone_stale_is_looked_up_again(js, stream_name):
    old, new = f"{stream_name}OLD", f"{stream_name}NEW"
    other = rayjet.connect(data_dir=js.data_dir)
    js.add_stream(name=old, subjects=[f"{stream_name}.>"], storage=StorageType.MEMORY)
    try:
        assert js.publish(f"{stream_name}.first", b"1").stream == old
        # another client moves the subjects to a new stream: this one still routes them
        # to the old stream, which refuses them as not its own
        other.update_stream(name=old, subjects=[f"{stream_name}moved.>"],
                            storage=StorageType.MEMORY)
        other.add_stream(name=new, subjects=[f"{stream_name}.>"], storage=StorageType.MEMORY)
        batch = js.publish_batch([(f"{stream_name}.b{i}", b"b") for i in range(80)])
        assert [(a.stream, a.seq) for a in batch] == [(new, i) for i in range(1, 81)]
        assert js.publish(f"{stream_name}.first", b"2").stream == new
        assert js.publish(f"{stream_name}.another", b"3").stream == new
        assert js.stream_info(new).state.messages == 82
        assert js.stream_info(old).state.messages == 1  # nothing stored where it is not due
    finally:
        for name in (old, new):
            js.delete_stream(name)
        other.close()
