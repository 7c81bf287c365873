"""Output: tables for people, ``--json`` for programs, colour only on a terminal."""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import sys
from collections.abc import Sequence
from typing import Any


def use_colour() -> bool:
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def colour(text: str, code: str) -> str:
    return f"\033[{code}m{text}\033[0m" if use_colour() else text


_STATE_COLOURS = {
    "COMPLETED": "32",
    "ACTIVE": "36",
    "RUNNING": "36",
    "ERROR": "31",
    "CANCELED": "33",
    "PAUSED": "33",
}


def state(value: str | None) -> str:
    s = (value or "").removeprefix("STATE_")
    return colour(s, _STATE_COLOURS[s]) if s in _STATE_COLOURS else s


def when(value: str | None) -> str:
    if not value:
        return ""
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    return t.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    # Imported here: with importlib.metadata it is a third of the CLI's start, and a command
    # that prints JSON, or nothing, needs none of it.
    from tabulate import tabulate

    print(
        tabulate(
            [list(r) for r in rows], headers=list(headers), tablefmt="simple", disable_numparse=True
        )
    )


def rows(headers: Sequence[str], body: Sequence[Sequence[Any]], as_csv: bool = False) -> None:
    """A table, or CSV (header row first) with ``as_csv``, as Determined's ``--csv`` prints."""
    if not as_csv:
        table(headers, body)
        return
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(headers)
    out.writerows(["" if v is None else v for v in r] for r in body)


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False))


_progress_drawn = False


def progress(label: str, done: float, total: float) -> None:
    """A one-line progress bar on stderr, redrawn in place (terminals only)."""
    global _progress_drawn
    if not sys.stderr.isatty() or total <= 0:
        return
    width = 30
    frac = min(1.0, max(0.0, done / total))
    bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
    sys.stderr.write(f"\r{label} [{bar}] {frac * 100:5.1f}%")
    sys.stderr.flush()
    _progress_drawn = True


def progress_done() -> None:
    """Ends the progress line, if one was drawn."""
    global _progress_drawn
    if _progress_drawn:
        sys.stderr.write("\n")
        sys.stderr.flush()
        _progress_drawn = False


def hparams(value: Any) -> str:
    """Hyperparameters as compact JSON (readable, and the same text the user wrote)."""
    return json.dumps(value, sort_keys=True, separators=(", ", ": "))


def metric(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else str(value)
