"""The CLI's errors. ``det.cli.__main__`` is the one place that turns them into a message line
and an exit code:

* ``CliError`` (exit 1): the user asked for something that cannot be done (message says why);
* ``UsageError`` (exit 2): bad arguments or input files;
* ``APIError`` (exit 1, or 3 when unauthenticated): the master refused; its message is shown;
* ``ConnectionError`` (exit 4): the master cannot be reached.
"""

from __future__ import annotations


class CliError(Exception):
    exit_code = 1


class UsageError(CliError):
    exit_code = 2


class APIError(CliError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.exit_code = 3 if status == 401 else 1


class MasterUnreachable(CliError):
    exit_code = 4
