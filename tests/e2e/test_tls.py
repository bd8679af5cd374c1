"""`atom serve` over TLS, with a self-signed certificate made here."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from atom.scaling.commands import serve_command
from atom.vocabulary.config import Settings
from tests.e2e.conftest import free_port

pytestmark = pytest.mark.slow


def test_the_tls_flags_reach_hypercorn() -> None:
    settings = Settings(ssl_certfile="c.pem", ssl_keyfile="k.pem", ssl_ca_certs="ca.pem")
    command = serve_command("127.0.0.1:8443", settings)
    for pair in (["--certfile", "c.pem"], ["--keyfile", "k.pem"], ["--ca-certs", "ca.pem"]):
        at = command.index(pair[0])
        assert command[at : at + 2] == pair
    assert "CERT_REQUIRED" in command  # with CA certificates, clients must present one


def test_atom_serve_answers_over_https(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    port = free_port()
    flags = ["--port", str(port), "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]
    proc = subprocess.Popen([sys.executable, "-m", "atom.cli", "serve", *flags])
    url = f"https://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600  # room for a cold start, as the e2e server has
        while True:
            assert proc.poll() is None, "the server exited during start-up"
            assert time.monotonic() < deadline, "the server did not become healthy"
            try:
                if httpx.get(f"{url}/health", verify=str(cert)).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        models = httpx.get(f"{url}/v1/models", verify=str(cert))
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)  # plain HTTP is refused
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert models.status_code == 200 and models.json()["data"]
