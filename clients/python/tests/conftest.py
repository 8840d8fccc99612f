"""Fixtures: the hosts the tests talk to, given by the Rust end-to-end test
(tests/tests/e2e/python_client.rs) through the environment:

- ``TLI_TEST_ENDPOINT``: a host on loopback, no token (template and behaviour plugins);
- ``TLI_TEST_SECURE_PORT``, ``TLI_TEST_TOKEN``, ``TLI_TEST_CA_CERT``: a host listening on
  every interface (0.0.0.0) with a bearer token and TLS (certificate for localhost/127.0.0.1);
- ``TLI_TEST_DOCS``: docs/python.md, whose examples are run as written;
- ``TLI_TEST_BUNDLE``: a model bundle (``tli train local --plugin template --save``, trained on
  the ES sample) and ``TLI_TEST_BARS_CSV``: that sample's bar file (the model tests).

Without them the host tests are skipped, unless ``TLI_TEST_REQUIRE_HOSTS=1`` (the e2e test
sets it), which makes a missing host a failure.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from tli_client import Client


def _need(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        if os.environ.get("TLI_TEST_REQUIRE_HOSTS") == "1":
            pytest.fail(f"{name} is not set (the e2e test passes the hosts' addresses)")
        pytest.skip(f"{name} not set: no host to test against")
    return value


@pytest.fixture(autouse=True)
def _no_ambient_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients read TLI_TOKEN / TLI_ENDPOINT; the tests say everything explicitly."""
    monkeypatch.delenv("TLI_TOKEN", raising=False)
    monkeypatch.delenv("TLI_ENDPOINT", raising=False)


@pytest.fixture
def endpoint() -> str:
    return _need("TLI_TEST_ENDPOINT")


@pytest.fixture
def client(endpoint: str) -> Iterator[Client]:
    with Client(endpoint, timeout=60.0) as c:
        yield c


@pytest.fixture
def secure_host() -> tuple[int, str, Path]:
    """(port, token, CA certificate) of the host beyond loopback."""
    return (
        int(_need("TLI_TEST_SECURE_PORT")),
        _need("TLI_TEST_TOKEN"),
        Path(_need("TLI_TEST_CA_CERT")),
    )


@pytest.fixture
def docs() -> Path:
    return Path(_need("TLI_TEST_DOCS"))


@pytest.fixture
def bundle() -> Path:
    """A template model's bundle, trained on the ES sample (``TLI_TEST_BARS_CSV``)."""
    return Path(_need("TLI_TEST_BUNDLE"))


@pytest.fixture
def bars_csv() -> Path:
    return Path(_need("TLI_TEST_BARS_CSV"))
