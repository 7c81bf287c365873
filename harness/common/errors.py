"""The errors of det's task-side packages (``det.common``, ``det.core``, ``det.storage``); the
CLI and the agent, which talk to the master through :mod:`det.common.api`, translate the
``MasterCallError`` branch into their own (``det.cli.errors``, ``det.agent.errors``)::

    HarnessError                      root: catch this for "det's harness failed"
    ├── CertError (also ValueError)   a DET_MASTER_CERT_FILE/NAME setting cannot be used
    ├── CheckpointNotFoundError       no checkpoint with that storage id (det.storage)
    └── MasterCallError               a call to the master failed (the client's side; the
        │                             master's own root is det.master.errors.MasterError)
        ├── MasterUnreachable         no answer: refused, reset, timed out (after the retries)
        ├── MasterTLSError            the master's certificate cannot be verified, or the TLS
        │                             handshake failed (never retried: it would fail again)
        └── MasterStatusError         the master answered an error status (.status, .body)
            └── NotFoundError         404

``det.core.InvalidHP`` stands outside the tree on purpose: user code raises it to end a trial
as "invalid hyperparameters"; it is a signal to det, not an error of det.

``MasterStatusError.rejected`` tells a refusal (4xx: the request is wrong, retrying cannot help)
from an outage that outlasted the retries (5xx). Only ``MasterUnreachable`` and a 5xx
``MasterStatusError`` mean "the master is not there"; a 4xx never does.

Runs inside task containers (Python 3.8+, standard library only).
"""

from __future__ import annotations

import json
import re


class HarnessError(Exception):
    """Root of the errors det's task-side code raises."""


class CertError(HarnessError, ValueError):
    """A certificate setting cannot be used; the message names the setting and the file."""


class CheckpointNotFoundError(HarnessError):
    """No checkpoint with that storage id in the checkpoint storage."""


class MasterCallError(HarnessError):
    """Talking to the master failed; the message is one line naming the master or the call."""


class MasterUnreachable(MasterCallError):
    """The master did not answer (connection refused or reset, timeout), after the retries."""

    def __init__(self, master_url: str, detail: str) -> None:
        super().__init__(f"cannot reach the master at {master_url}: {detail}")
        self.master_url = master_url
        self.detail = detail


class MasterTLSError(MasterCallError):
    """The master's TLS certificate cannot be verified (or the TLS handshake failed)."""


class MasterStatusError(MasterCallError):
    """The master answered with an error status."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path} failed with HTTP {status}: {body[:500]}")
        self.method = method
        self.path = path
        self.status = status
        self.body = body

    @property
    def rejected(self) -> bool:
        """A 4xx: the master refused the request itself (it is up; retrying cannot help)."""
        return 400 <= self.status < 500

    @property
    def message(self) -> str:
        """The master's own message: ``message`` (or gRPC-gateway's ``error.error``) of a JSON
        body, else the body's text."""
        try:
            body = json.loads(self.body)
        except ValueError:
            return _one_line(self.body)
        if isinstance(body, dict):
            error = body.get("error")
            text = body.get("message") or (error.get("error") if isinstance(error, dict) else error)
            if text:
                return str(text)
        return _one_line(self.body)


def _one_line(body: str) -> str:
    """A body that is not the master's JSON (a proxy's or a platform's page) as one short line:
    an HTML page's title, else its text without tags, whitespace collapsed."""
    title = re.search(r"<title[^>]*>(.*?)</title>", body, re.IGNORECASE | re.DOTALL)
    text = title.group(1) if title else re.sub(r"<[^>]*>", " ", body)
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:197] + "..."


class NotFoundError(MasterStatusError):
    """The master answered 404."""
