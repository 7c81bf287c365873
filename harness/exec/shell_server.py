"""The SSH server of a shell task (``det shell start``): ``python3 -m det.exec.shell_server``.

Listens on ``DET_TASK_PORT`` and admits one key, ``DET_SHELL_AUTHORIZED_KEY`` (the public half
of the key pair the master made for this shell; the user's CLI holds the private half and
reaches this port only through the master's proxy). A session runs the requested command with
``/bin/sh -c`` (or a login shell), on a pseudo-terminal when the client asks for one, in the
task's working directory with the task's environment. Uses asyncssh (in det's task images).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from typing import Any

#: Variables of the task's own that a session does not inherit.
_PRIVATE = ("DET_SHELL_AUTHORIZED_KEY", "DET_SHELL_HOST_KEY")


def _session_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _PRIVATE}
    env.update(extra)
    return env


async def _run(process: Any) -> None:
    command = process.command
    shell = os.environ.get("SHELL") or ("/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh")
    argv = [shell, "-c", command] if command else [shell, "-l"]
    extra = {"TERM": process.term_type or "xterm"} if process.term_type else {}
    try:
        if process.term_type:
            # POSIX only, as this server is (it runs in Linux task containers): kept out of the
            # module's imports so that the harness package imports anywhere.
            import pty

            leader, follower = pty.openpty()
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=follower,
                stdout=follower,
                stderr=follower,
                env=_session_env(extra),
                start_new_session=True,
            )
            os.close(follower)
            size = process.term_size
            if size and size[0] and size[1]:
                # POSIX only (see pty above)
                import fcntl
                import struct
                import termios

                fcntl.ioctl(leader, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
            await _pump_pty(process, leader, proc)
            code = proc.returncode if proc.returncode is not None else await proc.wait()
            process.exit(code if code >= 0 else 128 - code)
            return
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=_session_env(extra),
        )
        feeder = asyncio.create_task(_feed(process.stdin, proc.stdin))
        # Every byte of output is sent before the exit status (the session ends with it).
        await asyncio.gather(_copy(proc.stdout, process.stdout), _copy(proc.stderr, process.stderr))
        code = await proc.wait()
        feeder.cancel()
        await process.stdout.drain()
        process.exit(code if code >= 0 else 128 - code)
    except Exception as e:  # the client hears why, the server goes on
        process.stderr.write(f"det shell: {e}\n".encode())
        process.exit(1)


async def _copy(source: Any, sink: Any) -> None:
    while data := await source.read(65536):
        sink.write(data)


async def _feed(source: Any, sink: Any) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except (OSError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            sink.close()


async def _pump_pty(process: Any, leader: int, proc: Any) -> None:
    """Copies the session's input to the terminal and the terminal's output to the session
    until the command has exited and its last output is read (EIO on the terminal)."""
    loop = asyncio.get_running_loop()
    output_done = asyncio.Event()

    def readable() -> None:
        try:
            data = os.read(leader, 65536)
        except OSError:
            data = b""
        if data:
            process.stdout.write(data)
            return
        loop.remove_reader(leader)
        output_done.set()

    async def pump_in() -> None:
        while True:
            data = await process.stdin.read(65536)
            if not data:
                return
            os.write(leader, data)

    loop.add_reader(leader, readable)
    feeder = asyncio.create_task(pump_in())
    try:
        await proc.wait()
        await asyncio.wait_for(output_done.wait(), timeout=5)
    except asyncio.TimeoutError:
        loop.remove_reader(leader)
    finally:
        feeder.cancel()
        os.close(leader)
        await process.stdout.drain()


async def serve(port: int, authorized_key: str, host_key: str | None) -> None:
    # asyncssh is in det's task images, not in the harness's dependencies (only shells need it)
    import asyncssh

    key = (
        asyncssh.import_private_key(host_key)
        if host_key
        else asyncssh.generate_private_key("ssh-ed25519")
    )
    authorized = asyncssh.import_authorized_keys(authorized_key)
    server = await asyncssh.create_server(
        asyncssh.SSHServer,
        "0.0.0.0",
        port,
        server_host_keys=[key],
        authorized_client_keys=authorized,
        process_factory=_run,
        encoding=None,
        allow_pty=True,
        x11_forwarding=False,
        agent_forwarding=False,
    )
    print(f"det shell: SSH server listening on port {port}", flush=True)
    await server.wait_closed()


def main() -> int:
    port = int(os.environ["DET_TASK_PORT"])
    authorized_key = os.environ["DET_SHELL_AUTHORIZED_KEY"]
    asyncio.run(serve(port, authorized_key, os.environ.get("DET_SHELL_HOST_KEY")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
