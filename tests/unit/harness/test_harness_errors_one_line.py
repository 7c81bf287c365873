"""A master call's error is one readable line whatever answered: the master's JSON message, or a
platform's or proxy's page (an ALB's 503 page while a serverless master sleeps)."""

from __future__ import annotations

import pytest

from det.common.errors import MasterStatusError

ALB_PAGE = (
    "<html>\r\n<head><title>503 Service Temporarily Unavailable</title></head>\r\n"
    "<body>\r\n<center><h1>503 Service Temporarily Unavailable</h1></center>\r\n</body>\r\n</html>"
)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('{"message": "experiment 3 not found"}', "experiment 3 not found"),
        ('{"error": {"error": "denied"}}', "denied"),
        (ALB_PAGE, "503 Service Temporarily Unavailable"),
        ("<p>upstream\n  timed out</p>", "upstream timed out"),
        ("x" * 500, "x" * 197 + "..."),
    ],
)
def test_the_message_is_one_line(body: str, message: str) -> None:
    assert MasterStatusError("GET", "/api/v1/x", 503, body).message == message
