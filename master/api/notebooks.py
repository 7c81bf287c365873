"""``/api/v1/notebooks``: JupyterLab tasks (``det notebook``), reached through the proxy."""

from __future__ import annotations

from flask import Blueprint, Response, request

from det.master import expconf, proxy
from det.master.api import commands as common
from det.master.api._common import db
from det.master.api._contract import contract
from det.master.expconf.task import TaskKind
from det.master.schemas import d
from det.master.schemas import notebooks as wire
from det.master.schemas.commands import config as shown_config

bp = Blueprint("notebooks", __name__)
# The front's proxy (det.master.proxy) serves /proxy/<task id>/ with this app's state.
bp.record_once(lambda setup: proxy.bind(setup.app.extensions.get("det")))


@bp.before_app_request
def _proxy_on_a_new_connection() -> Response | None:
    """A /proxy/ request on a connection that began with an API request (a browser or a client
    reusing its connection), or any request for the task origin's host, reached the API, not the
    proxy, which takes a connection from its first request: the same URL again on a new
    connection (307 keeps method and body)."""
    if not request.path.startswith("/proxy/") and not proxy.is_task_host(request.host):
        return None
    # WSGI may not say "Connection: close"; waitress closes after the answer to a request that
    # asked for it, so the request is marked (its channel is the one waitress's disconnect
    # check is bound to). Without the close, the client would come back on this connection.
    channel = getattr(request.environ.get("waitress.client_disconnected"), "__self__", None)
    for pending in getattr(channel, "requests", [])[:1]:
        pending.headers["CONNECTION"] = "close"
    return Response(
        "the proxy takes a new connection\n",
        status=307,
        headers={"Location": request.full_path.rstrip("?")},
        mimetype="text/plain",
    )


KIND: TaskKind = "NOTEBOOK"
_EMPTY: d.v1Notebook = {
    "description": "",
    "id": "",
    "jobId": "",
    "resourcePool": "",
    "startTime": "1970-01-01T00:00:00Z",
    "state": "STATE_UNSPECIFIED",
    "username": "",
    "workspaceId": 0,
}


@bp.post("/api/v1/notebooks")
@contract("LaunchNotebook")
def launch_notebook(body: d.v1LaunchNotebookRequest) -> d.v1LaunchNotebookResponse:
    if body.get("preview"):
        with db() as conn:
            config = common.launch_config(conn, KIND, body)
        # Determined answers a preview with an empty notebook (every field its zero value),
        # which its client parses; the config is shown as every stored config is (redacted).
        return {"notebook": _EMPTY, "config": expconf.redact(config), "warnings": []}
    row = common.launch(KIND, body)
    return {"notebook": wire.notebook(row), "config": shown_config(row), "warnings": []}


common.task_routes(bp, KIND, "notebook", lambda row, _: wire.notebook(row))
