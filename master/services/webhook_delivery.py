"""Sends queued webhook events (``webhook_events``): never inside a transaction, never in the
control loop's own thread, and never letting one receiver hold up another.

**Per-receiver queues.** A receiver is a URL (the webhook's current one, so a patched URL takes
its queued events along). Each receiver gets at most one event in flight at a time, and up to
``webhooks.delivery.workers`` receivers (10, as Determined sends up to 10 at once) are sent to
concurrently, each by its own thread: a receiver that hangs until the timeout, or is down,
delays only its own queue.

**Claims.** The loop's leader calls :func:`kick` every pass; it starts a dispatcher thread
when none runs (or wakes the one that does). The dispatcher claims, in a short transaction
(``FOR UPDATE SKIP LOCKED``), the oldest due event of each receiver that has none in flight,
and leases it (``leased_until``, a few timeouts ahead); the POST is made with no transaction
open and its outcome written in another short one. A master killed mid-send leaves the lease
to run out and the next leader sends again: deliveries are at least once, and each event keeps
one ``event_id`` across attempts (header ``X-Det-Event-Id``; DEFAULT payloads carry it as
Determined's ``event_id``) for the receiver to deduplicate on.

**Outcomes.** A 2xx is delivered, and the receiver's other waiting events become due at once
(it is back). A 4xx other than 408, 425 and 429 is final (as Determined treats it). Anything
else (5xx, refused, timeout, a blocked address) is tried again after ``retry_initial_seconds``,
doubling up to ``retry_max_seconds``; the receiver's other events wait as long (one probe per
interval, not one per event). An event not delivered ``dead_letter_after_seconds`` after it was
queued or last re-sent is a dead letter (``failed_at``) until an admin re-sends it
(:func:`det.master.services.webhooks.resend`). A non-admin's webhook is sent under the egress
policy (:mod:`det.master.egress`), judged on the address connected to; what is recorded is the
status, or why no answer came, never the body.

Signing as Determined's master does: ``X-Determined-AI-Signature-Timestamp`` is the Unix time
and ``X-Determined-AI-Signature`` the hex HMAC-SHA256, under the cluster's webhook signing key,
of ``"<timestamp>,<body>"``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import hmac
import logging
import threading
import time
import uuid

import requests
from psycopg.rows import class_row

from det.master import db, egress
from det.master.config import WebhookDeliveryConfig
from det.master.db import Conn
from det.master.handles import MasterState

logger = logging.getLogger(__name__)

#: 4xx answers worth trying again (timeout, too early, too many requests); other 4xx are final.
RETRYABLE_4XX = frozenset({408, 425, 429})
EVENT_ID_HEADER = "X-Det-Event-Id"
EVENT_TYPE_HEADER = "X-Det-Event-Type"
#: How long the dispatcher waits for a sender to finish before it looks for due events again.
_POLL_SECONDS = 0.5


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
    url: str,
    body: bytes,
    key: bytes | None,
    policy: egress.Policy,
    *,
    timeout: float = 10.0,
    event: tuple[str, str] | None = None,
) -> tuple[int | None, str | None]:
    """One POST under the egress ``policy``; returns (status, error). ``event``: its id and
    type, sent as headers. Only the status of an answer is kept, never its body (an internal
    service's answer is not the webhook owner's to read). No redirects are followed (a redirect
    could lead a restricted webhook to an address it may not use). ``timeout`` bounds the
    connection and each wait for the answer."""
    headers = {"Content-Type": "application/json; charset=UTF-8"}
    if key is not None:
        t = int(time.time())
        headers["X-Determined-AI-Signature-Timestamp"] = str(t)
        headers["X-Determined-AI-Signature"] = sign(key, t, body)
    if event is not None:
        headers[EVENT_ID_HEADER], headers[EVENT_TYPE_HEADER] = event
    try:
        with egress.session(policy) as http:
            r = http.post(url, data=body, headers=headers, timeout=timeout, allow_redirects=False)
            r.close()
    except requests.RequestException as e:
        refused = egress.refusal_in(e)
        if refused is not None:
            return None, str(refused)
        return None, f"{type(e).__name__}: {e}"[:500]
    return r.status_code, None


def lease_seconds(cfg: WebhookDeliveryConfig) -> float:
    """How long a claimed event is left to its sender: longer than one POST can take (connect
    and answer each within the timeout) before another master may send it again."""
    return 3 * cfg.timeout_seconds + 5


@dataclasses.dataclass(frozen=True, slots=True)
class _Due:
    """A queued event due for a delivery attempt (:func:`_claim`)."""

    id: int
    event_id: uuid.UUID
    event_type: str
    #: Its webhook's URL now (a patched URL takes the queued events along).
    url: str
    payload: str
    attempts: int
    #: Whether its webhook was made by an admin (an admin's may reach any address).
    by_admin: bool


# The oldest due event of each receiver with nothing in flight (a live lease on any of its
# events), at most %(n)s of them; locked and leased in the same transaction.
_CLAIM = """
WITH heads AS (
    SELECT DISTINCT ON (w.url) e.id FROM webhook_events e JOIN webhooks w ON w.id = e.webhook_id
    WHERE e.delivered_at IS NULL AND e.failed_at IS NULL AND e.next_attempt_at <= now()
      AND (e.leased_until IS NULL OR e.leased_until <= now())
      AND NOT EXISTS (
          SELECT 1 FROM webhook_events l JOIN webhooks lw ON lw.id = l.webhook_id
          WHERE lw.url = w.url AND l.leased_until > now()
            AND l.delivered_at IS NULL AND l.failed_at IS NULL)
    ORDER BY w.url, e.id
)
SELECT e.id, e.event_id, e.event_type, w.url, e.payload, e.attempts,
       coalesce(u.admin, false) AS by_admin
FROM webhook_events e JOIN webhooks w ON w.id = e.webhook_id
LEFT JOIN users u ON u.id = w.created_by
WHERE e.id IN (SELECT id FROM heads)
  AND e.delivered_at IS NULL AND e.failed_at IS NULL
  AND (e.leased_until IS NULL OR e.leased_until <= now())
ORDER BY e.id LIMIT %(n)s FOR UPDATE OF e SKIP LOCKED
"""


def _claim(conn: Conn, n: int, lease: float) -> list[_Due]:
    with conn.transaction():
        rows = (
            conn.cursor(row_factory=class_row(_Due)).execute(_CLAIM, {"n": n}).fetchall()
            if n > 0
            else []
        )
        if rows:
            conn.execute(
                "UPDATE webhook_events SET attempts = attempts + 1, last_attempt_at = now(),"
                " leased_until = now() + make_interval(secs => %s) WHERE id = ANY(%s)",
                (lease, [r.id for r in rows]),
            )
    return rows


# The other waiting events of the same receiver (not leased by anyone).
_SAME_RECEIVER = (
    " FROM webhooks w WHERE w.id = e.webhook_id AND w.url = %s AND e.id <> %s"
    " AND e.delivered_at IS NULL AND e.failed_at IS NULL"
    " AND (e.leased_until IS NULL OR e.leased_until <= now())"
)


def _record(
    conn: Conn, event: _Due, status: int | None, error: str | None, cfg: WebhookDeliveryConfig
) -> None:
    attempts = event.attempts + 1
    with conn.transaction():
        if status is not None and 200 <= status < 300:
            conn.execute(
                "UPDATE webhook_events SET last_status = %s, last_error = NULL,"
                " delivered_at = now(), leased_until = NULL WHERE id = %s",
                (status, event.id),
            )
            # The receiver answers again: what waits for it need not wait out its backoff.
            conn.execute(
                "UPDATE webhook_events e SET next_attempt_at = now()"
                + _SAME_RECEIVER
                + " AND e.next_attempt_at > now()",
                (event.url, event.id),
            )
            return
        expired = bool(
            db.scalar(
                conn,
                bool,
                "SELECT now() >= retry_since + make_interval(secs => %s) AS expired"
                " FROM webhook_events WHERE id = %s",
                (cfg.dead_letter_after_seconds, event.id),
            )
        )
        final = status is not None and 400 <= status < 500 and status not in RETRYABLE_4XX
        if final or expired:
            conn.execute(
                "UPDATE webhook_events SET last_status = %s, last_error = %s, failed_at = now(),"
                " leased_until = NULL WHERE id = %s",
                (status, error, event.id),
            )
            logger.warning(
                "webhook event %s (%s) is a dead letter after %s attempts: %s %s",
                event.event_id,
                event.event_type,
                attempts,
                status,
                error,
            )
            return
        delay = min(cfg.retry_initial_seconds * 2 ** (attempts - 1), cfg.retry_max_seconds)
        # Never past the dead-letter time: the last attempt is made then.
        nxt = db.scalar(
            conn,
            dt.datetime,
            "UPDATE webhook_events SET last_status = %s, last_error = %s, leased_until = NULL,"
            " next_attempt_at = least(now() + make_interval(secs => %s),"
            " retry_since + make_interval(secs => %s)) WHERE id = %s RETURNING next_attempt_at",
            (status, error, delay, cfg.dead_letter_after_seconds, event.id),
        )
        if nxt is not None:
            # One probe of a failing receiver per interval, not one per queued event.
            conn.execute(
                "UPDATE webhook_events e SET next_attempt_at = greatest(e.next_attempt_at, %s)"
                + _SAME_RECEIVER,
                (nxt, event.url, event.id),
            )
        logger.debug("webhook event %s: %s %s; again in %s s", event.id, status, error, delay)


class _Dispatcher:
    """Claims due events and hands each to a sender thread, at most ``workers`` at once."""

    def __init__(self, state: MasterState) -> None:
        self.state = state
        self.cfg = state.config.webhooks.delivery
        self.key = signing_key(state)
        self.wake = threading.Event()
        self._lock = threading.Lock()
        self._in_flight = 0

    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def run(self) -> None:
        lease = lease_seconds(self.cfg)
        while True:
            self.wake.clear()
            free = self.cfg.workers - self.in_flight()
            claimed: list[_Due] = []
            if free > 0:
                with self.state.pool.connection() as conn:
                    claimed = _claim(conn, free, lease)
            for event in claimed:
                with self._lock:
                    self._in_flight += 1
                threading.Thread(
                    target=self._send, args=(event,), name=f"webhook-{event.id}", daemon=True
                ).start()
            if not claimed and self.in_flight() == 0:
                return
            if not claimed or free - len(claimed) <= 0:
                self.wake.wait(_POLL_SECONDS)

    def _send(self, event: _Due) -> None:
        try:
            policy = egress.Policy.of(self.state.config.egress, restricted=not event.by_admin)
            status, error = post(
                event.url,
                event.payload.encode(),
                self.key,
                policy,
                timeout=self.cfg.timeout_seconds,
                event=(str(event.event_id), event.event_type),
            )
            with self.state.pool.connection() as conn:
                _record(conn, event, status, error, self.cfg)
        except Exception:
            # The lease runs out and the event is sent again.
            logger.exception("webhook event %s: recording the attempt failed", event.id)
        finally:
            with self._lock:
                self._in_flight -= 1
            self.wake.set()


_thread: threading.Thread | None = None
_dispatcher: _Dispatcher | None = None
_lock = threading.Lock()


def _run(dispatcher: _Dispatcher) -> None:
    try:
        dispatcher.run()
    except Exception:
        logger.exception("webhook delivery failed; the next pass tries again")


def kick(state: MasterState) -> None:
    """Starts the dispatcher unless it runs, else wakes it (the loop's webhooks pass)."""
    global _thread, _dispatcher
    with _lock:
        if _thread is not None and _thread.is_alive() and _dispatcher is not None:
            _dispatcher.wake.set()
            return
        _dispatcher = _Dispatcher(state)
        _thread = threading.Thread(target=_run, args=(_dispatcher,), name="webhooks", daemon=True)
        _thread.start()
