"""Interactive tasks live on an origin of their own (docs/security.md): where browsers reach
them, how the master tells a request for that origin from one for the WebUI's, and what of a
task's answer may reach the browser.

A task's page is code its author wrote. Served on the WebUI's origin it would read the
viewer's session and call the API as them; on another origin the browser's same-origin policy
keeps it from the WebUI's storage, its responses and its frames, and the master adds what the
browser does not do on its own (:func:`filter_response_head`, the API's ``Sec-Fetch-Site``
check, single-use tickets and session-bound task cookies: :mod:`det.master.proxy`).

The origin is the master config's ``task_origin`` (``scheme://host[:port]``; ``{task}`` as the
host's first label gives each task its own origin, ``https://{task}.tasks.example.com``), else
the host the browser reached the master by, at the master's second port (``task_port``) and the
master's scheme.
"""

from __future__ import annotations

import re
import urllib.parse

from det.master.config import MasterConfig

#: The placeholder of a per-task host name in ``task_origin``.
TASK_LABEL = "{task}"
#: The query parameter of an opened URL (a ticket) and the cookie the proxy trades it for.
TICKET = "det_ticket"
TASK_COOKIE = "det_task"


def split_host(host: str) -> tuple[str, str]:
    """(host name, port as written, possibly empty) of a ``Host`` header or a URL's netloc."""
    host = host.strip().lower()
    if host.startswith("["):
        name, _, rest = host.partition("]")
        return name + "]", rest[1:] if rest.startswith(":") else ""
    name, _, port = host.partition(":")
    return name, port


#: Host names of this machine: a browser that reached the master by one of them gets a host
#: name per task under ``localhost`` (which browsers resolve to loopback themselves).
LOOPBACK = frozenset({"localhost", "127.0.0.1", "[::1]"})


def origin(config: MasterConfig, task_port: int | None, host: str | None, task_id: str) -> str:
    """The origin a browser opens task ``task_id`` at, for a request that reached the master at
    ``host`` (its ``Host`` header)."""
    if config.task_origin:
        return config.task_origin.replace(TASK_LABEL, task_id)
    scheme = "https" if config.security.tls.enabled else "http"
    name = split_host(host or "")[0] or split_host(urllib.parse.urlsplit(config.url()).netloc)[0]
    if name in LOOPBACK or name.endswith(".localhost"):
        name = f"{task_id}.localhost"
    return f"{scheme}://{name}:{task_port}"


def _pattern(config: MasterConfig) -> re.Pattern[str] | None:
    if not config.task_origin:
        return None
    netloc = urllib.parse.urlsplit(config.task_origin).netloc.lower()
    name, port = split_host(netloc)
    if not port:
        port = "443" if config.task_origin.startswith("https:") else "80"
    host = re.escape(name).replace(re.escape(TASK_LABEL), "(?P<task>[0-9a-f-]{1,64})")
    return re.compile(f"{host}(?::{port})?" if port in ("80", "443") else f"{host}:{port}")


def host_task(config: MasterConfig, host: str | None) -> str | None:
    """For a request whose ``Host`` is the configured ``task_origin``'s: the task its host
    names (``""`` when the origin is one for all tasks); None for any other host."""
    pattern = _pattern(config)
    if pattern is None or not host:
        return None
    m = pattern.fullmatch(host.strip().lower())
    if m is None:
        return None
    return m.groupdict().get("task") or ""


def host_label(config: MasterConfig, host: str | None) -> str | None:
    """The task a request's host name is for, when it names one (a per-task origin: the
    configured ``{task}`` label, or ``<task>.localhost``); None for a host shared by tasks."""
    found = host_task(config, host)
    if found:
        return found
    name = split_host(host or "")[0]
    if name.endswith(".localhost"):
        return name.split(".", 1)[0]
    return None


def _keeps_cookie(value: str, task_id: str) -> bool:
    """Whether a task's ``Set-Cookie: value`` may reach the browser: a cookie of its own name,
    for the task's own path, for this host only."""
    pair, *attrs = value.split(";")
    name = pair.partition("=")[0].strip()
    if not name or name.lower() == "auth" or name.lower().startswith("det_"):
        return False
    if name.startswith(("__Host-", "__Secure-")):
        return False  # __Host- needs Path=/, and neither is the task's to claim
    own = f"/proxy/{task_id}"
    for attr in attrs:
        key, _, val = attr.strip().partition("=")
        key = key.strip().lower()
        if key == "domain":
            return False  # a parent domain would share it with every task's host
        if key == "path" and not (val.strip() == own or val.strip().startswith(own + "/")):
            return False
    return True


def filter_response_head(head: bytes, task_id: str, *, task_origin: bool) -> bytes:
    """A task's response head as it may reach the browser. On the task origin: its cookies
    only for its own path and never one named like the WebUI's or the proxy's. On the WebUI's
    origin (reached only with a bearer token, never by a page): no cookie at all, and a
    sandbox, so that nothing it sends runs as the WebUI's origin if a browser ever renders it."""
    lines = head.split(b"\r\n")
    out = [lines[0]]
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        low = name.strip().lower()
        if low == b"set-cookie" and not (
            task_origin and _keeps_cookie(value.decode("latin-1"), task_id)
        ):
            continue
        if not task_origin and low == b"content-security-policy":
            continue
        out.append(line)
    if not task_origin:
        out.append(b"Content-Security-Policy: sandbox")
    return b"\r\n".join(out)


class ResponseFilter:
    """Filters the heads of what a task sends back on one proxied connection (each carries one
    request, or one WebSocket after its ``101``): interim ``1xx`` heads and the final head pass
    :func:`filter_response_head`; the body and anything after an upgrade go through as they
    are."""

    MAX_HEAD = 65536

    def __init__(self, task_id: str, *, task_origin: bool) -> None:
        self.task_id, self.task_origin = task_id, task_origin
        self._buf = b""
        self._done = False

    def feed(self, chunk: bytes) -> bytes:
        if self._done:
            return chunk
        self._buf += chunk
        out = b""
        while not self._done:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > self.MAX_HEAD:
                    raise ValueError("the task's response head is too long")
                return out
            head, self._buf = self._buf[:end], self._buf[end + 4 :]
            parts = head.split(b" ", 2)
            status = parts[1] if len(parts) > 1 else b""
            out += filter_response_head(head, self.task_id, task_origin=self.task_origin)
            out += b"\r\n\r\n"
            # An interim answer (100 Continue) is followed by the real head; 101 is final.
            self._done = not (status.startswith(b"1") and status != b"101")
        out, self._buf = out + self._buf, b""
        return out
