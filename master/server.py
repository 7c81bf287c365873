"""Bringing a master process up: database, migrations, cluster identity, HTTP and the loops."""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import logging
import os
import resource
import secrets
import signal
import socket
import ssl
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from psycopg.conninfo import make_conninfo
from typing_extensions import TypedDict
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer

from det.master import (
    authcache,
    db,
    deferred,
    dispatch,
    evloop,
    httptask,
    listcache,
    proxy,
    slimsync,
)
from det.master.app import create_app
from det.master.config import MasterConfig, MasterConfigError
from det.master.db import Conn
from det.master.handles import MasterState
from det.master.loop import ControlLoop
from det.master.rows.cluster import ClusterIdentity
from det.master.services import master_settings, users
from det.master.tls import TLSWSGIServer, _TLSChannel, server_context

logger = logging.getLogger(__name__)


def database_url(config: MasterConfig) -> str:
    if config.db is not None:
        return config.db.conninfo()
    if importlib.util.find_spec("pgserver") is None:
        # pgserver has no wheel for Python 3.13 and later (pyproject.toml leaves it out there).
        raise MasterConfigError(
            "no db: configured and the embedded PostgreSQL (the pgserver package) is not "
            f"available on Python {sys.version_info[0]}.{sys.version_info[1]}: configure db: "
            "(host, port, user, password, name) or DET_DB_HOST/DET_DB_PASSWORD"
        )
    logger.info("no db configured: using the embedded PostgreSQL under %s", config.data_dir)
    try:
        return db.start_embedded(config.data_dir)
    except db.embedded.EmbeddedDatabaseError as e:  # a missing or wrong db_password file
        raise MasterConfigError(str(e)) from e


def _cluster_identity(conninfo: str, config: MasterConfig) -> tuple[str, str, str]:
    with db.connect(conninfo) as conn:
        conn.execute(
            "INSERT INTO cluster (cluster_id, agent_token, token_secret) VALUES (%s, %s, %s)"
            " ON CONFLICT DO NOTHING",
            # Hex: a urlsafe token may start with "-", which breaks `det-agent --agent-token T`.
            (str(uuid.uuid4()), secrets.token_hex(32), secrets.token_urlsafe(32)),
        )
        row = db.fetch_row(
            conn, ClusterIdentity, "SELECT cluster_id, agent_token, token_secret FROM cluster"
        )
    assert row is not None
    token = config.security.agent_token or row.agent_token
    return row.cluster_id, token, row.token_secret


def prepare(config: MasterConfig) -> MasterState:
    """Everything before serving: fails with MasterConfigError on a config we cannot run with."""
    password = config.security.initial_user_password
    if not password and not config.security.allow_empty_initial_password:
        raise MasterConfigError(
            "security.initial_user_password is empty: set it (or DET_SECURITY_INITIAL_USER_PASSWORD);"
            " for local development only, security.allow_empty_initial_password: true"
        )
    if config.security.tls.enabled:
        server_context(config.security.tls)  # a bad certificate or key stops us before the DB
    config.data_dir.mkdir(parents=True, exist_ok=True)
    conninfo = database_url(config)
    if config.migrate_on_start:
        db.upgrade(conninfo)
    else:
        missing = db.pending(conninfo)
        if missing:
            raise MasterConfigError(
                f"the database is not migrated ({len(missing)} pending, the latest"
                f" {missing[-1]}) and migrate_on_start is false: run `det-master migrate` first"
            )
    cluster_id, agent_token, token_secret = _cluster_identity(conninfo, config)
    token_file = Path(config.data_dir) / "agent_token"
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(agent_token)
    # Before any fork, so that every process of this master shares them.
    epoch = authcache.Epoch()
    list_epoch = authcache.Epoch(listcache.CHANNEL)
    master_id = str(uuid.uuid4())
    # Every connection of this master says whose it is (other masters look for it:
    # det.master.authcache.other_masters).
    conninfo = make_conninfo(conninfo, application_name=authcache.application_name(master_id))
    pool = db.open_pool(
        conninfo, max_size=config.db_pool_size, configure=_watching(epoch, list_epoch)
    )
    with pool.connection() as conn:
        users.ensure_admin(conn, password)
        users.fill_username_keys(conn)
    return MasterState(
        config=config,
        pool=pool,
        cluster_id=cluster_id,
        agent_token=agent_token,
        token_secret=token_secret,
        master_id=master_id,
        auth_epoch=epoch,
        list_epoch=list_epoch,
    )


def _watching(*epochs: authcache.Epoch | None) -> Callable[[Conn], None]:
    """A pool's ``configure``: each new connection hears its own commits' notifications on
    each epoch's channel (det.master.authcache.Epoch.watch)."""

    def configure(conn: Conn) -> None:
        for e in epochs:
            if e is not None:
                e.watch(conn)

    return configure


def _open_pool(state: MasterState, conninfo: str) -> None:
    state.pool = db.open_pool(
        conninfo,
        max_size=state.config.db_pool_size,
        configure=_watching(state.auth_epoch, state.list_epoch),
    )


# User processes yield the CPU to the front processes when both want it.
USER_PROCESS_NICENESS = 5
# How long a starting master waits for the masters already on its database to see it.
PRESENCE_WAIT_SECONDS = 30.0


def serve(state: MasterState, *, run_loops: bool = True) -> None:
    """Serves the API until interrupted; runs the control loops when this process leads.

    The listening socket is bound once and shared by ``api_processes`` front processes, which
    serve agents, tasks and ``/info`` and hand every user's connection to the
    ``user_api_processes`` (:mod:`det.master.dispatch`). All are forked before any of them
    opens a database connection; each has its own pool, and they die with the parent.
    """
    cfg = state.config
    sock = socket.socket(socket.AF_INET6 if ":" in cfg.bind_address else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((cfg.bind_address, cfg.port))
    sock.listen(1024)
    task_sock = _task_listener(state)
    if state.list_epoch is not None:
        # Before this master commits anything: every master already on the database, which may
        # check the experiment list in memory while alone, has seen this one and checks it
        # against the database from now on (det.master.listcache).
        late = authcache.wait_until_seen(
            str(state.pool.conninfo), state.master_id, PRESENCE_WAIT_SECONDS
        )
        if late:
            logger.warning(
                "other masters did not say within %g s that they saw this one: %s",
                PRESENCE_WAIT_SECONDS,
                ", ".join(sorted(late)),
            )
        listcache.EPOCH = state.list_epoch  # the forks below inherit it
    handoff: socket.socket | None = None
    if cfg.api_processes > 1 or cfg.user_api_processes > 0:
        conninfo = str(state.pool.conninfo)
        state.pool.close()
        if cfg.user_api_processes > 0:
            handoff, receive = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            for i in range(cfg.user_api_processes):
                if os.fork() == 0:
                    _die_with_parent()
                    sock.close()
                    handoff.close()
                    if task_sock is not None:
                        task_sock.close()
                    os.nice(USER_PROCESS_NICENESS)
                    _open_pool(state, conninfo)
                    logger.info("user API process %d serving", i + 1)
                    _serve_users(state, receive)
                    os._exit(0)
            receive.close()
        for i in range(1, cfg.api_processes):
            if os.fork() == 0:
                _die_with_parent()
                _open_pool(state, conninfo)
                logger.info("API process %d serving", i)
                _serve_socket(state, sock, handoff, run_loops=False)
                os._exit(0)
        _open_pool(state, conninfo)
    epochs = [e for e in (state.auth_epoch, state.list_epoch) if e is not None]
    if epochs:
        # One listener per master (here, after the forks): other masters' revocations and
        # changes to the experiment list, and whether this master is alone on the database.
        conninfo = str(state.pool.conninfo)
        presence = (state.list_epoch, state.master_id) if state.list_epoch is not None else None
        threading.Thread(
            target=authcache.listen_forever,
            args=(conninfo, epochs, threading.Event()),
            kwargs={"presence": presence},
            name="det-db-listener",
            daemon=True,
        ).start()
    if task_sock is not None:
        context = server_context(cfg.security.tls) if cfg.security.tls.enabled else None
        threading.Thread(
            target=proxy.serve_task_listener,
            args=(task_sock, context),
            name="det-task-listener",
            daemon=True,
        ).start()
    _serve_socket(state, sock, handoff, run_loops=run_loops)


def freeze_startup_heap() -> None:
    """Moves every object alive once a process is ready to serve (its modules, the app, the
    configuration: most of its heap) out of the garbage collector's sight for good. They live
    as long as the process, and each full collection scanned them again with every thread of
    the process stopped: under bench/scale.py's 300 agents x 600 trials the front process's
    full collections took 107-124 ms (median; at most 146-153 ms), 48-53 ms (at most 72-81)
    with the freeze (two runs each)."""
    gc.collect()
    gc.freeze()


def _task_listener(state: MasterState) -> socket.socket | None:
    """The task origin's port (det.master.task_origin), bound before the processes fork so that
    every one knows it; served by this process."""
    cfg = state.config
    if cfg.task_port is None:
        return None
    sock = socket.socket(socket.AF_INET6 if ":" in cfg.bind_address else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((cfg.bind_address, cfg.task_port))
    sock.listen(1024)
    state.task_port = int(sock.getsockname()[1])
    logger.info("interactive tasks served on port %d", state.task_port)
    return sock


def _die_with_parent() -> None:
    """Linux: SIGTERM this process when its parent dies (so a killed master leaves no strays)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:  # not Linux: children outlive a SIGKILLed parent
        logger.warning("cannot tie API processes to the master's lifetime on this platform")


def _connection_limit() -> int:
    """As many connections as the descriptor limit allows (raised to its hard cap), leaving
    room for database connections and files; at least waitress's default of 100."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 16384 if hard == resource.RLIM_INFINITY else min(hard, 16384)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            logger.warning("cannot raise the open-file limit above %d", soft)
    return max(100, (soft if soft != resource.RLIM_INFINITY else want) - 256)


class _Adjustments(TypedDict):
    """The waitress settings (``Adjustments``) det sets."""

    threads: int
    channel_timeout: int
    ident: str
    connection_limit: int
    asyncore_use_poll: bool
    url_scheme: str
    clear_untrusted_proxy_headers: bool


def _adjustments(state: MasterState, threads: int) -> _Adjustments:
    return {
        "threads": threads,
        "channel_timeout": 600,
        "ident": "det-master",
        # waitress stops accepting at 100 open connections by default: a client holding 100
        # keep-alive connections would lock agents out (a reconnecting agent's heartbeat waits
        # in the listen backlog until it is declared lost). poll(), unlike select(), takes
        # descriptors above 1024.
        "connection_limit": _connection_limit(),
        "asyncore_use_poll": True,
        "url_scheme": "https" if state.config.security.tls.enabled else "http",
        # X-Forwarded-* reach the app, which believes them only from security.trusted_proxies
        # and removes them otherwise (det.master.clientaddr); waitress would drop them all.
        "clear_untrusted_proxy_headers": False,
    }


def _serve_socket(state: MasterState, sock: Any, handoff: Any, *, run_loops: bool) -> None:
    """A front process: accepts connections on ``sock``; hands users' to ``handoff`` (the
    user processes' datagram socket), when there is one."""
    stop = threading.Event()
    _watch_settings(state, stop)
    if run_loops:
        loop = ControlLoop(state, stop)
        threading.Thread(target=loop.run_forever, name="det-control-loop", daemon=True).start()
    server = front_server(state, create_app(state), sock, handoff)
    freeze_startup_heap()
    try:
        server.run()
    finally:
        stop.set()


def front_server(state: MasterState, app: Any, sock: Any, handoff: Any) -> TcpWSGIServer:
    """The front's waitress server for ``app`` on the bound, listening ``sock`` (det's
    channels, event loop and settings), not yet running: ``run()`` serves until its socket
    map is empty."""
    tls = state.config.security.tls
    logger.info(
        "master %s serving %s on %s:%d",
        state.master_id,
        "HTTPS" if tls.enabled else "HTTP",
        state.config.bind_address,
        state.config.port,
    )
    base: type = TcpWSGIServer
    channel: type = dispatch.RoutingChannel
    extra: dict[str, ssl.SSLContext] = {}
    if tls.enabled:
        base, extra = TLSWSGIServer, {"context": server_context(tls)}
        channel = type("_TLSRoutingChannel", (dispatch.RelayedMixin, _TLSChannel), {})
    base, channel, loop_map = _event_loop(state, base, channel)
    channel = connection_class(channel, park_without_thread=state.config.api_park_without_thread)
    threads = front_threads(state.config, hands_users_off=handoff is not None)
    front = type("_FrontServer", (base,), {"channel_class": channel, "handoff": None})
    server = front(
        app,
        map=loop_map,
        _sock=sock,
        dispatcher=dispatch.dispatcher(threads),
        adj=Adjustments(sockets=[sock], **_adjustments(state, threads)),
        bind_socket=False,
        sockinfo=(sock.family, sock.type, sock.proto, sock.getsockname()),
        **extra,
    )
    if handoff is not None:
        server.handoff = dispatch.Handoff(handoff, state.agent_token, server._map)
    return server


def connection_class(channel: type, *, park_without_thread: bool = False) -> type:
    """The class of the connections a front or a user process serves, from a waitress
    ``HTTPChannel`` class: det's task (det.master.httptask), output lock (det.master.slimsync)
    and, with ``park_without_thread`` (``api_park_without_thread``), long-polls that wait
    without a thread (det.master.deferred)."""
    slim = slimsync.slim_output_lock(httptask.keep_alive(channel))
    if not park_without_thread:
        return slim
    return type(channel.__name__, (deferred.DeferringChannel, slim), {})


def front_threads(cfg: MasterConfig, *, hands_users_off: bool) -> int:
    """The worker threads of a front: ``cluster_api_threads`` when it hands users'
    connections to the user processes (it then serves agents, tasks and ``/info``: short work
    on the database each), else ``api_threads`` (it serves users too, whose admission limits
    derive from them: det.master.api._admission). At 1,000 agents x 2,000 trials
    (bench/scale.py, two fronts, runs alternated) 16 threads instead of 128 took the master
    from 0.88 and 1.01 to 0.86 and 0.72 cores, and a metric report's context switches in the
    app (its waits for the interpreter's lock, the database, a connection) from 12.3 and 18.3
    to 9.5 and 7.7."""
    return cfg.cluster_api_threads if hands_users_off else cfg.api_threads


def _event_loop(
    state: MasterState, server: type, channel: type
) -> tuple[type, type, dict[int, Any] | None]:
    """``server`` and ``channel`` for the configured event loop, and the socket map to give
    the server (None: waitress makes its own)."""
    if state.config.api_event_loop == "poll":
        return server, channel, None
    own = all(getattr(channel, n) is getattr(HTTPChannel, n) for n in ("readable", "writable"))
    if own:
        # Asked only when it changed; a TLS channel's readiness follows its TLS session, so it
        # is asked at every wake-up (det.master.evloop.tracked).
        channel = type(channel.__name__, (evloop.TrackedChannel, channel), {})
    server = type(server.__name__, (evloop.ReadinessServer, server), {})
    loop_map = evloop.ReadinessMap()
    loop_map.full_pass_seconds = state.config.api_full_pass_seconds
    return server, channel, loop_map


def _watch_settings(state: MasterState, stop: threading.Event) -> None:
    """This process applies the settings changed at run time (the log level) as they move."""
    threading.Thread(
        target=master_settings.watch_forever,
        args=(state.pool, stop),
        name="det-master-settings",
        daemon=True,
    ).start()


def _serve_users(state: MasterState, receive: Any) -> None:
    """A user process: serves the connections the fronts hand over on ``receive``."""
    _watch_settings(state, threading.Event())
    app = create_app(state)
    # No listening socket: a placeholder the server never accepts on (it is not started).
    placeholder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    base, channel, loop_map = _event_loop(state, TcpWSGIServer, HTTPChannel)
    users = type(
        "_UserServer",
        (base,),
        {
            "channel_class": connection_class(
                channel, park_without_thread=state.config.api_park_without_thread
            )
        },
    )
    server = users(
        app,
        map=loop_map,
        _sock=placeholder,
        _start=False,
        dispatcher=dispatch.dispatcher(state.config.api_threads),
        adj=Adjustments(**_adjustments(state, state.config.api_threads)),
        bind_socket=False,
        sockinfo=(socket.AF_INET, socket.SOCK_STREAM, 0, ("127.0.0.1", 0)),
    )
    dispatch.Receiver(server, receive)
    freeze_startup_heap()
    server.run()
