"""A WebSocket (the client side, after the handshake) bridged to a TCP connection: each binary
or text message's payload goes to the TCP peer, what the peer sends goes back as binary
messages. Pings are answered, a close ends both. RFC 6455 framing, no extensions. With a time
limit, the bridge closes the WebSocket (1001, going away) before the platform in front would cut
it, and the client connects again."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

_MAX_FRAME = 1 << 24


def frame(opcode: int, payload: bytes) -> bytes:
    """A final, unmasked frame (the server's side)."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


class _Reader:
    def __init__(self, sock: socket.socket, buffered: bytes) -> None:
        self.sock, self.buf = sock, bytearray(buffered)

    def exactly(self, n: int) -> bytes | None:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def message_part(self) -> tuple[int, bytes] | None:
        """The next frame's opcode and unmasked payload; None at the end of the stream."""
        head = self.exactly(2)
        if head is None:
            return None
        opcode, n = head[0] & 0x0F, head[1] & 0x7F
        if n == 126:
            raw = self.exactly(2)
            n = struct.unpack("!H", raw)[0] if raw else -1
        elif n == 127:
            raw = self.exactly(8)
            n = struct.unpack("!Q", raw)[0] if raw else -1
        if n < 0 or n > _MAX_FRAME:
            return None
        mask = self.exactly(4) if head[1] & 0x80 else b""
        payload = self.exactly(n)
        if mask is None or payload is None:
            return None
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return opcode, payload


# Close codes (RFC 6455, 7.4.1).
NORMAL, GOING_AWAY = 1000, 1001


def bridge(
    client: socket.socket,
    upstream: socket.socket,
    buffered: bytes = b"",
    *,
    seconds: float | None = None,
) -> None:
    """Relays until either side ends, or for ``seconds`` at most; ``buffered``: client bytes
    already read."""
    lock = threading.Lock()
    closed = threading.Event()

    def to_client(opcode: int, payload: bytes) -> None:
        # Nothing follows a close frame.
        with lock:
            if closed.is_set():
                return
            if opcode == 8:
                closed.set()
            client.sendall(frame(opcode, payload))

    def from_client() -> None:
        reader = _Reader(client, buffered)
        try:
            while (part := reader.message_part()) is not None:
                opcode, payload = part
                if opcode in (0, 1, 2):
                    upstream.sendall(payload)
                elif opcode == 9:
                    to_client(10, payload)
                elif opcode == 8:
                    with contextlib.suppress(OSError):
                        to_client(8, payload[:2])
                    break
        except OSError:
            pass
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_WR)

    def time_up() -> None:
        if closed.wait(seconds):
            return
        with contextlib.suppress(OSError):
            to_client(8, struct.pack("!H", GOING_AWAY) + b"request time limit")
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_RDWR)

    reader = threading.Thread(target=from_client, name="det-proxy-ws", daemon=True)
    reader.start()
    if seconds is not None:
        threading.Thread(target=time_up, name="det-proxy-ws-limit", daemon=True).start()
    try:
        while chunk := upstream.recv(65536):
            to_client(2, chunk)
        with contextlib.suppress(OSError):
            to_client(8, struct.pack("!H", NORMAL))
    except OSError:
        pass
    closed.set()
    reader.join(timeout=5)
