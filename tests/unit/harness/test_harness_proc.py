"""Signal forwarding of a task's PID 1 (det.common.proc)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any

import pytest

from det.common import proc


def test_a_signal_that_arrives_while_the_child_starts_reaches_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_popen = subprocess.Popen

    def popen_after_a_sigterm(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)  # handled before the child exists
        time.sleep(0.05)  # (the Python-level handler runs at the next bytecode)
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(proc.subprocess, "Popen", popen_after_a_sigterm)
    before = signal.getsignal(signal.SIGTERM)
    started = time.monotonic()
    code = proc.run_forwarding(["sleep", "30"], group=True)
    assert code == 128 + signal.SIGTERM
    assert time.monotonic() - started < 20
    assert signal.getsignal(signal.SIGTERM) == before  # our handler is gone again
