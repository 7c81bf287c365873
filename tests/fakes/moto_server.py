"""moto in server mode as a subprocess: a real HTTP endpoint for boto3 (EC2, S3, IAM…).

``MotoServer`` starts ``moto_server`` on a free port with its output in a log file (it logs every
request; a pipe nobody reads would block it), waits until it answers, and ``reset()`` wipes
every service in every region (``POST /moto-api/reset``) between tests.

``aws_env(endpoint)`` is the environment that routes boto3 there with dummy credentials.
``Ec2ErrorInjector`` makes one client see AWS errors moto cannot produce (capacity, quotas).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests import stall_clock
from tests.ports import free_port

REGION = "us-east-1"


def aws_env(endpoint: str, region: str = REGION) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
        # Never read a real profile or the instance metadata service.
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


class MotoServer:
    def __init__(self, log_dir: Path | None = None) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._own_dir = log_dir is None
        self._dir = Path(tempfile.mkdtemp(prefix="det-moto-")) if log_dir is None else log_dir
        self.log_path = self._dir / "moto_server.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> MotoServer:
        exe = shutil.which("moto_server", path=str(Path(sys.executable).parent))
        cmd = [exe] if exe else [sys.executable, "-m", "moto.server"]
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                [*cmd, "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"moto_server exited: {self.log_path.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1).close()
                return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto_server did not answer within {timeout}s")

    def reset(self) -> None:
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
        urllib.request.urlopen(request, timeout=10).close()

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                stall_clock.wait_process(self._proc, 10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if self._own_dir:
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Body:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: object) -> Iterator[bytes]:
        yield self._data


class Ec2ErrorInjector:
    """Answers chosen EC2 calls of one boto3 client with an AWS error, before they are sent.

    A botocore ``before-send`` hook (moto has no error injection): the next ``times`` calls of
    ``operation`` get ``code`` with HTTP ``status`` (real EC2 answers capacity errors with 500,
    quota errors with 400). ``calls`` counts every attempt of ``operation`` that reached the hook,
    injected or not, so tests can see whether botocore retried.
    """

    def __init__(
        self, client: Any, operation: str, code: str, *, status: int = 500, times: int = 1
    ):
        self.operation = operation
        self.code = code
        self.status = status
        self.remaining = times
        self.calls = 0
        client.meta.events.register(f"before-send.ec2.{operation}", self._before_send)

    def _before_send(self, request: Any, **_: object) -> Any:
        from botocore.awsrequest import AWSResponse

        self.calls += 1
        if self.remaining <= 0:
            return None  # send it to moto
        self.remaining -= 1
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
            f"<Code>{self.code}</Code><Message>injected {self.code}</Message>"
            "</Error></Errors><RequestID>injected</RequestID></Response>"
        ).encode()
        return AWSResponse(request.url, self.status, {"Content-Type": "text/xml"}, _Body(body))
