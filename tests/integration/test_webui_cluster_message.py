# ruff: noqa: F811 (the fixtures imported from webui_support are parameters here)
"""The WebUI's cluster message banner (issue 27 items 4 and 9), in Chromium: shown on the login
page and every page while active, as text, gone once cleared."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from tests.integration.threaded import ThreadedMaster
from tests.integration.webui_support import browser, login, page, screenshot  # noqa: F401

pytestmark = [pytest.mark.integration, pytest.mark.browser]

TEXT = "Maintenance at 18:00 UTC <b>save your work</b>"


def _message(m: ThreadedMaster, method: str, body: Any = None) -> None:
    r = requests.request(
        method,
        m.url + "/api/v1/master/cluster_message",
        json=body,
        headers={"Authorization": f"Bearer {m.token}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text


def test_the_banner_shows_the_active_message_and_goes_when_cleared(
    threaded_master: ThreadedMaster, page: Any
) -> None:
    m = threaded_master
    _message(m, "PUT", {"message": TEXT, "duration": "1h"})
    login(page, m)
    banner = page.locator("#cluster-message")
    banner.wait_for(state="visible", timeout=30_000)
    assert banner.inner_text() == TEXT  # the markup is text, not a bold element
    assert banner.locator("b").count() == 0
    screenshot(page, "cluster-message")
    page.goto(m.url + "/det/cluster")
    banner.wait_for(state="visible", timeout=30_000)

    _message(m, "DELETE")
    # The page re-reads the message with its periodic refresh (GetMaster caches it ~5 s).
    banner.wait_for(state="hidden", timeout=60_000)

    # The login page shows it as well (GetMaster answers without a login).
    _message(m, "PUT", {"message": "read me first"})
    context = page.context.browser.new_context()
    try:
        fresh = context.new_page()
        fresh.goto(m.url + "/det/login")
        fresh.locator("#cluster-message").wait_for(state="visible", timeout=60_000)
        assert fresh.locator("#cluster-message").inner_text() == "read me first"
    finally:
        context.close()
