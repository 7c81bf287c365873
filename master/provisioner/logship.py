"""Ship a VM's boot, master and agent logs to CloudWatch Logs or Cloud Logging (runs on the VM).

Standard library only, like ``fetch_release.py`` beside it: it is the first thing a machine's
boot starts, before apt, pip or det exist, so that a failure of those shows in ``det deploy
aws|gcp status``. ``python3 logship.py --cloud aws --region R --target GROUP FILE...`` tails the
files (from their start, remembering offsets across restarts in ``--state``) and sends new lines
every few seconds:

- AWS: ``PutLogEvents`` (CloudWatch Logs JSON API, Signature V4 with the instance role's
  credentials from IMDSv2) to the group ``GROUP``, stream ``<instance id>/<file name>``, made
  with ``CreateLogStream`` once; ``AWS_ENDPOINT_URL_LOGS`` / ``AWS_ENDPOINT_URL`` in tests.
- GCP: ``entries:write`` (Cloud Logging REST API, the service account's token from the metadata
  server) to ``projects/P/logs/TARGET``, each entry labelled with the instance and the file;
  ``DET_LOGGING_ENDPOINT`` in tests.

A failed send is retried at the next round; lines are never re-sent once acknowledged.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for mypy: this script runs before det is installed
    from det.common.jsontypes import JSONObject, JSONValue

logger = logging.getLogger(__name__)

Sender = Callable[[str, list[tuple[int, str]]], None]
"""``send(file_name, [(epoch_ms, line), ...])``"""

_MAX_BATCH = 1000


def read_new(path: Path, offset: int) -> tuple[list[str], int]:
    """Complete lines appended after ``offset``; a truncated file starts over."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return [], 0
    if size < offset:
        offset = 0
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read(1 << 20)
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    chunk = data[: end + 1]
    return chunk.decode("utf-8", "replace").splitlines(), offset + len(chunk)


def ship_once(files: Sequence[Path], offsets: dict[str, int], send: Sender) -> int:
    """Send what is new in each file; returns the number of lines sent."""
    sent = 0
    for path in files:
        lines, new_offset = read_new(path, offsets.get(str(path), 0))
        if not lines:
            offsets[str(path)] = new_offset
            continue
        now = int(time.time() * 1000)
        for start in range(0, len(lines), _MAX_BATCH):
            send(path.name, [(now, line) for line in lines[start : start + _MAX_BATCH]])
        offsets[str(path)] = new_offset
        sent += len(lines)
    return sent


def _fetch_release() -> ModuleType:
    """``fetch_release`` (SigV4, IMDSv2): det's module, or on a VM the file beside this one."""
    try:
        return importlib.import_module("det.master.provisioner.fetch_release")
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        return importlib.import_module("fetch_release")


def _post(url: str, body: bytes, headers: dict[str, str]) -> JSONValue:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: JSONValue = json.loads(response.read() or b"{}")
        return answer


class _AwsCredentials:
    """The instance role's keys (IMDSv2), fetched again before they expire; the environment's
    keys when set (tests, or a machine without a role)."""

    def __init__(self, region: str) -> None:
        self.region = region
        self._keys: tuple[str, str, str | None] | None = None
        self._at = 0.0

    def get(self) -> tuple[str, str, str | None]:
        env = os.environ
        if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
            return (
                env["AWS_ACCESS_KEY_ID"],
                env["AWS_SECRET_ACCESS_KEY"],
                env.get("AWS_SESSION_TOKEN"),
            )
        if self._keys is None or time.monotonic() - self._at > 600:
            access, secret, session, region = _fetch_release().aws_credentials()
            self.region = self.region or region
            self._keys, self._at = (access, secret, session), time.monotonic()
        return self._keys


def aws_sender(region: str, group: str, instance: str) -> Sender:
    fr = _fetch_release()
    credentials = _AwsCredentials(region)
    made: set[str] = set()

    def call(action: str, payload: JSONObject) -> JSONValue:
        access, secret, session = credentials.get()
        endpoint = os.environ.get("AWS_ENDPOINT_URL_LOGS") or os.environ.get("AWS_ENDPOINT_URL")
        url = (endpoint or f"https://logs.{credentials.region}.amazonaws.com").rstrip("/") + "/"
        body = json.dumps(payload).encode()
        extra = {
            "content-type": "application/x-amz-json-1.1",
            "x-amz-target": f"Logs_20140328.{action}",
        }
        headers = fr.sigv4_headers(
            "POST", url, access_key=access, secret_key=secret, session_token=session,
            region=credentials.region, service="logs", body=body, extra=extra,
        )  # fmt: skip
        try:
            return _post(url, body, headers)
        except urllib.error.HTTPError as e:
            answer = e.read().decode("utf-8", "replace")
            raise ShipError(action, e.code, answer) from None

    def send(name: str, events: list[tuple[int, str]]) -> None:
        stream = f"{instance}/{name}"
        if stream not in made:
            try:
                call("CreateLogStream", {"logGroupName": group, "logStreamName": stream})
            except ShipError as e:
                if "ResourceAlreadyExistsException" not in e.answer:
                    raise
            made.add(stream)
        call(
            "PutLogEvents",
            {
                "logGroupName": group,
                "logStreamName": stream,
                "logEvents": [{"timestamp": ts, "message": line or " "} for ts, line in events],
            },
        )

    return send


class ShipError(Exception):
    def __init__(self, action: str, code: int, answer: str) -> None:
        super().__init__(f"{action}: HTTP {code}: {answer[:300]}")
        self.answer = answer


def _gcp_token() -> str:
    return str(json.loads(_gcp_metadata("instance/service-accounts/default/token"))["access_token"])


def _gcp_metadata(path: str) -> str:
    host = os.environ.get("GCE_METADATA_HOST", "metadata.google.internal")
    request = urllib.request.Request(
        f"http://{host}/computeMetadata/v1/{path}", headers={"Metadata-Flavor": "Google"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(response.read().decode()).strip()


def gcp_sender(project: str, log_name: str, instance: str) -> Sender:
    """``project`` empty: the machine's own (the metadata server's ``project/project-id``)."""
    endpoint = os.environ.get("DET_LOGGING_ENDPOINT", "https://logging.googleapis.com")
    project = project or _gcp_metadata("project/project-id")

    def send(name: str, events: list[tuple[int, str]]) -> None:
        body = {
            "logName": f"projects/{project}/logs/{log_name}",
            "resource": {"type": "global", "labels": {"project_id": project}},
            "labels": {"instance": instance, "file": name},
            "entries": [
                {
                    "textPayload": line,
                    "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts / 1000))
                    + f".{ts % 1000:03d}Z",
                }
                for ts, line in events
            ],
        }
        headers = {"Authorization": f"Bearer {_gcp_token()}", "Content-Type": "application/json"}
        try:
            _post(f"{endpoint}/v2/entries:write", json.dumps(body).encode(), headers)
        except urllib.error.HTTPError as e:
            raise ShipError("entries:write", e.code, e.read().decode("utf-8", "replace")) from None

    return send


def instance_name(cloud: str) -> str:
    """This machine's instance id (AWS) or name (GCP), as ``status`` and the consoles name it;
    the host name when the metadata server does not answer in a minute."""
    for _ in range(30):
        try:
            if cloud == "aws":
                fr = _fetch_release()
                return str(fr._imds_get("meta-data/instance-id", fr._imds_token())).strip()
            return _gcp_metadata("instance/name")
        except OSError:
            time.sleep(2)
    return socket.gethostname()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="det-logship", description=__doc__)
    p.add_argument("--cloud", choices=["aws", "gcp"], required=True)
    p.add_argument("--target", required=True, help="log group (AWS) or log name (GCP)")
    p.add_argument("--region", default="")
    p.add_argument("--project", default="")
    p.add_argument("--instance", default="", help="default: the instance id (AWS) or name (GCP)")
    p.add_argument("--state", default="/var/lib/det/logship.json")
    p.add_argument("--interval", type=float, default=5.0)
    p.add_argument("--once", action="store_true", help="send what is there and exit")
    p.add_argument("files", nargs="+")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    instance = args.instance or instance_name(args.cloud)
    send: Sender = (
        aws_sender(args.region, args.target, instance)
        if args.cloud == "aws"
        else gcp_sender(args.project, args.target, instance)
    )
    state = Path(args.state)
    try:
        offsets: dict[str, int] = json.loads(state.read_text())
    except (OSError, ValueError):
        offsets = {}
    files = [Path(f) for f in args.files]
    while True:
        try:
            if ship_once(files, offsets, send):
                state.parent.mkdir(parents=True, exist_ok=True)
                state.write_text(json.dumps(offsets))
        except Exception as e:  # the network or the API: try again next round
            logger.warning("logship: send failed (%s); retrying", e)
        if args.once:
            return 0
        time.sleep(args.interval)


if __name__ == "__main__":
    raise SystemExit(main())
