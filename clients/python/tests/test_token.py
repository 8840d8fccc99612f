"""Beyond loopback a host needs a bearer token: a host listening on 0.0.0.0 with --token-file
(and TLS) refuses calls without the token or with a wrong one (UNAUTHENTICATED), and serves the
right one. The client connects through a non-loopback address of this machine when it has one."""

from __future__ import annotations

import socket
from pathlib import Path

import grpc
import pytest

from tli_client import Client, Tls, TemplateConfig, Unauthenticated, synthetic


def reachable_address() -> str:
    """This machine's address on its default route (no packet is sent), else loopback."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))
            address: str = s.getsockname()[0]
            return address
    except OSError:
        return "127.0.0.1"


def connect(port: int, ca: Path, token: str | None) -> Client:
    # The certificate names localhost; the address may be another of this machine's.
    return Client(
        f"https://{reachable_address()}:{port}",
        token=token,
        tls=Tls(ca_cert=ca, server_name="localhost"),
        timeout=30.0,
    )


def test_a_token_is_required_beyond_loopback(secure_host: tuple[int, str, Path]) -> None:
    port, token, ca = secure_host
    for wrong in (None, token + "x", ""):
        with connect(port, ca, wrong) as c:
            with pytest.raises(Unauthenticated) as e:
                c.plugins()
            assert e.value.code is grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(Unauthenticated):
                list(c.list())
            with pytest.raises(Unauthenticated):
                next(iter(c.watch(1)))

    with connect(port, ca, token) as c:
        assert "template" in c.plugins()
        job = c.start(TemplateConfig(hidden_sizes=[4]), synthetic(300, seed=5), steps=10, name="secure")
        assert c.wait(job, interval_ms=50).is_completed
        assert [j.job_id for j in c.list()] == [job.job_id]
