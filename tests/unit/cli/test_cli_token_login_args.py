"""``det token login TOKEN`` takes any token as its operand, one beginning with ``-`` included
(tokens are URL-safe base64: one in 64 begins with ``-``)."""

from __future__ import annotations

import pytest

from det.cli.__main__ import _token_as_operand, build_parser


@pytest.mark.parametrize(
    "argv",
    [
        ["token", "login", "-AbC_123"],
        ["tkn", "login", "-AbC_123"],
        ["token", "login", "--", "-AbC_123"],
        ["-m", "http://m:8080", "token", "login", "-AbC_123"],
        ["token", "login", "--AbC_123"],
    ],
)
def test_a_token_beginning_with_a_dash_is_the_operand(argv: list[str]) -> None:
    fixed = _token_as_operand(argv)
    args = build_parser(fixed).parse_args(fixed)
    assert args.token == argv[-1]


def test_an_ordinary_token_and_other_commands_are_untouched() -> None:
    assert _token_as_operand(["token", "login", "AbC"]) == ["token", "login", "AbC"]
    assert _token_as_operand(["token", "login", "-h"]) == ["token", "login", "-h"]
    argv = ["experiment", "list", "--all"]
    assert _token_as_operand(argv) == argv


def test_without_the_fix_argparse_refuses_it() -> None:
    """What the operand rewrite is for: argparse alone takes the token for an option."""
    with pytest.raises(SystemExit):
        build_parser(["token", "login", "-AbC_123"]).parse_args(["token", "login", "-AbC_123"])
