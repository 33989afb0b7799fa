"""A blocking NATS client for short jobs: one socket speaking the client protocol
(CONNECT, one wildcard inbox subscription, pipelined requests), so a command costs a few
requests instead of starting a Ray driver. :mod:`rayjet.remote.jetstream` builds the
JetStream API on it.

:func:`find_gateway` looks for a gateway to use: ``$RAYJET_GATEWAY`` (a ``nats://`` URL,
credentials as ``nats://token@host:port`` or ``nats://user:pass@host:port``; ``off`` never
uses one), else a rayjet gateway on ``127.0.0.1:4222``. A socket that refuses, or a server
that is not a rayjet gateway, means "none": the caller takes the Ray path. A gateway that
serves TLS (``tls://`` URLs, or an INFO asking for it) is reached over TLS, its certificate
checked against ``$RAYJET_GATEWAY_CA`` (a PEM file of CA certificates) or the system's
trust store; one that is not trusted is an error naming that setting, as refused
credentials are. A gateway that asks for client certificates (mutual TLS) gets
``$RAYJET_GATEWAY_CERT`` and ``$RAYJET_GATEWAY_KEY``; without them, or when it refuses
them, the command fails naming those settings rather than taking the Ray path.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import socket
import ssl
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from rayjet.api.headers import decode_headers, encode_headers
from rayjet.errors import (
    APIError,
    AuthorizationError,
    BadRequestError,
    ConsumerNotFoundError,
    PermissionViolationError,
    ServiceUnavailableError,
)
from rayjet.errors import TimeoutError as AnswerTimeout

GATEWAY_ENV = "RAYJET_GATEWAY"
CA_ENV = "RAYJET_GATEWAY_CA"  # CA certificates (PEM) to check a TLS gateway's certificate
# this command's certificate and key (PEM), for a gateway that asks for one (mutual TLS)
CERT_ENV, KEY_ENV = "RAYJET_GATEWAY_CERT", "RAYJET_GATEWAY_KEY"
DEFAULT_URL = "nats://127.0.0.1:4222"
PROBE_TIMEOUT = 0.5  # seconds to reach a gateway's port before taking the Ray path
# Something listens there: seconds for its INFO and PONG (a busy gateway answers late, and
# taking the Ray path then would fail where Ray is not reachable)
GREETING_TIMEOUT = 5.0
TLS_HANDSHAKE_TIMEOUT = 5.0


class NoGateway(Exception):
    """Nothing usable listens there (refused, not a rayjet gateway, or TLS only)."""


@dataclass
class Reply:
    data: bytes
    headers: dict[str, str]
    status: int = 0  # the status of a status message (503 no responders, 404 ...), else 0
    description: str = ""


def _status(block: bytes) -> tuple[int, str, dict[str, str]]:
    first, _, _rest = block.partition(b"\r\n")
    parts = first.decode("latin-1").split(None, 2)  # NATS/1.0 [code [description]]
    code = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    return code, parts[2] if len(parts) > 2 else "", decode_headers(block)


class Requester:
    """One connection to a NATS server; requests are answered on ``<inbox>.<n>``."""

    def __init__(self, url: str, timeout: float = 10.0, *, name: str = "rayjet-cli",
                 credentials: dict[str, Any] | None = None, nkey_seed: str | None = None,
                 any_server: bool = False) -> None:
        parts = urlsplit(url if "://" in url else f"nats://{url}")
        try:
            port = parts.port or 4222
        except ValueError:
            port = None
        if port is None or not parts.hostname and "@" in parts.netloc:
            raise BadRequestError(f"invalid gateway URL {url!r}: use nats://host:port "
                                  "(credentials as nats://token@host:port)")
        if parts.scheme not in ("nats", "tls", ""):
            raise NoGateway(f"{parts.scheme}:// gateways are not used by the CLI")
        self.timeout = timeout
        try:
            self.sock = socket.create_connection((parts.hostname or "127.0.0.1",
                                                  port), PROBE_TIMEOUT)
        except OSError as exc:
            raise NoGateway(str(exc)) from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        try:
            self.sock.settimeout(GREETING_TIMEOUT)
            line = self._line()
            info = json.loads(line[5:]) if line.startswith(b"INFO ") else {}
            if info.get("go") != "rayjet" and not any_server:
                raise NoGateway("not a rayjet gateway")
            if info.get("tls_required") or parts.scheme == "tls":
                # as NATS clients do: the handshake follows the plain-text INFO
                self.sock = _tls(self.sock, parts.hostname or "127.0.0.1", url,
                                 bool(info.get("tls_verify")))
            self.max_payload = int(info.get("max_payload") or 1024 * 1024)
            connect: dict[str, Any] = {"verbose": False, "pedantic": False, "headers": True,
                                       "no_responders": True, "protocol": 1,
                                       "name": name, "lang": "python",
                                       "tls_required": isinstance(self.sock, ssl.SSLSocket)}
            if parts.username and parts.password is not None:
                connect.update(user=unquote(parts.username), **{"pass": unquote(parts.password)})
            elif parts.username:
                connect["auth_token"] = unquote(parts.username)
            connect.update(credentials or {})
            if nkey_seed is not None:
                from rayjet.auth.nkeys import KeyPair

                key = KeyPair(nkey_seed)
                connect["nkey"] = key.public_key
                connect["sig"] = key.sign(str(info.get("nonce", "")).encode())
            self.inbox = "_INBOX." + secrets.token_hex(11)
            self.sock.sendall(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n"
                              + f"SUB {self.inbox}.* 1\r\n".encode())
            while True:
                try:
                    line = self._line()
                except ServiceUnavailableError:
                    if isinstance(self.sock, ssl.SSLSocket):  # no PONG: it ended the session
                        raise ssl.SSLError("closed before answering (a client certificate it "
                                           "does not accept?)") from None
                    raise
                if line == b"PONG":
                    break
                if line.startswith(b"-ERR") and b"Authorization Violation" in line:
                    raise AuthorizationError(
                        f"the gateway at {url} refused these credentials",
                        hint=f"give a user of its configuration (for the CLI: "
                             f"{GATEWAY_ENV}=nats://user:pass@host:port or token@), or "
                             f"{GATEWAY_ENV}=off for the Ray path")
                if line.startswith(b"-ERR"):
                    # a gateway that wants other credentials: an error, not a fallback
                    raise ServiceUnavailableError(
                        f"the gateway at {url} refused the connection: {line[5:].decode()}",
                        hint=f"set {GATEWAY_ENV}=nats://token@host:port (or user:pass@), "
                             f"or {GATEWAY_ENV}=off for the Ray path")
        except ssl.SSLError as exc:  # after the handshake: it refused our certificate
            self.sock.close()
            why = getattr(exc, "reason", None) or exc.args[-1]
            raise ServiceUnavailableError(
                f"the gateway at {url} ended the TLS session: {why}",
                hint=f"{CERT_ENV}/{KEY_ENV}: a client certificate its CA signed, or "
                     f"{GATEWAY_ENV}=off for the Ray path") from None
        except (OSError, ValueError) as exc:
            self.sock.close()
            raise NoGateway(str(exc)) from None
        except BaseException:
            self.sock.close()
            raise
        self.sock.settimeout(None)
        self._ids = itertools.count(1)

    # -- frames ------------------------------------------------------------------------------
    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ServiceUnavailableError("the gateway closed the connection")
        self.buf += chunk

    def _line(self) -> bytes:
        while (end := self.buf.find(b"\r\n")) < 0:
            self._fill()
        line = bytes(self.buf[:end])
        del self.buf[:end + 2]
        return line

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n + 2]
        return out

    def _next_message(self, deadline: float) -> tuple[str, str, str, bytes | None, bytes]:
        """The next MSG/HMSG (sid, subject, reply, header block, payload); PINGs answered
        on the way."""
        while True:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                line = self._line()
            except TimeoutError:  # the socket's
                raise AnswerTimeout("the gateway did not answer in time") from None
            verb, _, rest = line.partition(b" ")
            verb = verb.upper()
            if verb in (b"MSG", b"HMSG"):
                args = [a.decode() for a in rest.split()]
                if verb == b"MSG":  # subject sid [reply] size
                    data, block = self._exactly(int(args[-1])), None
                    reply = args[2] if len(args) == 4 else ""
                else:  # subject sid [reply] header-size total-size
                    whole = self._exactly(int(args[-1]))
                    hlen = int(args[-2])
                    block, data = whole[:hlen], whole[hlen:]
                    reply = args[2] if len(args) == 5 else ""
                return args[1], args[0], reply, block, data
            if verb == b"PING":
                self.sock.sendall(b"PONG\r\n")
            elif verb == b"-ERR":
                text = rest.decode().strip().strip("'")
                if text.startswith("Permissions Violation"):
                    raise PermissionViolationError(text[len("Permissions Violation for "):])
                raise ServiceUnavailableError(f"gateway error: {text}")

    # -- requests ----------------------------------------------------------------------------
    def send(self, subject: str, payload: bytes = b"", headers: dict[str, str] | None = None
             ) -> str:
        """Publish with a fresh reply subject; returns it."""
        reply = f"{self.inbox}.{next(self._ids)}"
        self.sock.sendall(self._frame(subject, reply, payload, headers))
        return reply

    @staticmethod
    def _frame(subject: str, reply: str, payload: bytes, headers: dict[str, str] | None
               ) -> bytes:
        if headers:
            block = encode_headers(headers)
            return (f"HPUB {subject} {reply} {len(block)} {len(block) + len(payload)}\r\n"
                    .encode() + block + payload + b"\r\n")
        return f"PUB {subject} {reply} {len(payload)}\r\n".encode() + payload + b"\r\n"

    def replies(self, waiting: Iterable[str], timeout: float | None = None
                ) -> dict[str, Reply]:
        """The replies on the given reply subjects (any order)."""
        want = set(waiting)
        got: dict[str, Reply] = {}
        deadline = time.monotonic() + (timeout or self.timeout)
        while want:
            _sid, subject, _reply, block, data = self._next_message(deadline)
            if subject not in want:
                continue  # a late answer to an earlier, timed-out request
            want.discard(subject)
            code, text, headers = _status(block) if block else (0, "", {})
            got[subject] = Reply(data, headers, code, text)
        return got

    def request(self, subject: str, payload: bytes = b"",
                headers: dict[str, str] | None = None, timeout: float | None = None) -> Reply:
        reply = self.send(subject, payload, headers)
        return self.replies([reply], timeout)[reply]

    def pull(self, subject: str, body: dict[str, Any], timeout: float | None = None
             ) -> Iterator[tuple[str, str, bytes | None, bytes]]:
        """Messages answering one pull request (``$JS.API.CONSUMER.MSG.NEXT...``), as
        (subject, ack reply, header block, data), until a status ends it (404/408: no more;
        others raise) or ``body['batch']`` came."""
        sid = str(next(self._ids) + 1_000_000)
        inbox = f"{self.inbox}.pull{sid}"
        self.sock.sendall(f"SUB {inbox} {sid}\r\n".encode()
                          + self._frame(subject, inbox, json.dumps(body).encode(), None))
        left = int(body.get("batch") or 1)
        deadline = time.monotonic() + (timeout or self.timeout) + (body.get("expires") or 0) / 1e9
        try:
            while left > 0:
                got_sid, msg_subject, reply, block, data = self._next_message(deadline)
                if got_sid != sid:
                    continue
                if block is not None and not reply:
                    code, text, _ = _status(block)
                    # nats-server: no responders (503) when the consumer is not there
                    if code == 503 or (code == 404 and text == "Consumer Not Found"):
                        raise ConsumerNotFoundError(text)
                    if code in (404, 408):
                        return
                    if code != 100:
                        raise APIError(text or f"status {code}", code=code)
                    continue
                left -= 1
                yield msg_subject, reply, block, data
        finally:
            self.sock.sendall(f"UNSUB {sid}\r\n".encode())

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _tls(sock: socket.socket, host: str, url: str, wants_cert: bool = False
         ) -> ssl.SSLSocket:
    """``sock`` after a TLS handshake that checked the gateway's certificate for ``host``
    and, when it asks for one (``wants_cert``) or one is set, gave it ours."""
    cafile = os.environ.get(CA_ENV, "").strip() or None
    try:
        context = ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as exc:
        raise BadRequestError(f"{CA_ENV}={cafile}: no CA certificates could be read from "
                              f"it ({exc})") from None
    cert, key = (os.environ.get(e, "").strip() or None for e in (CERT_ENV, KEY_ENV))
    if cert or key:
        try:
            context.load_cert_chain(cert or "", key)
        except (OSError, ssl.SSLError) as exc:
            raise BadRequestError(f"{CERT_ENV}={cert}, {KEY_ENV}={key}: no certificate and "
                                  f"key could be read ({exc})") from None
    elif wants_cert:
        raise ServiceUnavailableError(
            f"the gateway at {url} asks for a client certificate (mutual TLS)",
            hint=f"set {CERT_ENV}=client.pem and {KEY_ENV}=client-key.pem (signed by the "
                 f"gateway's --tls-ca), or {GATEWAY_ENV}=off for the Ray path")
    sock.settimeout(TLS_HANDSHAKE_TIMEOUT)
    try:
        return context.wrap_socket(sock, server_hostname=host)
    except ssl.SSLCertVerificationError as exc:
        raise ServiceUnavailableError(
            f"the gateway at {url} serves TLS with a certificate this command does not "
            f"trust: {exc.verify_message or exc}",
            hint=f"set {CA_ENV}=ca.pem (the CA that signed the gateway's certificate), "
                 f"or {GATEWAY_ENV}=off for the Ray path") from None


def find_gateway(timeout: float = 10.0) -> Requester | None:
    """A connection to the gateway the CLI should use, or None (take the Ray path). The
    default gateway (127.0.0.1:4222) is not used when ``$RAY_ADDRESS`` names a cluster: it
    may front another one."""
    url = os.environ.get(GATEWAY_ENV, "").strip()
    if not url and os.environ.get("RAY_ADDRESS", "").strip():
        return None
    url = url or DEFAULT_URL
    if url.lower() in ("off", "none", "0", "false", "no"):
        return None
    try:
        return Requester(url, timeout)
    except NoGateway:
        return None


