"""js.get_msgs: batched and multi_last gets (ADR-31) in one call to a replica."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rayjet.errors import BadRequestError, NotFoundError
from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401


def test_get_msgs_batches_and_last_per_subject(js, stream_name,  # noqa: F811
                                               drop_new_streams):  # noqa: F811
    s = stream_name
    js.add_stream(name=s, subjects=[f"{s}.>"], allow_direct=True)
    js.publish_batch([(f"{s}.{'ab'[i % 2]}", b"m%d" % i) for i in range(6)])
    js.delete_msg(s, 2)
    calls = []
    real = js._stream_call

    def counting(name, method, *args, **kwargs):
        calls.append(method)
        return real(name, method, *args, **kwargs)

    js._stream_call = counting
    try:
        got = js.get_msgs(s, 1, batch=3)
    finally:
        js._stream_call = real
    assert calls == ["get_msgs"]  # one call for the whole batch
    assert [(m.seq, m.data) for m in got] == [(1, b"m0"), (3, b"m2"), (4, b"m3")]
    assert (got.num_pending, got.last_seq) == (2, 4)

    got = js.get_msgs(s, batch=5, next_by_subject=f"{s}.a")
    assert [m.seq for m in got] == [1, 3, 5] and got.num_pending == 0
    got = js.get_msgs(s, start_time=datetime(2000, 1, 1, tzinfo=UTC), batch=2)
    assert [m.seq for m in got] == [1, 3]

    last = js.get_msgs(s, multi_last=[f"{s}.>"])
    assert [(m.subject, m.seq) for m in last] == [(f"{s}.a", 5), (f"{s}.b", 6)]
    assert last.up_to_seq == 6
    before = js.get_msgs(s, multi_last=[f"{s}.a", f"{s}.b"], up_to_seq=4)
    assert [m.seq for m in before] == [3, 4] and before.up_to_seq == 4
    assert len(js.get_msgs(s, multi_last=[f"{s}.>"], batch=1)) == 1

    with pytest.raises(NotFoundError):
        js.get_msgs(s, multi_last=[f"{s}.zzz"])
    with pytest.raises(NotFoundError):
        js.get_msgs(s, 100, batch=2)
    with pytest.raises(BadRequestError):
        js.get_msgs(s)  # nothing to start from
    with pytest.raises(BadRequestError):
        js.get_msgs(s, multi_last=[f"{s}.>"], up_to_seq=3,
                    up_to_time=datetime(2100, 1, 1, tzinfo=UTC))
