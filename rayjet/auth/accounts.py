"""Accounts and users from a server configuration, and who a CONNECT makes a client.

In nats-server's shapes: an ``authorization`` block (one token, one user/password, or a
list of users, all in the global account ``$G``) and an ``accounts`` map, each account with
``users`` (user/password, bcrypt hashes accepted, or nkey), ``default_permissions``,
``jetstream`` (``enabled``, ``disabled`` or limits), ``exports`` and ``imports``;
``no_auth_user`` names the user a client without credentials becomes, and
``system_account`` the account of ``$SYS`` (default ``$SYS``).

A configuration without users, token or accounts' users requires no authentication: every
client is in ``$G`` with no permissions set.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from typing import Any

from rayjet.auth import nkeys
from rayjet.auth.permissions import Permissions, parse_duration
from rayjet.errors import ServerConfigError
from rayjet.subjects import is_valid_filter

GLOBAL = "$G"
SYSTEM = "$SYS"
_BCRYPT = ("$2a$", "$2b$", "$2x$", "$2y$")
RESPONSE_TYPES = ("singleton", "stream", "chunked")


@dataclass
class User:
    account: str
    name: str  # username, or the public nkey
    password: str | None = None  # plain or a bcrypt hash
    nkey: str | None = None
    permissions: Permissions | None = None

    def password_matches(self, given: Any) -> bool:
        if self.password is None or not isinstance(given, str):
            return False
        return secret_matches(self.password, given)


def secret_matches(stored: str, given: str) -> bool:
    """``given`` against a stored password or token (bcrypt when it looks like one)."""
    if stored.startswith(_BCRYPT):
        import bcrypt

        try:
            return bcrypt.checkpw(given.encode(), stored.encode())
        except ValueError:
            return False
    return hmac.compare_digest(stored.encode(), given.encode())


@dataclass(frozen=True)
class Export:
    kind: str  # "stream" or "service"
    subject: str
    accounts: tuple[str, ...] | None = None  # None: any account may import it
    response_type: str = "singleton"

    def permits(self, account: str) -> bool:
        return self.accounts is None or account in self.accounts


@dataclass(frozen=True)
class Import:
    kind: str  # "stream" or "service"
    account: str  # where it comes from
    subject: str  # the subject in that account
    to: str | None = None  # the subject here (a prefix, for streams, as "prefix")
    prefix: str | None = None


@dataclass
class JetStreamLimits:
    """An account's JetStream: off, or on with limits (None: no limit), tiered by replica
    count as nats-server's ``R1``/``R3`` tiers."""

    enabled: bool = True
    max_memory: int | None = None
    max_storage: int | None = None
    max_streams: int | None = None
    max_consumers: int | None = None
    max_ack_pending: int | None = None
    max_bytes_required: bool = False
    memory_max_stream_bytes: int | None = None  # one stream's max_bytes, by storage type
    storage_max_stream_bytes: int | None = None
    # by replica count ("R1", "R3"): from an account JWT's tiered_limits (nats-server's
    # configuration file has no tiers)
    tiers: dict[str, JetStreamLimits] = field(default_factory=dict)


@dataclass
class Account:
    name: str
    users: list[User] = field(default_factory=list)
    jetstream: JetStreamLimits | None = None  # None: no JetStream
    exports: list[Export] = field(default_factory=list)
    imports: list[Import] = field(default_factory=list)
    default_permissions: Permissions | None = None


@dataclass(frozen=True)
class Identity:
    """Who a connection is: its account, its user (None: anonymous) and permissions."""

    account: str
    user: str | None = None
    permissions: Permissions | None = None


class ServerAuth:
    """The accounts and users of one configuration."""

    def __init__(self) -> None:
        self.accounts: dict[str, Account] = {GLOBAL: Account(GLOBAL)}
        self.users: dict[str, User] = {}
        self.nkey_users: dict[str, User] = {}
        self.token: str | None = None
        self.no_auth_user: str | None = None
        self.system_account = SYSTEM
        self.timeout = 2.0
        self.accounts_configured = False
        # the configuration's tls block (cert_file, key_file, ca_file, verify,
        # verify_and_map); with verify_and_map a client's certificate names its user
        self.tls: dict[str, Any] = {}
        self.tls_map = False
        # operator mode (decentralised JWT users): the trusted operators' keys and each
        # preloaded account's signing keys
        self.operator_keys: set[str] = set()
        self.account_keys: dict[str, set[str]] = {}

    @property
    def auth_required(self) -> bool:
        return bool(self.users or self.nkey_users or self.token or self.tls_map
                    or self.operator_keys)

    @property
    def needs_nonce(self) -> bool:
        return bool(self.nkey_users or self.operator_keys)

    def authenticate(self, connect: dict[str, Any], nonce: bytes | None,
                     cert_names: list[str] | None = None) -> Identity | None:
        """The identity these CONNECT options prove, or None (an Authorization Violation).
        ``cert_names``: what the client's verified TLS certificate says it is (its email and
        DNS names, then its subject), for ``verify_and_map``."""
        if self.tls_map:
            for name in cert_names or ():
                user = self.users.get(name)
                if user is not None:
                    return self._identity(user)
            return None
        if not self.auth_required:
            return Identity(GLOBAL)
        if self.operator_keys:
            return self._jwt_user(connect, nonce)
        nk = connect.get("nkey")
        if nk and self.nkey_users:
            user = self.nkey_users.get(nk) if isinstance(nk, str) else None
            if user is None or nonce is None or not nkeys.verify(nk, nonce,
                                                                  connect.get("sig")):
                return None
            return self._identity(user)
        name = connect.get("user")
        if name:
            user = self.users.get(name) if isinstance(name, str) else None
            if user is None or not user.password_matches(connect.get("pass")):
                return None
            return self._identity(user)
        token = connect.get("auth_token")
        if token:
            if self.token is None or not isinstance(token, str) or not secret_matches(
                    self.token, token):
                return None
            return Identity(GLOBAL)
        if self.no_auth_user and not connect.get("jwt") and not connect.get("sig"):
            user = self.users.get(self.no_auth_user)
            return self._identity(user) if user is not None else None
        return None

    def _jwt_user(self, connect: dict[str, Any], nonce: bytes | None) -> Identity | None:
        """A user JWT issued by a preloaded account (or its signing key) whose holder
        signed the nonce."""
        from rayjet.auth import jwt

        try:
            claims = jwt.decode(connect.get("jwt"))
        except jwt.JWTError:
            return None
        if claims.kind != "user" or not nkeys.is_public_key(claims.subject, "U"):
            return None
        account = claims.nats.get("issuer_account") or claims.issuer
        keys = self.account_keys.get(account)
        if keys is None or claims.issuer not in keys:
            return None
        if not claims.nats.get("bearer_token") and (
                nonce is None or not nkeys.verify(claims.subject, nonce, connect.get("sig"))):
            return None
        perms = jwt.permissions_doc(claims.nats)
        try:
            permissions = Permissions.from_config(perms) if perms else None
        except ServerConfigError:
            return None
        return Identity(account, claims.name or claims.subject, permissions)

    def _operator(self, doc: dict[str, Any]) -> None:
        """Operator mode: ``operator`` (JWTs or files of them), ``resolver: MEMORY`` and
        ``resolver_preload`` (account public key -> account JWT)."""
        from rayjet.auth import jwt

        operators = doc.get("operator") or doc.get("operators")
        tokens = operators if isinstance(operators, list) else [operators]
        for token in tokens:
            text = _string(token, "operator").strip()
            if not text.startswith("eyJ"):
                try:
                    with open(text, encoding="utf-8") as f:
                        text = f.read().strip()
                except OSError as exc:
                    raise ServerConfigError(f"operator: {token!r} cannot be read: {exc}") \
                        from None
            try:
                op = jwt.decode(text)
            except jwt.JWTError as exc:
                raise ServerConfigError(f"operator: not an operator JWT: {exc}") from None
            if op.kind != "operator" or op.issuer != op.subject:
                raise ServerConfigError("operator: not a self-signed operator JWT")
            self.operator_keys |= {op.subject} | op.signing_keys
            system = op.nats.get("system_account")
            if isinstance(system, str) and system:
                self.system_account = system
        resolver = doc.get("resolver")
        if not (isinstance(resolver, str) and resolver.upper() == "MEMORY"):
            raise ServerConfigError("resolver: only MEMORY (accounts from resolver_preload) "
                                    "is served")
        preload = doc.get("resolver_preload") or {}
        if not isinstance(preload, dict):
            raise ServerConfigError("resolver_preload: expected a map of account JWTs")
        for key, token in preload.items():
            try:
                acc = jwt.decode(_string(token, f"resolver_preload.{key}"))
            except jwt.JWTError as exc:
                raise ServerConfigError(f"resolver_preload.{key}: {exc}") from None
            if acc.kind != "account" or acc.subject != key:
                raise ServerConfigError(f"resolver_preload.{key}: not the account JWT of "
                                        f"{key}")
            if acc.issuer not in self.operator_keys:
                raise ServerConfigError(f"resolver_preload.{key}: not issued by a trusted "
                                        f"operator")
            self.account_keys[key] = {key} | acc.signing_keys
            limits = acc.nats.get("limits") if isinstance(acc.nats.get("limits"), dict) \
                else {}
            self.accounts[key] = Account(key, jetstream=_jwt_jetstream(
                limits, acc.nats.get("tiered_limits")))
        self.accounts_configured = True

    def _identity(self, user: User) -> Identity:
        perms = user.permissions
        if perms is None:
            perms = self.accounts[user.account].default_permissions
        return Identity(user.account, user.name, perms)

    def jetstream_of(self, account: str) -> JetStreamLimits | None:
        acc = self.accounts.get(account)
        if acc is None:
            return None
        if acc.jetstream is None and account == GLOBAL and not self.accounts_configured:
            return JetStreamLimits()  # no accounts configured: $G has JetStream
        return acc.jetstream

    # -- from a configuration ---------------------------------------------------------------
    @classmethod
    def from_config(cls, doc: dict[str, Any]) -> ServerAuth:
        auth = cls()
        single: tuple[str, str] | None = None
        for key, value in doc.items():
            k = key.lower()
            if k == "authorization":
                single = auth._authorization(value)
            elif k == "accounts":
                auth._accounts(value)
            elif k == "no_auth_user":
                auth.no_auth_user = _string(value, key)
            elif k == "system_account":
                auth.system_account = _string(value, key)
            elif k == "tls":
                auth.tls = _tls(value)
                auth.tls_map = bool(auth.tls.get("verify_and_map"))
        if doc.get("operator") or doc.get("operators"):
            if any(a.users for a in auth.accounts.values()):
                raise ServerConfigError("operator mode takes its users from JWTs: no users "
                                        "in the configuration")
            auth._operator(doc)
        if single is not None:
            if auth.accounts_configured and any(a.users for a in auth.accounts.values()):
                raise ServerConfigError("authorization: can not have a single user/pass and "
                                        "accounts")
            user, password = single
            auth._add_user(User(GLOBAL, user, password=password))
        if auth.token and (auth.users or auth.nkey_users):
            raise ServerConfigError("authorization: can not have a token and users")
        if auth.no_auth_user is not None and auth.no_auth_user not in auth.users:
            raise ServerConfigError(f"no_auth_user: {auth.no_auth_user!r} is not a "
                                    f"configured user (nkey users can not be it)")
        if auth.system_account not in auth.accounts:
            auth.accounts[auth.system_account] = Account(auth.system_account)
        auth._check_imports()
        return auth

    def _authorization(self, doc: Any) -> tuple[str, str] | None:
        if not isinstance(doc, dict):
            raise ServerConfigError("authorization: expected a map")
        user = password = None
        defaults = None
        users: list[Any] = []
        for key, value in doc.items():
            k = key.lower()
            if k in ("user", "username"):
                user = _string(value, f"authorization.{key}")
            elif k in ("pass", "password"):
                password = _string(value, f"authorization.{key}")
            elif k == "token":
                self.token = _string(value, f"authorization.{key}")
            elif k == "timeout":
                self.timeout = _seconds(value, f"authorization.{key}")
            elif k == "users":
                users = _list(value, "authorization.users")
            elif k in ("default_permission", "default_permissions", "permissions"):
                defaults = Permissions.from_config(value, f"authorization.{key}")
            else:
                raise ServerConfigError(f"authorization: unknown field {key!r}")
        self.accounts[GLOBAL].default_permissions = defaults
        for i, entry in enumerate(users):
            self._add_user(_user(entry, GLOBAL, f"authorization.users[{i}]"))
        if user is not None:
            return user, password or ""
        return None

    def _accounts(self, doc: Any) -> None:
        self.accounts_configured = True
        if isinstance(doc, list):
            doc = {_string(n, "accounts"): {} for n in doc}
        if not isinstance(doc, dict):
            raise ServerConfigError("accounts: expected a map of account names")
        for name, body in doc.items():
            if name == GLOBAL:
                raise ServerConfigError(f"accounts: {name!r} is a reserved account")
            if not isinstance(body, dict):
                raise ServerConfigError(f"accounts.{name}: expected a map")
            acc = Account(name)
            self.accounts[name] = acc
            users: list[Any] = []
            for key, value in body.items():
                k = key.lower()
                where = f"accounts.{name}.{key}"
                if k == "users":
                    users = _list(value, where)
                elif k == "default_permissions":
                    acc.default_permissions = Permissions.from_config(value, where)
                elif k == "jetstream":
                    acc.jetstream = _jetstream(value, where)
                elif k == "exports":
                    acc.exports = [_export(e, f"{where}[{i}]")
                                   for i, e in enumerate(_list(value, where))]
                elif k == "imports":
                    acc.imports = [_import(e, f"{where}[{i}]")
                                   for i, e in enumerate(_list(value, where))]
                else:
                    raise ServerConfigError(f"accounts.{name}: unknown field {key!r} "
                                            f"(users, default_permissions, jetstream, "
                                            f"exports or imports)")
            for i, entry in enumerate(users):
                self._add_user(_user(entry, name, f"accounts.{name}.users[{i}]"))

    def _add_user(self, user: User) -> None:
        if user.name in self.users or user.name in self.nkey_users:
            raise ServerConfigError(f"duplicate user {user.name!r}")
        (self.nkey_users if user.nkey else self.users)[user.name] = user
        self.accounts[user.account].users.append(user)

    def _check_imports(self) -> None:
        for acc in self.accounts.values():
            for imp in acc.imports:
                source = self.accounts.get(imp.account)
                if source is None:
                    raise ServerConfigError(f"accounts.{acc.name}.imports: {imp.account!r} "
                                            f"account not defined for {imp.kind} import")


def _jwt_jetstream(limits: dict[str, Any], tiered: Any = None) -> JetStreamLimits | None:
    """An account JWT's JetStream: on when it (or one of its tiers) may store in memory or
    on disk; ``tiered``: its ``tiered_limits`` by replica count."""

    def one(doc: dict[str, Any]) -> JetStreamLimits | None:
        if not doc.get("mem_storage") and not doc.get("disk_storage"):
            return None

        def limit(key: str) -> int | None:
            value = doc.get(key)
            return value if isinstance(value, int) and value >= 0 else None

        return JetStreamLimits(
            max_memory=limit("mem_storage"), max_storage=limit("disk_storage"),
            max_streams=limit("streams"), max_consumers=limit("consumer"),
            max_ack_pending=limit("max_ack_pending"),
            memory_max_stream_bytes=limit("mem_max_stream_bytes"),
            storage_max_stream_bytes=limit("disk_max_stream_bytes"),
            max_bytes_required=bool(doc.get("max_bytes_required")))

    tiers = {}
    for name, doc in (tiered.items() if isinstance(tiered, dict) else ()):
        t = one(doc) if isinstance(doc, dict) else None
        if t is not None:
            tiers[str(name).upper()] = t
    out = one(limits)
    if out is None and not tiers:
        return None
    out = out or JetStreamLimits()
    out.tiers = tiers
    return out


def _string(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ServerConfigError(f"{where}: expected a string, got {value!r}")
    return str(value)


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ServerConfigError(f"{where}: expected an array")
    return value


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise ServerConfigError(f"{where}: expected seconds or a duration")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return parse_duration(value, where)
    raise ServerConfigError(f"{where}: expected seconds or a duration")


def _tls(doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise ServerConfigError("tls: expected a map (cert_file, key_file, ca_file, verify, "
                                "verify_and_map)")
    out: dict[str, Any] = {}
    for key, value in doc.items():
        k = key.lower()
        if k in ("cert_file", "key_file", "ca_file"):
            out[k] = _string(value, f"tls.{key}")
        elif k in ("verify", "verify_and_map"):
            if not isinstance(value, bool):
                raise ServerConfigError(f"tls.{key}: expected true or false")
            out[k] = value
        elif k in ("timeout", "handshake_first", "cipher_suites", "curve_preferences",
                   "min_version", "insecure"):
            continue  # nats-server's tuning: the gateway keeps its own
        else:
            raise ServerConfigError(f"tls: unknown field {key!r}")
    if ("cert_file" in out) != ("key_file" in out):
        raise ServerConfigError("tls: cert_file and key_file go together")
    if (out.get("verify") or out.get("verify_and_map")) and "ca_file" not in out:
        raise ServerConfigError("tls: verify needs ca_file (the CA that signs client "
                                "certificates)")
    if "cert_file" not in out:
        raise ServerConfigError("tls: cert_file and key_file are required")
    return out


def _user(doc: Any, account: str, where: str) -> User:
    if not isinstance(doc, dict):
        raise ServerConfigError(f"{where}: expected a user map")
    name = password = nk = None
    perms = None
    for key, value in doc.items():
        k = key.lower()
        if k == "nkey":
            nk = _string(value, f"{where}.{key}")
        elif k in ("user", "username"):
            name = _string(value, f"{where}.{key}")
        elif k in ("pass", "password"):
            password = _string(value, f"{where}.{key}")
        elif k in ("permission", "permissions", "authorization"):
            perms = Permissions.from_config(value, f"{where}.{key}")
        elif k in ("allowed_connection_types", "connection_types", "clients"):
            continue  # every rayjet client connection is STANDARD
        else:
            raise ServerConfigError(f"{where}: unknown field {key!r}")
    if nk is not None:
        if not nkeys.is_public_key(nk, "U"):
            raise ServerConfigError(f"{where}: not a valid public nkey for a user")
        if name is not None or password is not None:
            raise ServerConfigError(f"{where}: nkey users do not take usernames or "
                                    f"passwords")
        return User(account, nk, nkey=nk, permissions=perms)
    if not name:
        raise ServerConfigError(f"{where}: a user entry needs a user (or an nkey)")
    return User(account, name, password=password or "", permissions=perms)


def _limit(value: Any, where: str) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ServerConfigError(f"{where}: expected an integer (-1: no limit)")
    return None if value < 0 else value


def _jetstream(value: Any, where: str) -> JetStreamLimits | None:
    if isinstance(value, bool):
        return JetStreamLimits() if value else None
    if isinstance(value, str):
        if value.lower() in ("enabled", "enable"):
            return JetStreamLimits()
        if value.lower() in ("disabled", "disable"):
            return None
        raise ServerConfigError(f"{where}: expected enabled, disabled or a map of limits")
    if not isinstance(value, dict):
        raise ServerConfigError(f"{where}: expected enabled, disabled or a map of limits")
    out = JetStreamLimits()
    names = {"max_memory": "max_memory", "max_mem": "max_memory", "mem": "max_memory",
             "memory": "max_memory", "max_file": "max_storage", "max_store": "max_storage",
             "store": "max_storage", "max_disk": "max_storage", "disk": "max_storage",
             "max_streams": "max_streams", "streams": "max_streams",
             "max_consumers": "max_consumers", "consumers": "max_consumers",
             "max_ack_pending": "max_ack_pending",
             "mem_max_stream_bytes": "memory_max_stream_bytes",
             "memory_max_stream_bytes": "memory_max_stream_bytes",
             "disk_max_stream_bytes": "storage_max_stream_bytes",
             "store_max_stream_bytes": "storage_max_stream_bytes"}
    for key, v in value.items():
        k = key.lower()
        if k in names:
            setattr(out, names[k], _limit(v, f"{where}.{key}"))
        elif k in ("max_bytes_required", "max_stream_bytes", "max_bytes"):
            if not isinstance(v, bool):
                raise ServerConfigError(f"{where}.{key}: expected true or false")
            out.max_bytes_required = v
        elif k == "cluster_traffic":
            continue  # where raft traffic is accounted: the cluster's own here
        else:
            raise ServerConfigError(f"{where}: unknown field {key!r}")
    return out


def _subject(value: Any, where: str) -> str:
    s = _string(value, where)
    if not is_valid_filter(s):
        raise ServerConfigError(f"{where}: {s!r} is not a valid subject")
    return s


def _export(doc: Any, where: str) -> Export:
    if not isinstance(doc, dict):
        raise ServerConfigError(f"{where}: expected a map with stream or service")
    kind = subject = None
    accounts = None
    response = "singleton"
    for key, value in doc.items():
        k = key.lower()
        if k in ("stream", "service"):
            if kind is not None:
                raise ServerConfigError(f"{where}: an export is a stream or a service, not "
                                        f"both")
            kind, subject = k, _subject(value, f"{where}.{key}")
        elif k == "accounts":
            accounts = tuple(_string(a, f"{where}.accounts") for a in _list(value, where))
        elif k in ("response", "response_type"):
            response = _string(value, f"{where}.{key}").lower()
            if response not in RESPONSE_TYPES:
                raise ServerConfigError(f"{where}: unknown response type {response!r}")
        elif k in ("threshold", "response_threshold", "latency", "allow_trace"):
            continue  # service latency tracking and tracing are not kept
        else:
            raise ServerConfigError(f"{where}: unknown field {key!r}")
    if kind is None or subject is None:
        raise ServerConfigError(f"{where}: an export needs a stream or a service subject")
    return Export(kind, subject, accounts, response)


def _import(doc: Any, where: str) -> Import:
    if not isinstance(doc, dict):
        raise ServerConfigError(f"{where}: expected a map with stream or service")
    kind = source = None
    to = prefix = None
    for key, value in doc.items():
        k = key.lower()
        if k in ("stream", "service"):
            if not isinstance(value, dict):
                raise ServerConfigError(f"{where}.{key}: expected {{account, subject}}")
            kind, source = k, value
        elif k == "to":
            to = _subject(value, f"{where}.to")
        elif k == "prefix":
            prefix = _string(value, f"{where}.prefix")
        elif k in ("share", "allow_trace"):
            continue
        else:
            raise ServerConfigError(f"{where}: unknown field {key!r}")
    if kind is None or source is None:
        raise ServerConfigError(f"{where}: an import needs a stream or a service")
    account = subject = None
    for key, value in source.items():
        if key.lower() in ("account", "acc"):
            account = _string(value, f"{where}.{kind}.account")
        elif key.lower() == "subject":
            subject = _subject(value, f"{where}.{kind}.subject")
        else:
            raise ServerConfigError(f"{where}.{kind}: unknown field {key!r}")
    if account is None or subject is None:
        raise ServerConfigError(f"{where}.{kind}: needs an account and a subject")
    if prefix is not None and kind == "service":
        raise ServerConfigError(f"{where}: a service import takes 'to', not 'prefix'")
    if prefix is not None and to is not None:
        raise ServerConfigError(f"{where}: a stream import takes 'to' or 'prefix', not both")
    return Import(kind, account, subject, to, prefix)
