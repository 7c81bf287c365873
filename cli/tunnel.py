"""``det shell tunnel SHELL_ID``: SSH's ``ProxyCommand`` for a shell: stdin and stdout carried
over a WebSocket to the master's proxy (``/proxy/<id>/``), which joins it to the shell's SSH
server. RFC 6455 client framing (masked binary messages out)."""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import ssl
import struct
import sys
import threading
import urllib.parse
from typing import Any

from det.cli.errors import CliError


def _frame(opcode: int, payload: bytes) -> bytes:
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def connect(master: str, path: str, token: str, verify: Any = True) -> tuple[socket.socket, bytes]:
    """A WebSocket to ``master`` + ``path``; the socket and any bytes read past the handshake."""
    u = urllib.parse.urlsplit(master)
    tls = u.scheme == "https"
    sock: socket.socket = socket.create_connection((u.hostname, u.port or (443 if tls else 80)))
    if tls:
        ctx = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
        if verify is False:
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        sock = ctx.wrap_socket(sock, server_hostname=u.hostname)
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {u.netloc}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        f"Authorization: Bearer {token}\r\n\r\n"
    )
    sock.sendall(request.encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise CliError(f"the master closed the tunnel to {path}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].decode("latin-1")
    if " 101 " not in status + " ":
        body = rest.decode("utf-8", "replace").strip()
        raise CliError(f"cannot open {path}: {status.split(' ', 1)[-1]} {body}".strip())
    return sock, rest


def _recv_exactly(sock: socket.socket, buf: bytearray, n: int) -> bytes | None:
    while len(buf) < n:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk
    out = bytes(buf[:n])
    del buf[:n]
    return out


def relay(sock: socket.socket, rest: bytes) -> None:
    """stdin -> binary messages; messages -> stdout; until either side ends."""
    lock = threading.Lock()
    out = os.fdopen(sys.stdout.fileno(), "wb", buffering=0, closefd=False)

    def send(opcode: int, payload: bytes) -> None:
        with lock:
            sock.sendall(_frame(opcode, payload))

    def pump_in() -> None:
        # Reads until ssh closes our stdin, even once the tunnel is gone: ssh's last words
        # (its disconnect message) must not meet a closed pipe, or it exits 255.
        stdin = os.fdopen(sys.stdin.fileno(), "rb", buffering=0, closefd=False)
        alive = True
        while chunk := stdin.read(65536):
            if alive:
                try:
                    send(2, chunk)
                except OSError:
                    alive = False
        with contextlib.suppress(OSError):
            send(8, struct.pack("!H", 1000))

    feeder = threading.Thread(target=pump_in, name="det-tunnel-in", daemon=True)
    feeder.start()
    try:
        _pump_out(sock, bytearray(rest), send, out)
    finally:
        feeder.join(timeout=10)


def _pump_out(sock: socket.socket, buf: bytearray, send: Any, out: Any) -> None:
    while True:
        try:
            head = _recv_exactly(sock, buf, 2)
        except OSError:
            return
        if head is None:
            return
        opcode, n = head[0] & 0x0F, head[1] & 0x7F
        if n == 126:
            n = struct.unpack("!H", _recv_exactly(sock, buf, 2) or b"\0\0")[0]
        elif n == 127:
            n = struct.unpack("!Q", _recv_exactly(sock, buf, 8) or b"\0" * 8)[0]
        payload = _recv_exactly(sock, buf, n)
        if payload is None or opcode == 8:
            return
        if opcode == 9:
            send(10, payload)
        elif opcode in (0, 1, 2):
            out.write(payload)
