"""``det-master``: run the master, or upgrade its database."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys

from det.master import db, server
from det.master.config import ConfigError, load_config
from det.master.logbuffer import BufferHandler


def _setup_logging(level: str) -> None:
    lvl = {"trace": "DEBUG", "warn": "WARNING", "fatal": "CRITICAL"}.get(level, level.upper())
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=lvl, format=fmt, stream=sys.stderr)
    buffer = BufferHandler()
    buffer.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    logging.getLogger().addHandler(buffer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="det-master", description="The det master.")
    parser.add_argument("--config-file", help="master.yaml (Determined's keys)")
    parser.add_argument(
        "--no-loops", action="store_true", help="serve the API only (no control loops)"
    )
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("run", help="run the master (the default)")
    dbp = sub.add_parser("db", help="database maintenance")
    dbp.add_argument("action", choices=["upgrade"])
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config_file)
    except ConfigError as e:
        print(f"det-master: {e}", file=sys.stderr)
        return 2
    _setup_logging(config.log.level)

    try:
        if args.command == "db":
            applied = db.upgrade(server.database_url(config))
            print(f"applied migrations: {applied or 'none (up to date)'}")
            return 0
        state = server.prepare(config)
    except ConfigError as e:
        print(f"det-master: {e}", file=sys.stderr)
        return 2
    # SIGTERM (systemd stop, `det deploy local down`) exits like Ctrl-C: finally blocks and
    # atexit hooks run, so an embedded PostgreSQL this master started is stopped with it.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve(state, run_loops=not args.no_loops)
    return 0


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    sys.exit(main())
