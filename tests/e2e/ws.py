"""A small WebSocket client (RFC 6455: handshake, masked text frames out, text frames in) for
tests that talk to a Jupyter kernel through the master's proxy; stdlib only."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import urllib.parse
from typing import Any


class WebSocket:
    def __init__(self, url: str, headers: dict[str, str], timeout: float = 60.0) -> None:
        u = urllib.parse.urlsplit(url)
        # Browsers resolve *.localhost (a task's own origin) to this machine themselves.
        host = "127.0.0.1" if (u.hostname or "").endswith(".localhost") else u.hostname
        self.sock = socket.create_connection((host, u.port or 80), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        path = u.path + (f"?{u.query}" if u.query else "")
        lines = [
            f"GET {path} HTTP/1.1",
            f"Host: {u.netloc}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
            *(f"{k}: {v}" for k, v in headers.items()),
        ]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError(f"closed during the handshake: {head!r}")
            head += chunk
        head, _, self.buf = head.partition(b"\r\n\r\n")
        self.status = int(head.split(b" ", 2)[1])
        self.head = head.decode("latin-1")

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send_text(self, text: str) -> None:
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        if n < 126:
            header = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 1 << 16:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(header + mask + masked)

    def recv_text(self) -> str:
        """The next text message (pings and other control frames are skipped)."""
        message = b""
        while True:
            b1, b2 = self._read(2)
            n = b2 & 0x7F
            if n == 126:
                (n,) = struct.unpack("!H", self._read(2))
            elif n == 127:
                (n,) = struct.unpack("!Q", self._read(8))
            mask = self._read(4) if b2 & 0x80 else b""
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            opcode = b1 & 0x0F
            if opcode == 8:
                raise ConnectionError("closed by the server")
            if opcode in (1, 0):
                message += payload
                if b1 & 0x80:
                    return message.decode()

    def send_json(self, obj: Any) -> None:
        self.send_text(json.dumps(obj))

    def recv_json(self) -> Any:
        return json.loads(self.recv_text())

    def close(self) -> None:
        self.sock.close()
