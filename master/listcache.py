"""Rendered pages of a list kept per API process while a version in the database says the list
is unchanged.

The WebUI and the CLI poll the experiment list; most polls find it as it was. Building a page
costs the list's statement (joins, a count, 20 rows) and turning its rows into JSON; checking
whether anything the list shows changed costs one read of a one-row table.

**Validity, across processes and masters.** ``list_versions`` holds, per list, the id of the
last transaction that changed anything the list shows: triggers (migration 0013) write it in
that transaction, at its commit, so the new version becomes visible to other connections exactly
when the change does. Transaction ids never repeat, so a version names one committed state of
the list's data. A page is stored under the version read *before* its rows were read (so the
page is at least as new as its version) and served only to a request whose own read of the
version, a new statement, finds the same value. A write committed and answered by any process
of any master is therefore seen by the very next request anywhere: its commit changed the
version before its answer was sent.

**Checked in memory while the master is alone.** The version's read is a round trip per
request, and the rest of a kept page's answer costs less than that (the list at 0.65x a
Flask hello with it, 1.06-1.14x without it: docs/benchmarks.md). Every change the list shows also
notifies ``det_list`` at its commit (migration 0047), and a master keeps an epoch of that
channel in memory shared by its processes (:class:`det.master.authcache.Epoch`, as for
sessions): the connection that commits the change hears its own notification with the commit,
so the epoch has moved, in every process of the master, before the change's request is
answered. Another master's commit would reach it only through its listener, a moment later: so
the epoch stands in for the version only while the master's listener is connected and has found
no other master on the database (:func:`validity`; a starting master waits until every master
already there has seen it, ``authcache.wait_until_seen``). With another master, or no listener,
the version is read as above.

**Who may see a page.** A page depends on the request's validated query and nothing else: every
user reads every experiment (:mod:`det.master.api._access`). Reads that sort by values the
metric ingest changes (a trial's best metric, checkpoint sizes) are not cached: the triggers do
not follow those tables, so that the ingest writes no shared row.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, NamedTuple

from det.master import authz, db
from det.master.authcache import Epoch
from det.master.db import Conn


class Page(NamedTuple):
    """A rendered answer: its JSON body and the ETag of that body."""

    body: bytes
    etag: str


def version(conn: Conn, name: str) -> str:
    """The list's current version (one short statement; opaque, compared for equality)."""
    v = db.scalar(
        conn, str, "SELECT version::text AS v FROM list_versions WHERE name = %s", (name,)
    )
    # No row (a database before migration 0013 cannot be served by this code): nothing matches.
    return v if v is not None else ""


@dataclass(frozen=True)
class VersionAndPrivacy:
    version: str | None
    private: bool


def version_and_privacy(conn: Conn, name: str) -> VersionAndPrivacy:
    """The list's current version (as :func:`version`: "" when there is none) and whether any
    workspace is private (:data:`det.master.authz.ANY_PRIVATE`) in one statement: a kept page's
    check costs one round trip."""
    row = db.fetch_row(
        conn,
        VersionAndPrivacy,
        "SELECT (SELECT version::text FROM list_versions WHERE name = %s) AS version,"
        f" {authz.ANY_PRIVATE} AS private",
        (name,),
    )
    assert row is not None  # a SELECT of expressions answers one row
    return VersionAndPrivacy(row.version or "", row.private)


class ListCache:
    """A least-recently-used map of request key -> (version, page), bounded in bytes."""

    def __init__(self, max_bytes: int = 32 << 20) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[Hashable, tuple[str, Page]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable, held: str) -> Page | None:
        """The page stored for ``key`` under version ``held``, if any."""
        if not held:
            return None
        with self._lock:
            entry = self._items.get(key)
            if entry is None:
                return None
            if entry[0] != held:
                self._drop(key)  # its version is gone for good: ids are not reused
                return None
            self._items.move_to_end(key)
            return entry[1]

    def put(self, key: Hashable, held: str, page: Page) -> None:
        size = len(page.body)
        if not held or size > self.max_bytes // 8:
            return
        with self._lock:
            self._drop(key)
            self._items[key] = (held, page)
            self._bytes += size
            while self._bytes > self.max_bytes and self._items:
                self._drop(next(iter(self._items)))

    def __len__(self) -> int:
        return len(self._items)

    def _drop(self, key: Hashable) -> None:
        entry = self._items.pop(key, None)
        if entry is not None:
            self._bytes -= len(entry[1].body)


def key_of(params: Any) -> Hashable:
    """A hashable key of a request's validated query parameters (lists as tuples)."""
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in params.items()))


# One per process (the API processes are forked before they serve).
EXPERIMENTS = ListCache()

#: The channel migration 0047's triggers notify at a change the list shows.
CHANNEL = "det_list"
#: The master's list epoch (det.master.server.serve sets it before it forks): None, the
#: version is read at every request.
EPOCH: Epoch | None = None
# (epoch, whether any workspace is private) as this process last read them.
_memo: tuple[int, bool] | None = None


def validity(conn: Conn, name: str) -> VersionAndPrivacy:
    """What a kept page of ``name`` is checked against: while the master is alone on the
    database and listening, its epoch (no statement; whether any workspace is private is read
    once an epoch, since making one private moves it); otherwise the version, read now
    (:func:`version_and_privacy`). Tokens of the two kinds never match each other."""
    global _memo
    epoch = EPOCH
    if epoch is None or not (epoch.listening and epoch.alone):
        return version_and_privacy(conn, name)
    seen = epoch.read()  # before anything is read: a commit after this moves it
    memo = _memo
    if memo is None or memo[0] != seen:
        memo = (seen, version_and_privacy(conn, name).private)
        _memo = memo
    return VersionAndPrivacy(f"epoch {seen}", memo[1])
