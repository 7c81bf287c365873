"""The master's errors: one root, :class:`MasterError`, and the API's branch.

::

    MasterError                                     - anything the master raises on purpose
    ├── APIError (500, "internal")                  - answered to a request (below)
    ├── det.master.config.MasterConfigError         - master.yaml (also a ValueError)
    ├── det.master.expconf.ConfigError              - an experiment or task config (ValueError)
    ├── det.master.provisioner.config_base.ProviderConfigError - a pool's provider (ValueError)
    ├── det.master.provisioner.provider.LaunchError - the cloud refused a launch
    └── det.master.proxy.Refused                    - the task proxy refuses a connection

    APIError (500, "internal")
    ├── InvalidArgument (400, "invalid_argument")  - bad input; nothing was changed
    ├── Unauthenticated (401, "unauthenticated")   - no or bad token
    ├── PermissionDenied (403, "permission_denied")
    ├── NotFound (404, "not_found")
    ├── Conflict (409, "already_exists" / "failed_precondition")
    ├── PayloadTooLarge (413, "payload_too_large")
    ├── TooManyRequests (429, "resource_exhausted") - throttled; ``retry_after`` seconds
    ├── Unimplemented (501, "unimplemented")        - a Determined feature det does not build
    └── Unavailable (503, "unavailable")            - a store the master reads could not answer

One Flask handler (``det.master.app``) turns APIErrors into Determined's error JSON:
``{"error": {"error": "<message>"}, "code": <grpc code>, "message": "<message>"}``; a service
turns a config error into :class:`InvalidArgument` where a request carried the config, and the
server's entry point turns master.yaml's into one line and an exit code.

Outside the tree on purpose: ``provisioner/fetch_release.py`` and ``provisioner/logship.py``
(standard-library scripts a new VM runs before det is installed), two private control-flow
signals (``proxy._Redirect``, ``tls._Encrypted``), never seen outside their modules, and
``deferred.Deferred``: a request parking (a ``BaseException``, so that Flask lets it through to
the task that catches it), not an error.
"""

from __future__ import annotations


class MasterError(Exception):
    """The root of every error the master raises on purpose."""


class APIError(MasterError):
    status = 500
    code = "internal"
    grpc_code = 13

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(APIError):
    status = 400
    code = "invalid_argument"
    grpc_code = 3


class Unauthenticated(APIError):
    status = 401
    code = "unauthenticated"
    grpc_code = 16


class PermissionDenied(APIError):
    status = 403
    code = "permission_denied"
    grpc_code = 7


class NotFound(APIError):
    status = 404
    code = "not_found"
    grpc_code = 5


class Conflict(APIError):
    status = 409
    code = "failed_precondition"
    grpc_code = 9


class Unimplemented(APIError):
    """A Determined feature det deliberately does not build: the message names it and says
    where the README explains what to do instead."""

    status = 501
    code = "unimplemented"
    grpc_code = 12


class PayloadTooLarge(APIError):
    status = 413
    code = "payload_too_large"
    grpc_code = 8


class TooManyRequests(APIError):
    status = 429
    code = "resource_exhausted"
    grpc_code = 8

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Unavailable(APIError):
    """Something the master depends on for this request (a checkpoint's storage) failed."""

    status = 503
    code = "unavailable"
    grpc_code = 14
