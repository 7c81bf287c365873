"""`det-agent`: the agent daemon's entry point."""

from __future__ import annotations

import logging
import queue
import signal
import sys
import threading
from collections.abc import Callable
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
    handler = stopper(stop, agent.wake)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    agent.run(stop)
    return 0


def stopper(
    stop: threading.Event, wake: Callable[[], None]
) -> Callable[[int, FrameType | None], None]:
    """The handler of SIGTERM and SIGINT, which leaves setting ``stop`` and calling ``wake`` to
    a thread of its own. A handler runs in the main thread between two of its bytecodes,
    possibly while that thread holds the lock of the very event it would set (the agent's loop
    clears and waits on its wake-up event every pass): setting it there would wait for itself
    forever, and the agent would never exit. The handler only puts the signal in a
    ``SimpleQueue``, whose ``put`` is safe in a signal handler; the thread, started here, takes
    it and sets the events once the main thread lets go of their locks."""
    signals: queue.SimpleQueue[int] = queue.SimpleQueue()

    def set_both() -> None:
        signals.get()
        stop.set()
        wake()

    threading.Thread(target=set_both, name="det-agent-stop", daemon=True).start()

    def handle(signum: int, frame: FrameType | None) -> None:
        signals.put(signum)
        logging.getLogger(__name__).info("signal %d: stopping (containers keep running)", signum)

    return handle


if __name__ == "__main__":
    sys.exit(main())
