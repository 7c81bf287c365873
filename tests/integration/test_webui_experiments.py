# ruff: noqa: F811 (the fixtures imported from webui_support are parameters here)
"""The WebUI's experiment list in Chromium against a live master with a finished adaptive ASHA
search: filters, sorting on every column (by the server), paging, labels, archive and batch
actions with one confirmation."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import wait_for
from tests.integration.threaded import ThreadedMaster
from tests.integration.webui_support import (  # noqa: F401 (fixtures)
    browser,
    create,
    login,
    module_db,
    page,
    screenshot,
    search,
)

pytestmark = [pytest.mark.integration, pytest.mark.browser]

PAUSED = """
name: {name}
entrypoint: python3 train.py
searcher: {{name: single, metric: loss, max_length: {{batches: 10}}}}
hyperparameters: {{lr: 0.1}}
"""

SORT_KEYS = {
    "ID": "SORT_BY_ID",
    "Name": "SORT_BY_NAME",
    "Description": "SORT_BY_DESCRIPTION",
    "State": "SORT_BY_STATE",
    "Trials": "SORT_BY_NUM_TRIALS",
    "Progress": "SORT_BY_PROGRESS",
    "User": "SORT_BY_USER",
    "Pool": "SORT_BY_RESOURCE_POOL",
    "Started": "SORT_BY_START_TIME",
    "Ended": "SORT_BY_END_TIME",
}


def shown_ids(page: Any) -> list[int]:
    return [
        int(x) for x in page.locator("tbody tr").evaluate_all("rs => rs.map(r => r.dataset.id)")
    ]


def api_ids(m: ThreadedMaster, query: str) -> list[int]:
    return [e["id"] for e in m.get("/api/v1/experiments?" + query)["experiments"]]


def settle(page: Any, m: ThreadedMaster, query: str) -> list[int]:
    """Waits until the page shows what the API answers for ``query``, and returns it."""
    want = api_ids(m, query)
    wait_for(lambda: shown_ids(page) == want, 15, what=f"the list to show {query}")
    return want


def test_the_list_filters_sorts_pages_labels_and_archives_in_batches(
    search: tuple[ThreadedMaster, int], page: Any
) -> None:
    m, asha = search
    # A second user with an experiment of their own, and 22 paused experiments of admin's.
    m.post("/api/v1/users", {"user": {"username": "bob", "active": True}, "password": "Bob-pw-12"})
    bob = m.session(m.login("bob", "Bob-pw-12"))
    r = bob.post(
        m.url + "/api/v1/experiments",
        json={"config": PAUSED.format(name="bobs-run"), "activate": False},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    bobs = r.json()["experiment"]["id"]
    mine = [create(m, PAUSED.format(name=f"sweep-{i:02d}"), False) for i in range(22)]

    login(page, m, "/det/experiments")
    # Newest first, 20 to a page, the server's count.
    settle(page, m, "sortBy=SORT_BY_ID&orderBy=ORDER_BY_DESC&limit=20&archived=false")
    assert page.inner_text(".pager .range") == "1\u201320 of 24"
    page.get_by_role("button", name="Next").click()
    assert settle(page, m, "sortBy=SORT_BY_ID&orderBy=ORDER_BY_DESC&limit=20&offset=20") == [
        mine[1],
        mine[0],
        bobs,
        asha,
    ]
    assert page.inner_text(".pager .range") == "21\u201324 of 24"
    page.select_option("select[name=limit]", "50")
    wait_for(lambda: len(shown_ids(page)) == 24, 15, what="one page of 50")

    # Each column sorts on the server, both ways.
    for label, key in SORT_KEYS.items():
        seen = []
        for _ in range(2):  # the first click sorts by the column, the second reverses it
            page.locator(f"th button[data-sort={key}]").click()
            page.wait_for_url(f"**sort={key}**")
            order = "desc" if "order=desc" in page.url else "asc"
            head = page.locator("th[aria-sort]:not([aria-sort=none])")
            wait_for(
                lambda h=head, x=label: h.inner_text().startswith(x), 15, what=f"{label} marked"
            )
            settle(
                page, m, f"sortBy={key}&orderBy=ORDER_BY_{order.upper()}&limit=50&archived=false"
            )
            assert not page.locator("#error").is_visible(), page.inner_text("#error")
            seen.append(order)
        assert sorted(seen) == ["asc", "desc"], (label, seen)
    page.locator("th button[data-sort=SORT_BY_NAME]").click()
    page.wait_for_url("**order=asc**")

    def by_name() -> bool:  # the rows come after the URL: their fetch answers later
        names = page.locator("tbody tr td:nth-child(3) > a").all_inner_texts()
        return bool(names) and names[0] == "asha-webui" and names[-1] == "sweep-21"

    wait_for(by_name, 30, what="the list sorted by name, asha-webui first and sweep-21 last")

    # Filters: name, state, user, label (each narrows the list to what the server answers).
    page.fill("input[name=name]", "sweep-1")
    wait_for(lambda: sorted(shown_ids(page)) == mine[10:20], 15, what="the name filter")
    page.fill("input[name=name]", "")
    page.select_option("select[name=state]", "COMPLETED")
    wait_for(lambda: shown_ids(page) == [asha], 15, what="the state filter")
    page.select_option("select[name=state]", "")
    page.fill("input[name=user]", "bob")
    wait_for(lambda: shown_ids(page) == [bobs], 15, what="the user filter")
    page.fill("input[name=user]", "")
    page.fill("input[name=label]", "asha")
    wait_for(lambda: shown_ids(page) == [asha], 15, what="the label filter")
    page.fill("input[name=label]", "")
    wait_for(lambda: len(shown_ids(page)) == 24, 15, what="no filter")
    screenshot(page, "experiments")

    # Columns can be hidden; the choice stays in this browser.
    page.locator("details.columns summary").click()
    page.locator("input[name=column][value=SORT_BY_RESOURCE_POOL]").uncheck()
    wait_for(lambda: page.locator("th button[data-sort=SORT_BY_RESOURCE_POOL]").count() == 0, 15)
    page.reload()
    page.wait_for_selector("tbody tr")
    assert page.locator("th button[data-sort=SORT_BY_RESOURCE_POOL]").count() == 0
    assert page.locator("th button[data-sort=SORT_BY_USER]").count() == 1
    page.locator("details.columns summary").click()
    page.locator("input[name=column][value=SORT_BY_RESOURCE_POOL]").check()
    page.locator("th button[data-sort=SORT_BY_RESOURCE_POOL]").wait_for()
    page.locator("details.columns summary").click()

    # Labels: add one on a row, follow it as a filter, remove it.
    row = page.locator(f"tbody tr[data-id='{mine[3]}']")
    page.once("dialog", lambda d: d.accept("urgent"))
    row.get_by_role("button", name=f"add label to {mine[3]}", exact=True).click()
    row.locator(".label-chip", has_text="urgent").wait_for()
    assert m.get(f"/api/v1/experiments/{mine[3]}")["experiment"]["labels"] == ["urgent"]
    row.locator(".label-chip a", has_text="urgent").click()
    page.wait_for_url("**label=urgent**")
    wait_for(lambda: shown_ids(page) == [mine[3]], 15, what="the label link's filter")
    page.get_by_role("button", name=f"remove label urgent from {mine[3]}", exact=True).click()
    wait_for(
        lambda: m.get(f"/api/v1/experiments/{mine[3]}")["experiment"]["labels"] == [],
        15,
        what="the label removed",
    )

    # Batch actions: one question for all the selected experiments.
    page.goto(m.url + "/det/experiments?name=sweep-0&limit=50")
    wait_for(lambda: sorted(shown_ids(page)) == mine[:10], 15, what="sweep-0x")
    asked: list[str] = []

    def answer(d: Any) -> None:
        asked.append(d.message)
        d.accept()

    page.on("dialog", answer)
    for eid in mine[:3]:
        page.get_by_role("checkbox", name=f"select {eid}", exact=True).check()
    assert page.inner_text(".batch .muted") == "3 selected"
    page.locator(".batch").get_by_role("button", name="Kill").click()
    wait_for(
        lambda: all(
            m.get(f"/api/v1/experiments/{e}")["experiment"]["state"] == "STATE_CANCELED"
            for e in mine[:3]
        ),
        30,
        what="three experiments killed",
    )
    assert asked == ["Kill 3 experiments?"]
    untouched = m.get(f"/api/v1/experiments/{mine[3]}")["experiment"]["state"]
    assert untouched == "STATE_PAUSED"
    page.reload()
    wait_for(lambda: sorted(shown_ids(page)) == mine[:10], 15, what="the list again")
    page.get_by_role("checkbox", name="select all").check()
    page.locator(".batch").get_by_role("button", name="Archive", exact=True).click()
    # Only the ended ones can be archived; the paused ones are left as they are.
    wait_for(lambda: sorted(shown_ids(page)) == mine[3:10], 15, what="archived ones hidden")
    assert asked[-1] == "Archive 3 experiments?"
    assert [m.get(f"/api/v1/experiments/{e}")["experiment"]["archived"] for e in mine[:4]] == [
        True,
        True,
        True,
        False,
    ]
    page.select_option("select[name=archived]", "yes")
    wait_for(lambda: sorted(shown_ids(page)) == mine[:3], 15, what="only archived")
    assert page.locator("tbody .state-ARCHIVED").count() == 3
    page.get_by_role("checkbox", name="select all").check()
    page.locator(".batch").get_by_role("button", name="Unarchive").click()
    wait_for(lambda: shown_ids(page) == [], 15, what="none archived")
    assert not m.get(f"/api/v1/experiments/{mine[0]}")["experiment"]["archived"]
    assert len(asked) == 3
