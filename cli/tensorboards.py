"""``det tensorboard``: TensorBoard tasks are not built yet; ``start`` asks the master, which
answers with what is missing (a 501 naming the feature), so the user reads one clear line."""

from __future__ import annotations

import argparse
from typing import Any

from det.cli._util import noun, session, verb


def start(args: argparse.Namespace) -> None:
    body: dict[str, Any] = {"experimentIds": args.experiment_ids, "trialIds": args.trial_ids}
    tb = session(args).post("/api/v1/tensorboards", body)["tensorboard"]
    print(tb["id"])


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "tensorboard", aliases, "TensorBoard on the cluster (not built yet)")
    p = verb(sub, "start", start, "start TensorBoard for experiments or trials")
    p.add_argument("experiment_ids", type=int, nargs="*", help="experiment ids")
    p.add_argument("-t", "--trial-ids", type=int, nargs="+", default=[], help="trial ids")
