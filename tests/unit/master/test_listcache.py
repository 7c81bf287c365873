"""The per-process store of rendered list pages (det.master.listcache): a page is served only
under the version it was stored with, and the store stays within its byte budget."""

from __future__ import annotations

from det.master.listcache import ListCache, Page, key_of


def _page(n: int, text: str = "x") -> Page:
    return Page((text * n).encode(), f'W/"{text}{n}"')


def test_a_page_is_served_under_its_version_only() -> None:
    cache = ListCache()
    key = key_of({"limit": 20})
    cache.put(key, "100", _page(10))
    assert cache.get(key, "100") == _page(10)
    assert cache.get(key, "101") is None
    # The other version's page is gone for good (transaction ids are not reused).
    assert cache.get(key, "100") is None and len(cache) == 0


def test_no_version_keeps_and_serves_nothing() -> None:
    cache = ListCache()
    key = key_of({"limit": 20})
    cache.put(key, "", _page(10))
    assert len(cache) == 0
    cache.put(key, "7", _page(10))
    assert cache.get(key, "") is None


def test_the_least_recently_used_page_goes_first_past_the_budget() -> None:
    cache = ListCache(max_bytes=1000)
    old = [key_of({"offset": i}) for i in range(3)]
    new = [key_of({"offset": 10 + i}) for i in range(8)]
    for k in old:
        cache.put(k, "1", _page(100))
    assert cache.get(old[0], "1") is not None  # used: old[1] is now the least recent
    for k in new:  # 1,100 bytes in all, over a budget of 1,000: one page goes
        cache.put(k, "1", _page(100))
    assert cache.get(old[1], "1") is None
    assert all(cache.get(k, "1") is not None for k in [old[0], old[2], *new])
    assert len(cache) == 10


def test_a_page_larger_than_an_eighth_of_the_budget_is_not_kept() -> None:
    cache = ListCache(max_bytes=800)
    cache.put(key_of({"limit": 0}), "1", _page(101))
    assert len(cache) == 0
    cache.put(key_of({"limit": 0}), "1", _page(100))
    assert len(cache) == 1


def test_keys_of_the_same_query_are_equal_in_any_order_and_lists_are_kept_apart() -> None:
    a = key_of({"limit": 20, "states": ["STATE_ACTIVE", "STATE_PAUSED"], "name": None})
    b = key_of({"name": None, "states": ["STATE_ACTIVE", "STATE_PAUSED"], "limit": 20})
    assert a == b and hash(a) == hash(b)
    assert a != key_of({"limit": 20, "states": ["STATE_PAUSED", "STATE_ACTIVE"], "name": None})
    assert key_of({"limit": 20}) != key_of({"limit": 20, "offset": 20})
