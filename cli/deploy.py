"""The ``det`` CLI's ``deploy`` noun: only registers ``det deploy local|aws|gcp``; the commands
(flags, dispatch, programs) live in ``det.deploy``: ``deploy/local/`` and, for the clouds,
``deploy/clouds.py``."""

from __future__ import annotations

from typing import Any

from det.cli._util import noun


def register(nouns: Any, aliases: dict[str, list[str]], full: bool = True) -> None:
    """``full=False`` registers the noun alone (for help listings) without importing the deploy
    programs and their SDKs."""
    sub = noun(nouns, "deploy", aliases, "stand up or tear down a cluster (local, aws, gcp)")
    if not full:
        return
    try:
        # Only when `det deploy` is asked for: the deploy programs import Pulumi and the cloud
        # SDKs (det[deploy]); the local deploy is optional in a harness-only install.
        from det.deploy import local
    except ImportError:  # the local deploy is optional in a harness-only install
        local = None  # type: ignore[assignment]
    if local is not None and hasattr(local, "add_parsers"):
        local.add_parsers(sub)
    # the cloud commands' parsers, with the same reason as the local ones above
    from det.deploy.clouds import add_parsers as add_clouds

    add_clouds(sub)
