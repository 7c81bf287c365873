"""The Flask app factory: blueprints and the one error handler, nothing read at import time."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg
from flask import Flask, Response, jsonify, request
from typing_extensions import TypedDict
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound
from werkzeug.routing import Rule

from det.master.api import BLUEPRINTS, _common, _predispatch, _unbuilt, _wirelog
from det.master.api._admission import Admission, Limits
from det.master.authcache import SessionCache
from det.master.clientaddr import Proxies, TrustedProxies, parse_networks
from det.master.errors import APIError, TooManyRequests, Unimplemented
from det.master.handles import MasterState
from det.master.rows.users import User
from det.master.services.users import AllocationToken

logger = logging.getLogger(__name__)


class _Error(TypedDict):
    error: str


class ErrorBody(TypedDict):
    """Determined's gateway error shape, which the official client parses."""

    error: _Error
    code: int
    message: str
    status: int


def _error_body(message: str, grpc_code: int, status: int) -> ErrorBody:
    return {"error": {"error": message}, "code": grpc_code, "message": message, "status": status}


class _Rule(Rule):
    """A route whose URL builders (what ``url_for`` calls) are compiled on first use instead of
    when the route is added. Werkzeug compiles two per route, generating and compiling Python
    code: 87% of an app's 222 routes' registration (39 CPU-ms of every ``create_app``: each
    master process's start, a serverless instance's cold start, every in-process test's
    master). The master never builds a URL from a route, so they are never compiled."""

    def _compile_builder(self, append_unknown: bool = True) -> Callable[..., tuple[str, str]]:
        compiled: list[Callable[..., tuple[str, str]]] = []

        def build(rule: Rule, *args: Any, **kwargs: Any) -> tuple[str, str]:
            if not compiled:  # two threads may both compile it: the same function
                compiled.append(Rule._compile_builder(rule, append_unknown).__get__(rule, None))
            return compiled[0](*args, **kwargs)

        return build


class _Flask(Flask):
    url_rule_class = _Rule


def create_app(state: MasterState) -> Flask:
    app = _Flask("det.master")
    app.extensions["det"] = state
    app.config["MAX_CONTENT_LENGTH"] = 200 * 1024 * 1024
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions["det_admission"] = Admission(Limits.for_threads(state.config.api_threads))
    if state.auth_epoch is not None:
        app.extensions["det_sessions"] = SessionCache[User](
            state.auth_epoch, state.config.session_cache_seconds
        )
        app.extensions["det_task_tokens"] = SessionCache[AllocationToken](
            state.auth_epoch, state.config.task_token_cache_seconds
        )
    app.before_request(_common.authenticate)
    app.teardown_request(_common.release_connection)
    app.teardown_request(_common.release_admission)
    for bp in BLUEPRINTS:
        app.register_blueprint(bp)
    _wirelog.install(app)
    # The hottest routes' answers that need no Flask dispatch (det.master.api._predispatch).
    _predispatch.install(app)
    # The client's address and scheme, from X-Forwarded-* of trusted proxies only.
    proxies = Proxies(parse_networks(state.config.security.trusted_proxies))
    app.wsgi_app = TrustedProxies(app.wsgi_app, proxies)  # type: ignore[method-assign]
    served = _unbuilt.served_operations(
        (m, rule.rule) for rule in app.url_map.iter_rules() for m in rule.methods or ()
    )

    @app.errorhandler(APIError)
    def _api_error(e: APIError) -> tuple[Response, int, dict[str, str]]:
        headers = {}
        if isinstance(e, TooManyRequests):
            headers["Retry-After"] = str(e.retry_after)
        return jsonify(_error_body(e.message, e.grpc_code, e.status)), e.status, headers

    @app.errorhandler(HTTPException)
    def _http_error(
        e: HTTPException,
    ) -> tuple[Response, int, dict[str, str] | list[tuple[str, str]]]:
        status = e.code or 500
        if status in (404, 405):
            # A route of Determined's that det does not serve: say so, with the feature's name.
            unbuilt = _unbuilt.message(request.method, request.path, served)
            if unbuilt is not None:
                return _api_error(Unimplemented(unbuilt))
        grpc = {404: 5, 405: 12, 413: 8}.get(status, 3 if status < 500 else 13)
        description = e.description or e.name
        if status == 404 and description == NotFound.description:
            description = (
                f"no route {request.method} {request.path} (not a det or Determined API path)"
            )
        elif status == 405 and description == MethodNotAllowed.description:
            allowed = ", ".join(e.valid_methods or []) if isinstance(e, MethodNotAllowed) else ""
            description = f"{request.method} is not allowed on {request.path} (allowed: {allowed})"
        # Keep the exception's own headers (a 405's Allow, for one) but not its content type.
        headers = [(k, v) for k, v in e.get_headers() if k.lower() != "content-type"]
        return jsonify(_error_body(description, grpc, status)), status, headers

    @app.errorhandler(psycopg.DataError)
    def _data_error(e: psycopg.DataError) -> tuple[Response, int]:
        # A value PostgreSQL cannot take (an integer beyond its column, a negative OFFSET, a
        # malformed uuid that slipped past a route's checks): the client's input, not our fault.
        # The request's transaction is rolled back, so nothing changed.
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        return jsonify(_error_body(f"invalid value: {reason}", 3, 400)), 400

    @app.errorhandler(Exception)
    def _unexpected(e: Exception) -> tuple[Response, int]:
        logger.exception(
            "unhandled error in %s %s from %s", request.method, request.path, request.remote_addr
        )
        return jsonify(_error_body("internal error", 13, 500)), 500

    return app
