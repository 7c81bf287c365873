"""What det answers for a Determined route it does not serve: a 501 whose message names the
feature (or the operation) and points to the README, never a bare 404/405.

A request that matches no det route but does match one of Determined 0.38.1's
(:mod:`det.master.api._determined_routes`) is a call from Determined's own clients for something
det has not built; anything else is an ordinary 404.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from det.master.api._determined_routes import ROUTES

README = "see README: Where det differs from Determined"

# Path prefix → the feature, as the message names it. First match wins.
_FEATURES: tuple[tuple[str, str], ...] = (
    ("/api/v1/generic-tasks", "det does not run generic tasks yet"),
    (
        "/api/v1/roles",
        "det serves role search, assignment and the roles of a user or group (docs/security.md:"
        " Roles), not this role route",
    ),
    ("/api/v1/oauth2", "det has no OAuth clients (a Determined Enterprise feature)"),
    ("/api/v1/config-policies", "det has no config policies (a Determined Enterprise feature)"),
    ("/api/v1/namespace-bindings", "det has no Kubernetes namespace bindings"),
)

# Operations on a path det serves for other methods (so the prefix table cannot tell them).
_OPERATIONS: dict[str, str] = {
    "KillGenericTask": "det does not run generic tasks yet",
    "PauseGenericTask": "det does not run generic tasks yet",
    "UnpauseGenericTask": "det does not run generic tasks yet",
    "GetGenericTaskConfig": "det does not run generic tasks yet",
}


# Determined's master serves these outside /api/v1 (its ``det resources`` commands call them).
_NON_API_ROUTES = (
    ("GET", "/resources/allocation/raw", "ResourceAllocationRaw"),
    ("GET", "/resources/allocation/aggregated", "ResourceAllocationAggregated"),
    ("GET", "/resources/allocation/allocations-csv", "ResourceAllocationCSV"),
)


@functools.cache
def _compiled() -> tuple[tuple[str, re.Pattern[str], str], ...]:
    out = []
    for method, template, op in ROUTES + _NON_API_ROUTES:
        pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))
        out.append((method, re.compile(pattern + "/?"), op))
    return tuple(out)


def operation(method: str, path: str) -> str | None:
    """Determined's operation name for ``method path``, or None when Determined has none."""
    for m, pattern, op in _compiled():
        if m == method and pattern.fullmatch(path):
            return op
    return None


def _shape(template: str) -> str:
    return re.sub(r"\{[^/]+?\}|<[^/]+?>", "{}", template)


def served_operations(rules: Iterable[tuple[str, str]]) -> frozenset[str]:
    """Determined's operations that det serves, from det's (method, Flask rule) pairs: a request
    for one of them that matched no det rule (a malformed id, say) is a plain 404, not a 501."""
    shapes = {(m, _shape(r)) for m, r in rules}
    return frozenset(op for m, t, op in ROUTES if (m, _shape(t)) in shapes)


def message(method: str, path: str, served: frozenset[str] = frozenset()) -> str | None:
    """The 501 message for a Determined route det does not serve, or None for other paths."""
    op = operation(method, path)
    if op is None or op in served:
        return None
    feature = _OPERATIONS.get(op) or next(
        (text for prefix, text in _FEATURES if path.startswith(prefix)), None
    )
    if feature is None:
        feature = f"det does not implement Determined's {op} ({method} {path}) yet"
    return f"{feature} ({README})"
