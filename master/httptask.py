"""waitress's task, keeping an HTTP/1.1 connection open after an answer that has no body.

waitress closes the connection after every ``304 Not Modified`` or ``204 No Content`` (it finds
no length to send and treats the answer as one whose end only a close can mark), though nothing
follows the head of such an answer. A WebUI tab or a CLI poller whose conditional reads mostly
answer 304 then opened a new connection for every poll, which the front process handed to a user
process again each time: the cheapest answer cost the most. :class:`KeepAliveTask` leaves the
connection open for those answers; everything else is waitress's.
"""

from __future__ import annotations

from waitress.channel import HTTPChannel
from waitress.task import WSGITask


class KeepAliveTask(WSGITask):  # type: ignore[misc]
    _bodiless_keep_alive = False

    def build_response_header(self) -> bytes:
        self._bodiless_keep_alive = (
            self.version == "1.1"
            and not self.has_body
            and not self.close_on_finish
            and self.request.headers.get("CONNECTION", "").lower() != "close"
        )
        try:
            header: bytes = super().build_response_header()
            return header
        finally:
            self._bodiless_keep_alive = False

    def set_close_on_finish(self) -> None:
        if self._bodiless_keep_alive:
            return  # no body to delimit: the next request may follow on this connection
        super().set_close_on_finish()


def keep_alive(channel: type) -> type:
    """``channel`` (an :class:`HTTPChannel` class) with :class:`KeepAliveTask` as its task."""
    return type(channel.__name__, (channel,), {"task_class": KeepAliveTask})


KeepAliveChannel = keep_alive(HTTPChannel)
