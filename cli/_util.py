"""Small helpers shared by the command modules."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from det.cli.errors import CliAPIError, CliError
from det.cli.session import Session, setup_session

if TYPE_CHECKING:
    from det.master.schemas import d


#: What a verb runs: its parsed arguments in, None or an exit code out.
Handler = Callable[[argparse.Namespace], int | None]
#: Where a noun's or a verb's parser is added.
Subparsers = argparse._SubParsersAction  # the type argparse's add_subparsers() returns


def session(args: argparse.Namespace) -> Session:
    return setup_session(args.master, args.user)


def noun(
    nouns: Subparsers[argparse.ArgumentParser],
    name: str,
    aliases: dict[str, list[str]],
    help_: str,
) -> Subparsers[argparse.ArgumentParser]:
    p = nouns.add_parser(name, aliases=aliases.get(name, []), help=help_)
    sub = p.add_subparsers(dest="verb", metavar="VERB")
    p.set_defaults(func=shows_help(p))
    return sub


def shows_help(p: argparse.ArgumentParser) -> Handler:
    """The handler of a noun given no verb: its help, exit 2."""

    def run(args: argparse.Namespace) -> int:
        p.print_help()
        return 2

    return run


def verb(
    sub: Subparsers[argparse.ArgumentParser], names: str, func: Handler, help_: str
) -> argparse.ArgumentParser:
    first, *rest = names.split()
    p: argparse.ArgumentParser = sub.add_parser(first, aliases=rest, help=help_)
    p.set_defaults(func=func)
    return p


def true_or_false(value: str) -> bool:
    """A ``(true|false)`` flag's value, as Determined's CLI takes it (yes/no, on/off, 1/0 too);
    anything else is refused, naming the flag, where Determined's would take it for true."""
    v = value.strip().lower()
    if v in ("true", "t", "yes", "y", "on", "1"):
        return True
    if v in ("false", "f", "no", "n", "off", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, not {value!r}")


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON")


def workspace_id(s: Session, name_or_id: str) -> int:
    """``-w/--workspace`` of the task commands: the workspace of that name (as the official
    client's ``-w`` takes it), else, for a number no workspace is named, the one of that id."""
    found = cast(
        "d.v1GetWorkspacesResponse",
        s.get("/api/v1/workspaces", params={"nameCaseSensitive": name_or_id}),
    )["workspaces"]
    if found:
        return int(found[0]["id"])
    if name_or_id.isdigit():
        try:
            one = cast("d.v1GetWorkspaceResponse", s.get(f"/api/v1/workspaces/{name_or_id}"))
        except CliAPIError as e:
            if e.status != 404:
                raise
        else:
            return int(one["workspace"]["id"])
    raise CliError(f"--workspace: no workspace named (or with id) '{name_or_id}'")


def add_workspace_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-w", "--workspace", help="the workspace (name or id) to run it in (default: none)"
    )


def workspace_by_name(s: Session, name: str) -> d.v1Workspace:
    """The workspace named ``name`` (exactly), or an error naming it."""
    found = cast(
        "d.v1GetWorkspacesResponse", s.get("/api/v1/workspaces", params={"nameCaseSensitive": name})
    )["workspaces"]
    if not found:
        raise CliError(f"workspace '{name}' not found")
    one = cast("d.v1GetWorkspaceResponse", s.get(f"/api/v1/workspaces/{found[0]['id']}"))
    return one["workspace"]
