"""Output helpers and the one place that turns errors into exit codes (no master needed)."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from det.cli import render
from det.cli.__main__ import main
from det.cli.errors import CliAPIError, CliError, CliUnreachable, UsageError
from det.common import errors as common_errors


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert render.state("STATE_COMPLETED") == "COMPLETED"
    monkeypatch.setattr("sys.stdout", Tty())
    assert render.state("STATE_COMPLETED") == "\x1b[32mCOMPLETED\x1b[0m"
    monkeypatch.setenv("NO_COLOR", "1")
    assert render.state("STATE_COMPLETED") == "COMPLETED"


def test_progress_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    pipe = io.StringIO()
    monkeypatch.setattr("sys.stderr", pipe)
    render.progress("exp 1", 0.5, 1.0)
    render.progress_done()
    assert pipe.getvalue() == ""
    tty = Tty()
    monkeypatch.setattr("sys.stderr", tty)
    render.progress("exp 1", 0.5, 1.0)
    render.progress("exp 1", 2.0, 1.0)  # clamped
    render.progress_done()
    render.progress_done()  # only one line end
    out = tty.getvalue()
    assert "\rexp 1 [###############---------------]  50.0%" in out
    assert out.endswith("100.0%\n")


def test_table_and_hparams_are_readable(capsys: pytest.CaptureFixture[str]) -> None:
    render.table(["ID", "H-Params"], [[1, render.hparams({"lr": 0.1, "b": 2})]])
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["ID", "H-Params"]
    assert out[2].startswith("1 ") and '{"b": 2, "lr": 0.1}' in out[2]


def _raise_from_a_command(error: Exception, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make preview-search (offline) raise ``error``."""

    def fail(args: Any) -> None:
        raise error

    import det.cli.__main__ as entry

    real = entry.build_parser

    def patched(argv: Any = None) -> Any:
        p = real(argv)
        sub = next(a for a in p._actions if a.dest == "noun")
        sub.choices["preview-search"].set_defaults(func=fail)  # type: ignore[union-attr]
        return p

    monkeypatch.setattr(entry, "build_parser", patched)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (CliError("experiment 9 not found"), 1),
        (UsageError("bad"), 2),
        (CliAPIError(401, "unauthenticated"), 3),
        (CliAPIError(404, "not found"), 1),
        (CliUnreachable("cannot reach the master at http://x:8080"), 4),
        (RuntimeError("boom"), 1),
    ],
)
def test_errors_become_one_line_and_an_exit_code(
    error: Exception, code: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _raise_from_a_command(error, monkeypatch)
    assert main(["preview-search", "x.yaml"]) == code
    err = capsys.readouterr().err
    assert err.startswith("det: error:") and err.count("\n") == 1
    assert str(error) in err
    with pytest.raises(type(error)):
        main(["--debug", "preview-search", "x.yaml"])


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "experiment" in capsys.readouterr().out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("det ")


def test_json_output_parses(capsys: pytest.CaptureFixture[str]) -> None:
    render.print_json({"a": [1, 2], "b": None})
    assert json.loads(capsys.readouterr().out) == {"a": [1, 2], "b": None}


def test_deploy_commands_are_built_only_when_asked_for() -> None:
    from det.cli.__main__ import build_parser

    def verbs(parser: Any) -> set[str]:
        nouns = next(a for a in parser._actions if a.dest == "noun")
        deploy = nouns.choices["deploy"]
        sub = [a for a in deploy._actions if a.dest == "verb"]
        return set(sub[0].choices) if sub else set()

    assert verbs(build_parser(["experiment", "list"])) == set()
    assert {"aws", "gcp"} <= verbs(build_parser(["deploy", "aws", "--help"]))


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (
            common_errors.MasterStatusError(
                "GET", "/api/v1/me", 401, '{"message": "invalid token"}'
            ),
            3,
            "invalid token (log in with: det user login)",
        ),
        (
            common_errors.MasterStatusError(
                "GET", "/api/v1/x", 403, '{"error": {"error": "not yours"}}'
            ),
            1,
            "not yours",
        ),
        (common_errors.MasterStatusError("GET", "/x", 502, "bad gateway\n"), 1, "bad gateway"),
        (
            common_errors.MasterUnreachable("http://x:8080", "GET /info: refused"),
            4,
            "cannot reach the master at http://x:8080 (is it running? set -m or DET_MASTER)",
        ),
        (common_errors.MasterTLSError("cannot verify the master's TLS certificate"), 1, "verify"),
        (common_errors.CertError("DET_MASTER_CERT_FILE=/x: cannot read"), 1, "CERT_FILE=/x"),
    ],
)
def test_the_shared_clients_errors_become_cli_lines_and_exit_codes(
    error: Exception,
    code: int,
    line: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Whatever escapes a command from det.common (the REST client under the CLI's Session) is
    translated in the one place: the master's own message, the exit code of the CLI error."""

    _raise_from_a_command(error, monkeypatch)
    assert main(["preview-search", "x.yaml"]) == code
    err = capsys.readouterr().err
    assert err.startswith("det: error:") and err.count("\n") == 1
    assert line in err and "Traceback" not in err
