"""The hottest routes answered before Flask's dispatch, with the answer Flask would give.

:class:`PreDispatch` wraps the Flask app's WSGI callable (inside the trusted-proxy middleware,
so it sees the client's address and scheme). For a request it knows it tries a *fast path*;
whenever the fast path cannot give exactly the answer Flask would, it gives none and the request
goes on to Flask unchanged, which answers it as it always did. So every refusal before a view
runs (a missing or bad token, a cross-site page, an admission limit's 429, a bad query or body)
is Flask's own answer; the fast path only answers what it can answer in full:

* ``GET /api/v1/experiments``: the page the view would answer, kept
  (:mod:`det.master.listcache`) for the same validated query and a matching version, or
  rendered and kept as the view does (200, or 304 for a matching ``If-None-Match``);
* ``POST /api/v1/trials/<id>/metrics/batch`` (det's metric reports),
  ``POST /api/v1/trials/<id>/metrics`` (Determined's, one report a request) and
  ``POST /api/v1/agents/<id>/heartbeat``: the route's own view, called as Flask's dispatch
  calls it; an error it raises is answered by Flask's handlers.

Equivalence rests on running the same code as the Flask path, not a copy of it: the caller is
resolved by :func:`det.master.api._common.principal_for` (the rules of ``authenticate``), the
site check is ``site_refusal``, the user counts against the same admission limits
(``is_waiting`` from the same query), the query is validated by the route's own contract type
(``query_dict`` + ``validate``, as ``@contract`` does), the page is found by
:func:`det.master.api.experiments.list_page` (the view's own work) and answered by
``conditional_wsgi`` (the status line and headers werkzeug writes for ``conditional``'s
Response); the answer is recorded in the wire log as Flask's would be. What is left out is
only what does not change the answer: werkzeug's routing, Flask's request context and hooks,
the contract wrapper's per-request work (a query string's validation is kept per process: it
depends on the string alone). tests/integration/test_predispatch.py asserts, request by
request, that both paths answer the same.

``DET_PREDISPATCH=0`` in the master's environment turns the layer off (every request to Flask):
a diagnostic for benches that compare both paths in one run (bench/scale.py ``--predispatch``).
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flask import Flask, Response, g
from werkzeug.wsgi import get_host

from det.master import proxy
from det.master.api import _wirelog
from det.master.api._admission import Admission, Ticket
from det.master.api._answers import conditional_wsgi
from det.master.api._common import (
    USER,
    Conn,
    give_back,
    is_waiting,
    object_and_finiteness,
    principal_for,
    release_admission,
    release_connection,
    site_refusal,
)
from det.master.api._contract import query_dict
from det.master.api.experiments import list_page
from det.master.errors import APIError
from det.master.handles import MasterState
from det.master.schemas import d, validate

if TYPE_CHECKING:  # the standard library's WSGI types exist for type checkers only
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

logger = logging.getLogger(__name__)

#: The answer of a fast path: status line, headers, body.
Answer = tuple[str, list[tuple[str, str]], bytes]

LIST_PATH = "/api/v1/experiments"
LIST_OPERATION = "GetExperiments"
_USER_ONLY = frozenset({USER})
# Distinct query strings whose validation a process keeps (a client asks a few).
_MAX_QUERIES = 1024


@dataclass(frozen=True)
class _ViewRoute:
    """A route whose view is called without Flask's dispatch: ``POST prefix<value>suffix``,
    the value passed to the view as ``param``, read as werkzeug's ``int`` converter (``kind``
    "int") or its default one ("string") would read it."""

    prefix: str
    suffix: str
    param: str
    kind: str
    #: The view as the app registered it (its @contract wrapper: the body is validated there).
    view: Callable[..., Any]
    allowed: frozenset[str]

    def value(self, path: str) -> int | str | None:
        """The route's value in ``path``, or None (not this route, or a form werkzeug reads
        in a way this path does not: a leading zero, other scripts' digits, an integer beyond
        an int64; Flask answers those)."""
        if not (path.startswith(self.prefix) and path.endswith(self.suffix)):
            return None
        text = path[len(self.prefix) : len(path) - len(self.suffix)]
        if not text or "/" in text:
            return None
        if self.kind == "string":
            return text
        if not (text.isascii() and text.isdigit()) or len(text) > 18 or text.startswith("0"):
            return None
        return int(text)


# (prefix, an example value, suffix, the view's parameter, converter): the routes of _ViewRoute.
_VIEW_ROUTES = (
    ("/api/v1/trials/", "1", "/metrics/batch", "trial_id", "int"),  # det's metric reports
    ("/api/v1/trials/", "1", "/metrics", "trial_id", "int"),  # Determined's (ReportTrialMetrics)
    ("/api/v1/agents/", "a", "/heartbeat", "agent_id", "string"),  # agents' heartbeats
)


#: "0" turns the layer off in a master process (see the module's docstring).
ENV = "DET_PREDISPATCH"


class PreDispatch:
    """WSGI middleware: the fast paths of the module's docstring, else ``inner`` (Flask)."""

    def __init__(self, app: Flask, inner: WSGIApplication) -> None:
        self.app = app
        self.inner = inner
        #: Off: every request goes to Flask (the tests compare both paths with it).
        self.enabled = os.environ.get(ENV, "1") != "0"
        #: Requests answered here (for tests and benches; threads may lose a count).
        self.answered = 0
        # query string -> (validated params, or None when Flask refuses them; waiting)
        self._queries: dict[str, tuple[d.GetExperimentsParams | None, bool]] = {}
        # The route this layer stands in for, as Flask dispatches it: its contract's query
        # type validates here too.
        endpoint, _ = app.url_map.bind("localhost").match(LIST_PATH, "GET")
        view = app.view_functions[endpoint]
        spec = getattr(view, "_det_contract", None)
        if spec is None or spec.name != LIST_OPERATION or spec.params is None:
            raise RuntimeError(f"pre-dispatch: {LIST_PATH} is not {LIST_OPERATION}'s ({endpoint})")
        if getattr(view, "_det_allow", _USER_ONLY) != _USER_ONLY:
            raise RuntimeError(f"pre-dispatch: {LIST_PATH} admits more than users ({endpoint})")
        self._list_params: Any = spec.params
        # The views called as Flask's dispatch calls them: each the one Flask routes to.
        self._views: list[_ViewRoute] = []
        for prefix, example, suffix, param, kind in _VIEW_ROUTES:
            endpoint, args = app.url_map.bind("localhost").match(prefix + example + suffix, "POST")
            view = app.view_functions[endpoint]
            spec = getattr(view, "_det_contract", None)
            recorded = bool(spec and spec.name and d.OPERATIONS[spec.name].response)
            if spec is None or spec.params is not None or list(args) != [param] or recorded:
                # A query is read from Flask's request, and a Determined operation's answer with
                # a body goes to the wire log (Flask's hook): neither is done here.
                raise RuntimeError(f"pre-dispatch: {endpoint} is not a route with a body alone")
            allowed = getattr(view, "_det_allow", _USER_ONLY)
            self._views.append(_ViewRoute(prefix, suffix, param, kind, view, allowed))
        self._routes: dict[tuple[Any, Any], Callable[[WSGIEnvironment], Answer | None]] = {
            ("GET", LIST_PATH): self._list
        }

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        answer: Answer | Response | None = None
        if self.enabled:
            method, path = environ.get("REQUEST_METHOD"), environ.get("PATH_INFO") or ""
            fast = self._routes.get((method, path))
            if fast is not None:
                answer = fast(environ)
            elif method == "POST":
                for route in self._views:
                    value = route.value(path)
                    if value is not None:
                        answer = self._call_view(environ, route, value)
                        break
        if answer is None:
            return self.inner(environ, start_response)
        self.answered += 1
        if isinstance(answer, Response):
            return answer(environ, start_response)
        status, headers, body = answer
        start_response(status, headers)
        return [body]

    @property
    def _state(self) -> MasterState:
        st: MasterState = self.app.extensions["det"]
        return st

    def _list(self, environ: WSGIEnvironment) -> Answer | None:
        """A page of the experiment list (kept, or rendered and kept as the view does), or
        None (Flask answers)."""
        path = environ["PATH_INFO"]
        if site_refusal(path, environ.get("HTTP_SEC_FETCH_SITE")) is not None:
            return None
        if proxy.is_task_host(get_host(environ)):
            return None  # the proxy's redirect (det.master.api.notebooks)
        params, waiting = self._query(environ)
        if params is None:
            return None
        st = self._state
        admission: Admission = self.app.extensions["det_admission"]
        conn: Conn | None = None
        ticket: Ticket | None = None

        def request_conn() -> Conn:
            nonlocal conn
            if conn is None:
                conn = st.pool.getconn()
                conn.autocommit = True  # as the Flask path's reads (_common._request_conn)
            return conn

        try:
            caller = principal_for(
                _USER_ONLY,
                environ.get("HTTP_AUTHORIZATION"),
                environ.get("HTTP_GRPC_METADATA_X_ALLOCATION_TOKEN"),
                None,
                st,
                self.app.extensions.get("det_sessions"),
                request_conn,
                tasks=self.app.extensions.get("det_task_tokens"),
            )
            if caller.user is None:
                return None
            ticket = admission.admit(caller.user.id, waiting=waiting)
            page = list_page(request_conn(), caller.user, params)
        except APIError:
            return None  # refused (401, 403, 429): Flask says so, in its words
        except Exception:
            # The fast path only reads: whatever went wrong, Flask's path does it again and
            # answers as it does (a database error's 500, say).
            logger.debug("pre-dispatch: the list falls through to Flask", exc_info=True)
            return None
        finally:
            if ticket is not None:
                admission.release(ticket)
            if conn is not None:
                give_back(st, conn)
        answer = conditional_wsgi(page, environ.get("HTTP_IF_NONE_MATCH"))
        _wirelog.record(LIST_OPERATION, int(answer[0][:3]), answer[2])
        return answer

    def _call_view(
        self, environ: WSGIEnvironment, route: _ViewRoute, value: int | str
    ) -> Response | None:
        """A request to a route of :data:`_VIEW_ROUTES` (metric reports, heartbeats): the
        route's view called as Flask's dispatch calls it, in an application context (``g``)
        without the request context, routing and hooks; an error it raises is answered by
        Flask's own handlers. None (Flask answers) for anything before the view: a refusal of
        the caller, a body that is not a JSON object, a query string, a request this path does
        not take apart."""
        if environ.get("QUERY_STRING"):
            return None
        if site_refusal(environ["PATH_INFO"], environ.get("HTTP_SEC_FETCH_SITE")) is not None:
            return None
        if proxy.is_task_host(get_host(environ)):
            return None
        length_text = environ.get("CONTENT_LENGTH") or ""
        if not length_text.isdigit():
            return None
        length = int(length_text)
        limit = self.app.config["MAX_CONTENT_LENGTH"]
        if limit is not None and length > limit:
            return None  # Flask's 413
        st = self._state
        admission: Admission = self.app.extensions["det_admission"]
        conn: Conn | None = None

        def request_conn() -> Conn:
            nonlocal conn
            if conn is None:
                conn = st.pool.getconn()
                conn.autocommit = True
            return conn

        try:
            caller = principal_for(
                route.allowed,
                environ.get("HTTP_AUTHORIZATION"),
                environ.get("HTTP_GRPC_METADATA_X_ALLOCATION_TOKEN"),
                str(value) if route.param == "agent_id" else None,  # Flask's view_args
                st,
                self.app.extensions.get("det_sessions"),
                request_conn,
                tasks=self.app.extensions.get("det_task_tokens"),
            )
        except Exception:
            if conn is not None:
                give_back(st, conn)
            return None
        with self.app.app_context():
            g.principal = caller
            if conn is not None:
                g._det_conn = conn  # the request's connection from here (_common._request_conn)
            try:
                if caller.user is not None:
                    g._det_ticket = admission.admit(caller.user.id, waiting=False)
                raw = environ["wsgi.input"].read(length) if length else b""
                # Whatever happens next, Flask may still read the body.
                environ["wsgi.input"] = io.BytesIO(raw)
                g._det_body = object_and_finiteness(raw)
            except Exception:
                release_connection()
                release_admission()
                return None
            try:
                return self.app.make_response(route.view(**{route.param: value}))
            except Exception as e:
                return self._flask_error(environ, e)
            finally:
                release_connection()
                release_admission()

    def _flask_error(self, environ: WSGIEnvironment, e: Exception) -> Response:
        """Flask's answer to ``e`` raised by a view: its error handlers, in a request context
        of its own (the application context's ``g`` stays; its teardown releases the
        connection and the admission ticket)."""
        with self.app.request_context(environ):
            return self.app.finalize_request(
                self.app.handle_user_exception(e), from_error_handler=True
            )

    def _query(self, environ: WSGIEnvironment) -> tuple[d.GetExperimentsParams | None, bool]:
        """The list's validated query parameters (None: Flask refuses them) and whether the
        request counts as waiting, kept per query string."""
        qs = environ.get("QUERY_STRING", "")
        found = self._queries.get(qs)
        if found is not None:
            return found
        try:
            args = self.app.request_class(environ).args  # Flask's own parse of the string
            params = validate(self._list_params, query_dict(self._list_params, args), "query")
            found = (params, is_waiting(args))
        except Exception:  # a query Flask refuses (400, 413): it answers
            found = (None, False)
        if len(self._queries) >= _MAX_QUERIES:
            self._queries.clear()
        self._queries[qs] = found
        return found


def install(app: Flask) -> PreDispatch:
    """Put the layer in front of ``app``'s dispatch (before the trusted-proxy middleware wraps
    it); kept in ``app.extensions["det_predispatch"]``."""
    layer = PreDispatch(app, app.wsgi_app)
    app.wsgi_app = layer  # type: ignore[method-assign]
    app.extensions["det_predispatch"] = layer
    return layer
