"""`det-agent`: the agent daemon's entry point."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType

from det.agent.config import AgentConfigError, load_config


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["enroll"]:
        # The boot's one-shot: it needs neither the daemon nor the Docker SDK.
        from det.agent.enroll import main as enroll

        return enroll(args[1:])
    try:
        config = load_config(argv)
    except AgentConfigError as e:
        print(f"det-agent: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=config.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # Imported after the config is valid: a bad flag should not need the Docker SDK.
    from det.agent.daemon import Agent

    try:
        agent = Agent(config)
    except Exception as e:
        print(f"det-agent: cannot start: {e}", file=sys.stderr)
        return 1
    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        logging.getLogger(__name__).info("signal %d: stopping (containers keep running)", signum)
        stop.set()
        agent.wake()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    agent.run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
