"""What every blueprint shares: the request's DB connection, who is calling, body parsing.

Callers are one of three principals:

* a **user** (``Authorization: Bearer <session token>``),
* a **task** (``Grpc-Metadata-x-allocation-token: Bearer <token>``, or the same token in
  ``Authorization``), allowed only on endpoints marked for tasks and only for its own
  allocation, trial and experiment,
* an **agent** (``Authorization: Bearer <cluster agent token>``), allowed only on the agent
  protocol endpoints.

Views say who may call them with :func:`allow`; unmarked views are for users only.
"""

from __future__ import annotations

import contextlib
import hmac
import math
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from flask import current_app, g, request
from psycopg.pq import TransactionStatus

from det.common.jsontypes import JSONObject, JSONValue
from det.master import agent_tokens, fastjson
from det.master.api._admission import Admission, Ticket
from det.master.authcache import SessionCache
from det.master.db import Conn as Conn  # the request connection's type, for the other api modules
from det.master.errors import Conflict, InvalidArgument, PermissionDenied, Unauthenticated
from det.master.handles import MasterState
from det.master.rows.users import User
from det.master.services import rendezvous, trial_runs, users
from det.master.wire import pagination, ts

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["pagination", "ts"]

PUBLIC = "public"
USER = "user"
TASK = "task"
AGENT = "agent"


@dataclass(frozen=True)
class TaskPrincipal:
    allocation_id: str
    task_id: str
    trial_id: int | None
    experiment_id: int | None
    #: Its experiment's owner (None: not a trial's allocation).
    user_id: int | None
    #: Which container of the allocation called (0: the chief's; services.rendezvous).
    container_rank: int = 0


@dataclass(frozen=True)
class Principal:
    kind: str
    user: User | None = None
    task: TaskPrincipal | None = None
    # An enrolled cloud agent's own token (services.enrollment) is good for its own id only.
    agent_id: str | None = None


def allow(*kinds: str) -> Callable[[F], F]:
    def mark(fn: F) -> F:
        fn._det_allow = frozenset(kinds)  # type: ignore[attr-defined]
        return fn

    return mark


def state() -> MasterState:
    s: MasterState = current_app.extensions["det"]
    return s


def _request_conn() -> Conn:
    conn: Conn | None = g.get("_det_conn")
    if conn is None:
        conn = state().pool.getconn()
        # Outside db() blocks statements run on their own, with no transaction to begin and
        # commit: authentication and reads cost one round trip per statement.
        conn.autocommit = True
        g._det_conn = conn
    return conn


@contextmanager
def db() -> Iterator[Conn]:
    """The request's connection in a transaction: committed when the block ends, rolled back
    on error. One pooled connection serves the whole request (authentication included) and goes
    back to the pool when the request ends (:func:`release_connection`)."""
    conn = _request_conn()
    with conn.transaction():
        yield conn


@contextmanager
def reads() -> Iterator[Conn]:
    """The request's connection for a view that only reads: no transaction (no BEGIN and COMMIT
    round trips); each statement sees what was committed when it started. A view that writes
    uses :func:`db`."""
    yield _request_conn()


def statement() -> Conn:
    """The request's connection for a view whose one write is a single statement: no
    transaction (no BEGIN and COMMIT round trips); the statement is atomic on its own."""
    return _request_conn()


def release_connection(_exc: BaseException | None = None) -> None:
    """``teardown_request`` hook: return the request's connection to the pool."""
    conn: Conn | None = g.pop("_det_conn", None)
    if conn is not None:
        give_back(state(), conn)


def give_back(st: MasterState, conn: Conn) -> None:
    """A request's connection back to ``st``'s pool, as the pool's other users expect it (no
    transaction open, autocommit off)."""
    with contextlib.suppress(psycopg.Error):  # a broken connection: the pool drops it
        if conn.info.transaction_status != TransactionStatus.IDLE:
            conn.rollback()
        conn.autocommit = False
    st.pool.putconn(conn)


def _bearer(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() == "bearer" and token:
        return token.strip()
    return None


def authenticate() -> None:
    """``before_request`` hook: resolves the caller and checks the view admits that kind."""
    _refuse_other_sites()
    view = current_app.view_functions.get(request.endpoint or "")
    allowed: frozenset[str] = getattr(view, "_det_allow", frozenset({USER}))
    if PUBLIC in allowed or view is None:
        g.principal = Principal(PUBLIC)
        return
    found = principal_for(
        allowed,
        request.headers.get("Authorization"),
        request.headers.get("Grpc-Metadata-x-allocation-token"),
        (request.view_args or {}).get("agent_id"),
        state(),
        current_app.extensions.get("det_sessions"),
        _request_conn,
        tasks=current_app.extensions.get("det_task_tokens"),
    )
    g.principal = found
    if found.user is not None:
        admission: Admission = current_app.extensions["det_admission"]
        g._det_ticket = admission.admit(found.user.id, waiting=_is_waiting_request())


def principal_for(
    allowed: frozenset[str],
    authorization: str | None,
    allocation_token: str | None,
    named_agent: str | None,
    st: MasterState,
    sessions: SessionCache[User] | None,
    conn: Callable[[], Conn],
    *,
    tasks: SessionCache[users.AllocationToken] | None = None,
) -> Principal:
    """Who calls a view that admits the principals ``allowed`` (not PUBLIC), from its
    ``Authorization`` and ``Grpc-Metadata-x-allocation-token`` headers (``named_agent``: the
    route's ``agent_id``); raises :class:`PermissionDenied` or :class:`Unauthenticated`.
    ``conn`` gives the request's connection, taken only when a token must be looked up;
    ``sessions`` and ``tasks`` are the process's caches of session and allocation tokens.
    The one statement of these rules: :func:`authenticate` and the pre-dispatch layer
    (:mod:`det.master.api._predispatch`) both call it."""
    task_token = _bearer(allocation_token)
    token = _bearer(authorization)
    if token and AGENT in allowed and hmac.compare_digest(token, st.agent_token):
        return Principal(AGENT)
    if token and AGENT in allowed and token.startswith(agent_tokens.TOKEN_PREFIX):
        agent_id = agent_tokens.agent_of_token(st.agent_token, token)
        if agent_id is not None:
            if named_agent is not None and named_agent != agent_id:
                raise PermissionDenied(
                    f"this agent token is agent {agent_id}'s, not {named_agent}'s"
                )
            return Principal(AGENT, agent_id=agent_id)
    if token:
        user = session_user(sessions, token, conn)
        if user is not None:
            if USER not in allowed:
                raise PermissionDenied("this endpoint is not for user sessions")
            return Principal(USER, user=user)
    for candidate in (task_token, token):
        if not candidate:
            continue
        task = _task_for_token(conn, candidate, tasks)
        if task is not None:
            if TASK not in allowed:
                raise PermissionDenied("allocation tokens may not call this endpoint")
            return Principal(TASK, task=task)
    raise Unauthenticated("missing or invalid token")


def _refuse_other_sites() -> None:
    reason = site_refusal(request.path, request.headers.get("Sec-Fetch-Site"))
    if reason is not None:
        raise PermissionDenied(reason)


def site_refusal(path: str, sec_fetch_site: str | None) -> str | None:
    """Why a request for ``path`` is refused whoever sends it, or None. A browser says where a
    request comes from (``Sec-Fetch-Site``, which no page can set): the API answers only its
    own origin's pages (the WebUI) and clients that are not browsers. Another site's page, or a
    task's (same-site: another port or a sibling host name), never reaches it, whatever it
    carries."""
    if not path.startswith("/api/"):
        return None
    site = (sec_fetch_site or "").lower()
    if site in ("cross-site", "same-site"):
        return f"Sec-Fetch-Site: {site}: the API answers only the WebUI's own origin's pages"
    return None


def session_user(
    sessions: SessionCache[User] | None, token: str, conn: Callable[[], Conn]
) -> User | None:
    """The token's user, from the process's session cache (:mod:`det.master.authcache`) when
    there is one (``sessions``)."""
    digest = users.token_digest(token)
    if sessions is None:
        found = users.session_for_digest(conn(), digest)
        return found[0] if found else None
    return sessions.lookup(digest, lambda: users.session_for_digest(conn(), digest))


def _task_for_token(
    conn: Callable[[], Conn], token: str, tasks: SessionCache[users.AllocationToken] | None
) -> TaskPrincipal | None:
    """The task whose allocation ``token`` is (its container rank after the token's own part),
    from the process's cache when there is one (``tasks``: the allocation's end, a changed token
    or trial, moves the auth epoch, migration 0051)."""
    token, container_rank = rendezvous.split_token(token)
    digest = users.token_digest(token)

    def load() -> tuple[users.AllocationToken, float] | None:
        row = users.allocation_for_digest(conn(), digest)
        # An allocation's token dies with it: a stray process of an ended run (a container the
        # agent lost track of, say) cannot report into the trial's next run.
        if row is None or row.state == "TERMINATED":
            return None
        return row, math.inf

    if tasks is not None:
        row = tasks.lookup(digest, load)
    else:
        loaded = load()
        row = loaded[0] if loaded is not None else None
    if row is None:
        return None
    return TaskPrincipal(
        row.id, row.task_id, row.trial_id, row.experiment_id, row.owner_id, container_rank
    )


def _is_waiting_request() -> bool:
    return is_waiting(request.args)


def is_waiting(args: Mapping[str, str]) -> bool:
    """A request (its query ``args``) that may hold its thread for long: a log follow or a
    preemption long-poll."""
    if args.get("follow", "").lower() == "true":
        return True
    # Determined's client sends ``timeoutSeconds``; det's harness the proto name.
    timeout = args.get("timeoutSeconds", args.get("timeout_seconds"))
    try:
        return timeout is not None and float(timeout) > 0
    except ValueError:
        return False  # the view refuses it


def release_admission(_exc: BaseException | None = None) -> None:
    """``teardown_request`` hook: the user request no longer counts against the limits."""
    ticket: Ticket | None = g.pop("_det_ticket", None)
    if ticket is not None:
        admission: Admission = current_app.extensions["det_admission"]
        admission.release(ticket)


def principal() -> Principal:
    p: Principal = g.principal
    return p


def current_user() -> User:
    p = principal()
    if p.user is None:
        raise Unauthenticated("a user session is required")
    return p.user


def acting_user_id() -> int:
    """The user on whose behalf the call is made (a task acts for its experiment's owner)."""
    p = principal()
    if p.user is not None:
        return p.user.id
    if p.task is not None and p.task.user_id is not None:
        return p.task.user_id
    raise Unauthenticated("a user session is required")


def check_task_scope(
    *,
    trial_id: int | None = None,
    allocation_id: str | None = None,
    experiment_id: int | None = None,
    task_id: str | None = None,
) -> None:
    """A task may touch only its own allocation, trial, task and experiment."""
    p = principal()
    if p.kind != TASK or p.task is None:
        return
    t = p.task
    if (
        (trial_id is not None and trial_id != t.trial_id)
        or (allocation_id is not None and allocation_id != t.allocation_id)
        or (experiment_id is not None and experiment_id != t.experiment_id)
        or (task_id is not None and task_id != t.task_id)
    ):
        raise PermissionDenied("an allocation token is valid only for its own task")


def chief_only() -> None:
    """A training report (metrics, a checkpoint, progress) is the chief's: from another
    container of a task's run it ends the trial ERROR, naming the launcher to use, and is
    refused, keeping nothing of it (:func:`trial_runs.refuse_report_from_worker`). Call it
    before the view's own transaction: the trial's end is committed on its own."""
    task = principal().task
    if task is None or task.container_rank == 0 or task.trial_id is None:
        return
    with db() as conn:
        reason = trial_runs.refuse_report_from_worker(
            conn, task.trial_id, task.allocation_id, task.container_rank
        )
    raise Conflict(reason)


def require_admin() -> None:
    if not current_user().admin:
        raise PermissionDenied("only an admin may do this")


def any_json() -> JSONValue:
    """The request's body as any JSON value (None when empty), for the few routes whose body is
    a bare value (Determined's generated client sends some that way). Same checks as
    :func:`body_and_finiteness`."""
    raw = request.get_data(cache=True)
    if not raw:
        return None
    return _parse(raw)[0]


def _parse(raw: bytes) -> tuple[JSONValue, bool]:
    try:
        value, finite = fastjson.loads(raw)
    except UnicodeDecodeError:
        raise InvalidArgument("request body is not valid UTF-8") from None
    except ValueError as e:
        reason = "nested too deeply" if "nested too deeply" in str(e) else "not valid JSON"
        raise InvalidArgument(f"request body is {reason}") from None
    # Text every route may store: PostgreSQL text and jsonb hold neither NUL nor a lone UTF-16
    # surrogate ("\ud800", or its bytes encoded as UTF-8), so both are refused here for every
    # field. orjson refuses surrogates, so only a body it could not parse (the standard
    # library's) can hold them; cheap byte tests come first (the walk that names the field runs
    # only when one matches).
    if b"\\u0000" in raw or (not finite and _MAYBE_SURROGATE.search(raw)):
        found = _bad_text(value, "")
        if found is not None:
            where, rule = found
            raise InvalidArgument(f"{where or 'request body'}: {rule}")
    return value, finite


# A surrogate escaped (\ud800 to \udfff) or encoded as UTF-8 (ED A0-BF ..).
_MAYBE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
_NUL = "must not contain NUL (\\u0000)"
_SURROGATE = "is not valid Unicode text (a lone surrogate such as \\ud800)"


def _text_fault(text: str) -> str | None:
    if "\x00" in text:
        return _NUL
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE
    return None


def _bad_text(value: JSONValue, path: str) -> tuple[str, str] | None:
    """The path of the first string (or key) holding NUL or a lone surrogate, and the rule it
    breaks; or None."""
    if isinstance(value, str):
        fault = _text_fault(value)
        return (path, fault) if fault else None
    if isinstance(value, dict):
        for k, v in value.items():
            sub = f"{path}.{k}" if path else str(k)
            fault = _text_fault(str(k))
            if fault:
                # A key that cannot be printed as it is: named by its escaped form.
                return (path + "." + ascii(k) if path else ascii(k)), fault
            found = _bad_text(v, sub)
            if found is not None:
                return found
    if isinstance(value, list):
        for i, v in enumerate(value):
            found = _bad_text(v, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def int_list_arg(name: str) -> list[int]:
    """A repeated or comma-separated integer query parameter (``trialIds=1&trialIds=2``)."""
    out = []
    for raw in request.args.getlist(name):
        for part in raw.split(","):
            try:
                value = int(part)
            except ValueError:
                raise InvalidArgument(f"{name}: not an integer: {part!r}") from None
            if not _INT64_MIN <= value <= _INT64_MAX:
                raise InvalidArgument(f"{name}: {part} is out of range (a 64-bit integer)")
            out.append(value)
    return out


def body_and_finiteness() -> tuple[JSONObject, bool]:
    """The request's JSON object, and whether every number in it is finite (see
    :mod:`det.master.fastjson`). Parsed once per request."""
    parsed: tuple[JSONObject, bool] | None = g.get("_det_body")
    if parsed is not None:
        return parsed
    parsed = object_and_finiteness(request.get_data(cache=True))
    g._det_body = parsed
    return parsed


def object_and_finiteness(raw: bytes) -> tuple[JSONObject, bool]:
    """A request body (``raw``) as :func:`body_and_finiteness` gives it."""
    if not raw:
        return {}, True
    data, finite = _parse(raw)
    if not isinstance(data, dict):
        raise InvalidArgument("request body must be a JSON object")
    return data, finite


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def int_arg(name: str, default: int | None = None) -> int | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgument(f"{name}: not an integer: {raw!r}") from None
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise InvalidArgument(f"{name}: {raw} is out of range (a 64-bit integer)")
    return value
