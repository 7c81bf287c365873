"""The hottest routes answered before Flask's dispatch, with the answer Flask would give.

:class:`PreDispatch` wraps the Flask app's WSGI callable (inside the trusted-proxy middleware,
so it sees the client's address and scheme). For a request it knows it tries a *fast path*;
whenever the fast path cannot give exactly the answer Flask would, it gives none and the request
goes on to Flask unchanged, which answers it as it always did. So every refusal (a missing or
bad token, a cross-site page, an admission limit's 429, a bad query) and every first read is
Flask's own answer; the fast path only answers what it can answer in full:

* ``GET /api/v1/experiments`` whose page is kept (:mod:`det.master.listcache`) for the same
  validated query and a matching version: the kept page (200, or 304 for a matching
  ``If-None-Match``).

Equivalence rests on running the same code as the Flask path, not a copy of it: the caller is
resolved by :func:`det.master.api._common.principal_for` (the rules of ``authenticate``), the
site check is ``site_refusal``, the user counts against the same admission limits
(``is_waiting`` from the same query), the query is validated by the route's own contract type
(``query_dict`` + ``validate``, as ``@contract`` does), the page is found by
:func:`det.master.api.experiments.kept_page` (what the view itself calls first) and answered by
``conditional_wsgi`` (the status line and headers werkzeug writes for ``conditional``'s
Response); the answer is recorded in the wire log as Flask's would be. What is left out is
only what does not change the answer: werkzeug's routing, Flask's request context and hooks,
the contract wrapper's per-request work (a query string's validation is kept per process: it
depends on the string alone). tests/integration/test_predispatch.py asserts, request by
request, that both paths answer the same.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from flask import Flask
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
    principal_for,
    site_refusal,
)
from det.master.api._contract import query_dict
from det.master.api.experiments import kept_page
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


class PreDispatch:
    """WSGI middleware: the fast paths of the module's docstring, else ``inner`` (Flask)."""

    def __init__(self, app: Flask, inner: WSGIApplication) -> None:
        self.app = app
        self.inner = inner
        #: Off: every request goes to Flask (the tests compare both paths with it).
        self.enabled = True
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
        self._routes: dict[tuple[Any, Any], Callable[[WSGIEnvironment], Answer | None]] = {
            ("GET", LIST_PATH): self._list
        }

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        fast = self._routes.get((environ.get("REQUEST_METHOD"), environ.get("PATH_INFO")))
        answer = fast(environ) if fast is not None and self.enabled else None
        if answer is None:
            return self.inner(environ, start_response)
        self.answered += 1
        status, headers, body = answer
        start_response(status, headers)
        return [body]

    @property
    def _state(self) -> MasterState:
        st: MasterState = self.app.extensions["det"]
        return st

    def _list(self, environ: WSGIEnvironment) -> Answer | None:
        """A kept page of the experiment list, or None (Flask answers)."""
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
            )
            if caller.user is None:
                return None
            ticket = admission.admit(caller.user.id, waiting=waiting)
            page = kept_page(request_conn(), caller.user, params).page
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
        if page is None:
            return None  # not kept: Flask renders it and keeps it
        answer = conditional_wsgi(page, environ.get("HTTP_IF_NONE_MATCH"))
        _wirelog.record(LIST_OPERATION, int(answer[0][:3]), answer[2])
        return answer

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
