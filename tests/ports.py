"""Free ports for tests that start servers: one port (:func:`free_port`, from the kernel's
ephemeral range, for a server bound at once) or two in a row (:func:`free_port_pair`)."""

from __future__ import annotations

import random
import socket


def free_port() -> int:
    """A port free on 127.0.0.1 now (the kernel's pick): for a server started right away."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ephemeral_low() -> int:
    """The first port of the kernel's range for outgoing connections' local ports."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port_pair() -> int:
    """A free port whose next one is free too: a deployed master (a VM's, ``det deploy local``'s)
    serves its task origin on the port after its API's.

    The pair is taken below the kernel's ephemeral range. The VM's master binds it a minute or
    more after this check (its boot installs det first); a port from the ephemeral range
    (what binding port 0 gives) may meanwhile become the local port of any outgoing connection
    on this host, and the master then failed with "Address already in use" (seen on CI). Below
    the range only an explicit bind can take it.
    """
    low = 10000
    high = _ephemeral_low() - 2
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(low, high)
        try:
            for p in (port, port + 1):
                with socket.socket() as sock:
                    sock.bind(("0.0.0.0", p))  # the VM master binds every address
        except OSError:
            continue
        return port
    raise RuntimeError(f"no two consecutive free ports in {low}-{high + 1} in 200 tries")
