"""Cross-origin writes to a task are refused by the proxy itself (pure).

The proxy adds the master's ``Authorization: token …`` to what it forwards, and Jupyter skips
its own XSRF and Origin checks for a token-authenticated request; a browser sends a task's
cookie with a form or a WebSocket from any page of the same site (another port of the same
host, a sibling sub-domain). So the proxy refuses a request that changes state (any method but
``GET``, ``HEAD`` and ``OPTIONS``) or opens a WebSocket when the browser says it comes from
another origin: ``Sec-Fetch-Site`` ``cross-site`` or ``same-site``, or an ``Origin`` whose host
and port are not the request's own ``Host`` (nor the master's public URL's). Clients that are
not browsers (the CLI, the SDK) send neither header and pass.
"""

from __future__ import annotations

import urllib.parse

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def _host_port(netloc: str, scheme: str) -> tuple[str, int] | None:
    try:
        parts = urllib.parse.urlsplit(f"//{netloc}")
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return parts.hostname.lower(), port or _DEFAULT_PORTS.get(scheme, 0)


def origin_of(url: str) -> tuple[str, int] | None:
    """(host, port) of an origin or URL (``http://a:1/x`` -> ``("a", 1)``); None if it has none."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme.lower() not in _DEFAULT_PORTS or not parts.netloc:
        return None
    return _host_port(parts.netloc, parts.scheme.lower())


def refusal(
    method: str,
    upgrade: bool,
    host: str | None,
    origin: str | None,
    fetch_site: str | None,
    also_allowed: tuple[str, ...] = (),
) -> str | None:
    """Why the request must be refused (one line), or None to let it through.
    ``also_allowed``: other origins the task is served from (the master's public URL)."""
    if method.upper() in SAFE_METHODS and not upgrade:
        return None
    what = "a WebSocket" if upgrade else f"a {method.upper()}"
    site = (fetch_site or "").strip().lower()
    if site in ("cross-site", "same-site"):
        return (
            f"cross-origin request refused: {what} from another site's or origin's page"
            f" (Sec-Fetch-Site: {site}); a task accepts writes only from its own pages"
        )
    if origin is None:
        return None
    claimed = origin_of(origin)
    if claimed is not None:
        own = _host_port(host or "", urllib.parse.urlsplit(origin.strip()).scheme.lower())
        allowed = {own, *(origin_of(u) for u in also_allowed)}
        if claimed in allowed:
            return None
    return (
        f"cross-origin request refused: {what} from Origin {origin.strip()[:200]}, which is not"
        f" this task's origin ({host}); a task accepts writes only from its own pages"
    )
