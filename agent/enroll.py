"""``det-agent enroll``: trade the machine's one-time enrollment ticket for this agent's token.

A cloud agent's user data carries a ticket (``DET_ENROLL_TICKET``), never the cluster's agent
token. The bootstrap runs this once, before the agent and so before any task: it posts the
ticket with the agent id of agent.yaml to ``POST /api/v1/agent_enrollments`` and writes the
answer to agent.yaml's ``agent_token_file``, readable by root only. A later boot finds the file
and asks nothing (the ticket is spent by then). Network errors and 5xx are retried until
``--timeout``; a refusal (spent, expired, unknown ticket) is final.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from det.agent.config import AgentConfigError, load_config
from det.agent.master_client import MasterClient, MasterRejected, MasterUnavailable

TICKET_ENV = "DET_ENROLL_TICKET"


def write_private(path: Path, text: str) -> None:
    """``text`` to ``path`` (mode 0600, through a new file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="det-agent enroll", description=__doc__.split("\n")[0])
    p.add_argument("--config-file", type=Path, required=True)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to retry an outage")
    args = p.parse_args(argv)
    try:
        config = load_config(["--config-file", str(args.config_file)])
        if config.agent_token_file is None:
            raise AgentConfigError(
                "agent_token_file: required to enroll (the token is written there)"
            )
        cert = config.master_cert()
    except AgentConfigError as e:
        print(f"det-agent enroll: {e}", file=sys.stderr)
        return 2
    token_file = config.agent_token_file
    if token_file.exists() and token_file.read_text().strip():
        print(f"det-agent enroll: {token_file} exists: already enrolled", file=sys.stderr)
        return 0
    ticket = os.environ.get(TICKET_ENV, "")
    if not ticket:
        print(f"det-agent enroll: {TICKET_ENV} is not set", file=sys.stderr)
        return 2
    client = MasterClient(config.master_url, None, cert=cert)
    deadline = time.monotonic() + args.timeout
    delay = 2.0
    while True:
        try:
            token = client.enroll(ticket, config.agent_id)
            break
        except MasterRejected as e:
            print(f"det-agent enroll: the master refused the ticket: {e}", file=sys.stderr)
            return 1
        except MasterUnavailable as e:
            if time.monotonic() + delay > deadline:
                print(f"det-agent enroll: master unavailable: {e}", file=sys.stderr)
                return 1
            print(f"det-agent enroll: master unavailable ({e}); retrying", file=sys.stderr)
            time.sleep(delay)
            delay = min(delay * 2, 30.0)
    write_private(token_file, token + "\n")
    print(f"det-agent enroll: agent {config.agent_id} enrolled; token in {token_file}")
    return 0
