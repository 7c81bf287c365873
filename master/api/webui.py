"""The WebUI's routes: the static single-page app under ``/det/`` (its files are the
``det.master.webui`` package's), which reads and steers the cluster through the same REST API as
the CLI, with the user's session token.

These responses carry no data, so they need no token; every page's data comes from API calls
the browser makes with ``Authorization: Bearer``. The app builds its DOM from text nodes only,
and a strict Content-Security-Policy (scripts and styles from this origin only, no inline code)
backs that up.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from flask import Blueprint, Response, redirect
from flask.typing import ResponseReturnValue

from det.master.api._common import PUBLIC, allow

bp = Blueprint("webui", __name__)

# One script per area of the app (poll.js, then app.js: the helpers and the router the others
# use).
_SCRIPTS = (
    "poll",
    "app",
    "charts",
    "experiments",
    "analysis",
    "trials",
    "models",
    "usage",
    "admin",
    "workspaces",
    "tasks",
    "launch",
    "settings",
    "ops",
    "policy",
)
_ASSETS = {
    "app.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
    **{f"{name}.js": "text/javascript; charset=utf-8" for name in _SCRIPTS},
}
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


@cache
def _read(name: str) -> bytes:
    return (resources.files("det.master.webui") / name).read_bytes()


def _respond(name: str, mimetype: str) -> Response:
    resp = Response(_read(name), mimetype=mimetype)
    resp.headers.update(_HEADERS)
    resp.headers["Cache-Control"] = "no-cache"
    return resp


@bp.get("/")
@allow(PUBLIC)
def root() -> ResponseReturnValue:
    """The WebUI's front page."""
    return redirect("/det/", code=302)


@bp.get("/favicon.ico")
@allow(PUBLIC)
def favicon() -> ResponseReturnValue:
    """Browsers ask for it on every site whatever the page says: the WebUI's icon."""
    return redirect("/det/static/favicon.svg", code=301)


@bp.get("/det/static/<name>")
@allow(PUBLIC)
def asset(name: str) -> ResponseReturnValue:
    """The WebUI's script and stylesheet."""
    mimetype = _ASSETS.get(name)
    if mimetype is None:
        return Response("not found", status=404, mimetype="text/plain")
    return _respond(name, mimetype)


@bp.get("/det/")
@bp.get("/det/<path:page>")
@allow(PUBLIC)
def page(page: str = "") -> ResponseReturnValue:
    """A WebUI page (the app routes on the path in the browser)."""
    return _respond("index.html", "text/html; charset=utf-8")
