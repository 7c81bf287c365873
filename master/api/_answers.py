"""Fast JSON answers for the read paths: orjson, raw JSON fragments, conditional reads.

A read that PostgreSQL can hand over as JSON text (an experiment's config, a metric series)
passes through as a fragment (:func:`det.master.fastjson.fragment`): it is neither decoded into Python objects nor
encoded again. :func:`answer` encodes the rest with orjson.

:func:`answer` with ``etag=True`` makes the read conditional: the answer carries a weak ETag
(a hash of its body) and a request whose ``If-None-Match`` names it gets ``304 Not Modified``
with no body. The body is still built (the hash is of it), so a 304 saves the network and the
client's parsing, not the master's query; a read whose rendered page is kept
(:mod:`det.master.listcache`) answers from the kept page and its ETag without building it.

orjson writes a non-finite float as ``null`` where the standard encoder wrote ``NaN``; the
values these reads send come from jsonb (which holds no non-finite number: det stores them as
Determined's strings ``"NaN"``/``"Infinity"``) or are finite by construction.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from flask import Response, request

from det.master.listcache import Page

_OPTIONS = orjson.OPT_NON_STR_KEYS


def etag_of(body: bytes) -> str:
    # SHA-256, 96 bits of it: OpenSSL computes it with the CPU's SHA instructions, 31 us for
    # the 63 KB list of 20 on this project's machine type against blake2b's 73 us.
    return 'W/"' + hashlib.sha256(body).hexdigest()[:24] + '"'


def _matches(header: str | None, tag: str) -> bool:
    if not header:
        return False
    if header.strip() == "*":
        return True
    # Weak comparison (RFC 9110 13.1.2): W/ prefixes do not count.
    wanted = tag.removeprefix("W/")
    return any(t.strip().removeprefix("W/") == wanted for t in header.split(","))


def answer(value: Any, *, etag: bool = False, status: int = 200) -> Response:
    body = orjson.dumps(value, option=_OPTIONS)
    if not etag:
        return Response(body, status=status, mimetype="application/json")
    return conditional(Page(body, etag_of(body)), status=status)


def encoded(value: Any) -> bytes:
    """``value``'s JSON body, as :func:`answer` sends it."""
    return orjson.dumps(value, option=_OPTIONS)


def render(value: Any) -> Page:
    """``value``'s JSON body and its ETag, to answer with :func:`conditional` (now or later)."""
    body = orjson.dumps(value, option=_OPTIONS)
    return Page(body, etag_of(body))


def conditional(page: Page, *, status: int = 200) -> Response:
    """``page`` as a conditional answer: 304 with no body when ``If-None-Match`` names its ETag."""
    if _matches(request.headers.get("If-None-Match"), page.etag):
        resp = Response(status=304)
    else:
        resp = Response(page.body, status=status, mimetype="application/json")
    resp.headers["ETag"] = page.etag
    # The answer depends on who asks (what they may see): shared caches must not reuse it.
    resp.headers["Cache-Control"] = "private, no-cache"
    return resp


def conditional_wsgi(
    page: Page, if_none_match: str | None
) -> tuple[str, list[tuple[str, str]], bytes]:
    """:func:`conditional`'s answer of status 200 as WSGI gives it (status line, headers,
    body), byte for byte what Flask sends for that Response (werkzeug drops a 304's
    Content-Type and Content-Length), for an answer given without Flask
    (:mod:`det.master.api._predispatch`)."""
    tags = [("ETag", page.etag), ("Cache-Control", "private, no-cache")]
    if _matches(if_none_match, page.etag):
        return "304 NOT MODIFIED", tags, b""
    head = [("Content-Type", "application/json"), ("Content-Length", str(len(page.body)))]
    return "200 OK", head + tags, page.body
