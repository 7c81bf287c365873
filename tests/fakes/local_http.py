"""What the in-process HTTP fakes share: a threaded server on a free 127.0.0.1 port, served
from a daemon thread, started and stopped explicitly or as a context manager."""

from __future__ import annotations

import http.server
import threading
from typing import Self


class LocalHttpFake:
    """Subclasses return their request handler class from :meth:`handler`; the handler reaches
    the fake through ``self.server.fake``."""

    _server: http.server.ThreadingHTTPServer | None = None

    def handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        raise NotImplementedError

    def start(self) -> Self:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self.handler())
        server.daemon_threads = True
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
