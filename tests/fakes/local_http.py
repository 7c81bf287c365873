"""What the in-process HTTP fakes share: a threaded server on a free 127.0.0.1 port, served
from a daemon thread, started and stopped explicitly or as a context manager; and the server
class every HTTP server of the tests uses."""

from __future__ import annotations

import http.server
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the harness's tests import this module on Python 3.9 (test_harness_bundle)
    from typing import Self

# A client that goes away mid-answer (its test ended, its timeout passed): nothing to report.
CLIENT_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


class TestHTTPServer(http.server.ThreadingHTTPServer):
    """``ThreadingHTTPServer`` that stays quiet when a client goes away mid-answer: socketserver
    prints such a traceback on the process's stderr, which every test of the process shares
    (a capture of a later test's stderr then reads another test's server). Any other error in a
    handler is still printed."""

    __test__ = False  # not a test class, whatever its name
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], CLIENT_GONE):
            return
        super().handle_error(request, client_address)


class LocalHttpFake:
    """Subclasses return their request handler class from :meth:`handler`; the handler reaches
    the fake through ``self.server.fake``."""

    _server: TestHTTPServer | None = None

    def handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        raise NotImplementedError

    def start(self) -> Self:
        server = TestHTTPServer(("127.0.0.1", 0), self.handler())
        server.fake = self  # type: ignore[attr-defined]
        self._server = server
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the fake first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def host(self) -> str:
        """``host:port`` (for variables such as ``GCE_METADATA_HOST``)."""
        return self.url.removeprefix("http://")
