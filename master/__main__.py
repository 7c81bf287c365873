"""``det-master``: run the master, or migrate its database (``det-master migrate``: applies the
pending migrations and exits, the one-off job of a serverless deploy)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys

import psycopg

from det.master import db, server
from det.master.config import MasterConfigError, load_config
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
    parser.add_argument(
        "--config-file",
        default=os.environ.get("DET_CONFIG_FILE") or None,
        help="master.yaml (Determined's keys); default: $DET_CONFIG_FILE",
    )
    parser.add_argument(
        "--no-loops",
        action="store_true",
        help="serve the API only (no control loops); also run_loops: false or DET_RUN_LOOPS=false",
    )
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("run", help="run the master (the default)")
    sub.add_parser("migrate", help="apply the database's pending migrations and exit")
    dbp = sub.add_parser("db", help="database maintenance")
    dbp.add_argument("action", choices=["upgrade"])
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config_file)
    except MasterConfigError as e:
        print(f"det-master: {e}", file=sys.stderr)
        return 2
    _setup_logging(config.log.level)

    try:
        if args.command in ("db", "migrate"):
            applied = db.upgrade(server.database_url(config))
            print(f"applied migrations: {applied or 'none (up to date)'}")
            return 0
        state = server.prepare(config)
    except MasterConfigError as e:
        print(f"det-master: {e}", file=sys.stderr)
        return 2
    except psycopg.Error as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        print(f"det-master: database: {reason}", file=sys.stderr)
        return 1
    # SIGTERM (systemd stop, `det deploy local down`) exits like Ctrl-C: finally blocks and
    # atexit hooks run, so an embedded PostgreSQL this master started is stopped with it.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve(state, run_loops=config.run_loops and not args.no_loops)
    return 0


def _exit_on_signal(signum: int, _frame: object) -> None:
    """The first SIGTERM stops the process as Ctrl-C would; later ones are ignored, so that a
    second one (a service manager's, or a parent's death for the API processes, which inherit
    this handler) cannot interrupt the shutdown halfway: raised inside waitress's wait for its
    threads, it broke a lock ("release unlocked lock") and the process died with a traceback,
    its finally blocks cut short. SIGKILL still ends a shutdown that hangs."""
    signal.signal(signum, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    sys.exit(main())
