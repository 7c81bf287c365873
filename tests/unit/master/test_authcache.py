"""The session cache's rules: hits only under the epoch an entry was read in, before its
deadline (the TTL or the session's expiry, whichever is first) and while the master listens."""

from __future__ import annotations

import os
import warnings

from det.master.authcache import Epoch, SessionCache


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Loader:
    def __init__(self, value: str | None, expires: float = 1e12) -> None:
        self.value, self.expires, self.calls = value, expires, 0

    def __call__(self) -> tuple[str, float] | None:
        self.calls += 1
        return None if self.value is None else (self.value, self.expires)


def _cache(ttl: float = 10.0) -> tuple[SessionCache[str], Epoch, Clock]:
    epoch, clock = Epoch(), Clock()
    epoch.set_listening(True)
    return SessionCache(epoch, ttl, clock=clock), epoch, clock


def test_a_second_lookup_is_answered_from_the_cache() -> None:
    cache, _, _ = _cache()
    load = Loader("alice")
    assert cache.lookup("d1", load) == "alice"
    assert cache.lookup("d1", load) == "alice"
    assert load.calls == 1


def test_a_moved_epoch_forgets_every_entry() -> None:
    cache, epoch, _ = _cache()
    load = Loader("alice")
    cache.lookup("d1", load)
    epoch.bump()
    load.value = None  # revoked
    assert cache.lookup("d1", load) is None
    assert load.calls == 2
    assert cache.lookup("d1", load) is None  # a miss is not cached
    assert load.calls == 3


def test_a_lookup_that_raced_a_revocation_is_kept_under_the_old_epoch() -> None:
    cache, epoch, _ = _cache()

    def racing() -> tuple[str, float]:
        # The lookup read the session before the revocation's commit; the epoch moved after.
        epoch.bump()
        return "alice", 1e12

    assert cache.lookup("d1", racing) == "alice"
    load = Loader(None)
    assert cache.lookup("d1", load) is None
    assert load.calls == 1


def test_entries_end_at_the_ttl_or_the_sessions_expiry() -> None:
    cache, _, clock = _cache(ttl=10.0)
    long, short = Loader("alice"), Loader("bob", expires=clock.now + 3)
    cache.lookup("long", long)
    cache.lookup("short", short)
    clock.now += 5
    cache.lookup("long", long)
    cache.lookup("short", short)
    assert (long.calls, short.calls) == (1, 2)  # bob's session expired at +3
    clock.now += 6
    cache.lookup("long", long)
    assert long.calls == 2  # past the TTL


def test_no_cache_while_not_listening_or_with_a_zero_ttl() -> None:
    cache, epoch, _ = _cache()
    epoch.set_listening(False)
    load = Loader("alice")
    cache.lookup("d1", load)
    epoch.set_listening(True)
    cache.lookup("d1", load)
    assert load.calls == 2  # nothing was kept while deaf
    off, _, _ = _cache(ttl=0)
    load = Loader("alice")
    off.lookup("d1", load)
    off.lookup("d1", load)
    assert load.calls == 2


def test_the_epoch_is_shared_with_forked_processes() -> None:
    epoch = Epoch()
    before = epoch.read()
    with warnings.catch_warnings():  # Python 3.12+ warns of forking with threads about
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child moves it and leaves at once
        epoch.bump()
        os._exit(0)
    os.waitpid(pid, 0)
    assert epoch.read() == before + 1
