"""The CLI's errors, and the one translation of everything else into them.

``det.cli.__main__`` is the one place that prints an error (one line) and exits with its code;
:func:`translate` is the one place that turns the shared REST client's errors
(:mod:`det.common.errors`, raised by :class:`det.common.api.Session` under
:class:`det.cli.session.Session`) into CLI errors::

    CliError                 exit 1: the user asked for something that cannot be done
    ├── UsageError           exit 2: bad arguments or input files
    ├── CliAPIError          exit 1, or 3 when unauthenticated (401): the master refused; its
    │                        message is shown
    └── CliUnreachable       exit 4: the master cannot be reached

    det.common.errors  →  CLI
    MasterStatusError      CliAPIError(status, the master's message; 401 adds how to log in)
    MasterUnreachable      CliUnreachable ("is it running? set -m or DET_MASTER")
    MasterTLSError         CliError (the TLS problem and the setting that fixes it)
    CertError              CliError (the DET_MASTER_CERT_FILE problem)
    any other HarnessError CliError (its message)
"""

from __future__ import annotations

from det.common import errors as common


class CliError(Exception):
    exit_code = 1


class UsageError(CliError):
    exit_code = 2


class CliAPIError(CliError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.exit_code = 3 if status == 401 else 1


class CliUnreachable(CliError):
    exit_code = 4


def unreachable(master: str) -> CliUnreachable:
    return CliUnreachable(
        f"cannot reach the master at {master} (is it running? set -m or DET_MASTER)"
    )


def translate(e: common.HarnessError, master: str | None = None) -> CliError:
    """The CLI error for an error of the shared client (see the table above); ``master`` names
    the master in "cannot reach" (default: the URL the client tried)."""
    if isinstance(e, common.MasterStatusError):
        message = e.message or f"HTTP {e.status}"
        if e.status == 401:
            message = f"{message} (log in with: det user login)"
        return CliAPIError(e.status, message)
    if isinstance(e, common.MasterUnreachable):
        return unreachable(master or e.master_url)
    return CliError(str(e))
