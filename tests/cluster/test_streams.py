"""Streams on real Ray actors: management, publishing, reads, and bad input."""

from __future__ import annotations

import contextlib

import pytest

from rayjet import DiscardPolicy, StorageType, StreamConfig
from rayjet.errors import (
    BadRequestError,
    ExpectedStreamMismatchError,
    InvalidConfigError,
    InvalidSubjectError,
    MessageTooBigError,
    NotFoundError,
    StoreLimitError,
    StreamNameInUseError,
    StreamNotFoundError,
    SubjectsOverlapError,
    WrongLastMsgIdError,
    WrongLastSequenceError,
)


@pytest.fixture
def stream(js, stream_name):
    info = js.add_stream(name=stream_name, subjects=[f"{stream_name}.*"],
                         storage=StorageType.MEMORY)
    yield info.config
    js.delete_stream(stream_name)


def test_publish_get_info_purge_delete(js, stream):
    s = stream.name
    acks = [js.publish(f"{s}.a", b"one"), js.publish(f"{s}.b", b"two"),
            js.publish(f"{s}.a", b"three", headers={"k": "v"})]
    assert [a.seq for a in acks] == [1, 2, 3] and all(a.stream == s for a in acks)
    info = js.stream_info(s)
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (3, 1, 3)
    assert info.state.num_subjects == 2 and info.created is not None
    # the record size formula of the store, summed: 30 + subject + data (+ 4 + headers)
    hdr = len(b"NATS/1.0\r\nk: v\r\n\r\n")
    subj = len(f"{s}.a")
    assert info.state.bytes == (30 + subj + 3) + (30 + subj + 3) + (30 + subj + 5 + 4 + hdr)
    last = js.get_msg(s, last_by_subject=f"{s}.a")
    assert (last.seq, last.data, last.headers) == (3, b"three", {"k": "v"})
    assert js.get_msg(s, 2).data == b"two"
    assert js.delete_msg(s, 2) is True
    with pytest.raises(NotFoundError) as info_err:
        js.get_msg(s, 2)
    assert info_err.value.err_code == 10037
    assert js.stream_info(s).state.num_deleted == 1
    assert js.purge_stream(s, subject=f"{s}.a") == 2
    assert js.stream_info(s).state.messages == 0
    assert js.publish(f"{s}.a", b"four").seq == 4  # sequences never go back


def test_names_info_list_and_lookup(js, stream):
    assert stream.name in js.stream_names()
    assert js.stream_names(subject=f"{stream.name}.x") == [stream.name]
    assert js.find_stream_name_by_subject(f"{stream.name}.x") == stream.name
    assert any(i.config.name == stream.name for i in js.streams_info())


def test_infos_of_many_streams_at_once_match_each_ones_info(js, stream_name):
    names = [f"{stream_name}_{i}" for i in range(5)]
    for i, name in enumerate(names):
        created = js.add_stream(name=name, subjects=[f"{name}.*"], storage=StorageType.MEMORY)
        assert created.state.messages == 0 and created.config.name == name
        js.publish_batch([(f"{name}.x", b"m")] * i)
    # adding the same stream again answers with its state, not an empty one
    assert js.add_stream(name=names[3], subjects=[f"{names[3]}.*"],
                         storage=StorageType.MEMORY).state.messages == 3
    try:
        infos = js.stream_infos([*names, f"{stream_name}_gone"])
        assert isinstance(infos[f"{stream_name}_gone"], StreamNotFoundError)
        assert [infos[n].state.messages for n in names] == [0, 1, 2, 3, 4]
        for name in names:
            one = js.stream_info(name)
            assert (one.config, one.state.last_seq) == (infos[name].config,
                                                        infos[name].state.last_seq)
        for bad in ("one_name", [names[0], 7], [""], 7):
            with pytest.raises(BadRequestError):
                js.stream_infos(bad)
        listed = {i.config.name: i.state.messages for i in js.streams_info()}
        assert {n: listed[n] for n in names} == {n: i for i, n in enumerate(names)}
    finally:
        for name in names:
            js.delete_stream(name)


def test_publish_follows_subjects_to_a_new_stream(js, stream_name):
    import rayjet

    other = rayjet.connect(data_dir=js.data_dir)  # a second client in the same cluster
    old, new = stream_name, f"{stream_name}_NEW"
    js.add_stream(name=old, subjects=[f"{old}.*"], storage=StorageType.MEMORY)
    assert js.publish(f"{old}.a", b"1").stream == old  # js now routes the subject to old
    other.delete_stream(old)
    other.add_stream(name=new, subjects=[f"{old}.*"], storage=StorageType.MEMORY)
    assert js.publish(f"{old}.a", b"2").stream == new
    assert [a.stream for a in js.publish_batch([(f"{old}.b", b"3")])] == [new]
    other.delete_stream(new)
    with pytest.raises(NotFoundError):
        js.publish(f"{old}.a", b"4")  # nothing captures it any more


def test_stream_errors_carry_nats_codes(js, stream):
    with pytest.raises(StreamNotFoundError) as err:
        js.stream_info("NOSUCHSTREAM")
    assert err.value.err_code == 10059
    with pytest.raises(StreamNameInUseError) as err:
        js.add_stream(name=stream.name, subjects=[f"{stream.name}.other"])
    assert err.value.err_code == 10058
    with pytest.raises(SubjectsOverlapError) as err:
        js.add_stream(name=f"{stream.name}X", subjects=[f"{stream.name}.>"])
    assert err.value.err_code == 10065
    with pytest.raises(InvalidConfigError) as err:
        js.add_stream(name="bad.name", subjects=["bad"])
    assert err.value.err_code == 10052
    # adding the identical stream again is fine (idempotent, as in NATS)
    assert js.add_stream(stream).config.name == stream.name


def test_publish_refuses_bad_input_and_stores_nothing(js, stream):
    s = stream.name
    with pytest.raises(InvalidSubjectError):
        js.publish(f"{s}..a", b"x")
    with pytest.raises(InvalidSubjectError):
        js.publish(f"{s}.*", b"x")
    with pytest.raises(BadRequestError):
        js.publish(f"{s}.a", 12345)
    with pytest.raises(BadRequestError):
        js.publish(f"{s}.a", b"x", headers={"bad key": "v"})
    with pytest.raises(NotFoundError):
        js.publish("NOSTREAM.captures.this", b"x")
    assert js.stream_info(s).state.messages == 0


def test_wildcard_tokens_are_stored_literally_only_when_asked(js, stream_name):
    # as nats-server stores a client's publish to 'a.*' (a KV key "x.*" with validation off)
    s = stream_name
    js.add_stream(name=s, subjects=[f"{s}.>"], storage=StorageType.MEMORY,
                  allow_rollup_hdrs=True)
    with pytest.raises(InvalidSubjectError):
        js.publish_batch([(f"{s}.x.*", b"no")])
    acks = js.publish_batch([(f"{s}.x.*", b"1"), (f"{s}.x.>", b"2"), (f"{s}.x.a", b"3"),
                             (f"{s}.x.*", b"4", {"Nats-Rollup": "sub"})],
                            literal_wildcards=True)
    assert [a.seq for a in acks] == [1, 2, 3, 4]
    assert js.get_msg(s, 2).subject == f"{s}.x.>"
    # the rollup on 'x.*' purged what 'x.*' matches ('x.*' and 'x.a'), keeping itself
    assert js.get_last_msg(s, f"{s}.x.>").seq == 4  # as a filter, 'x.>' matches them all
    assert [js.get_msg(s, q).data for q in (2, 4)] == [b"2", b"4"]
    assert js.stream_info(s).state.messages == 2
    with pytest.raises(InvalidSubjectError):
        js.publish_batch([(f"{s}.>.x", b"no")], literal_wildcards=True)


@pytest.mark.parametrize("replicas", [1, 3])
def test_limits_and_expected_headers(js, stream_name, replicas):
    s = stream_name
    js.add_stream(name=s, subjects=[f"{s}.*"], max_msgs=2, discard=DiscardPolicy.NEW,
                  max_msg_size=64, storage=StorageType.MEMORY, num_replicas=replicas)
    try:
        with pytest.raises(MessageTooBigError) as err:
            js.publish(f"{s}.a", b"x" * 65)  # headers count too, as in NATS
        assert err.value.err_code == 10054
        js.publish(f"{s}.a", b"1")
        with pytest.raises(WrongLastSequenceError) as err:
            js.publish(f"{s}.a", b"2", headers={"Nats-Expected-Last-Sequence": "5"})
        assert err.value.err_code == 10071
        js.publish(f"{s}.a", b"2", headers={"Nats-Expected-Last-Sequence": "1"})
        with pytest.raises(StoreLimitError) as err:
            js.publish(f"{s}.a", b"3")
        assert err.value.err_code == 10077
        assert js.stream_info(s).state.messages == 2
    finally:
        js.delete_stream(s)


@pytest.mark.parametrize("replicas", [1, 3])
def test_dedup_and_expected_stream(js, stream_name, replicas):
    s = stream_name
    js.add_stream(name=s, subjects=[f"{s}.*"], num_replicas=replicas,
                  storage=StorageType.FILE)
    try:
        _check_dedup_and_expected_stream(js, s)
    finally:
        js.delete_stream(s)


def _check_dedup_and_expected_stream(js, s):
    first = js.publish(f"{s}.a", b"x", headers={"Nats-Msg-Id": "abc"})
    again = js.publish(f"{s}.a", b"x", headers={"Nats-Msg-Id": "abc"})
    assert (again.seq, again.duplicate) == (first.seq, True)
    assert js.stream_info(s).state.messages == 1
    with pytest.raises(ExpectedStreamMismatchError) as err:
        js.publish(f"{s}.a", b"y", stream="OTHER")
    assert err.value.err_code == 10060
    assert js.publish(f"{s}.a", b"y", stream=s).seq == 2
    with pytest.raises(WrongLastMsgIdError) as err:
        js.publish(f"{s}.a", b"z", headers={"Nats-Expected-Last-Msg-Id": "nope"})
    assert err.value.err_code == 10070


def test_publish_batch_and_async_keep_order_and_report_each_message(js, stream):
    s = stream.name
    answers = js.publish_batch([(f"{s}.a", b"%d" % i) for i in range(500)]
                               + [("NOSTREAM.here", b"lost?")] + [(f"{s}.b", b"end")])
    assert [a.seq for a in answers[:500]] == list(range(1, 501))
    assert isinstance(answers[500], NotFoundError)  # refused, and said so
    assert answers[501].seq == 501
    futures = [js.publish_async(f"{s}.c", b"%d" % i) for i in range(300)]
    js.publish_async_completed(timeout=30)
    assert [f.result().seq for f in futures] == list(range(502, 802))
    msgs = [js.get_msg(s, seq).data for seq in (1, 250, 500)]
    assert msgs == [b"0", b"249", b"499"]


def test_atomic_batch_is_all_or_nothing(js, stream_name):
    s = stream_name
    js.add_stream(name=s, subjects=[f"{s}.*"], allow_atomic_publish=True,
                  storage=StorageType.MEMORY)
    try:
        acks = js.publish_batch([(f"{s}.a", b"1"), (f"{s}.b", b"2")], atomic=True)
        assert [a.seq for a in acks] == [1, 2]
        with pytest.raises(Exception) as err:
            js.publish_batch([(f"{s}.a", b"3"),
                              (f"{s}.a", b"4", {"Nats-Expected-Last-Sequence": "99"})],
                             atomic=True)
        assert getattr(err.value, "err_code", None) is not None
        assert js.stream_info(s).state.messages == 2
    finally:
        js.delete_stream(s)


def test_update_stream_checks_editable_fields(js, stream):
    updated = js.update_stream(StreamConfig(name=stream.name, subjects=[f"{stream.name}.*"],
                                            storage=StorageType.MEMORY, max_msgs=10,
                                            description="now limited"))
    assert updated.config.max_msgs == 10 and updated.config.description == "now limited"
    with pytest.raises(InvalidConfigError):
        js.update_stream(StreamConfig(name=stream.name, subjects=[f"{stream.name}.*"],
                                      storage=StorageType.FILE))
    with pytest.raises(StreamNotFoundError):
        js.update_stream(StreamConfig(name="NOSUCH", subjects=["nosuch"]))


def test_watching_the_catalogue_answers_changes_and_refuses_bad_arguments(js, stream_name):
    import asyncio

    async def run():
        applied, configs = await js.watch_stream_configs(-1, 0.0, linearizable=True)
        assert configs is not None
        same = await js.watch_stream_configs(applied, 0.05)
        assert same == (applied, None)  # nothing changed within the timeout
        waiting = asyncio.ensure_future(js.watch_stream_configs(applied, 20.0))
        await asyncio.sleep(0)
        await asyncio.to_thread(js.add_stream, name=stream_name,
                                subjects=[f"{stream_name}.>"])
        moved, now = await asyncio.wait_for(waiting, 20)
        assert moved > applied and stream_name in {c.name for c in now}
        for since, timeout in (("1", 1.0), (-2, 1.0), (0, -1), (0, "x")):
            with pytest.raises(BadRequestError):
                await js.watch_stream_configs(since, timeout)

    asyncio.run(run())
    js.delete_stream(stream_name)


def test_watching_the_catalogues_changes_answers_only_what_changed(js, stream_name):
    import asyncio

    made, gone = f"{stream_name}M", f"{stream_name}G"
    js.add_stream(name=gone, subjects=[f"{gone}.>"])

    async def run():
        applied, every, removed = await js.watch_stream_changes(-1, 0.0)
        assert removed is None and gone in {c.name for c in every}  # all, to start from
        assert await js.watch_stream_changes(applied, 0.05) == (applied, None, [])
        await asyncio.to_thread(js.add_stream, name=made, subjects=[f"{made}.>"])
        await asyncio.to_thread(js.delete_stream, gone)
        seen: dict[str, bool] = {}
        since = applied
        while len(seen) < 2:  # one answer per change, or both in one
            since, configs, removed = await asyncio.wait_for(
                js.watch_stream_changes(since, 20.0), 30)
            assert removed is not None  # what changed, not every stream
            seen.update({c.name: True for c in configs if c.name in (made, gone)})
            seen.update({name: False for name in removed if name in (made, gone)})
        assert seen == {made: True, gone: False}
        with pytest.raises(BadRequestError):
            await js.watch_stream_changes(-2, 1.0)

    asyncio.run(run())
    js.delete_stream(made)


def test_a_listing_follows_what_another_client_changes(js, stream_name):
    """Listings keep a copy of the catalogue and the infos they built: what another
    client creates, changes, deletes, publishes or adds a consumer to shows in the very
    next listing."""
    import rayjet

    other = rayjet.connect(data_dir=js.data_dir)
    a, b, c = (f"{stream_name}{x}" for x in "ABC")
    try:
        js.add_stream(name=a, subjects=[f"{a}.*"])
        js.add_stream(name=b, subjects=[f"{b}.*"])
        first = js.stream_infos([a, b])
        assert [first[n].state.messages for n in (a, b)] == [0, 0]
        other.add_stream(name=c, subjects=[f"{c}.*"])
        other.delete_stream(b)
        other.publish(f"{a}.x", b"1")
        other.update_stream(name=a, subjects=[f"{a}.*"], max_msgs=10)
        other.add_consumer(a, durable_name="D")
        names = js.stream_names()
        assert c in names and b not in names and a in names
        assert js.stream_names(f"{c}.q") == [c]
        infos = js.stream_infos()
        assert b not in infos and infos[c].state.messages == 0
        assert infos[a].state.messages == 1 and infos[a].config.max_msgs == 10
        assert infos[a].state.consumer_count == 1
        assert infos[a].timestamp > first[a].timestamp
        assert {cfg.name: cfg.max_msgs for cfg in js.stream_configs()}[a] == 10
        other.publish(f"{a}.x", b"2")
        assert js.stream_infos([a])[a].state.messages == 2
        assert first[a].state.messages == 0  # what a caller got stays as it was
    finally:
        for name in (a, c):
            with contextlib.suppress(Exception):
                js.delete_stream(name)
        other.close()


def test_the_meta_answers_what_changed_since_an_applied_index(js, stream_name):
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.*"])
    first = js._meta_call("streams_since", -1)
    assert stream_name in {a["config"]["name"] for a in first["streams"]}
    new = f"{stream_name}N"
    js.add_stream(name=new, subjects=[f"{new}.*"])
    try:
        delta = js._meta_call("streams_since", first["applied"])
        assert delta["applied"] > first["applied"] and "streams" not in delta
        assert new in {a["config"]["name"] for a in delta["changed"]}
        assert stream_name not in {a["config"]["name"] for a in delta["changed"]}
        js.add_consumer(stream_name, durable_name="D")
        changed = js._meta_call("streams_since", delta["applied"])
        assert [(a["config"]["name"], a["consumers"]) for a in changed["changed"]] == [
            (stream_name, ["D"])]
        js.delete_stream(new)
        gone = js._meta_call("streams_since", changed["applied"])
        assert gone["removed"] == [new] and gone["changed"] == []
        same = js._meta_call("streams_since", gone["applied"])
        assert (same["changed"], same["removed"]) == ([], [])
        assert same["applied"] >= gone["applied"]
        # a copy from another history (ahead of this catalogue): every stream, reset
        ahead = js._meta_call("streams_since", gone["applied"] + 1_000_000)
        assert ahead["reset"] and stream_name in {a["config"]["name"]
                                                  for a in ahead["streams"]}
    finally:
        with contextlib.suppress(Exception):
            js.delete_stream(new)
        js.delete_stream(stream_name)


def test_listing_calls_refuse_bad_input(js, stream_name):
    for bad in ("7", None, 1.5, True):
        with pytest.raises(BadRequestError):
            js._meta_call("streams_since", bad)
    for bad in ("one_name", [7], [""], 7):
        with pytest.raises(BadRequestError):
            js.consumer_infos(stream_name, bad)


@pytest.mark.parametrize("lost", ["replica died", "leadership lost"])
def test_a_delete_whose_answer_was_lost_reports_the_deletion(js, stream_name, monkeypatch,
                                                              lost):
    """The delete ran but its answer did not come back (the connection dropped, or the meta
    leader stepped down after committing it): asking again finds the stream gone, which
    answers for the first attempt, not "stream not found"."""
    from rayjet.errors import NotLeaderError, ServiceUnavailableError

    js.add_stream(name=stream_name, subjects=[f"{stream_name}.*"], storage=StorageType.MEMORY)
    real, attempts = js._meta.call, []

    def answer_lost_once(method, *args, **kwargs):
        if method == "delete_stream" and not attempts:
            attempts.append(real(method, *args, **kwargs))  # it ran
            if lost == "replica died":
                raise ServiceUnavailableError("meta: replica r0 died during the call; the "
                                              "outcome is unknown")
            raise NotLeaderError("the outcome is unknown", outcome_unknown=True)
        return real(method, *args, **kwargs)

    monkeypatch.setattr(js._meta, "call", answer_lost_once)
    assert js.delete_stream(stream_name) is True
    assert attempts == [True]
    assert stream_name not in js.stream_names()
    with pytest.raises(StreamNotFoundError):  # a stream that is not there, asked once
        js.delete_stream(stream_name)
