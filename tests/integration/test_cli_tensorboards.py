"""``det tensorboard start`` says in one line that det does not run TensorBoard yet (the
master's 501), and exits non-zero."""

from __future__ import annotations

import pytest

from tests.integration import cli_support
from tests.integration.cli_support import Det

pytestmark = pytest.mark.integration
cli_master = cli_support.cli_master
det = cli_support.det


def test_tensorboard_start_says_it_is_not_built(det: Det) -> None:
    det.login()
    r = det("tensorboard", "start", "1")
    assert r.rc != 0
    lines = [line for line in r.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "det does not run TensorBoard yet" in lines[0], r.err
