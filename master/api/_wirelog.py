"""A record of the master's answers, for checking them against Determined's own client.

Off unless ``DET_WIRE_LOG`` names a directory (the test suite sets it). Then every process of the
master appends, to ``wire-<pid>.ndjson`` there, one line per successful JSON answer of a route
whose ``@contract`` names a Determined operation: ``{"op", "message", "status", "body"}``, where
``message`` is the operation's response message in Determined's generated bindings. A streamed
answer (logs, metrics) gives one line per streamed object, ``"stream": true``. The check itself
runs in the official client's own environment (``tests/compat/check_wire.py``): every recorded
body must be parsed by that message's ``from_json``.

Recording never changes or fails an answer: a body over :data:`MAX_BODY` or that is not JSON is
skipped, and an error while recording is logged once. A process records at most
:data:`PER_OPERATION` answers of an operation and :data:`PER_PROCESS` bytes in all (a load test
would otherwise write gigabytes of the same answers).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from typing import Any, NotRequired

from flask import Flask, Response, current_app, request
from typing_extensions import TypedDict

from det.common.jsontypes import JSONValue
from det.master.schemas import d

logger = logging.getLogger(__name__)

ENV = "DET_WIRE_LOG"
MAX_BODY = 1 << 20
PER_OPERATION = 100
PER_PROCESS = 16 << 20

_lock = threading.Lock()
_warned = [False]
_counts: dict[str, int] = {}
_written = [0]


def enabled() -> bool:
    return bool(os.environ.get(ENV))


def install(app: Flask) -> None:
    """Record ``app``'s answers when :data:`ENV` is set."""
    if enabled():
        app.after_request(_after)


class _Entry(TypedDict):
    op: str
    message: str
    status: int
    stream: NotRequired[bool]
    body: JSONValue


def _write(entry: _Entry) -> None:
    line = json.dumps(entry, separators=(",", ":")) + "\n"
    path = os.path.join(os.environ[ENV], f"wire-{os.getpid()}.ndjson")
    with _lock:
        op = entry["op"]
        if _counts.get(op, 0) >= PER_OPERATION or _written[0] + len(line) > PER_PROCESS:
            return
        _counts[op] = _counts.get(op, 0) + 1
        _written[0] += len(line)
        with open(path, "a", encoding="utf-8") as f:
            f.write(line)


def _full(op: str) -> bool:
    """Whether this process has recorded all it will of ``op`` (checked before any parsing, so
    a load test's thousands of answers cost a dictionary lookup each)."""
    return _counts.get(op, 0) >= PER_OPERATION or _written[0] >= PER_PROCESS


def _operation() -> tuple[str, str] | None:
    """The Determined operation and its response message of the request's route, if any."""
    view = current_app.view_functions.get(request.endpoint or "")
    spec = getattr(view, "_det_contract", None)
    if spec is None or not spec.name or spec.name not in d.OPERATIONS:
        return None
    official = d.OPERATIONS[spec.name].response
    return (spec.name, official.__name__) if official is not None else None


def _after(response: Response) -> Response:
    try:
        op = _operation()
        if op is None or not 200 <= response.status_code < 300:
            return response
        name, message = op
        if _full(name):
            return response
        if response.is_streamed:
            response.response = _tee(response.response, name, message, response.status_code)
            return response
        if response.mimetype != "application/json" or (response.content_length or 0) > MAX_BODY:
            return response
        _write(
            {
                "op": name,
                "message": message,
                "status": response.status_code,
                "body": json.loads(response.get_data()),
            }
        )
    except Exception:  # recording must never fail an answer
        _failed()
    return response


def record(operation: str, status: int, body: bytes) -> None:
    """Record an answer given without Flask (:mod:`det.master.api._predispatch`): a JSON
    ``body`` of status ``status`` to the Determined ``operation``, as :func:`_after` records the
    same answer given through Flask."""
    if not enabled() or not 200 <= status < 300 or _full(operation):
        return
    official = d.OPERATIONS[operation].response
    if official is None or len(body) > MAX_BODY:
        return
    try:
        _write(
            {
                "op": operation,
                "message": official.__name__,
                "status": status,
                "body": json.loads(body),
            }
        )
    except Exception:  # recording must never fail an answer
        _failed()


def _failed() -> None:
    if not _warned[0]:
        _warned[0] = True
        logger.exception("wire log: recording failed (further failures are not logged)")


def _tee(chunks: Iterable[Any], name: str, message: str, status: int) -> Iterator[Any]:
    """Pass a streamed answer through, recording each complete NDJSON line."""
    pending = b""
    for chunk in chunks:
        yield chunk
        try:
            pending += chunk.encode() if isinstance(chunk, str) else bytes(chunk)
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if _full(name):
                    break
                if line.strip() and len(line) <= MAX_BODY:
                    body = json.loads(line)
                    _write(
                        {
                            "op": name,
                            "message": message,
                            "status": status,
                            "stream": True,
                            "body": body,
                        }
                    )
        except Exception:
            pending = b""
            if not _warned[0]:
                _warned[0] = True
                logger.exception("wire log: recording a stream failed")
