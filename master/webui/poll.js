// det WebUI: when to ask the master again. An open tab must not keep a serverless master awake
// (docs/deploy.md, "What it costs": the platform stops an idle master only when no request
// comes for 15 minutes), so the page polls like this:
//   - never while the page is hidden (visibilityState "hidden"); once when it shows again;
//   - every BASE_MS while something changes (a trial runs, a list moves) or the user acts;
//   - each refresh that changes nothing doubles the wait, up to MAX_MS;
//   - after IDLE_STOP_MS with neither a change nor the user's hand, it stops, and says so,
//     until the user comes back (a key, the pointer, the tab shown or focused again).
// Pure logic with its clock and timers passed in: tests/unit/master/test_webui_polling.py
// drives it under node with a fake clock.
"use strict";

const POLL = { BASE_MS: 5000, MAX_MS: 60000, IDLE_STOP_MS: 10 * 60 * 1000 };

// tick(): one refresh; resolves true when it changed what the page shows.
// hidden(): whether the page is hidden now. onPause(paused): the page says polling stopped.
function createPoller({ tick, now, setTimer, clearTimer, hidden, onPause = () => {}, limits = POLL }) {
  let delay = limits.BASE_MS;
  let lastActive = now();
  let timer = null;
  let paused = false;
  let running = false;

  function schedule(ms) {
    if (timer !== null) clearTimer(timer);
    timer = setTimer(run, ms);
  }

  function pause() {
    if (timer !== null) clearTimer(timer);
    timer = null;
    if (!paused) {
      paused = true;
      onPause(true);
    }
  }

  async function run() {
    timer = null;
    if (hidden()) return; // visibility() starts again
    if (running) return;
    running = true;
    let changed = false;
    try {
      changed = await tick();
    } finally {
      running = false;
    }
    if (changed) {
      delay = limits.BASE_MS;
      lastActive = now();
    } else {
      delay = Math.min(delay * 2, limits.MAX_MS);
    }
    if (hidden()) return;
    if (now() - lastActive >= limits.IDLE_STOP_MS) return pause();
    schedule(delay);
  }

  return {
    start() {
      schedule(delay);
    },
    // The user acted: poll at the base rate again (at once when polling had stopped).
    activity() {
      lastActive = now();
      delay = limits.BASE_MS;
      if (paused) {
        paused = false;
        onPause(false);
        if (!hidden()) run();
      } else if (timer !== null && !hidden()) {
        schedule(delay);
      }
    },
    // visibilitychange: stop while hidden; refresh at once when shown (it counts as activity).
    visibility() {
      if (hidden()) {
        if (timer !== null) clearTimer(timer);
        timer = null;
        return;
      }
      lastActive = now();
      delay = limits.BASE_MS;
      if (timer !== null) clearTimer(timer);
      timer = null;
      if (paused) {
        paused = false;
        onPause(false);
      }
      run();
    },
    state() {
      return { delay, paused, scheduled: timer !== null };
    },
  };
}

if (typeof module !== "undefined") module.exports = { createPoller, POLL };
