"""The harness nats.py's own tests run against: it stands in for their ``tests/utils.py``
(which the nats-py sdist does not ship) and starts a rayjet gateway where theirs starts
``nats-server -p 4222 [-js -sd DIR] -m 8222``.

One rayjet (a local Ray, started once, only when a JetStream test runs) serves the whole
run; each JetStream test case gets an empty JetStream (every stream of the previous test is
deleted). Each test case gets a gateway listening on 127.0.0.1:4222 with monitoring on 8222;
the core tests' (SingleServerTestCase) has no JetStream, as their nats-server. ``server_pool
[0].stop()`` / ``.start()`` take the gateway down and bring it back as a server restart
would: clients are disconnected, the streams stay. As nats.py's ``start()``, which spawns
nats-server and returns, ours returns while the gateway comes up; setUp waits until it
serves (``start_natsd``, as theirs).

The server set-ups this harness cannot give (several servers clustered, TLS with the
certificates of nats.py's repository, which its sdist does not ship, operator JWTs) are test
cases that skip, saying why. Those with accounts and users (no_auth_user, an nkey user) get
a gateway with a server configuration of this harness's own giving what the tests expect.

With ``RAYJET_NATSPY_SERVER=nats-server`` (and the binary beside the interpreter, on
``$NATS_SERVER_BIN`` or on the PATH) the JetStream and core cases start nats-server itself,
as nats.py's own harness does: run.py checks with it that a test listed as failing on
nats-server too really does.

tests/natspy/run.py copies this file to ``tests/utils.py`` of the unpacked sdist.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import unittest
import unittest.mock  # noqa: F401 - the tests use unittest.mock through this import
from concurrent.futures import Future
from pathlib import Path

__all__ = ["SingleServerTestCase", "SingleJetStreamServerTestCase",
           "SingleJetStreamServerLimitsTestCase", "async_test", "async_long_test", "NATSD",
           "get_config_file", "start_natsd"]

_JS = None


def _rayjet():
    global _JS
    if _JS is None:
        import rayjet

        data_dir = tempfile.mkdtemp(prefix="rayjet-natspy-")
        _JS = rayjet.connect(data_dir=data_dir, num_cpus=int(os.environ.get("NATSPY_CPUS", "2")),
                             hosting="shared",
                             ray_init_kwargs={"include_dashboard": False})
    return _JS


def _empty(js) -> None:
    from concurrent.futures import ThreadPoolExecutor

    # side by side: after JSMTest's 300 streams, one after another took seconds of CI time
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(js.delete_stream, js.stream_names()))


SERVER_ENV = "RAYJET_NATSPY_SERVER"  # "nats-server": the cases run against nats-server


def _nats_server_binary() -> str:
    env = os.environ.get("NATS_SERVER_BIN")
    beside = os.path.join(os.path.dirname(sys.executable), "nats-server")
    for candidate in (env, beside, shutil.which("nats-server")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError("no nats-server binary: install nats-server-bin or set NATS_SERVER_BIN")


class NatsServer:
    """nats-server itself, as nats.py's harness runs it (``-p PORT [-js -sd DIR] -m HTTP``)."""

    def __init__(self, port: int, with_jetstream: bool, http_port: int,
                 config_file: str | None, domain: str | None) -> None:
        self.port, self.http_port = port, http_port
        self.args = [_nats_server_binary(), "-a", "127.0.0.1", "-p", str(port),
                     "-m", str(http_port)]
        if with_jetstream:
            self.args += ["-js", "-sd", tempfile.mkdtemp(prefix="natspy-nats-server-")]
        if domain:
            config_file = _config_file(f"jetstream {{ domain: {domain} }}")
        if config_file:
            self.args += ["-c", config_file]
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)

    def ready(self) -> None:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                if self.proc is None or self.proc.poll() is not None or \
                        time.monotonic() > deadline:
                    raise RuntimeError(f"nats-server did not start: {self.args}") from None
                time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


class NATSD:
    """A rayjet gateway in this process, in nats.py's NATSD shape."""

    def __init__(self, port: int = 4222, with_jetstream: bool = True, config_file=None,
                 domain: str | None = None, http_port: int = 8222, tls=None,
                 **_ignored) -> None:
        self.port = port
        self.tls = tls
        self.http_port = http_port
        self.with_jetstream = with_jetstream
        self.config_file = config_file
        self.domain = domain
        self.thread = None
        self._starting: Future | None = None
        self._fresh = True
        self._nats_server: NatsServer | None = None
        if os.environ.get(SERVER_ENV) == "nats-server":
            self._nats_server = NatsServer(port, with_jetstream, http_port, config_file,
                                           domain)

    def start(self):
        """Return before the gateway listens, as nats.py's start() once nats-server is
        spawned: a test restarting it from a message callback goes on meanwhile. Held for
        the gateway's JetStream start-up (Ray calls, slow under load), its client stays
        away longer, its ordered consumers queue resets for missed heartbeats, and nats.py's
        close() fails draining them into the lost connection."""
        if self._nats_server is not None:
            self._nats_server.start()
            return self
        from rayjet.gateway import GatewayOptions, GatewayThread

        js = _rayjet() if self.with_jetstream else None
        if self._fresh and js is not None:
            _empty(js)
        self._fresh = False
        thread = GatewayThread(js, GatewayOptions(host="127.0.0.1", port=self.port,
                                                  domain=self.domain,
                                                  http_port=self.http_port,
                                                  config=self.config_file, tls=self.tls))
        starting: Future = Future()

        def run() -> None:
            try:
                thread.start()
            except BaseException as exc:  # noqa: BLE001 - raised by ready()
                starting.set_exception(exc)
            else:
                starting.set_result(None)

        self.thread, self._starting = thread, starting
        threading.Thread(target=run, name="natsd-start", daemon=True).start()
        return self

    def ready(self) -> None:
        """Wait until the gateway started last serves (raises what kept it from it)."""
        if self._nats_server is not None:
            self._nats_server.ready()
        elif self._starting is not None:
            self._starting.result()

    def stop(self) -> None:
        if self._nats_server is not None:
            self._nats_server.stop()
        if self.thread is not None:
            try:
                self.ready()
            finally:
                self.thread.stop()
                self.thread = None
                self._starting = None


def start_natsd(natsd: NATSD) -> None:
    """Start ``natsd`` and wait until it serves (nats.py's start_natsd polls /varz)."""
    natsd.start()
    natsd.ready()


class SingleServerTestCase(unittest.TestCase):
    """Core NATS: a gateway without JetStream (nats.py's ``nats-server -p 4222``)."""

    jetstream = False

    def setUp(self):
        self.server_pool = []
        self.loop = asyncio.new_event_loop()
        server = NATSD(port=4222, with_jetstream=self.jetstream)
        self.server_pool.append(server)
        start_natsd(server)

    def tearDown(self):
        for natsd in self.server_pool:
            natsd.stop()
        self.loop.close()


def _cannot(why: str) -> type:
    class Unavailable(unittest.TestCase):
        def setUp(self):
            raise unittest.SkipTest(why)

    return Unavailable


_CLUSTER = "needs several NATS servers routed together; a rayjet gateway is one server"
ClusteringTestCase = _cannot(_CLUSTER)
ClusteringDiscoveryAuthTestCase = _cannot(_CLUSTER)
MultiServerAuthTestCase = _cannot(_CLUSTER)
MultiServerAuthTokenTestCase = _cannot(_CLUSTER)
MultiTLSServerAuthTestCase = _cannot(_CLUSTER)
TLSServerTestCase = _cannot("needs the certificates of nats.py's repository "
                            "(tests/certs), which its sdist does not ship")
TLSServerHandshakeFirstTestCase = TLSServerTestCase
TrustedServerOperatorTestCase = _cannot("needs operator JWTs from nats.py's repository")

# NoAuthUserClientTest: on port 4555, a client without credentials is "foo"; "bar" (another
# account) may subscribe to nothing
_NO_AUTH_USER = """
accounts {
  A: { users: [ {user: foo, password: foo} ] }
  B: { users: [ {user: bar, password: bar, permissions: {subscribe: {deny: ">"}}} ] }
}
no_auth_user: foo
"""


def _config_file(text: str) -> str:
    path = os.path.join(tempfile.mkdtemp(prefix="rayjet-natspy-conf-"), "server.conf")
    with open(path, "w") as f:
        f.write(text)
    return path


class NoAuthUserServerTestCase(SingleServerTestCase):
    def setUp(self):
        self.server_pool = []
        self.loop = asyncio.new_event_loop()
        server = NATSD(port=4555, with_jetstream=False, http_port=8555,
                       config_file=_config_file(_NO_AUTH_USER))
        self.server_pool.append(server)
        start_natsd(server)


class NkeysServerTestCase(SingleServerTestCase):
    """ClientNkeysAuthTest: an nkey user (its seed in ``nkeys/foo-user.nk`` beside this
    file, made here) that may not subscribe to ``bar``, over TLS (a self-signed certificate
    the client trusts through SSL_CERT_FILE)."""

    def setUp(self):
        from rayjet.auth.nkeys import KeyPair

        here = os.path.dirname(os.path.abspath(__file__))
        os.makedirs(os.path.join(here, "nkeys"), exist_ok=True)
        user = KeyPair.create("U")
        with open(os.path.join(here, "nkeys", "foo-user.nk"), "w") as f:
            f.write(user.seed)
        conf = ("authorization { users: [ {nkey: " + user.public_key
                + ", permissions: {subscribe: {deny: \"bar\"}}} ] }")
        self._serve_tls(conf)

    def tearDown(self):
        super().tearDown()
        if self._cert_env is None:
            os.environ.pop("SSL_CERT_FILE", None)
        else:
            os.environ["SSL_CERT_FILE"] = self._cert_env

    def _serve_tls(self, conf: str) -> None:
        import ssl

        from tests.rayjet_tls_certs import self_signed

        certs = tempfile.mkdtemp(prefix="rayjet-natspy-tls-")
        cert, key = self_signed(Path(certs), "localhost", ips=("127.0.0.1",))
        self._cert_env = os.environ.get("SSL_CERT_FILE")
        os.environ["SSL_CERT_FILE"] = str(cert)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(cert), str(key))
        self.server_pool = []
        self.loop = asyncio.new_event_loop()
        server = NATSD(port=4222, with_jetstream=False, config_file=_config_file(conf),
                       tls=ctx)
        self.server_pool.append(server)
        start_natsd(server)


# the account that signed the user JWT ClientJWTAuthTest carries in its own text: this
# harness's operator vouches for it, as nats.py's resolver_preload.conf does
_RAW_CREDS_ACCOUNT = "AD7SEANS6BCBF6FHIB7SQ3UGJVPW53BXOALP75YXJBBXQL7EAFB6NJNA"


class TrustedServerTestCase(NkeysServerTestCase):
    """ClientJWTAuthTest: operator mode with a memory resolver; the user's JWT, seed and
    .creds file (and two broken .creds files) are made here, where the tests read them."""

    def setUp(self):
        from rayjet.auth.jwt import creds, issue
        from rayjet.auth.nkeys import KeyPair

        operator, account, user = (KeyPair.create("O"), KeyPair.create("A"),
                                   KeyPair.create("U"))

        def account_jwt(subject: str) -> str:
            return issue({"sub": subject, "nats": {"type": "account", "version": 2}},
                         operator)

        user_jwt = issue({"sub": user.public_key, "name": "foo-user",
                          "nats": {"type": "user", "version": 2, "pub": {}, "sub": {}}},
                         account)
        nk = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nkeys")
        os.makedirs(nk, exist_ok=True)
        files = {"foo-user.jwt": user_jwt, "foo-user.nk": user.seed,
                 "foo-user.creds": creds(user_jwt, user.seed),
                 # the seed's marker with no seed after it (nats.py: invalid credentials)
                 "bad-user.creds": creds(user_jwt, "").split(
                     "-----BEGIN USER NKEY SEED-----")[0] + "-----BEGIN USER NKEY SEED-----",
                 "bad-user2.creds": creds(user_jwt, "SUNOTASEED")}
        for name, text in files.items():
            with open(os.path.join(nk, name), "w") as f:
                f.write(text)
        op_jwt = issue({"sub": operator.public_key, "nats": {"type": "operator",
                                                              "version": 2}}, operator)
        self._serve_tls(
            f"operator: \"{op_jwt}\"\nresolver: MEMORY\nresolver_preload: {{\n"
            f"  {account.public_key}: \"{account_jwt(account.public_key)}\"\n"
            f"  {_RAW_CREDS_ACCOUNT}: \"{account_jwt(_RAW_CREDS_ACCOUNT)}\"\n}}\n")


class SingleJetStreamServerTestCase(SingleServerTestCase):
    jetstream = True

    def tearDown(self):
        super().tearDown()
        # nats.py's harness runs the server in a process of its own, ours runs in the
        # tests' process: a test that turns on allocation tracing (test_fetch_cancelled_
        # errors_raised calls tracemalloc.start() and never stops it) would slow the gateway
        # of every later test two- to threefold
        if tracemalloc.is_tracing():
            tracemalloc.stop()


# what nats.py's js-limits.conf gives its server: a JetStream domain and these account
# limits (its tests assert them back from account info)
LIMITS_DOMAIN = "test-domain"
LIMITS = {"max_memory": 64 * 1024 * 1024, "max_storage": 32 * 1024 * 1024, "max_streams": 10,
          "max_consumers": 20, "max_ack_pending": 100, "memory_max_stream_bytes": 2048,
          "storage_max_stream_bytes": 4096, "max_bytes_required": True}


class SingleJetStreamServerLimitsTestCase(SingleJetStreamServerTestCase):
    """nats.py runs these with js-limits.conf: the same domain and account limits here."""

    def setUp(self):
        from rayjet import AccountLimits

        self.server_pool = []
        self.loop = asyncio.new_event_loop()
        js = _rayjet()
        _empty(js)
        js.set_account_limits(AccountLimits(**LIMITS))
        server = NATSD(port=4222, with_jetstream=True, domain=LIMITS_DOMAIN)
        server._fresh = False
        self.server_pool.append(server)
        start_natsd(server)

    def tearDown(self):
        from rayjet import AccountLimits

        super().tearDown()
        _rayjet().set_account_limits(AccountLimits())


def get_config_file(file_path: str) -> str:
    """A file beside the tests (the nkeys server case writes its seed there)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), file_path)


def async_test(test_case_fun, timeout=5):
    def wrapper(test_case, *args, **kw):
        asyncio.set_event_loop(test_case.loop)
        return asyncio.run(asyncio.wait_for(test_case_fun(test_case, *args, **kw), timeout))

    wrapper.__name__ = test_case_fun.__name__
    return wrapper


def async_long_test(test_case_fun, timeout=20):
    return async_test(test_case_fun, timeout)
