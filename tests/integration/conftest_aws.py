"""AWS fixtures: one moto server per session, wiped before each test that uses it.

Register them in a test module by assigning them at module level
(``moto_server = conftest_aws.moto_server``; ``aws_endpoint = conftest_aws.aws_endpoint``), or
for every test with ``pytest_plugins = ["tests.integration.conftest_aws"]`` in the root conftest.

``aws_endpoint`` sets ``AWS_ENDPOINT_URL``, dummy credentials and the region for the test, so any
boto3 client made during the test talks to moto.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.moto_server import MotoServer, aws_env


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = MotoServer(log_dir=tmp_path_factory.mktemp("moto")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def aws_endpoint(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> str:
    moto_server.reset()
    for key, value in aws_env(moto_server.endpoint).items():
        monkeypatch.setenv(key, value)
    return moto_server.endpoint
