"""A PostgreSQL client made of the standard library only, for task images that have no driver.

``python3 pg_wire_probe.py SOCKET USER`` tries three logins over the Unix socket ``SOCKET``
(without a password, with a wrong one, with ``$PROBE_PASSWORD`` by SCRAM-SHA-256, as libpq does)
and prints one JSON line: ``{"none": R, "wrong": R, "right": R}``, each ``R`` being
``{"connected": bool, "stage": str, "detail": str}``. A client without a password stops where
the server asks for one, as libpq does ("no password supplied").
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import socket
import struct
import sys

PROTOCOL_3 = 196608
AUTH_OK, AUTH_CLEARTEXT, AUTH_MD5 = 0, 3, 5
AUTH_SASL, AUTH_SASL_CONTINUE, AUTH_SASL_FINAL = 10, 11, 12


def _exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        out += chunk
    return out


def _recv(sock: socket.socket) -> tuple[bytes, bytes]:
    head = _exact(sock, 5)
    return head[:1], _exact(sock, struct.unpack("!I", head[1:])[0] - 4)


def _send(sock: socket.socket, kind: bytes, payload: bytes) -> None:
    sock.sendall(kind + struct.pack("!I", len(payload) + 4) + payload)


def _error(payload: bytes) -> str:
    fields = {f[:1]: f[1:].decode(errors="replace") for f in payload.split(b"\0") if f}
    return f"{fields.get(b'C', '?')} {fields.get(b'M', '')}"


def _result(connected: bool, stage: str, detail: str) -> dict[str, object]:
    return {"connected": connected, "stage": stage, "detail": detail}


def _scram(sock: socket.socket, password: str) -> dict[str, object] | None:
    """Runs SCRAM-SHA-256 up to the server's verdict; None when the server accepted the proof."""
    first_bare = "n=,r=" + base64.b64encode(os.urandom(18)).decode()
    first = ("n,," + first_bare).encode()
    _send(sock, b"p", b"SCRAM-SHA-256\0" + struct.pack("!i", len(first)) + first)
    kind, data = _recv(sock)
    if kind == b"E":
        return _result(False, "scram", _error(data))
    server_first = data[4:].decode()
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(
        "sha256", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"])
    )
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    without_proof = "c=biws,r=" + attrs["r"]
    message = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(hashlib.sha256(client_key).digest(), message, "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    _send(sock, b"p", f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
    return None


def login(path: str, user: str, password: str | None) -> dict[str, object]:
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(15)
    try:
        sock.connect(path)
    except OSError as e:
        return _result(False, "socket", f"{type(e).__name__}: {e.strerror}")
    try:
        startup = struct.pack("!I", PROTOCOL_3) + b"user\0" + user.encode() + b"\0\0"
        sock.sendall(struct.pack("!I", len(startup) + 4) + startup)
        while True:
            kind, data = _recv(sock)
            if kind == b"E":
                return _result(False, "auth", _error(data))
            if kind != b"R":
                return _result(False, "auth", f"unexpected message {kind!r}")
            code = struct.unpack("!I", data[:4])[0]
            if code == AUTH_OK:
                return _result(True, "auth", "AuthenticationOk")
            if code == AUTH_SASL_FINAL:
                continue
            if code in (AUTH_SASL, AUTH_CLEARTEXT, AUTH_MD5) and password is None:
                return _result(False, "auth", f"the server asks for a password (request {code})")
            if code != AUTH_SASL or password is None:
                return _result(False, "auth", f"authentication request {code} not spoken here")
            failed = _scram(sock, password)
            if failed is not None:
                return failed
    finally:
        sock.close()


def main() -> None:
    path, user = sys.argv[1], sys.argv[2]
    right = os.environ.get("PROBE_PASSWORD", "")
    attempts = {"none": None, "wrong": right + "-not-it", "right": right}
    print(json.dumps({name: login(path, user, pw) for name, pw in attempts.items()}))


if __name__ == "__main__":
    main()
