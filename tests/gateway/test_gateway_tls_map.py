"""verify_and_map: a client's certificate names its user (an email or DNS name, else its
subject), compared with nats-server reading the same configuration file."""

from __future__ import annotations

import datetime
import ipaddress
import json
import socket
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.gateway.test_gateway_auth import gateway_with, nats_server


def _issue(directory: Path, stem: str, subject: x509.Name, san: list, ca=None):
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = (ca[0].subject, ca[1]) if ca else (subject, key)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=1))
               .not_valid_after(now + datetime.timedelta(days=1)))
    if ca is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), False)
    cert = builder.sign(issuer_key, hashes.SHA256())
    (directory / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / f"{stem}-key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return cert, key


def _name(**attrs) -> x509.Name:
    oids = {"O": NameOID.ORGANIZATION_NAME, "CN": NameOID.COMMON_NAME}
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in attrs.items()])


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    ca = _issue(d, "ca", _name(CN="test CA"), [])
    _issue(d, "server", _name(CN="localhost"),
           [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))], ca)
    _issue(d, "alice", _name(CN="Alice"), [x509.RFC822Name("alice@example.com")], ca)
    _issue(d, "bob", _name(O="Acme", CN="bob"), [], ca)
    _issue(d, "eve", _name(CN="eve"), [], ca)
    (d / "server.conf").write_text(f"""
tls {{
  cert_file: "{d}/server.pem"
  key_file: "{d}/server-key.pem"
  ca_file: "{d}/ca.pem"
  verify_and_map: true
}}
accounts {{
  A: {{ users: [ {{user: "alice@example.com"}}
                 {{user: "CN=bob,O=Acme", permissions: {{publish: "x"}}}} ] }}
}}
""")
    return d


def _session(port: int, pki: Path, who: str | None) -> list[str]:
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    f = raw.makefile("rb")
    info = json.loads(f.readline()[5:])
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if who:
        ctx.load_cert_chain(str(pki / f"{who}.pem"), str(pki / f"{who}-key.pem"))
    out = [f"tls_verify={info.get('tls_verify')}"]
    try:
        sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"protocol":1}\r\n'
                     b"PUB y 1\r\nz\r\nPING\r\n")
        buf = b""
        while b"PONG" not in buf:
            data = sock.recv(4096)
            if not data:
                out.append("<closed>")
                break
            buf += data
        out += [line for line in buf.decode().split("\r\n")
                if line and not line.startswith("INFO")]
    except (ssl.SSLError, OSError) as exc:
        out.append(f"<refused: {type(exc).__name__}>")
    finally:
        raw.close()
    return out


def _all(port: int, pki: Path) -> dict[str, list[str]]:
    out = {who or "none": _session(port, pki, who) for who in ("alice", "bob", "eve", None)}
    # without a certificate the handshake fails: nats-server's TLS alert reaches the client
    # as an SSLError, the gateway's as the connection closing; either way it is refused
    out["none"] = ["<refused>" if s.startswith("<") else s for s in out["none"]]
    return out


def test_certificates_map_to_users_as_on_nats_server(pki):
    with nats_server(pki / "server.conf") as (port, _):
        expected = _all(port, pki)
    assert expected["alice"][-1] == "PONG" and "Authorization" in "".join(expected["eve"])
    with gateway_with(pki / "server.conf") as gw:
        got = _all(gw.port, pki)
    assert got == expected
