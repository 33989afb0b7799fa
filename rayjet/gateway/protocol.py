"""The NATS client protocol as bytes in, operations out (and frames back): no I/O here.

A client sends ``CONNECT``, ``PUB``/``HPUB``, ``SUB``, ``UNSUB``, ``PING`` and ``PONG``
(verbs in any case, arguments split on spaces or tabs, lines ended by CRLF); the server
answers with ``INFO``, ``MSG``/``HMSG``, ``PING``/``PONG``, ``+OK`` and ``-ERR``.
:class:`Parser` turns whatever bytes arrived into complete operations and keeps the rest
for the next read; a line it cannot accept raises :class:`ProtocolError` carrying the
``-ERR`` text nats-server sends and whether the connection must close.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

# the nats-server release whose JetStream behaviour rayjet follows (clients gate features
# on the version INFO reports)
SERVER_VERSION = "2.15.1"
MAX_CONTROL_LINE = 4096  # nats-server's MAX_CONTROL_LINE_SIZE
DEFAULT_MAX_PAYLOAD = 1024 * 1024

CRLF = b"\r\n"
OK = b"+OK\r\n"
PING = b"PING\r\n"
PONG = b"PONG\r\n"

# operation kinds (the first item of each tuple the parser returns)
CONNECT = "CONNECT"
PUB = "PUB"  # (PUB, subject, reply or None, header block or None, payload)
SUB = "SUB"  # (SUB, subject, queue or None, sid)
UNSUB = "UNSUB"  # (UNSUB, sid, max msgs or None)
PING_OP = "PING"
PONG_OP = "PONG"

UNKNOWN_OP = "Unknown Protocol Operation"
MAX_PAYLOAD_VIOLATION = "Maximum Payload Violation"
MAX_CONTROL_LINE_EXCEEDED = "Maximum Control Line Exceeded"
PARSER_ERROR = "Parser Error"
INVALID_PUBLISH_SUBJECT = "Invalid Publish Subject"
INVALID_SUBJECT = "Invalid Subject"
AUTH_VIOLATION = "Authorization Violation"


@dataclass
class ProtocolError(Exception):
    """A line the server cannot parse: ``text`` goes back as ``-ERR 'text'`` and the
    connection closes (nats-server's rule for parse errors and oversized payloads)."""

    text: str
    ops: list = field(default_factory=list)  # the operations complete before the bad line

    def __str__(self) -> str:
        return self.text


def err(text: str) -> bytes:
    return b"-ERR '" + text.encode() + b"'\r\n"


def info(fields: dict[str, Any]) -> bytes:
    return b"INFO " + json.dumps(fields, separators=(",", ":")).encode() + CRLF


def msg(subject: str, sid: str, reply: str | None, payload: bytes) -> bytes:
    head = (f"MSG {subject} {sid} {reply} {len(payload)}\r\n" if reply
            else f"MSG {subject} {sid} {len(payload)}\r\n")
    return b"".join((head.encode(), payload, CRLF))


def hmsg(subject: str, sid: str, reply: str | None, hdr: bytes, payload: bytes) -> bytes:
    total = len(hdr) + len(payload)
    head = (f"HMSG {subject} {sid} {reply} {len(hdr)} {total}\r\n" if reply
            else f"HMSG {subject} {sid} {len(hdr)} {total}\r\n")
    return b"".join((head.encode(), hdr, payload, CRLF))


def frame(subject: str, sid: str, reply: str | None, hdr: bytes | None, payload: bytes) -> bytes:
    """MSG, or HMSG when there is a header block."""
    if hdr:
        return hmsg(subject, sid, reply, hdr, payload)
    return msg(subject, sid, reply, payload)


def status_header(code: int, description: str = "",
                  extra: list[tuple[str, str]] | None = None) -> bytes:
    """A status header block (``NATS/1.0 404 No Messages``) as nats-server sends them."""
    line = f"NATS/1.0 {code} {description}".rstrip() if description else f"NATS/1.0 {code}"
    rest = "".join(f"{k}: {v}\r\n" for k, v in extra or ())
    return f"{line}\r\n{rest}\r\n".encode()


def no_responders_header(subject: str) -> bytes:
    """The 503 a request nobody answered gets back, naming its subject as nats-server's."""
    return status_header(503, extra=[("Nats-Subject", subject)])


def _text(raw: bytes) -> str:
    # bytes that are not UTF-8 survive as surrogates: the server refuses such a subject
    # (see valid_subject) without losing its place in the stream of operations
    return raw.decode(errors="surrogateescape")


def valid_subject(subject: str, *, wildcards: bool) -> bool:
    """Tokens separated by dots, none empty, no whitespace; ``*`` and ``>`` only as whole
    tokens (``>`` last) and only where ``wildcards`` (subscriptions) allows them."""
    if not subject or not subject.isprintable() or " " in subject:
        return False
    if subject.isascii():
        if "*" not in subject and ">" not in subject:  # most subjects: no token to check
            return not (subject[0] == "." or subject[-1] == "." or ".." in subject)
    else:
        try:
            subject.encode()
        except UnicodeEncodeError:
            return False
    toks = subject.split(".")
    for i, tok in enumerate(toks):
        if not tok:
            return False
        if tok == ">":
            if not wildcards or i != len(toks) - 1:
                return False
        elif tok == "*":
            if not wildcards:
                return False
    return True


def _size(raw: bytes) -> int:
    if not raw.isdigit():
        raise ProtocolError(PARSER_ERROR)
    return int(raw)


class Parser:
    """Incremental parser: ``feed`` the bytes of each read, get back complete operations."""

    def __init__(self, max_payload: int = DEFAULT_MAX_PAYLOAD) -> None:
        self.max_payload = max_payload
        self._buf = bytearray()
        # a PUB/HPUB whose payload has not fully arrived: (subject, reply, hdr size, total)
        self._pending: tuple[str, str | None, int, int] | None = None

    def feed(self, data: bytes) -> list[tuple]:
        """The operations completed by ``data``. Raises ProtocolError at the first bad
        line, with the operations complete before it in ``ops`` (to be served before the
        connection closes)."""
        buf = self._buf
        buf += data
        ops: list[tuple] = []
        pos = 0
        try:
            while True:
                if self._pending is not None:
                    subject, reply, hsize, total = self._pending
                    end = pos + total
                    if len(buf) < end + 2:
                        break
                    if buf[end:end + 2] != CRLF:
                        raise ProtocolError(PARSER_ERROR)
                    hdr = bytes(buf[pos:pos + hsize]) if hsize else None
                    ops.append((PUB, subject, reply, hdr, bytes(buf[pos + hsize:end])))
                    pos = end + 2
                    self._pending = None
                    continue
                nl = buf.find(b"\n", pos)
                if nl < 0:
                    if len(buf) - pos > MAX_CONTROL_LINE:
                        raise ProtocolError(MAX_CONTROL_LINE_EXCEEDED)
                    break
                line = bytes(buf[pos:nl]).rstrip(b"\r")
                pos = nl + 1
                if len(line) > MAX_CONTROL_LINE:
                    raise ProtocolError(MAX_CONTROL_LINE_EXCEEDED)
                op = self._line(line)
                if op is not None:
                    ops.append(op)
        except ProtocolError as exc:
            exc.ops = ops
            raise
        finally:
            del buf[:pos]
        return ops

    def _line(self, line: bytes) -> tuple | None:
        verb, _, rest = line.lstrip().partition(b" ")
        if b"\t" in verb:
            verb, _, more = verb.partition(b"\t")
            rest = more + b" " + rest
        verb = verb.upper()
        args = rest.split()
        if verb == b"PUB":
            if len(args) not in (2, 3):
                raise ProtocolError(UNKNOWN_OP)
            self._start_payload(args[0], args[1] if len(args) == 3 else None, 0,
                                _size(args[-1]))
            return None
        if verb == b"HPUB":
            if len(args) not in (3, 4):
                raise ProtocolError(UNKNOWN_OP)
            hsize, total = _size(args[-2]), _size(args[-1])
            if hsize > total or hsize < len(b"NATS/1.0\r\n\r\n") and hsize != 0:
                raise ProtocolError(PARSER_ERROR)
            self._start_payload(args[0], args[1] if len(args) == 4 else None, hsize, total)
            return None
        if verb == b"SUB":
            if len(args) not in (2, 3):
                raise ProtocolError(UNKNOWN_OP)
            queue = _text(args[1]) if len(args) == 3 else None
            return (SUB, _text(args[0]), queue, _text(args[-1]))
        if verb == b"UNSUB":
            if len(args) not in (1, 2):
                raise ProtocolError(UNKNOWN_OP)
            return (UNSUB, _text(args[0]),
                    _size(args[1]) if len(args) == 2 else None)
        if verb == b"PING" and not args:
            return (PING_OP,)
        if verb == b"PONG" and not args:
            return (PONG_OP,)
        if verb == b"CONNECT":
            try:
                options = json.loads(rest)
            except ValueError:
                raise ProtocolError(PARSER_ERROR) from None
            if not isinstance(options, dict):
                raise ProtocolError(PARSER_ERROR)
            return (CONNECT, options)
        if not line.strip():
            return None  # an empty line is ignored, as nats-server does between ops
        raise ProtocolError(UNKNOWN_OP)

    def _start_payload(self, raw_subject: bytes, raw_reply: bytes | None, hsize: int,
                       total: int) -> None:
        if total > self.max_payload:
            raise ProtocolError(MAX_PAYLOAD_VIOLATION)
        reply = _text(raw_reply) if raw_reply else None
        self._pending = (_text(raw_subject), reply, hsize, total)
