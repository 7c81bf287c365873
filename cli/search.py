"""``det preview-search CONFIG``: what the searcher would do, offline."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from det.cli import render
from det.cli.errors import UsageError


def preview_search(args: argparse.Namespace) -> None:
    # det.master.expconf (the config models: ~0.3 s to import) only for the verbs that parse a
    # config, not at every det command's start
    from det.master.expconf import ConfigError, parse_experiment_config
    from det.master.searcher.simulate import preview

    try:
        text = Path(args.config_file).read_text()
    except OSError as e:
        raise UsageError(f"cannot read config file {args.config_file}: {e.strerror}") from None
    try:
        # Offline, the master's default checkpoint storage is unknown and irrelevant to the search.
        cfg = parse_experiment_config(
            text, {"checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp"}}
        )
        resolved = cfg.to_dict()
        result = preview(
            resolved["searcher"],
            resolved.get("hyperparameters") or {},
            cfg.reproducibility.experiment_seed or 0,  # parsing fills one in
        )
    except (ConfigError, ValueError) as e:
        raise UsageError(f"invalid config: {e}") from None
    if args.json:
        render.print_json(result.to_dict())
        return
    unit = result.time_metric or "units"
    print(
        f"Using {result.searcher} search, sampler {result.sampler}; "
        f"trials and their training length ({unit}):"
    )
    render.table(
        ["Trials", f"Length ({unit})"],
        [
            [n, "decided by the training code" if length is None else render.metric(length)]
            for length, n in result.length_counts()
        ],
    )
    if result.brackets:
        print(f"\nRungs: how many trials are ranked at each length ({unit})")
        render.table(
            ["Bracket", "Trials", "Rung", f"Length ({unit})", "Trials reaching it"],
            [
                [b + 1 if r == 0 else "", bracket.trials if r == 0 else "", r + 1,
                 render.metric(rung.length), rung.trials]
                for b, bracket in enumerate(result.brackets)
                for r, rung in enumerate(bracket.rungs)
            ],
        )  # fmt: skip
    total = result.total_length
    print(
        f"\n{len(result.trials)} trials; total budget: {'unknown' if total is None else render.metric(total)} {unit}"
    )


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    p = nouns.add_parser(
        "preview-search", help="preview the trials a searcher config would create (offline)"
    )
    p.add_argument("config_file")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=preview_search)
