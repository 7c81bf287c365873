# ruff: noqa: F811 (the fixtures imported from webui_support are parameters here)
"""The WebUI's user administration (an admin creates, promotes, resets and deactivates users; a
non-admin is refused) and the cluster page's recent pool events, in Chromium."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from tests.integration.conftest import wait_for
from tests.integration.threaded import ThreadedMaster
from tests.integration.webui_support import browser, login, page, screenshot  # noqa: F401

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def can_log_in(m: ThreadedMaster, user: str, password: str) -> bool:
    r = requests.post(
        m.url + "/api/v1/auth/login", json={"username": user, "password": password}, timeout=10
    )
    return r.status_code == 200


def user(m: ThreadedMaster, name: str) -> dict[str, Any]:
    return dict(m.get(f"/api/v1/users/{name}/by-username")["user"])


def test_an_admin_manages_users_and_a_non_admin_is_refused(
    threaded_master: ThreadedMaster, page: Any, browser: Any
) -> None:
    m = threaded_master
    login(page, m, "/det/admin/users")
    page.locator("#nav-users").wait_for()  # shown once /api/v1/me says admin
    page.fill("input[aria-label='new user name']", "carol")
    page.fill("input[aria-label='new user display name']", "Carol <i>C</i>")
    page.fill("input[aria-label='new user password']", "Carol-pw-1")
    page.get_by_role("button", name="Create user").click()
    row = page.locator("tbody tr", has_text="carol")
    row.wait_for()
    assert "Carol <i>C</i>" in row.inner_text() and page.locator("tbody i").count() == 0
    assert user(m, "carol")["admin"] is False and can_log_in(m, "carol", "Carol-pw-1")
    # A name that exists is refused with the master's message; nothing is created.
    before = len(m.get("/api/v1/users")["users"])
    page.fill("input[aria-label='new user name']", "carol")
    page.fill("input[aria-label='new user password']", "Other-pw-1")
    page.get_by_role("button", name="Create user").click()
    page.wait_for_selector(".create-user .form-error:text-matches('.+')")
    assert len(m.get("/api/v1/users")["users"]) == before

    row.get_by_role("button", name="Make admin").click()
    row.get_by_role("button", name="Remove admin").wait_for()
    assert user(m, "carol")["admin"] is True
    row.get_by_role("button", name="Remove admin").click()
    row.get_by_role("button", name="Make admin").wait_for()
    assert user(m, "carol")["admin"] is False

    page.once("dialog", lambda d: d.accept("Carol-new-2"))
    row.get_by_role("button", name="Reset password…").click()
    wait_for(lambda: can_log_in(m, "carol", "Carol-new-2"), 15, what="the new password")
    assert not can_log_in(m, "carol", "Carol-pw-1")
    screenshot(page, "users")

    # The non-admin sees no Users link, is refused on the page, and the API refuses too.
    other = browser.new_context()
    try:
        carol = other.new_page()
        carol.set_default_timeout(15_000)
        login(carol, m, "/det/admin/users", user="carol", password="Carol-new-2")
        carol.wait_for_selector(".refused")
        assert "Only an admin may manage users" in carol.inner_text("main")
        assert carol.locator("form.create-user").count() == 0
        assert not carol.locator("#nav-users").is_visible()
        token = carol.evaluate("localStorage.getItem('det.token')")
        r = m.session(token).post(
            m.url + "/api/v1/users",
            json={"user": {"username": "mallory"}, "password": "Mallory-pw-1"},
            timeout=10,
        )
        assert r.status_code == 403
    finally:
        other.close()

    # Deactivated after one question: carol can no longer log in; activated again, she can.
    asked: list[str] = []
    page.once("dialog", lambda d: (asked.append(d.message), d.accept()))
    row.get_by_role("button", name="Deactivate", exact=True).click()
    row.get_by_role("button", name="Activate", exact=True).wait_for()
    assert asked and "Deactivate carol" in asked[0]
    assert user(m, "carol")["active"] is False and not can_log_in(m, "carol", "Carol-new-2")
    row.get_by_role("button", name="Activate", exact=True).click()
    row.get_by_role("button", name="Deactivate", exact=True).wait_for()
    assert can_log_in(m, "carol", "Carol-new-2")
    # An admin cannot lock themselves out from here.
    assert page.locator("tbody tr", has_text="admin").first.locator("button").count() == 1


def test_the_cluster_page_lists_each_pools_recent_events(
    threaded_master: ThreadedMaster, pg_url: str, page: Any
) -> None:
    import psycopg

    with psycopg.connect(pg_url) as conn:
        for i in range(12):
            conn.execute(
                "INSERT INTO events (entity, entity_id, kind, message) VALUES"
                " ('pool', 'default', %s, %s)",
                ("launch" if i % 2 else "wait", f"event {i} <b>bold</b>"),
            )
    login(page, threaded_master, "/det/cluster")
    box = page.locator("section.pool-events[data-pool=default]")
    box.locator("tbody tr").first.wait_for()  # all_inner_texts waits for nothing
    lines = box.locator("tbody tr").all_inner_texts()
    # The newest ten, newest first, as text.
    assert len(lines) == 10
    assert "event 11 <b>bold</b>" in lines[0] and "event 2 " in lines[-1]
    assert "launch" in lines[0] and box.locator("b").count() == 0
    screenshot(page, "cluster")
