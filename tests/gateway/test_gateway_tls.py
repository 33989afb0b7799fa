"""TLS from Python's ssl: nats.py connects over TLS with a certificate it trusts; a client
that speaks plain text to a TLS gateway gets nowhere. A core-only gateway (no JetStream),
so no Ray is needed."""

from __future__ import annotations

import asyncio
import datetime
import ssl

import nats
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from rayjet.gateway import Gateway, GatewayOptions
from tests.tls_certs import self_signed


def _self_signed(tmp_path):
    return self_signed(tmp_path, "localhost")


def test_tls_round_trip_and_plain_text_refused(tmp_path):
    cert, key = _self_signed(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=str(cert))

    async def run():
        gw = Gateway(GatewayOptions(port=0, tls=server_ctx))
        await gw.start()
        try:
            nc = await nats.connect(f"tls://localhost:{gw.port}", tls=client_ctx)
            sub = await nc.subscribe("secure.*")
            await nc.publish("secure.hello", b"over tls")
            msg = await sub.next_msg(timeout=5)
            await nc.close()
            reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
            writer.write(b'CONNECT {}\r\nPUB secure.x 1\r\ny\r\nPING\r\n')
            await writer.drain()
            plain = await asyncio.wait_for(reader.read(100), 5)
            writer.close()
            return msg.data, plain
        finally:
            await gw.stop()

    data, plain = asyncio.run(run())
    assert data == b"over tls"
    assert b"PONG" not in plain  # the TLS handshake fails: no plain-text conversation


@pytest.mark.parametrize("verbose", [True, False])
def test_core_only_gateway_reports_no_jetstream(verbose):
    async def run():
        gw = Gateway(GatewayOptions(port=0))
        await gw.start()
        try:
            nc = await nats.connect(f"nats://127.0.0.1:{gw.port}", verbose=verbose)
            info = nc._server_info
            await nc.close()
            return info
        finally:
            await gw.stop()

    info = asyncio.run(run())
    assert info["jetstream"] is False and info["headers"] is True


def _key_and_cert(name: str, issuer=None, ca: bool = False):
    """A key and a certificate for ``name``, signed by ``issuer`` ((key, cert)) or itself."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    sign_key, issuer_name = (issuer[0], issuer[1].subject) if issuer else (key, subject)
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=1))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]),
                                        critical=False)
    return key, builder.sign(sign_key, hashes.SHA256())


def _write(tmp_path, stem: str, key, cert):
    cert_path, key_path = tmp_path / f"{stem}.pem", tmp_path / f"{stem}-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture
def pki(tmp_path):
    """A CA, the gateway's certificate and a client's (both signed by it), and a client
    certificate of another CA."""
    ca = _key_and_cert("rayjet test CA", ca=True)
    other_ca = _key_and_cert("another CA", ca=True)
    paths = {"ca": _write(tmp_path, "ca", *ca)[0],
             "server": _write(tmp_path, "server", *_key_and_cert("localhost", ca)),
             "client": _write(tmp_path, "client", *_key_and_cert("app", ca)),
             "stranger": _write(tmp_path, "stranger", *_key_and_cert("app", other_ca))}
    return paths


def test_mutual_tls_admits_clients_with_a_certificate_the_ca_signed(pki):
    from rayjet.gateway import tls_context

    server_ctx = tls_context(*pki["server"], ca=pki["ca"])

    def client_ctx(which):
        ctx = ssl.create_default_context(cafile=str(pki["ca"]))
        if which:
            ctx.load_cert_chain(*pki[which])
        return ctx

    async def attempt(port, which):
        try:
            nc = await nats.connect(f"tls://localhost:{port}", tls=client_ctx(which),
                                    allow_reconnect=False, connect_timeout=3)
        except Exception as exc:  # noqa: BLE001 - refused: how nats.py reports it varies
            return type(exc).__name__
        sub = await nc.subscribe("m.*")
        await nc.publish("m.tls", b"mutual")
        msg = await sub.next_msg(timeout=5)
        info = nc._server_info
        await nc.close()
        return msg.data, info.get("tls_verify")

    async def run():
        gw = Gateway(GatewayOptions(port=0, tls=server_ctx))
        await gw.start()
        try:
            return {w: await attempt(gw.port, w) for w in ("client", None, "stranger")}
        finally:
            await gw.stop()

    got = asyncio.run(run())
    assert got["client"] == (b"mutual", True)
    assert isinstance(got[None], str) and isinstance(got["stranger"], str)


def test_the_cli_client_presents_its_certificate_or_says_which_one_it_needs(pki, monkeypatch):
    from rayjet.errors import ServiceUnavailableError
    from rayjet.gateway import tls_context
    from rayjet.remote import connection as remote

    async def serve(started, stop):
        gw = Gateway(GatewayOptions(port=0, tls=tls_context(*pki["server"], ca=pki["ca"])))
        await gw.start()
        started.append(gw.port)
        await stop.wait()
        await gw.stop()

    import threading

    loop = asyncio.new_event_loop()
    started: list[int] = []
    stop = asyncio.Event()
    thread = threading.Thread(target=loop.run_until_complete, args=(serve(started, stop),))
    thread.start()
    try:
        while not started:
            assert thread.is_alive()
            thread.join(0.01)
        url = f"tls://localhost:{started[0]}"
        monkeypatch.setenv(remote.CA_ENV, str(pki["ca"]))
        monkeypatch.delenv(remote.CERT_ENV, raising=False)
        monkeypatch.delenv(remote.KEY_ENV, raising=False)
        with pytest.raises(ServiceUnavailableError, match="client certificate") as none:
            remote.Requester(url, timeout=5)
        assert remote.CERT_ENV in none.value.hint
        monkeypatch.setenv(remote.CERT_ENV, str(pki["stranger"][0]))
        monkeypatch.setenv(remote.KEY_ENV, str(pki["stranger"][1]))
        with pytest.raises(ServiceUnavailableError) as refused:
            remote.Requester(url, timeout=5)
        assert remote.CERT_ENV in refused.value.hint
        monkeypatch.setenv(remote.CERT_ENV, str(pki["client"][0]))
        monkeypatch.setenv(remote.KEY_ENV, str(pki["client"][1]))
        requester = remote.Requester(url, timeout=5)
        requester.close()
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
