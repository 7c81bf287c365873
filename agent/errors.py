"""The agent's errors: one root, one tree. ``det.agent.__main__`` turns what reaches it into one
line and an exit code; the daemon's loop decides what each branch means for the containers::

    AgentError                    root
    ├── AgentConfigError          the agent's config (file, environment, flags) is unusable:
    │                             exit 2 at start
    ├── AgentMasterError          talking to the master failed (det.agent.master_client; the
    │                             shared client's MasterCallError, sorted by what it means here)
    │   ├── MasterUnavailable     no usable answer: network error, timeout, 5xx, TLS failure,
    │   │                         malformed body. An outage: keep every container running and
    │   │                         retry with backoff
    │   └── MasterRejected        a 4xx: the master is up and refuses this request (wrong agent
    │                             token, unknown resource pool, an invalid log batch). Not an
    │                             outage: logged as an error naming the status
    ├── MetadataError             the cloud's metadata service (EC2 IMDS, GCE metadata server)
    │                             answered something unexpected or could not be reached
    ├── ImagePullError            a task image could not be pulled (str() is what the master
    │                             shows)
    ├── BadContext (ValueError)   a task's context archive is unusable
    ├── BadSpec (ValueError)      a container spec the agent refuses (a malformed ``user``)
    └── BundleError               the harness bundle could not be built

The shared REST client's errors (:mod:`det.common.errors`) are translated into the
``AgentMasterError`` branch in one place,
:func:`det.agent.master_client.MasterClient._request`.
"""

from __future__ import annotations


class AgentError(Exception):
    """Root of the agent's errors."""


class AgentConfigError(AgentError):
    """The agent's configuration cannot be used; the message names the setting."""


class AgentMasterError(AgentError):
    """Talking to the master failed."""


class MasterUnavailable(AgentMasterError):
    """No usable answer from the master (network error, timeout, 5xx, TLS, bad body)."""


class MasterRejected(AgentMasterError):
    """The master answered 4xx (bad token, unknown resource pool, ...): it is up, and says no."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"master answered {status}: {message}")
        self.status = status


class MetadataError(AgentError):
    """The cloud's metadata service answered something unexpected or could not be reached."""


class ImagePullError(AgentError):
    """The image could not be pulled; ``str()`` is the one line the master shows."""


class BadContext(AgentError, ValueError):
    """A task's context archive cannot be unpacked."""


class BadSpec(AgentError, ValueError):
    """A container spec field the agent refuses whatever the master sent; names the field."""


class BundleError(AgentError):
    """The harness bundle could not be built; the message says why."""
