"""Sends queued webhook events (``webhook_events``): never inside a transaction, never in the
control loop's own thread.

The loop's leader calls :func:`kick` every pass; it starts one daemon thread when none runs,
which drains the due events and ends. Each batch is claimed in a short transaction
(``FOR UPDATE SKIP LOCKED``, then a lease: ``next_attempt_at`` moved a minute on), sent with no
transaction open, and its outcome written in another short one. A 2xx is delivered; a 4xx is
final (as Determined treats it); anything else (5xx, refused, timeout, a blocked address) is
tried again after 1, 2, 4, 8 ... s (at most a minute) up to :data:`MAX_ATTEMPTS` times. A
non-admin's webhook is sent under the egress policy (:mod:`det.master.egress`), judged on the
address connected to; what is recorded is the status, or why no answer came, never the body. A master
that dies mid-send leaves the lease to run out and the next leader sends again: a receiver
may see an event twice (``event_id`` tells them apart).

Signing as Determined's master does: ``X-Determined-AI-Signature-Timestamp`` is the Unix time
and ``X-Determined-AI-Signature`` the hex HMAC-SHA256, under the cluster's webhook signing key,
of ``"<timestamp>,<body>"``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
import threading
import time

import requests
from psycopg.rows import class_row

from det.master import egress
from det.master.db import Conn
from det.master.handles import MasterState

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
BATCH = 10
TIMEOUT = 10.0  # seconds for one request
LEASE_SECONDS = 60

_thread: threading.Thread | None = None
_lock = threading.Lock()


def signing_key(state: MasterState) -> bytes:
    """The configured ``webhooks.signing_key``, else one derived from the cluster's secret
    (the same in every master process of the cluster)."""
    configured = state.config.webhooks.signing_key
    if configured:
        return configured.encode()
    return hmac.new(state.token_secret.encode(), b"det-webhook-signing", hashlib.sha256).digest()


def signing_key_text(state: MasterState) -> str:
    configured = state.config.webhooks.signing_key
    return configured or signing_key(state).hex()


def sign(key: bytes, timestamp: int, body: bytes) -> str:
    return hmac.new(key, str(timestamp).encode() + b"," + body, hashlib.sha256).hexdigest()


def post(
    url: str, body: bytes, key: bytes | None, policy: egress.Policy
) -> tuple[int | None, str | None]:
    """One POST under the egress ``policy``; returns (status, error). Only the status of an
    answer is kept, never its body (an internal service's answer is not the webhook owner's to
    read). No redirects are followed (a redirect could lead a restricted webhook to an address
    it may not use)."""
    headers = {"Content-Type": "application/json; charset=UTF-8"}
    if key is not None:
        t = int(time.time())
        headers["X-Determined-AI-Signature-Timestamp"] = str(t)
        headers["X-Determined-AI-Signature"] = sign(key, t, body)
    try:
        with egress.session(policy) as http:
            r = http.post(url, data=body, headers=headers, timeout=TIMEOUT, allow_redirects=False)
            r.close()
    except requests.RequestException as e:
        refused = egress.refusal_in(e)
        if refused is not None:
            return None, str(refused)
        return None, f"{type(e).__name__}: {e}"[:500]
    return r.status_code, None


@dataclasses.dataclass(frozen=True, slots=True)
class _Due:
    """A queued event due for a delivery attempt (:func:`_claim`)."""

    id: int
    url: str
    payload: str
    attempts: int
    #: Whether its webhook was made by an admin (an admin's may reach any address).
    by_admin: bool


def _claim(conn: Conn) -> list[_Due]:
    with conn.transaction():
        rows = (
            conn.cursor(row_factory=class_row(_Due))
            .execute(
                "SELECT e.id, e.url, e.payload, e.attempts, coalesce(u.admin, false) AS by_admin"
                " FROM webhook_events e LEFT JOIN webhooks w ON w.id = e.webhook_id"
                " LEFT JOIN users u ON u.id = w.created_by"
                " WHERE e.delivered_at IS NULL AND e.failed_at IS NULL AND e.next_attempt_at <= now()"
                " ORDER BY e.id LIMIT %s FOR UPDATE OF e SKIP LOCKED",
                (BATCH,),
            )
            .fetchall()
        )
        if rows:
            conn.execute(
                "UPDATE webhook_events SET attempts = attempts + 1, last_attempt_at = now(),"
                " next_attempt_at = now() + make_interval(secs => %s) WHERE id = ANY(%s)",
                (LEASE_SECONDS, [r.id for r in rows]),
            )
    return rows


def _record(conn: Conn, event: _Due, status: int | None, error: str | None) -> None:
    attempts = event.attempts + 1
    with conn.transaction():
        if status is not None and 200 <= status < 300:
            conn.execute(
                "UPDATE webhook_events SET last_status = %s, last_error = NULL,"
                " delivered_at = now() WHERE id = %s",
                (status, event.id),
            )
        elif (status is not None and 400 <= status < 500) or attempts >= MAX_ATTEMPTS:
            conn.execute(
                "UPDATE webhook_events SET last_status = %s, last_error = %s, failed_at = now()"
                " WHERE id = %s",
                (status, error, event.id),
            )
            logger.warning("webhook event %s failed for good: %s %s", event.id, status, error)
        else:
            delay = min(2 ** (attempts - 1), 60)
            conn.execute(
                "UPDATE webhook_events SET last_status = %s, last_error = %s,"
                " next_attempt_at = now() + make_interval(secs => %s) WHERE id = %s",
                (status, error, delay, event.id),
            )
            logger.debug("webhook event %s: %s %s; again in %s s", event.id, status, error, delay)


def drain(state: MasterState) -> int:
    """Sends every due event; returns how many were attempted."""
    key = signing_key(state)
    done = 0
    while True:
        with state.pool.connection() as conn:
            batch = _claim(conn)
        if not batch:
            return done
        for event in batch:
            policy = egress.Policy.of(state.config.egress, restricted=not event.by_admin)
            status, error = post(event.url, event.payload.encode(), key, policy)
            with state.pool.connection() as conn:
                _record(conn, event, status, error)
            done += 1


def _run(state: MasterState) -> None:
    try:
        drain(state)
    except Exception:
        logger.exception("webhook delivery failed; the next pass tries again")


def kick(state: MasterState) -> None:
    """Starts the sender thread unless it runs (called by the loop's webhooks pass)."""
    global _thread
    with _lock:
        if _thread is not None and _thread.is_alive():
            return
        _thread = threading.Thread(target=_run, args=(state,), name="webhooks", daemon=True)
        _thread.start()
