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


def _self_signed(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


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
