"""The one backoff rule of det: master (cloud API retries), agent (heartbeats, log shipping) and
harness (requests to the master) all wait ``backoff(attempt, ...)`` seconds between tries.

Capped exponential: ``base · 2^attempt`` (``attempt`` 0 for the first retry), at most ``cap``,
then shortened by the fraction ``jitter`` in [0, 1]. The caller draws ``jitter`` from its own
random source (seeded in tests), so this stays a pure function:

* ``jitter=rng.random()``: "full jitter", anywhere in (0, delay]; spreads a fleet's retries
  (cloud API throttling);
* ``jitter=0.25 * rng.random()``: at least three quarters of the delay (agents reconnecting
  after a master restart);
* ``jitter=0``: the plain doubling (a single client waiting for its master).

Runs inside task containers (Python 3.8+, standard library only).
"""

from __future__ import annotations

# 2**62 seconds is past any cap; the exponent is clamped so a long outage never overflows.
_MAX_EXPONENT = 62


def backoff(attempt: int, *, base: float, cap: float, jitter: float = 0.0) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based); see the module docstring."""
    if base <= 0 or cap <= 0:
        raise ValueError(f"backoff: base and cap must be positive (base={base}, cap={cap})")
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"backoff: jitter must be within [0, 1], got {jitter}")
    exponent = min(max(attempt, 0), _MAX_EXPONENT)
    return float(min(cap, base * 2**exponent) * (1.0 - jitter))
