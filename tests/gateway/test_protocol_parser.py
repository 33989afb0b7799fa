"""The NATS protocol parser: operations out of arbitrary chunks, nats-server's errors."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayjet.gateway import protocol as P

subjects = st.lists(st.text("abcXYZ019_-", min_size=1, max_size=6), min_size=1,
                    max_size=4).map(".".join)
payloads = st.binary(max_size=300)


@st.composite
def operations(draw):
    kind = draw(st.sampled_from(["PUB", "HPUB", "SUB", "UNSUB", "PING", "PONG"]))
    if kind == "PUB":
        subject, data = draw(subjects), draw(payloads)
        reply = draw(st.none() | subjects)
        wire = f"PUB {subject} {reply + ' ' if reply else ''}{len(data)}\r\n".encode() \
            + data + b"\r\n"
        return wire, (P.PUB, subject, reply, None, data)
    if kind == "HPUB":
        subject, data = draw(subjects), draw(payloads)
        reply = draw(st.none() | subjects)
        hdr = b"NATS/1.0\r\n" + draw(st.sampled_from([b"", b"A: b\r\n", b"X-Y: 1 2\r\n"])) \
            + b"\r\n"
        wire = (f"HPUB {subject} {reply + ' ' if reply else ''}{len(hdr)} "
                f"{len(hdr) + len(data)}\r\n").encode() + hdr + data + b"\r\n"
        return wire, (P.PUB, subject, reply, hdr, data)
    if kind == "SUB":
        subject, queue = draw(subjects), draw(st.none() | subjects)
        sid = str(draw(st.integers(1, 10**6)))
        return (f"SUB {subject} {queue + ' ' if queue else ''}{sid}\r\n".encode(),
                (P.SUB, subject, queue, sid))
    if kind == "UNSUB":
        sid, n = str(draw(st.integers(1, 999))), draw(st.none() | st.integers(1, 99))
        return (f"UNSUB {sid}{' ' + str(n) if n else ''}\r\n".encode(), (P.UNSUB, sid, n))
    return f"{kind}\r\n".encode(), (kind,)


@settings(deadline=None, max_examples=200)
@given(st.lists(operations(), min_size=1, max_size=12), st.data())
def test_any_split_of_the_bytes_gives_the_same_operations(ops, data):
    wire = b"".join(w for w, _ in ops)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=8)))
    parser = P.Parser()
    got = []
    start = 0
    for cut in [*cuts, len(wire)]:
        got += parser.feed(wire[start:cut])
        start = cut
    assert got == [op for _, op in ops]


@settings(deadline=None, max_examples=200)
@given(st.binary(max_size=200))
def test_garbage_raises_a_protocol_error_or_parses(junk):
    parser = P.Parser(max_payload=1024)
    try:
        ops = parser.feed(junk)
    except P.ProtocolError as exc:
        assert exc.text in (P.UNKNOWN_OP, P.PARSER_ERROR, P.MAX_PAYLOAD_VIOLATION,
                            P.MAX_CONTROL_LINE_EXCEEDED)
        return
    assert all(op[0] in (P.PUB, P.SUB, P.UNSUB, P.PING_OP, P.PONG_OP, P.CONNECT) for op in ops)


def test_verbs_are_case_insensitive_and_tabs_separate():
    ops = P.Parser().feed(b"pub\ta.b\t2\r\nhi\r\nping\r\nSub a.* 1\r\n")
    assert ops == [(P.PUB, "a.b", None, None, b"hi"), (P.PING_OP,), (P.SUB, "a.*", None, "1")]


def test_oversized_payload_is_refused_before_it_arrives():
    with pytest.raises(P.ProtocolError) as err:
        P.Parser(max_payload=10).feed(b"PUB a 11\r\n")
    assert err.value.text == P.MAX_PAYLOAD_VIOLATION


def test_operations_before_a_bad_line_are_kept():
    with pytest.raises(P.ProtocolError) as err:
        P.Parser().feed(b"PING\r\nPUB a 1\r\nx\r\nBOGUS\r\n")
    assert err.value.text == P.UNKNOWN_OP
    assert err.value.ops == [(P.PING_OP,), (P.PUB, "a", None, None, b"x")]


def test_a_control_line_too_long_is_refused():
    with pytest.raises(P.ProtocolError) as err:
        P.Parser().feed(b"PUB " + b"a" * (P.MAX_CONTROL_LINE + 10))
    assert err.value.text == P.MAX_CONTROL_LINE_EXCEEDED


def test_payload_must_end_with_crlf_and_sizes_must_be_numbers():
    with pytest.raises(P.ProtocolError):
        P.Parser().feed(b"PUB a 2\r\nhiXX")
    with pytest.raises(P.ProtocolError):
        P.Parser().feed(b"PUB a -1\r\n")
    with pytest.raises(P.ProtocolError):
        P.Parser().feed(b"HPUB a 20 10\r\n")


def test_connect_needs_a_json_object():
    assert P.Parser().feed(b'CONNECT {"verbose":true}\r\n') == [(P.CONNECT, {"verbose": True})]
    with pytest.raises(P.ProtocolError):
        P.Parser().feed(b"CONNECT [1]\r\n")


@pytest.mark.parametrize("subject,wild,ok", [
    ("a.b", False, True), ("a.*", False, False), ("a.*", True, True), ("a.>", True, True),
    ("a.>.b", True, False), ("a..b", True, False), ("", True, False), (".a", False, False),
    ("a b", False, False), ("a\udcff", False, False), ("*x.y", False, True),
])
def test_subject_validity(subject, wild, ok):
    assert P.valid_subject(subject, wildcards=wild) is ok


def _token_rule(subject: str, wildcards: bool) -> bool:
    """The rule spelled out: printable, no space, UTF-8, no empty token, '*' and '>' only
    as whole tokens where wildcards are allowed ('>' last)."""
    if not subject or not subject.isprintable() or " " in subject:
        return False
    try:
        subject.encode()
    except UnicodeEncodeError:
        return False
    toks = subject.split(".")
    if any(not t for t in toks):
        return False
    if not wildcards and any(t in ("*", ">") for t in toks):
        return False
    return ">" not in toks[:-1]


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab.*> \t\u00e9\udcff")), max_size=8),
       st.booleans())
def test_subject_validity_follows_the_token_rule(subject, wild):
    assert P.valid_subject(subject, wildcards=wild) is _token_rule(subject, wild)


def test_frames():
    assert P.msg("a", "1", None, b"hi") == b"MSG a 1 2\r\nhi\r\n"
    assert P.msg("a", "1", "r", b"") == b"MSG a 1 r 0\r\n\r\n"
    hdr = P.status_header(404, "No Messages")
    assert hdr == b"NATS/1.0 404 No Messages\r\n\r\n"
    assert P.hmsg("a", "2", None, hdr, b"x") == \
        b"HMSG a 2 %d %d\r\n" % (len(hdr), len(hdr) + 1) + hdr + b"x\r\n"
    assert P.status_header(408, "Request Timeout", [("Nats-Pending-Messages", "3")]) == \
        b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 3\r\n\r\n"
