"""A small fake of the GCE Compute REST API (v1) for the real ``google-cloud-compute`` client.

Serves, for any project::

    POST   /compute/v1/projects/P/zones/Z/instances               insert
    POST   /compute/v1/projects/P/zones/Z/instances/bulkInsert    bulkInsert
    GET    /compute/v1/projects/P/zones/Z/instances               list (label filter, paging)
    GET    /compute/v1/projects/P/aggregated/instances            aggregatedList (every zone)
    GET    /compute/v1/projects/P/zones/Z/instances/NAME          get
    DELETE /compute/v1/projects/P/zones/Z/instances/NAME          delete
    GET    /compute/v1/projects/P/zones/Z/operations/OP           get operation
    POST   /compute/v1/projects/P/zones/Z/operations/OP/wait      wait operation
    GET    /compute/v1/projects/P/global/images/family/F          getFromFamily
    GET    /compute/v1/projects/P/global/images/NAME              get image

Images are added with :meth:`FakeGce.add_image`; like GCE, ``getFromFamily`` answers the newest
image of the family that is not deprecated.

Like real GCE, capacity and quota failures do not fail the insert call: they arrive in the
``error`` field of the finished zone operation (:meth:`FakeGce.fail_zone`,
:meth:`FakeGce.set_capacity`). Synchronous HTTP errors (503 ``backendError``, 403
``rateLimitExceeded``…) are injected with :meth:`FakeGce.fail_http`.

New instances start ``RUNNING`` (``start="immediate"``), ``PROVISIONING`` until first observed
(``start="next_get"``) or ``PROVISIONING`` until :meth:`FakeGce.set_status` (``start="manual"``).
:meth:`FakeGce.running_instances` is the hook an e2e fixture polls to turn each running
instance into a real agent. Every request is recorded in :attr:`FakeGce.requests`.

Operations answer ``RUNNING`` to the call that starts them and ``DONE`` from the first get/wait
on (after ``operation_polls`` more, if set).

Thread-safe: one lock around all state; the HTTP server is threaded with Nagle disabled.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import http.server
import itertools
import json
import re
import socket
import threading
import urllib.parse
from typing import Any, Literal

from tests.fakes.local_http import LocalHttpFake

_PREFIX = re.compile(
    r"^/compute/v1/projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/(?P<rest>.*)$"
)
_IMAGES = re.compile(
    r"^/compute/v1/projects/(?P<project>[^/]+)/global/images/(?:family/(?P<family>[^/]+)|(?P<name>[^/]+))$"
)
_AGGREGATED = re.compile(r"^/compute/v1/projects/(?P<project>[^/]+)/aggregated/instances$")
_FILTER_TERM = re.compile(r'labels\.([A-Za-z0-9_-]+)\s*(=|!=)\s*"?([^"\s)]*)"?')
_NAME_PATTERN = re.compile(r"#+")


@dataclasses.dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    body: Any

    @property
    def kind(self) -> str:
        """``insert``, ``bulkInsert``, ``list``, ``aggregatedList``, ``get``, ``delete``,
        ``operation``, ``wait``."""
        if _AGGREGATED.match(self.path):
            return "aggregatedList"
        m = _IMAGES.match(self.path)
        if m:
            return "getFromFamily" if m.group("family") else "getImage"
        m = _PREFIX.match(self.path)
        rest = m.group("rest") if m else ""
        parts = rest.split("/")
        if parts[0] == "operations":
            return "wait" if rest.endswith("/wait") else "operation"
        if rest == "instances":
            return "insert" if self.method == "POST" else "list"
        if rest == "instances/bulkInsert":
            return "bulkInsert"
        return "delete" if self.method == "DELETE" else "get"


@dataclasses.dataclass
class _HttpFault:
    kind: str
    status: int
    reason: str
    message: str
    times: int
    after: bool


class FakeGce(LocalHttpFake):
    def __init__(
        self,
        *,
        start: Literal["immediate", "next_get", "manual"] = "immediate",
        page_size: int = 500,
        operation_polls: int = 0,
    ) -> None:
        self.start_mode = start
        self.page_size = page_size
        # How many get/wait calls answer RUNNING before an operation is DONE.
        self.operation_polls = operation_polls
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._instances: dict[tuple[str, str], dict[str, Any]] = {}
        self._operations: dict[str, dict[str, Any]] = {}
        self._zone_faults: dict[str, tuple[str, str, int | None]] = {}
        self._capacity: dict[str, int] = {}
        self._http_faults: list[_HttpFault] = []
        self._ids = itertools.count(1000)
        self._images: dict[tuple[str, str], dict[str, Any]] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        fake = self

        class Handler(_Handler):
            gce = fake

        return Handler

    # -- test controls -----------------------------------------------------------------------

    def fail_zone(
        self,
        zone: str,
        code: str = "ZONE_RESOURCE_POOL_EXHAUSTED",
        message: str = "",
        *,
        times: int | None = None,
    ) -> None:
        """Make inserts in ``zone`` finish with ``code`` in the operation's error field."""
        msg = message or f"The zone '{zone}' does not have enough resources available."
        with self._lock:
            self._zone_faults[zone] = (code, msg, times)

    def set_capacity(self, zone: str, instances: int) -> None:
        """At most ``instances`` more instances fit in ``zone`` (bulkInsert honours minCount)."""
        with self._lock:
            self._capacity[zone] = instances

    def fail_http(
        self,
        kind: str,
        status: int,
        reason: str,
        message: str = "",
        *,
        times: int = 1,
        after: bool = False,
    ) -> None:
        """Answer the next ``times`` requests of ``kind`` (see RecordedRequest.kind) with an
        HTTP error whose ``errors[0].reason`` is ``reason``. ``after``: carry the request out
        first (the error got lost on the way back, as a 503 from a front end can be)."""
        with self._lock:
            self._http_faults.append(
                _HttpFault(kind, status, reason, message or reason, times, after)
            )

    def set_status(self, name: str, status: str) -> None:
        with self._lock:
            for (_, n), inst in self._instances.items():
                if n == name:
                    inst["status"] = status

    def preempt(self, name: str) -> None:
        """What GCE does to a Spot/preemptible VM: delete it (Spot, action DELETE) or stop it."""
        with self._lock:
            for key, inst in list(self._instances.items()):
                if key[1] != name:
                    continue
                sched = inst.get("scheduling", {})
                if sched.get("instanceTerminationAction") == "DELETE":
                    del self._instances[key]
                else:
                    inst["status"] = "TERMINATED"

    def add_instance(self, zone: str, name: str, labels: dict[str, str], **fields: Any) -> None:
        """Put an instance there directly (e.g. another cluster's)."""
        with self._lock:
            self._create(
                "fake-project", zone, {"name": name, "labels": labels, **fields}, status="RUNNING"
            )

    def add_image(
        self,
        project: str,
        name: str,
        family: str = "",
        *,
        deprecated: bool = False,
        disk_size_gb: int = 10,
    ) -> None:
        """Publish an image (newer than every image added before it)."""
        with self._lock:
            self._images[(project, name)] = {
                "kind": "compute#image",
                "id": str(next(self._ids)),
                "name": name,
                "family": family,
                "status": "READY",
                "diskSizeGb": str(disk_size_gb),
                "selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}/global/images/{name}",
                "creationTimestamp": dt.datetime.now(dt.UTC).isoformat(timespec="microseconds"),
                **({"deprecated": {"state": "DEPRECATED"}} if deprecated else {}),
            }

    def instances(self) -> list[dict[str, Any]]:
        with self._lock:
            return [json.loads(json.dumps(i)) for i in self._instances.values()]

    def running_instances(self) -> list[dict[str, Any]]:
        """Instances currently RUNNING (the hook for turning VMs into real agents)."""
        return [i for i in self.instances() if i["status"] == "RUNNING"]

    def bodies(self, kind: str) -> list[Any]:
        with self._lock:
            return [r.body for r in self.requests if r.kind == kind]

    # -- state machine (called by the handler with the lock held) ------------------------------

    def _create(
        self, project: str, zone: str, body: dict[str, Any], *, status: str | None = None
    ) -> dict[str, Any]:
        base = f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}"
        name = body["name"]
        ip = next(self._ids)
        inst = {
            **body,
            "kind": "compute#instance",
            "id": str(next(self._ids)),
            "zone": base,
            "selfLink": f"{base}/instances/{name}",
            "creationTimestamp": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
            "status": status or ("RUNNING" if self.start_mode == "immediate" else "PROVISIONING"),
        }
        machine = str(body.get("machineType", ""))
        if machine and "/" not in machine:
            inst["machineType"] = f"{base}/machineTypes/{machine}"
        nics = inst.get("networkInterfaces") or [{"network": "global/networks/default"}]
        inst["networkInterfaces"] = [
            {**nic, "networkIP": f"10.0.{ip // 250 % 250}.{ip % 250 + 2}"} for nic in nics
        ]
        self._instances[(zone, name)] = inst
        return inst

    def _observe(self, inst: dict[str, Any]) -> dict[str, Any]:
        shown = dict(inst)
        if self.start_mode == "next_get" and inst["status"] == "PROVISIONING":
            inst["status"] = "RUNNING"
        return shown

    def _operation(
        self, project: str, zone: str, op_type: str, target: str, error: tuple[str, str] | None
    ) -> dict[str, Any]:
        name = f"operation-{next(self._ids)}"
        base = f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}"
        op: dict[str, Any] = {
            "kind": "compute#operation",
            "id": str(next(self._ids)),
            "name": name,
            "zone": base,
            "operationType": op_type,
            "targetLink": f"{base}/instances/{target}",
            "selfLink": f"{base}/operations/{name}",
            "status": "RUNNING",
            "progress": 0,
            "insertTime": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        }
        if error is not None:
            op["error"] = {"errors": [{"code": error[0], "message": error[1]}]}
            op["httpErrorStatusCode"] = 503 if "EXHAUSTED" in error[0] else 403
            op["httpErrorMessage"] = (
                "SERVICE UNAVAILABLE" if "EXHAUSTED" in error[0] else "FORBIDDEN"
            )
        self._operations[name] = op
        return dict(op)

    def _zone_error(
        self, zone: str, wanted: int, minimum: int
    ) -> tuple[tuple[str, str] | None, int]:
        """(error, how many to create) for a launch of ``wanted`` (at least ``minimum``)."""
        fault = self._zone_faults.get(zone)
        if fault is not None:
            code, msg, times = fault
            if times is not None:
                if times <= 1:
                    del self._zone_faults[zone]
                else:
                    self._zone_faults[zone] = (code, msg, times - 1)
            return (code, msg), 0
        room = self._capacity.get(zone)
        if room is None:
            return None, wanted
        if room < minimum:
            return (
                (
                    "ZONE_RESOURCE_POOL_EXHAUSTED",
                    f"The zone '{zone}' does not have enough resources.",
                ),
                0,
            )
        made = min(wanted, room)
        self._capacity[zone] = room - made
        return None, made

    def _take_http_fault(self, kind: str) -> _HttpFault | None:
        for fault in self._http_faults:
            if fault.kind == kind and fault.times > 0:
                fault.times -= 1
                return fault
        return None

    def handle(
        self, method: str, path: str, query: dict[str, str], body: Any
    ) -> tuple[int, dict[str, Any]]:
        with self._lock:
            req = RecordedRequest(method, path, query, body)
            self.requests.append(req)
            fault = self._take_http_fault(req.kind)
            if req.kind == "aggregatedList":
                if fault is not None:
                    return _error(fault.status, fault.reason, fault.message)
                return 200, self._list(None, query)
            image = _IMAGES.match(path)
            if image is not None:
                if fault is not None:
                    return _error(fault.status, fault.reason, fault.message)
                return self._image(
                    image.group("project"), image.group("family"), image.group("name")
                )
            m = _PREFIX.match(path)
            if m is None:
                return _error(404, "notFound", f"The resource '{path}' was not found")
            project, zone, rest = m.group("project"), m.group("zone"), m.group("rest")
            if fault is not None:
                if fault.after:
                    self._route(req.kind, project, zone, rest, query, body)
                return _error(fault.status, fault.reason, fault.message)
            return self._route(req.kind, project, zone, rest, query, body)

    def _route(
        self, kind: str, project: str, zone: str, rest: str, query: dict[str, str], body: Any
    ) -> tuple[int, dict[str, Any]]:
        if kind == "insert":
            if (zone, body["name"]) in self._instances:
                return _error(409, "alreadyExists", f"The resource '{body['name']}' already exists")
            error, made = self._zone_error(zone, 1, 1)
            if made:
                self._create(project, zone, body)
            return 200, self._operation(project, zone, "insert", body["name"], error)
        if kind == "bulkInsert":
            names = list(body.get("perInstanceProperties") or {})
            count = int(body.get("count", len(names)))
            pattern = body.get("namePattern")
            if pattern:
                names += [
                    _NAME_PATTERN.sub(lambda g, i=i: str(i).zfill(len(g.group())), pattern)
                    for i in range(1, count - len(names) + 1)
                ]
            error, made = self._zone_error(zone, count, int(body.get("minCount", count)))
            props = body.get("instanceProperties", {})
            for name in names[:made]:
                self._create(project, zone, {**props, "name": name})
            return 200, self._operation(
                project, zone, "bulkInsert", names[0] if names else "", error
            )
        if kind == "list":
            return 200, self._list(zone, query)
        if kind in ("get", "delete"):
            name = rest.split("/", 1)[1]
            inst = self._instances.get((zone, name))
            if inst is None:
                return _error(
                    404,
                    "notFound",
                    f"The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found",
                )
            if kind == "get":
                return 200, self._observe(inst)
            del self._instances[(zone, name)]
            return 200, self._operation(project, zone, "delete", name, None)
        op_name = rest.split("/")[1]
        op = self._operations.get(op_name)
        if op is None:
            return _error(404, "notFound", f"The resource 'operations/{op_name}' was not found")
        op["_polls"] = op.get("_polls", 0) + 1
        if op["_polls"] > self.operation_polls:
            op.update(status="DONE", progress=100)
        return 200, {k: v for k, v in op.items() if not k.startswith("_")}

    def _image(
        self, project: str, family: str | None, name: str | None
    ) -> tuple[int, dict[str, Any]]:
        if name is not None:
            image = self._images.get((project, name))
        else:
            # Added later = newer; like GCE, deprecated images are skipped.
            matching = [
                i
                for (p, _), i in self._images.items()
                if p == project and i["family"] == family and "deprecated" not in i
            ]
            image = matching[-1] if matching else None
        if image is None:
            what = f"family/{family}" if family is not None else name
            return _error(
                404,
                "notFound",
                f"The resource 'projects/{project}/global/images/{what}' was not found",
            )
        return 200, dict(image)

    def _list(self, zone: str | None, query: dict[str, str]) -> dict[str, Any]:
        """One zone's list, or (``zone=None``) the aggregated list grouped by ``zones/Z``."""
        terms = _FILTER_TERM.findall(query.get("filter", ""))
        matched = []
        for (z, _), inst in sorted(self._instances.items()):
            labels = inst.get("labels", {})
            if zone in (None, z) and all((labels.get(k) == v) == (op == "=") for k, op, v in terms):
                matched.append((z, inst))
        size = min(int(query.get("maxResults", self.page_size)), self.page_size)
        start = int(query.get("pageToken") or 0)
        page_items = [(z, self._observe(i)) for z, i in matched[start : start + size]]
        page: dict[str, Any]
        if zone is None:
            grouped: dict[str, Any] = {}
            for z, inst in page_items:
                grouped.setdefault(f"zones/{z}", {"instances": []})["instances"].append(inst)
            page = {"kind": "compute#instanceAggregatedList", "items": grouped}
        else:
            page = {"kind": "compute#instanceList", "items": [i for _, i in page_items]}
        if start + size < len(matched):
            page["nextPageToken"] = str(start + size)
        return page


def _error(status: int, reason: str, message: str) -> tuple[int, dict[str, Any]]:
    return status, {
        "error": {
            "code": status,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": reason}],
        }
    }


class _Handler(http.server.BaseHTTPRequestHandler):
    gce: FakeGce
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Without this every small response waits for the client's delayed ACK (~40 ms).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _serve(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        status, payload = self.gce.handle(self.command, url.path, query, body)
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass
