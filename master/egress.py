"""The egress policy: where a request the master makes on a user's behalf may connect.

Every such request goes through here: webhook deliveries and tests
(:mod:`det.master.services.webhook_delivery`), and checkpoint downloads the master reads from
an experiment's S3 ``endpoint_url`` (:mod:`det.master.services.checkpoints`). A *restricted*
request (one a non-admin chose the target of) may not connect to:

* loopback, unspecified ("this network"), link-local (169.254/16 and fe80::/10: cloud metadata),
  private (10/8, 172.16/12, 192.168/16), shared address space (CGNAT, 100.64/10), IPv6 unique
  local (fc00::/7: ``fd00:ec2::254`` is AWS's IPv6 metadata), IETF protocol assignments,
  documentation (TEST-NETs, 2001:db8::/32), benchmarking (198.18/15), multicast, reserved,
  and anything else Python does not call a global address;
* the same addresses written in an IPv6 form that carries an IPv4 one (IPv4-mapped and
  -compatible, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``, Teredo);
* any address of the master host's own interfaces (docker0, its public interface...), read
  from the host (:func:`host_addresses`, cached for a few seconds).

The check is made on the address actually connected to (:func:`connect`): the name is resolved
once, every address it resolves to is judged (one refused address refuses the name), and the
socket is connected to those exact addresses, so a name whose DNS answer changes between a
check and the connection (DNS rebinding) gains nothing. HTTP clients keep the name for the
``Host`` header, TLS SNI and the certificate check; only the socket's peer is pinned.

* ``requests``: :func:`session` mounts an adapter whose urllib3 connections open their socket
  with :func:`connect`. A restricted session ignores ``HTTP(S)_PROXY`` from the environment (a
  proxy would make the connection on the master's behalf, out of reach of the check).
* boto3/botocore (also urllib3 underneath): :func:`guard_boto3_client` swaps the connection
  pool classes of the client's own HTTP session for subclasses that connect the same way;
  botocore has no public hook for that, so the swap checks the attributes it relies on and
  fails closed (RuntimeError) if a botocore release moves them.

Admins widen it with ``egress.allowed_hosts`` in master.yaml (:class:`EgressConfig`): names
(an on-prem MinIO's), addresses or networks a restricted request may reach anyway. A request
an admin chose the target of (an admin's webhook, the cluster's own storage) is unrestricted.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import json
import re
import socket
import subprocess
import threading
import time
from collections.abc import Iterable
from typing import Any

import requests
import requests.adapters
import urllib3.connection
import urllib3.connectionpool
from pydantic import BaseModel, ConfigDict, Field, field_validator
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.util import connection as _u3
from urllib3.util.timeout import _DEFAULT_TIMEOUT

from det.master.errors import MasterError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Refused networks, most specific meaning first: (network, what it is).
REFUSED: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ipaddress.ip_network(net), what)
    for net, what in (
        ("0.0.0.0/8", "an unspecified ('this network') address"),
        ("127.0.0.0/8", "a loopback address"),
        ("10.0.0.0/8", "a private address"),
        ("172.16.0.0/12", "a private address"),
        ("192.168.0.0/16", "a private address"),
        ("100.64.0.0/10", "a shared (CGNAT) address"),
        ("169.254.0.0/16", "a link-local address (cloud metadata)"),
        ("192.0.0.0/24", "an IETF protocol assignment"),
        ("192.0.2.0/24", "a documentation address (TEST-NET-1)"),
        ("198.51.100.0/24", "a documentation address (TEST-NET-2)"),
        ("203.0.113.0/24", "a documentation address (TEST-NET-3)"),
        ("198.18.0.0/15", "a benchmarking address"),
        ("192.88.99.0/24", "a 6to4 relay address"),
        ("224.0.0.0/4", "a multicast address"),
        ("240.0.0.0/4", "a reserved address"),
        ("::/128", "an unspecified address"),
        ("::1/128", "a loopback address"),
        ("fe80::/10", "a link-local address"),
        ("fec0::/10", "a site-local address"),
        ("fc00::/7", "a unique local address (fd00:ec2::254 is AWS's metadata)"),
        ("ff00::/8", "a multicast address"),
        ("2001:db8::/32", "a documentation address"),
        ("2001:2::/48", "a benchmarking address"),
        ("100::/64", "a discard-only address"),
        ("64:ff9b:1::/48", "a local-use NAT64 address"),
        # Deprecated (RFC 7526) and not globally reachable by IANA's registry (Python 3.13 says
        # so, 3.11 did not): refused on every Python, its IPv4 address judged first for the
        # message.
        ("2002::/16", "a 6to4 address"),
    )
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_COMPAT = ipaddress.ip_network("::/96")

_HOST_TTL = 5.0  # seconds a read of the host's own addresses is reused


class EgressRefused(MasterError, OSError):
    """A restricted request's target is refused; the message names the address and why (an
    OSError too: it is raised where a socket would be connected, and HTTP clients treat it as
    a failed connection)."""


class EgressConfig(BaseModel):
    """master.yaml ``egress``: what a non-admin's webhook or storage endpoint may reach besides
    the public internet. ``allowed_hosts``: host names (``minio.corp.example``), addresses or
    networks (``10.20.0.0/16``); a name is matched as written in the URL, its subdomains too
    (its addresses are not judged), an address or network by the address connected to."""

    model_config = ConfigDict(extra="forbid")

    allowed_hosts: list[str] = Field(default_factory=list)

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        for entry in value:
            _parse_allowed(entry)  # ValueError names the entry
        return value


_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")


def _parse_allowed(entry: str) -> str | IPNetwork:
    text = entry.strip().lower().rstrip(".")
    try:
        return ipaddress.ip_network(text.strip("[]"), strict=False)
    except ValueError:
        pass
    if len(text) > 253 or not _HOSTNAME.fullmatch(text):
        raise ValueError(f"{entry!r} is not a host name, an address or a network")
    return text


@dataclasses.dataclass(frozen=True)
class Policy:
    """Whether a request is restricted, and what an admin allowed it anyway."""

    restricted: bool
    allowed_names: frozenset[str] = frozenset()
    allowed_networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def of(cls, config: EgressConfig, *, restricted: bool, extra: Iterable[str] = ()) -> Policy:
        """The policy of a request; ``extra``: more allowed names for this request (the
        cluster's own storage endpoint for a download)."""
        names: set[str] = set()
        nets: list[IPNetwork] = []
        for entry in (*config.allowed_hosts, *extra):
            parsed = _parse_allowed(entry)
            if isinstance(parsed, str):
                names.add(parsed)
            else:
                nets.append(parsed)
        return cls(restricted, frozenset(names), tuple(nets))

    def allowing(self, *names: str) -> Policy:
        """This policy with more allowed names (an endpoint an admin chose)."""
        more = {n.lower().rstrip(".") for n in names if n}
        return dataclasses.replace(self, allowed_names=self.allowed_names | more)

    def allows_name(self, host: str) -> bool:
        """``host`` is an allowed name or a subdomain of one (S3's ``bucket.minio.example``)."""
        name = host.lower().rstrip(".")
        return any(name == n or name.endswith("." + n) for n in self.allowed_names)

    def refusal(self, host: str, addr: IPAddress) -> str | None:
        """Why connecting to ``addr`` (``host`` resolved) is refused; None: it may."""
        if not self.restricted or self.allows_name(host):
            return None
        if any(a in net for a in _unwrap(addr) for net in self.allowed_networks):
            return None
        return classify(addr, host_addresses())


UNRESTRICTED = Policy(restricted=False)


def _embedded(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, compatible, NAT64, 6to4), if any."""
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr.sixtofour is not None:
        return addr.sixtofour
    if addr in _NAT64 or (addr in _COMPAT and int(addr) > 1):
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return None


def _unwrap(addr: IPAddress) -> list[IPAddress]:
    """``addr`` and every IPv4 address written inside it (a Teredo address carries two)."""
    out: list[IPAddress] = [addr]
    if isinstance(addr, ipaddress.IPv6Address):
        inner = _embedded(addr)
        if inner is not None:
            out.append(inner)
        if addr.teredo is not None:
            out.extend(addr.teredo)
    return out


def classify(addr: IPAddress, own: frozenset[IPAddress] = frozenset()) -> str | None:
    """Why a restricted request may not connect to ``addr`` (None: a public address that is
    not one of ``own``, the host's). Pure: the table above, then Python's ``is_global``."""
    # The IPv4 address carried first: "::ffff:127.0.0.1 is loopback" says more than "not global".
    for a in reversed(_unwrap(addr)):
        inner = f" (carrying {a})" if a is not addr else ""
        for net, what in REFUSED:
            if a.version == net.version and a in net:
                return what + inner
        if not a.is_global:
            return f"not a global address{inner}"
        if a in own:
            return f"an address of the master's own host{inner}"
    return None


# -- the host's own addresses ------------------------------------------------------------------
_host_lock = threading.Lock()
_host_cache: tuple[float, frozenset[IPAddress]] = (-_HOST_TTL, frozenset())


def _proc_addresses() -> set[IPAddress]:
    out: set[IPAddress] = set()
    try:
        with open("/proc/net/fib_trie", encoding="ascii") as f:
            last = ""
            for line in f:
                text = line.strip()
                if text.startswith("|--"):
                    last = text[3:].strip()
                elif text == "/32 host LOCAL" and last:
                    out.add(ipaddress.ip_address(last))
    except (OSError, ValueError):
        pass
    try:
        with open("/proc/net/if_inet6", encoding="ascii") as f:
            for line in f:
                hexaddr = line.split()[0]
                out.add(ipaddress.IPv6Address(int(hexaddr, 16)))
    except (OSError, ValueError, IndexError):
        pass
    return out


def _ip_command_addresses() -> set[IPAddress]:
    try:
        run = subprocess.run(
            ["ip", "-j", "addr"], capture_output=True, text=True, timeout=5, check=True
        )
        links = json.loads(run.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return set()
    out: set[IPAddress] = set()
    for link in links if isinstance(links, list) else ():
        for info in link.get("addr_info") or ():
            try:
                out.add(ipaddress.ip_address(str(info.get("local"))))
            except ValueError:
                continue
    return out


def _read_host_addresses() -> frozenset[IPAddress]:
    found = _proc_addresses() or _ip_command_addresses()
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None):
            found.add(ipaddress.ip_address(str(info[4][0]).split("%")[0]))
    except (OSError, ValueError):
        pass
    return frozenset(found)


def host_addresses() -> frozenset[IPAddress]:
    """Every address of this host's interfaces (``/proc/net``, else ``ip -j addr``) and of its
    host name, reread at most every few seconds (an interface may come up later: docker0)."""
    global _host_cache
    with _host_lock:
        at, addrs = _host_cache
        now = time.monotonic()
        if now - at >= _HOST_TTL:
            addrs = _read_host_addresses()
            _host_cache = (now, addrs)
        return addrs


# -- checks and connections --------------------------------------------------------------------
def _resolve(host: str, port: int | None) -> list[tuple[Any, ...]]:
    try:
        return socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except UnicodeError as e:
        raise socket.gaierror(f"host {host!r} is not a valid name: {e}") from None


def _judge(host: str, infos: list[tuple[Any, ...]], policy: Policy) -> None:
    for info in infos:
        addr = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        why = policy.refusal(host, addr)
        if why is not None:
            raise EgressRefused(f"host {host!r} is {addr}, {why}")


def check_host(host: str, policy: Policy) -> str | None:
    """An early, friendly check (when a webhook or an experiment is made): why ``host`` is
    refused, None if it may be reached now. The connection is judged again (:func:`connect`)."""
    if not policy.restricted:
        return None
    try:
        _judge(host, _resolve(host, None), policy)
    except EgressRefused as e:
        return str(e)
    except OSError:
        return f"host {host!r} does not resolve"
    return None


def connect(
    host: str,
    port: int,
    timeout: Any = _DEFAULT_TIMEOUT,
    *,
    policy: Policy,
    source_address: tuple[str, int] | None = None,
    socket_options: Any = None,
) -> socket.socket:
    """A TCP socket to ``host:port``: the name resolved once, each address judged, then the
    first that answers of those very addresses (EgressRefused when one is refused)."""
    if not policy.restricted:
        return _u3.create_connection((host, port), timeout, source_address, socket_options)
    infos = _resolve(host, port)
    _judge(host, infos, policy)
    error: OSError | None = None
    for info in infos:
        literal = str(info[4][0])
        try:
            return _u3.create_connection((literal, port), timeout, source_address, socket_options)
        except OSError as e:
            error = e
    raise error or OSError(f"host {host!r} has no address")


def refusal_in(exc: BaseException) -> EgressRefused | None:
    """The EgressRefused behind an HTTP client's error (urllib3, requests, botocore wrap it)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, EgressRefused):
            return e
        todo += [e.__cause__, e.__context__, *(a for a in e.args if isinstance(a, BaseException))]
        todo += [v for v in getattr(e, "__dict__", {}).values() if isinstance(v, BaseException)]
    return None


class _Guarded:
    """Mixed into a urllib3 connection class: the socket comes from :func:`connect`."""

    egress_policy: Policy = UNRESTRICTED

    def _new_conn(self) -> socket.socket:
        conn: Any = self
        try:
            return connect(
                conn._dns_host,
                conn.port,
                conn.timeout,
                policy=self.egress_policy,
                source_address=conn.source_address,
                socket_options=conn.socket_options,
            )
        except EgressRefused as e:
            raise NewConnectionError(conn, str(e)) from e
        except socket.gaierror as e:
            raise NameResolutionError(conn.host, conn, e) from e
        except TimeoutError as e:
            raise ConnectTimeoutError(conn, f"connection to {conn.host} timed out") from e
        except OSError as e:
            raise NewConnectionError(conn, f"failed to establish a new connection: {e}") from e


@functools.cache
def guarded_pools(
    policy: Policy,
    http_pool: type[urllib3.connectionpool.HTTPConnectionPool] = (
        urllib3.connectionpool.HTTPConnectionPool
    ),
    https_pool: type[urllib3.connectionpool.HTTPSConnectionPool] = (
        urllib3.connectionpool.HTTPSConnectionPool
    ),
) -> dict[str, type[urllib3.connectionpool.HTTPConnectionPool]]:
    """urllib3 pool classes (by scheme) whose connections connect under ``policy``."""
    out: dict[str, type[urllib3.connectionpool.HTTPConnectionPool]] = {}
    for scheme, pool in (("http", http_pool), ("https", https_pool)):
        conn_cls = type(
            "Guarded" + pool.ConnectionCls.__name__,
            (_Guarded, pool.ConnectionCls),
            {"egress_policy": policy},
        )
        out[scheme] = type("Guarded" + pool.__name__, (pool,), {"ConnectionCls": conn_cls})
    return out


class _Adapter(requests.adapters.HTTPAdapter):
    def __init__(self, policy: Policy) -> None:
        self._egress = policy
        super().__init__(max_retries=0)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = guarded_pools(self._egress)


def session(policy: Policy) -> requests.Session:
    """A requests session whose connections follow ``policy`` (a restricted one ignores the
    environment's proxies and ``.netrc``)."""
    s = requests.Session()
    s.trust_env = not policy.restricted
    adapter = _Adapter(policy)
    s.mount("http://", adapter)
    s.mount("https://", adapter)
    return s


def guard_boto3_client(client: Any, policy: Policy) -> None:
    """Make a boto3 client's connections follow ``policy`` (see the module's docstring).
    RuntimeError if this botocore keeps its HTTP session elsewhere (nothing is sent then)."""
    if not policy.restricted:
        return
    try:
        # botocore comes with the optional extra det[aws], as any boto3 client to guard does
        import botocore.awsrequest
        import botocore.httpsession
    except ImportError as e:
        raise RuntimeError("botocore is not installed: no boto3 client to guard") from e

    http = getattr(getattr(client, "_endpoint", None), "http_session", None)
    if not isinstance(http, botocore.httpsession.URLLib3Session) or not hasattr(
        http, "_pool_classes_by_scheme"
    ):
        raise RuntimeError("this botocore's HTTP session cannot be guarded; refusing to connect")
    pools = guarded_pools(
        policy,
        botocore.awsrequest.AWSHTTPConnectionPool,
        botocore.awsrequest.AWSHTTPSConnectionPool,
    )
    http._pool_classes_by_scheme = pools
    http._manager.pool_classes_by_scheme = pools
    for manager in http._proxy_managers.values():
        manager.pool_classes_by_scheme = pools
