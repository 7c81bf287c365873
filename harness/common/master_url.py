"""The one place that turns what a user or a config wrote into the master's URL.

* :func:`canonicalize`: ``host`` / ``host:port`` / ``scheme://host:port/`` → ``scheme://host:port``
  (``http`` when no scheme is given; ``default_port`` added when no port is; no trailing slash).
  The CLI (``-m``, ``DET_MASTER``), the agent (``master_url``) and the harness
  (``DET_MASTER``) all call it.
* :func:`resolve`: Determined's placeholder hosts that stand for "the master machine's own
  address" (``http://local-ipv4:8080`` on EC2, ``http://internal-ip:8080`` on GCE), replaced with
  what the cloud's metadata says. Each cloud passes its own placeholder table.

Runs inside task containers (Python 3.8+, standard library only).
"""

from __future__ import annotations

import urllib.parse
from typing import Callable, Mapping

DEFAULT_PORT = 8080


def canonicalize(url: str, *, default_port: int | None = None) -> str:
    """``url`` with a scheme (``http`` when missing), no trailing slash and, when
    ``default_port`` is given, a port. ValueError for an empty URL or a port that is no number."""
    text = url.strip().rstrip("/")
    if not text:
        raise ValueError("the master URL is empty")
    if "://" not in text:
        text = f"http://{text}"
    parts = urllib.parse.urlsplit(text)
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"master URL {url!r}: the port is not a number") from None
    if default_port is not None and port is None and parts.hostname:
        netloc = f"{parts.netloc}:{default_port}"
        text = urllib.parse.urlunsplit(parts._replace(netloc=netloc)).rstrip("/")
    return text


def resolve(url: str, placeholders: Mapping[str, str], lookup: Callable[[str], str]) -> str:
    """``url`` with a placeholder host replaced by ``lookup(placeholders[host])``.

    ``placeholders`` maps each placeholder host (``""`` for "no host given", where the cloud
    allows it) to the metadata key ``lookup`` reads; ``lookup`` is only called for one. The
    result is ``scheme://host:port``: ``http`` and :data:`DEFAULT_PORT` when missing, as in
    Determined.
    """
    parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    host = parts.hostname or ""
    if host in placeholders:
        host = lookup(placeholders[host])
    return f"{parts.scheme or 'http'}://{host}:{parts.port or DEFAULT_PORT}"
