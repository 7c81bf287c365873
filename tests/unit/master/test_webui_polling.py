"""The WebUI's polling (master/webui/poll.js) under node with a fake clock: quiet while the page
is hidden, backing off while nothing changes, stopped after ten idle minutes (so an open tab lets
a serverless master sleep), and back at once when the user returns."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

POLL_JS = Path(__file__).resolve().parents[3] / "master" / "webui" / "poll.js"

# A fake clock and timers; `steps` is a list of [action, arg] the test runs, one at a time:
# ["advance", ms] runs the timers due within ms; ["changes", bool] makes the next ticks change
# (or not) what the page shows; ["hide"|"show"|"activity", null].
_DRIVER = """
const { createPoller } = require(process.argv[1]);
const steps = JSON.parse(process.argv[2]);
let t = 0, timers = [], nextId = 1, hiddenNow = false, changes = false;
const ticks = [], pauses = [];
const poller = createPoller({
  tick: async () => { ticks.push(t); return changes; },
  now: () => t,
  setTimer: (fn, ms) => { const id = nextId++; timers.push({ id, at: t + ms, fn }); return id; },
  clearTimer: (id) => { timers = timers.filter((x) => x.id !== id); },
  hidden: () => hiddenNow,
  onPause: (p) => pauses.push([t, p]),
});
const settle = () => new Promise((r) => setImmediate(r));
(async () => {
  poller.start();
  for (const [action, arg] of steps) {
    if (action === "advance") {
      const end = t + arg;
      for (;;) {
        timers.sort((a, b) => a.at - b.at);
        const due = timers[0];
        if (!due || due.at > end) break;
        timers.shift();
        t = due.at;
        due.fn();
        await settle();
      }
      t = end;
    } else if (action === "changes") changes = arg;
    else if (action === "hide") { hiddenNow = true; poller.visibility(); }
    else if (action === "show") { hiddenNow = false; poller.visibility(); await settle(); }
    else if (action === "activity") { poller.activity(); await settle(); }
  }
  console.log(JSON.stringify({ ticks, pauses, state: poller.state() }));
})();
"""

MIN = 60_000


def _drive(steps: list[list[Any]]) -> dict[str, Any]:
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("node is not installed")
    done = subprocess.run(
        [node, "-e", _DRIVER, str(POLL_JS), json.dumps(steps)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_an_unchanging_page_backs_off_then_stops_polling_after_ten_idle_minutes():
    out = _drive([["advance", 30 * MIN]])
    gaps = [b - a for a, b in zip([0, *out["ticks"]], out["ticks"], strict=False)]
    assert gaps[:5] == [5000, 10000, 20000, 40000, 60000]
    assert set(gaps[5:]) == {60000}
    assert out["ticks"][-1] <= 11 * MIN  # nothing after the idle stop
    assert len(out["ticks"]) <= 14  # not the 360 of a fixed 5 s period
    assert out["pauses"] == [[out["ticks"][-1], True]]
    assert out["state"] == {"delay": 60000, "paused": True, "scheduled": False}


def test_a_page_that_changes_keeps_the_base_period():
    out = _drive([["changes", True], ["advance", 30 * MIN]])
    gaps = {b - a for a, b in zip(out["ticks"], out["ticks"][1:], strict=False)}
    assert gaps == {5000} and out["pauses"] == []


def test_a_hidden_page_sends_nothing_and_refreshes_once_when_shown():
    out = _drive([["advance", 6000], ["hide", None], ["advance", 60 * MIN], ["show", None]])
    assert out["ticks"] == [5000, 60 * MIN + 6000]
    assert out["state"]["scheduled"] and out["state"]["delay"] == 10000


def test_the_user_coming_back_resumes_a_stopped_page_at_once():
    out = _drive([["advance", 30 * MIN], ["activity", None], ["advance", 10000]])
    *_, resumed, next_tick = out["ticks"]
    assert resumed == 30 * MIN and next_tick == 30 * MIN + 10000
    assert out["pauses"][-1] == [30 * MIN, False]
    assert out["state"] == {"delay": 20000, "paused": False, "scheduled": True}


def test_activity_while_polling_resets_the_back_off():
    out = _drive([["advance", 80_000], ["activity", None], ["advance", 5000]])
    assert out["ticks"][-1] == 85_000  # 5 s after the activity, not the 40 s backed-off wait
