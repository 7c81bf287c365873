"""det-master's SIGTERM: the first stops it as Ctrl-C would, a second one during the shutdown
does not cut the shutdown short (a CI run's user API process died with "release unlocked lock"
when a second SIGTERM came while waitress waited for its threads)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

# The master's handler, a serve that blocks, and a shutdown that takes a while (waitress waits
# up to 5 s for its busy threads).
PROCESS = textwrap.dedent(
    """
    import signal, time
    from det.master.__main__ import _exit_on_signal
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        print("serving", flush=True)  # in the try: the first SIGTERM may come at once
        time.sleep(60)
    except KeyboardInterrupt:
        print("stopping", flush=True)
        try:
            time.sleep(1.5)
        finally:
            print("stopped", flush=True)
    """
)


def test_a_second_sigterm_during_the_shutdown_is_ignored() -> None:
    with subprocess.Popen(  # closes the pipes however the test ends
        [sys.executable, "-c", PROCESS],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "serving"
            proc.send_signal(signal.SIGTERM)
            assert proc.stdout.readline().strip() == "stopping"
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err
    assert out.split() == ["stopped"]
    assert "Traceback" not in err
