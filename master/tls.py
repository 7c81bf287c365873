"""HTTPS for the master: the certificate and key of ``security.tls``, served through waitress.

waitress speaks plain HTTP on non-blocking sockets driven by one select loop. TLS is added at the
two points where bytes meet the socket, so everything else (threads, the shared listening socket
of several API processes, channel timeouts, client addresses) stays waitress's own:

* each accepted connection is wrapped server-side *without* a handshake; the handshake then runs
  non-blocking inside the loop (``_TLSChannel.handle_read``/``handle_write``), so a client that
  connects and says nothing holds no thread and delays nobody; one that has not finished its
  handshake within ``HANDSHAKE_SECONDS`` is closed by the server's maintenance pass;
* reads drain every decrypted byte OpenSSL holds (``pending()``): the loop's select only sees
  the socket, and bytes already decrypted would otherwise wait for the client's next packet;
  "want read/write" from OpenSSL is "try again later", never an end of connection.

A plain HTTP request on the HTTPS port gets a clear-text 400 that says to use https://.
TLS 1.2 or newer, renegotiation off (it would make a write wait for a read).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import ssl
import time
from pathlib import Path
from typing import Any

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer

from det.master.config import MasterConfigError, TlsConfig

logger = logging.getLogger(__name__)

HANDSHAKE_SECONDS = 30.0
_TLS_HANDSHAKE_RECORD = b"\x16"  # the first byte of every TLS connection (a ClientHello record)
_DISCONNECTED = frozenset(
    {errno.ECONNRESET, errno.ENOTCONN, errno.ESHUTDOWN, errno.ECONNABORTED, errno.EPIPE}
)


def server_context(tls: TlsConfig) -> ssl.SSLContext:
    """The server's SSLContext; MasterConfigError (one line naming the file and the problem) when the
    certificate or key cannot be used."""
    assert tls.cert is not None and tls.key is not None
    for what, path in (("cert", tls.cert), ("key", tls.key)):
        _check_readable(f"security.tls.{what}", path)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    try:
        # The certificate alone first, so that a bad one is not reported as a bad key.
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=str(tls.cert))
    except ssl.SSLError as e:
        raise MasterConfigError(
            f"security.tls.cert: {tls.cert} is not a PEM certificate ({_reason(e)})"
        ) from None
    try:
        ctx.load_cert_chain(str(tls.cert), str(tls.key), password=_no_password)
    except ssl.SSLError as e:
        if "KEY_VALUES_MISMATCH" in str(e):
            raise MasterConfigError(
                f"security.tls.key: {tls.key} is not the private key of the certificate {tls.cert}"
            ) from None
        raise MasterConfigError(
            f"security.tls.key: {tls.key} is not an unencrypted PEM private key ({_reason(e)})"
        ) from None
    except _Encrypted:
        raise MasterConfigError(
            f"security.tls.key: {tls.key} is encrypted with a passphrase; give the master an"
            " unencrypted key (readable only by the master's user)"
        ) from None
    return ctx


class _Encrypted(Exception):
    pass


def _no_password() -> str:
    # Called only for an encrypted key: without this, OpenSSL would prompt on the terminal.
    raise _Encrypted


def _check_readable(setting: str, path: Path) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        raise MasterConfigError(f"{setting}: cannot read {path}: {e.strerror or e}") from None
    if os.path.getsize(path) == 0:
        raise MasterConfigError(f"{setting}: {path} is empty")


def _reason(e: ssl.SSLError) -> str:
    return str(e.reason or e).replace("_", " ").lower()


class _TLSChannel(HTTPChannel):  # type: ignore[misc]
    """An HTTP channel on an ``SSLSocket`` whose handshake has not run yet."""

    socket: ssl.SSLSocket

    def __init__(self, server: Any, sock: Any, addr: Any, adj: Any, map: Any = None) -> None:
        super().__init__(server, sock, addr, adj, map=map)
        self.handshaking = True
        self.handshake_started = time.monotonic()
        self._handshake_wants_write = False
        self._checked_first_byte = False

    def _refuse_plain_http(self) -> None:
        """A plain HTTP request on the HTTPS port: one short answer that says so, in clear."""
        body = b"this port speaks HTTPS: use an https:// URL for the det master\n"
        head = (
            "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        with contextlib.suppress(OSError):
            # Read what the client sent first: closing on unread bytes resets the connection,
            # and the client would never see the answer.
            socket.socket.recv(self.socket, 65536)
            socket.socket.send(self.socket, head.encode() + body)
        logger.debug("plain HTTP from %s on the HTTPS port", self.addr)
        self.handle_close()

    def _handshake(self) -> bool:
        """One step of the handshake; True once it is done."""
        if not self._checked_first_byte:
            try:
                first = socket.socket.recv(self.socket, 1, socket.MSG_PEEK)
            except (BlockingIOError, InterruptedError):
                return False
            except OSError:
                self.handle_close()
                return False
            self._checked_first_byte = True
            if first and first != _TLS_HANDSHAKE_RECORD:
                self._refuse_plain_http()
                return False
        try:
            self.socket.do_handshake()
        except ssl.SSLWantReadError:
            self._handshake_wants_write = False
            return False
        except ssl.SSLWantWriteError:
            self._handshake_wants_write = True
            return False
        except (ssl.SSLError, OSError) as e:
            # Clients that do not trust the certificate end up here (they abort with an alert).
            logger.debug("TLS handshake with %s failed: %s", self.addr, e)
            self.handle_close()
            return False
        self.handshaking = False
        return True

    def readable(self) -> bool:
        return True if self.handshaking else bool(super().readable())

    def writable(self) -> bool:
        return self._handshake_wants_write if self.handshaking else bool(super().writable())

    def handle_read(self) -> None:
        if self.handshaking and not self._handshake():
            return
        try:
            data = self.socket.recv(self.adj.recv_bytes)
            while data and self.socket.pending():
                data += self.socket.recv(self.socket.pending())
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return  # a TLS record not complete yet, or a post-handshake message: no data
        except (ssl.SSLError, OSError) as e:
            logger.debug("TLS read from %s: %s", self.addr, e)
            self.handle_close()
            return
        if data:
            self.last_activity = time.time()
            self.received(data)
        else:  # the client closed
            self.handle_close()
            self.connected = False

    def handle_write(self) -> None:
        if self.handshaking:
            self._handshake()
            return
        super().handle_write()

    def send(self, data: bytes, do_close: bool = True) -> int:
        # OpenSSL must be given the same bytes again after "want write"; waitress does exactly
        # that (it retries from the same place in its buffer when nothing was sent).
        try:
            return int(self.socket.send(data))
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return 0
        except (ssl.SSLError, OSError) as e:
            if isinstance(e, ssl.SSLError) or e.errno in _DISCONNECTED:
                if do_close:
                    self.handle_close()
                return 0
            raise


class TLSWSGIServer(TcpWSGIServer):  # type: ignore[misc]
    """waitress's TCP server whose connections speak TLS with ``context``."""

    channel_class = _TLSChannel

    def __init__(self, *args: Any, context: ssl.SSLContext, **kwargs: Any) -> None:
        self._tls_context = context
        super().__init__(*args, **kwargs)

    def handle_accept(self) -> None:
        try:
            accepted = self.accept()
            if accepted is None:
                return
            conn, addr = accepted
            self.set_socket_options(conn)
            conn = self._tls_context.wrap_socket(
                conn, server_side=True, do_handshake_on_connect=False
            )
        except OSError as e:  # the client went away before we got to it
            logger.debug("accept: %s", e)
            return
        self.channel_class(self, conn, self.fix_addr(addr), self.adj, map=self._map)

    def maintenance(self, now: float) -> None:
        super().maintenance(now)
        cutoff = time.monotonic() - HANDSHAKE_SECONDS
        for channel in list(self.active_channels.values()):
            if getattr(channel, "handshaking", False) and channel.handshake_started < cutoff:
                logger.debug("TLS handshake with %s timed out", channel.addr)
                channel.handle_close()


def make_server(
    app: Any, sock: Any, context: ssl.SSLContext, dispatcher: Any = None, **adjustments: Any
) -> TLSWSGIServer:
    """A waitress server for ``app`` on the bound, listening ``sock``, speaking TLS."""
    adj = Adjustments(sockets=[sock], url_scheme="https", **adjustments)
    return TLSWSGIServer(
        app,
        _sock=sock,
        dispatcher=dispatcher,
        adj=adj,
        bind_socket=False,
        sockinfo=(sock.family, sock.type, sock.proto, sock.getsockname()),
        context=context,
    )
