"""Accounts in the gateway: each account's subject space, who a connection is, and the
permission checks on what it publishes, subscribes to and is handed.

A connection's account is fixed at CONNECT (:meth:`rayjet.auth.ServerAuth.authenticate`);
its subscriptions live in that account's :class:`Space`, so a message published in one
account reaches only subscriptions of the same account. Violations are answered with
nats-server's ``-ERR`` texts and the connection stays open.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

from rayjet.auth import GLOBAL, Identity, ServerAuth, parse_file
from rayjet.auth.permissions import Permissions, Replies
from rayjet.gateway.interest import Interest, Subscription
from rayjet.gateway.tls import tls_context
from rayjet.subjects import SubjectTransform, is_literal, is_subset, subject_matches


class Space:
    """One account's subscriptions, and the gateway's own handlers listening in it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.interest = Interest()
        self.internal_subs: list[Subscription] = []
        # internal '$JS.<x>.>' subscriptions: (prefix, subscription) for the fast path
        self.js_internal: list[tuple[str, Subscription]] = []
        self.bridge: Any = None  # the JetStream bridge serving this account, if any


def go_quote(text: str) -> str:
    """``text`` as Go's %q writes it (nats-server's violation messages quote this way)."""
    return json.dumps(text, ensure_ascii=False)


def publish_violation(subject: str) -> str:
    return f"Permissions Violation for Publish to {go_quote(subject)}"


def subscribe_violation(subject: str, queue: str | None, sid: str | None = None) -> str:
    text = f"Permissions Violation for Subscription to {go_quote(subject)}"
    if queue:
        text += f" using queue {go_quote(queue)}"
    if sid is not None:
        text += f" (sid {go_quote(sid)})"
    return text


def certificate_names(ssl_object: Any) -> list[str]:
    """What a verified client certificate says its holder is, in the order nats-server's
    verify_and_map looks for a user: email addresses, DNS names, then the subject
    (``CN=alice,O=Acme``)."""
    if ssl_object is None:
        return []
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return []
    from cryptography import x509

    cert = x509.load_der_x509_certificate(der)
    names: list[str] = []
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names += san.get_values_for_type(x509.RFC822Name)
        names += san.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        pass
    names.append(cert.subject.rfc4514_string())
    return names


def tls_from_config(auth: ServerAuth) -> Any:
    """The server TLS context the configuration's tls block asks for, or None."""
    if not auth.tls:
        return None
    t = auth.tls
    verify = t.get("verify") or t.get("verify_and_map")
    try:
        return tls_context(t["cert_file"], t["key_file"], t.get("ca_file") if verify else None)
    except (OSError, ValueError) as exc:
        from rayjet.errors import ServerConfigError

        raise ServerConfigError(f"tls: the certificate files cannot be loaded: {exc}") from None


def auth_from_options(options: Any) -> ServerAuth:
    """The gateway's accounts and users: from its configuration file when it has one, else
    from its single token or user/password (or none: no authentication)."""
    if options.config:
        auth = ServerAuth.from_config(parse_file(options.config))
        if options.token or options.user:
            from rayjet.errors import ServerConfigError

            raise ServerConfigError("give users and tokens in the configuration file or as "
                                    "options, not both")
        return auth
    doc: dict[str, Any] = {}
    if options.token:
        doc["authorization"] = {"token": options.token}
    elif options.user:
        doc["authorization"] = {"user": options.user, "password": options.password or ""}
    return ServerAuth.from_config(doc)


def jetstream_accounts(auth: ServerAuth) -> list[str]:
    """The accounts the gateway's JetStream serves: ``$G`` when no accounts are configured,
    else those that enable JetStream; each has its own streams (rayjet.api.account_names)."""
    from rayjet.api.account_names import SEP

    names = sorted(n for n in auth.accounts if auth.jetstream_of(n) is not None)
    for name in names:
        if SEP in name or not name:
            from rayjet.errors import ServerConfigError

            raise ServerConfigError(f"accounts: {name!r} cannot have JetStream: {SEP!r} "
                                    f"is reserved in the names of accounts with JetStream")
    return names


class AccountGateway:
    """What a JetStream bridge of one account sees of the gateway: its handlers listen,
    and what it sends is routed, in that account's subject space."""

    def __init__(self, gateway: Any, account: str) -> None:
        self._gateway = gateway
        self.account = account

    @property
    def interest(self) -> Interest:
        return self._gateway.space(self.account).interest

    def route(self, subject: str, reply: str | None, hdr: bytes | None, payload: bytes,
              origin: Any = None, account: str | None = None) -> int:
        return self._gateway.route(subject, reply, hdr, payload, origin,
                                   account=account or self.account)

    def subscribe_internal(self, subject: str, handler: Any, account: str | None = None
                           ) -> Subscription:
        return self._gateway.subscribe_internal(subject, handler, account or self.account)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._gateway, attr)


class Guard:
    """A connection's identity and what its permissions let it do."""

    def __init__(self, identity: Identity) -> None:
        self.identity = identity
        self.perms: Permissions | None = identity.permissions
        self.replies = (Replies(self.perms.responses)
                        if self.perms is not None and self.perms.responses else None)
        self.filter_deliveries = False

    @property
    def account(self) -> str:
        return self.identity.account

    def may_publish(self, subject: str) -> bool:
        perms = self.perms
        if perms is None or not perms.restricts_publish or perms.can_publish(subject):
            return True
        return self.replies is not None and self.replies.answer(subject)

    def may_subscribe(self, subject: str, queue: str | None) -> bool:
        perms = self.perms
        if perms is None:
            return True
        if not perms.can_subscribe(subject, queue):
            return False
        if perms.filters_deliveries(subject, queue):
            self.filter_deliveries = True
        return True

    def may_receive(self, subject: str, reply: str | None) -> bool:
        """Is this message handed to the connection (remembering its reply subject for
        ``allow_responses``)?"""
        if self.filter_deliveries and self.perms.delivery_denied(subject):
            return False
        if reply and self.replies is not None:
            self.replies.handed(reply)
        return True


ANONYMOUS = Guard(Identity(GLOBAL))


RESPONSE_PREFIX = "_R_."
RESPONSE_TTL = 120.0  # how long an unanswered service import request's reply is kept
MAX_RESPONSES = 100_000


@dataclass
class StreamRoute:
    """Messages of the exporting account on ``source`` reach ``importer`` mapped."""

    importer: str
    source: str
    prefix: str | None = None
    transform: SubjectTransform | None = None

    def mapped(self, subject: str) -> str | None:
        if not subject_matches(subject, self.source):
            return None
        if self.prefix:
            return f"{self.prefix}.{subject}"
        if self.transform is not None:
            return self.transform.match(subject)
        return subject


@dataclass
class ServiceRoute:
    """Requests published in the importing account on ``local`` go to ``exporter``."""

    exporter: str
    local: str
    target: str
    response_type: str = "singleton"
    transform: SubjectTransform | None = None

    def mapped(self, subject: str) -> str | None:
        if not subject_matches(subject, self.local):
            return None
        if self.transform is not None:
            return self.transform.match(subject)
        return self.target


@dataclass
class Pending:
    importer: str
    reply: str
    singleton: bool
    expires: float


def request_info(hdr: bytes | None, account: str, rtt: float) -> bytes:
    """``hdr`` with the ``Nats-Request-Info`` header a service import adds."""
    info = json.dumps({"acc": account, "rtt": int(rtt * 1e9)}, separators=(",", ":"))
    line = b"Nats-Request-Info: " + info.encode() + b"\r\n"
    if not hdr:
        return b"NATS/1.0\r\n" + line + b"\r\n"
    return hdr[:-2] + line + b"\r\n" if hdr.endswith(b"\r\n\r\n") else hdr + line


class Crossings:
    """Where messages cross from one account to another: stream and service imports, and
    the replies of service requests on their way back."""

    def __init__(self, auth: ServerAuth) -> None:
        self.streams: dict[str, list[StreamRoute]] = {}  # exporter -> routes out
        self.services: dict[str, list[ServiceRoute]] = {}  # importer -> routes out
        self.responses: dict[tuple[str, str], Pending] = {}
        for acc in auth.accounts.values():
            for imp in acc.imports:
                export = _export_of(auth, acc.name, imp)
                if imp.kind == "stream":
                    transform = (SubjectTransform(imp.subject, imp.to) if imp.to else None)
                    self.streams.setdefault(imp.account, []).append(
                        StreamRoute(acc.name, imp.subject, imp.prefix, transform))
                else:
                    local = imp.to or imp.subject
                    transform = (SubjectTransform(local, imp.subject)
                                 if local != imp.subject and not is_literal(local) else None)
                    self.services.setdefault(acc.name, []).append(ServiceRoute(
                        imp.account, local, imp.subject, export.response_type, transform))

    @property
    def empty(self) -> bool:
        return not self.streams and not self.services

    def stream_routes(self, account: str, subject: str) -> list[tuple[str, str]]:
        """(importer, subject there) for a message of ``account`` on ``subject``."""
        out = []
        for route in self.streams.get(account, ()):
            mapped = route.mapped(subject)
            if mapped is not None:
                out.append((route.importer, mapped))
        return out

    def service_route(self, account: str, subject: str) -> tuple[ServiceRoute, str] | None:
        for route in self.services.get(account, ()):
            mapped = route.mapped(subject)
            if mapped is not None:
                return route, mapped
        return None

    def reply_for(self, route: ServiceRoute, importer: str, reply: str, now: float) -> str:
        """A reply subject in the exporting account that leads back to ``reply``."""
        if len(self.responses) >= MAX_RESPONSES:
            self.responses = {k: p for k, p in self.responses.items() if p.expires > now}
            while len(self.responses) >= MAX_RESPONSES:
                self.responses.pop(next(iter(self.responses)))
        mapped = RESPONSE_PREFIX + secrets.token_urlsafe(6) + "." + secrets.token_urlsafe(6)
        self.responses[(route.exporter, mapped)] = Pending(
            importer, reply, route.response_type == "singleton", now + RESPONSE_TTL)
        return mapped

    def response(self, account: str, subject: str, now: float) -> tuple[str, str] | None:
        """(importer, its reply subject) when ``subject`` answers a service import."""
        key = (account, subject)
        pending = self.responses.get(key)
        if pending is None:
            return None
        if pending.expires < now:
            del self.responses[key]
            return None
        if pending.singleton:
            del self.responses[key]
        return pending.importer, pending.reply


def _export_of(auth: ServerAuth, importer: str, imp: Any) -> Any:
    source = auth.accounts[imp.account]
    for export in source.exports:
        if export.kind == imp.kind and is_subset(imp.subject, export.subject) and \
                export.permits(importer):
            return export
    from rayjet.errors import ServerConfigError

    raise ServerConfigError(f"accounts.{importer}.imports: Error adding {imp.kind} import "
                            f"{go_quote(imp.subject)}: {imp.kind} import not authorized "
                            f"({imp.account} exports no {imp.kind} covering it to {importer})")


