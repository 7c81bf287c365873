"""Talking to the master: the URL, login, and a token cache per master and user.

Tokens live in ``$XDG_CONFIG_HOME/det/auth.json`` (mode 0600), keyed by master URL; each entry
remembers the active user for that master. ``DET_USER``/``DET_PASS`` log in without a prompt.
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
import sys
import urllib.parse
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

import requests
from urllib3.exceptions import InsecureRequestWarning

from det.cli.errors import CliAPIError, CliError, UsageError, translate, unreachable
from det.common import api, master_url, tls
from det.common import errors as common_errors
from det.common.api import QueryValue as QueryValue
from det.common.errors import MasterCallError
from det.common.jsontypes import JSONObject

if TYPE_CHECKING:
    from det.master.schemas import d

DEFAULT_MASTER = "http://127.0.0.1:8080"


def canonical_master(url: str | None) -> str:
    """The master from ``-m``, else ``$DET_MASTER``, else the local default, canonicalized
    (det.common.master_url: a scheme, port 8080 when none is given, no trailing slash)."""
    given = url or os.environ.get("DET_MASTER") or DEFAULT_MASTER
    try:
        return master_url.canonicalize(given, default_port=master_url.DEFAULT_PORT)
    except ValueError as e:
        raise UsageError(f"-m/DET_MASTER: {e}") from None


def _store_path() -> Path:
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "det" / "auth.json"


class _MasterTokens(TypedDict, total=False):
    """One master's entry in the token store: tokens by user, and the active user."""

    tokens: dict[str, str]
    active_user: str


class _Stored(TypedDict, total=False):
    """``auth.json``: the entries by master URL."""

    masters: dict[str, _MasterTokens]


class TokenStore:
    def __init__(self, master: str) -> None:
        self.master = master
        self.path = _store_path()
        try:
            loaded = json.loads(self.path.read_text())
        except (OSError, ValueError):
            loaded = {}
        # Written by _save only; a file of another shape is read as empty.
        self.data: _Stored = cast("_Stored", loaded) if isinstance(loaded, dict) else {}

    @property
    def _entry(self) -> _MasterTokens:
        return self.data.setdefault("masters", {}).setdefault(self.master, {"tokens": {}})

    def active_user(self) -> str | None:
        user = self._entry.get("active_user")
        return str(user) if user else None

    def token(self, user: str) -> str | None:
        token = self._entry.get("tokens", {}).get(user)
        return str(token) if token else None

    def set(self, user: str, token: str) -> None:
        self._entry.setdefault("tokens", {})[user] = token
        self._entry["active_user"] = user
        self._save()

    def drop(self, user: str) -> None:
        self._entry.setdefault("tokens", {}).pop(user, None)
        if self._entry.get("active_user") == user:
            self._entry.pop("active_user", None)
        self._save()

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # O_CREAT's mode does not apply to a leftover file
        with os.fdopen(fd, "w") as f:
            json.dump(self.data, f, indent=1)
        tmp.replace(self.path)


def master_cert() -> tls.MasterCert:
    """How to verify the master, as ``DET_MASTER_CERT_FILE`` and ``DET_MASTER_CERT_NAME`` say
    (det.common.tls); CliError naming the setting when it cannot be used."""
    try:
        cert = tls.from_env()
    except tls.CertError as e:
        raise translate(e) from None
    if cert.noverify:  # asked for: one warning per request would only be noise
        warnings.simplefilter("ignore", InsecureRequestWarning)
    return cert


def _say_waking(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _client(master: str, token: str | None = None) -> api.Session:
    """The shared REST client for one command: no retries (a command says at once that the
    master is down, exit 4, rather than hang for two minutes), except for a sleeping
    serverless master, which the command waits for (``DET_MASTER_WAKE_SECONDS``, 300 s by
    default) after saying so once on stderr (det.common.api.wake_retry says which answers)."""
    try:
        wake = api.wake_seconds_from_env()
    except ValueError as e:
        raise UsageError(str(e)) from None
    return api.Session(
        master,
        user_token=token,
        retry_seconds=0,
        cert=master_cert(),
        wake_seconds=wake,
        on_wake=_say_waking,
    )


# Sent by the master's logs routes for a task whose logs retention deleted (det.master.api._logs).
LOGS_DELETED_HEADER = "X-Det-Logs-Deleted"


def logs_deleted_message(when: str) -> str:
    """``logs deleted by the retention policy on 2026-01-31 04:00 UTC`` (``when``: RFC 3339)."""
    try:
        t = dt.datetime.fromisoformat(when.replace("Z", "+00:00")).astimezone(dt.UTC)
        shown = t.strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        shown = when[:40]
    return f"logs deleted by the retention policy on {shown}"


class Session:
    """A logged-in connection to one master, over the shared client (det.common.api): its
    errors become CLI errors (det.cli.errors.translate)."""

    def __init__(self, master: str, token: str | None = None, user: str | None = None) -> None:
        self.master = master
        self.token = token
        self.user = user
        self.api = _client(master, token)
        self._said: set[str] = set()

    def request(
        self, method: str, path: str, *, stream: bool = False, timeout: float | None = 60, **kw: Any
    ) -> requests.Response:
        try:
            r = self.api.request(method, path, stream=stream, timeout=timeout, **kw)
        except MasterCallError as e:
            raise translate(e, self.master) from None
        # What the master wants the user to know of a request that succeeded (PatchUser: an
        # agent user that could not write the checkpoint storage).
        warning = r.headers.get("X-Det-Warning")
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
        return r

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw).json()

    def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        r = self.request("POST", path, json=body if body is not None else {}, **kw)
        return r.json() if r.content else {}

    def put(self, path: str, body: Any, **kw: Any) -> Any:
        r = self.request("PUT", path, json=body, **kw)
        return r.json() if r.content else {}

    def patch(self, path: str, body: Any, **kw: Any) -> Any:
        return self.request("PATCH", path, json=body, **kw).json()

    def delete(self, path: str, **kw: Any) -> None:
        """A DELETE, its answer checked (no caller reads its body)."""
        self.request("DELETE", path, **kw)

    def stream(self, path: str, **kw: Any) -> Iterator[dict[str, Any]]:
        """An NDJSON stream of ``{"result": …}`` lines. A log stream that ends with no line
        while the master says retention deleted the logs (``X-Det-Logs-Deleted``) says so on
        stderr (once per session), rather than print nothing."""
        r = self.request("GET", path, stream=True, timeout=None, **kw)
        lines = r.iter_lines()
        empty = True
        while True:
            try:
                line = next(lines)
            except StopIteration:
                deleted = r.headers.get(LOGS_DELETED_HEADER)
                if empty and deleted and deleted not in self._said:
                    self._said.add(deleted)
                    print(logs_deleted_message(deleted), file=sys.stderr)
                return
            except requests.RequestException:  # the master went away mid-stream
                raise unreachable(self.master) from None
            if line:
                obj = json.loads(line)
                if "error" in obj and "result" not in obj:
                    raise CliError(str(obj["error"]))
                empty = False
                yield obj.get("result", obj)

    def follow(
        self, path: str, params: dict[str, QueryValue], ended: Callable[[], bool]
    ) -> Iterator[dict[str, Any]]:
        """A log follow (``params`` with ``follow=true``) asked again until ``ended()``: a
        master behind a platform's request time limit ends a follow before that limit
        (``request_time_limit_seconds``) while the task still runs. Lines already given (by
        ``id``) are skipped in the next answer."""
        last = 0
        while True:
            for entry in self.stream(path, params=params):
                entry_id = int(entry.get("id") or 0)
                if entry_id and entry_id <= last:
                    continue
                last = max(last, entry_id)
                yield entry
            if ended():
                return


def get_info(master: str) -> JSONObject:
    """The master's unauthenticated ``/info``; CliUnreachable when it does not answer, a
    one-line CliError when its TLS certificate cannot be verified."""
    try:
        r = _client(master).get("/info", timeout=10)
    except common_errors.MasterStatusError as e:
        text = e.body.strip()[:300] or f"HTTP {e.status}"
        raise CliAPIError(e.status, f"{master}/info: {text}") from None
    except MasterCallError as e:
        raise translate(e, master) from None
    try:
        body = r.json()
    except ValueError:
        raise CliError(f"{master}/info answered {r.status_code} without JSON") from None
    return body if isinstance(body, dict) else {}


def check_reachable(master: str) -> None:
    """Raises CliUnreachable unless the master answers its unauthenticated ``/info`` (and
    the master's own error when it refuses, e.g. plain HTTP on its HTTPS port)."""
    get_info(master)


def login(master: str, user: str, password: str) -> Session:
    s = Session(master)
    try:
        body = cast(
            "d.v1LoginResponse",
            s.post("/api/v1/auth/login", {"username": user, "password": password}),
        )
    except CliAPIError as e:
        if e.status == 401:
            raise CliAPIError(401, f"cannot log in as {user}: wrong username or password") from None
        raise
    TokenStore(master).set(user, body["token"])
    return Session(master, body["token"], user)


def _print_cluster_message(r: requests.Response) -> None:
    """The master's active cluster message (sent with ``/api/v1/me``), on stderr before the
    command's output."""
    raw = r.headers.get("X-Det-Cluster-Message")
    if raw:
        text = urllib.parse.unquote(raw).replace("\n", " ").strip()
        print(f"cluster message: {text}", file=sys.stderr)


def setup_session(master_arg: str | None, user_arg: str | None) -> Session:
    """A session for ``user_arg`` (or ``$DET_USER``, or the cached active user).

    A cached token is checked with ``GET /api/v1/me``; a revoked or expired one is dropped and
    replaced by a fresh login when ``DET_PASS`` is set (or a password can be prompted for);
    otherwise the error says how to log in. An unreachable master is reported as such (exit 4)
    before any "not logged in" message, which would send the user the wrong way.
    """
    master = canonical_master(master_arg)
    store = TokenStore(master)
    user = user_arg or os.environ.get("DET_USER") or store.active_user()
    expired = False
    if user:
        token = store.token(user)
        if token:
            s = Session(master, token, user)
            try:
                _print_cluster_message(s.request("GET", "/api/v1/me"))
                return s
            except CliAPIError as e:
                if e.status != 401:
                    raise
                store.drop(user)
                expired = True
    else:
        check_reachable(master)
        raise CliError(
            f"not logged in to {master}: run det user login USERNAME (or set DET_USER and DET_PASS)"
        )
    password = os.environ.get("DET_PASS")
    if password is None:
        check_reachable(master)
        why = "the saved login has expired or was revoked" if expired else "not logged in"
        if not sys.stdin.isatty():
            raise CliError(
                f"{why} for user {user} on {master}: run det user login {user} (or set DET_PASS)"
            )
        password = getpass.getpass(f"Password for user '{user}': ")
    return login(master, user, password)
