"""Ship a VM's boot and master logs to CloudWatch Logs or Cloud Logging (runs on the VM).

``python -m det.deploy.common.logship --cloud aws --region R --target GROUP FILE...`` tails the
files (from their start, remembering offsets across restarts in ``--state``) and sends new lines
every few seconds: AWS to the log group ``GROUP``, stream ``<instance id>/<file name>``
(boto3 with the instance role); GCP to the log ``projects/P/logs/TARGET`` as ``gce_instance``
entries (the Logging REST API through google-auth with the VM's service account). The vendor
agents are heavy; this is the part of them det needs. A failed send is retried at the next
round; lines are never re-sent once acknowledged.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path

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


def aws_sender(region: str, group: str, instance: str) -> Sender:
    import boto3

    client = boto3.client("logs", region_name=region)
    made: set[str] = set()

    def send(name: str, events: list[tuple[int, str]]) -> None:
        stream = f"{instance}/{name}"
        if stream not in made:
            with contextlib.suppress(client.exceptions.ResourceAlreadyExistsException):
                client.create_log_stream(logGroupName=group, logStreamName=stream)
            made.add(stream)
        client.put_log_events(
            logGroupName=group,
            logStreamName=stream,
            logEvents=[{"timestamp": ts, "message": line or " "} for ts, line in events],
        )

    return send


def gcp_sender(project: str, log_name: str, instance: str) -> Sender:
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/logging.write"])
    session = AuthorizedSession(credentials)  # type: ignore[no-untyped-call]
    endpoint = os.environ.get("DET_LOGGING_ENDPOINT", "https://logging.googleapis.com")

    def send(name: str, events: list[tuple[int, str]]) -> None:
        body = {
            "logName": f"projects/{project}/logs/{log_name}",
            "resource": {"type": "global", "labels": {"project_id": project}},
            "labels": {"instance": instance, "file": name},
            "entries": [
                {
                    "textPayload": line,
                    "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts / 1000)) + "Z",
                }
                for ts, line in events
            ],
        }
        response = session.post(f"{endpoint}/v2/entries:write", data=json.dumps(body), timeout=30)
        response.raise_for_status()

    return send


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="det-logship", description=__doc__)
    p.add_argument("--cloud", choices=["aws", "gcp"], required=True)
    p.add_argument("--target", required=True, help="log group (AWS) or log name (GCP)")
    p.add_argument("--region", default="")
    p.add_argument("--project", default="")
    p.add_argument("--instance", default=socket.gethostname())
    p.add_argument("--state", default="/var/lib/det/logship.json")
    p.add_argument("--interval", type=float, default=5.0)
    p.add_argument("--once", action="store_true", help="send what is there and exit")
    p.add_argument("files", nargs="+")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    send: Sender = (
        aws_sender(args.region, args.target, args.instance)
        if args.cloud == "aws"
        else gcp_sender(args.project, args.target, args.instance)
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
