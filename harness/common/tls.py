"""Trusting the master's TLS certificate, as Determined's clients do.

Two settings, read from the environment by the ``det`` CLI and the harness and from
``master_cert_file``/``master_cert_name`` in the agent's config (same names, same meaning):

* ``DET_MASTER_CERT_FILE``: a PEM file with the master's certificate (or the CA that issued it).
  It is trusted *in addition to* the public CAs (``REQUESTS_CA_BUNDLE``, else certifi's bundle),
  as Determined does. The value ``noverify`` (any case) turns verification off. Empty or unset:
  the public CAs only.
* ``DET_MASTER_CERT_NAME``: the host name the certificate must be valid for, when it differs
  from the host in the master's URL (a certificate for ``det-master`` reached by IP address).

Unlike Determined (which logs a warning and goes on), a ``DET_MASTER_CERT_FILE`` that cannot be
read is an error: going on only turns it into a certificate error later, further from its cause.

Runs inside task containers on Python 3.8+, with whatever ``requests``/``urllib3`` the image has
(urllib3 1.26 or 2.x): no syntax or API beyond that.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import ssl
import tempfile
import threading
from typing import TYPE_CHECKING, Any, Mapping, MutableMapping

import requests
import requests.adapters
from requests.utils import DEFAULT_CA_BUNDLE_PATH

from det.common.errors import CertError as CertError  # re-exported: callers name tls.CertError

if TYPE_CHECKING:
    # What requests' stubs say merge_environment_settings answers (a stub-only TypedDict).
    from requests.sessions import _Settings

CERT_FILE_ENV = "DET_MASTER_CERT_FILE"
CERT_NAME_ENV = "DET_MASTER_CERT_NAME"
NOVERIFY = "noverify"


class MasterCert:
    """How to verify the master: ``verify`` as requests takes it, and the expected host name.

    ``verify`` is True (the public CAs), False (``noverify``) or the path of a PEM bundle.
    ``cert_file`` is the file the user named (None for the defaults and for ``noverify``).
    """

    def __init__(
        self,
        verify: bool | str = True,
        name: str | None = None,
        cert_file: str | None = None,
    ) -> None:
        self.verify = verify
        self.name = name or None
        self.cert_file = cert_file

    @property
    def noverify(self) -> bool:
        return self.verify is False

    def __repr__(self) -> str:
        return f"MasterCert(verify={self.verify!r}, name={self.name!r})"


def load(
    cert_file: str | None, cert_name: str | None, *, setting: str = CERT_FILE_ENV
) -> MasterCert:
    """A MasterCert from the two settings; ``setting`` names the first one in errors.

    Raises CertError when ``cert_file`` cannot be read or holds no PEM certificate.
    """
    name = (cert_name or "").strip() or None
    path = (cert_file or "").strip()
    if not path:
        return MasterCert(True, name)
    if path.lower() == NOVERIFY:
        return MasterCert(False, name)
    return MasterCert(_bundle_with_public_cas(path, setting), name, cert_file=path)


def from_env(environ: Mapping[str, str] | None = None) -> MasterCert:
    """The MasterCert that ``DET_MASTER_CERT_FILE``/``DET_MASTER_CERT_NAME`` describe."""
    env = os.environ if environ is None else environ
    return load(env.get(CERT_FILE_ENV), env.get(CERT_NAME_ENV))


def read_pem(path: str, setting: str) -> str:
    """The text of a PEM certificate file, or CertError naming ``setting`` and the problem."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise CertError(
            f"{setting}={path}: cannot read the certificate: {e.strerror or e}"
        ) from None
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        text = ""
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise CertError(f"{setting}={path}: not a PEM certificate (no BEGIN CERTIFICATE)")
    return text


_bundles: dict[tuple[str, int, float], str] = {}
_bundles_lock = threading.Lock()


def _bundle_with_public_cas(path: str, setting: str) -> str:
    """A private file with certifi's bundle followed by ``path``'s certificates (once per
    process and file version); removed when the process exits."""
    pem = read_pem(path, setting)
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_mtime)
    with _bundles_lock:
        bundle = _bundles.get(key)
        if bundle is not None:
            return bundle
        public = b""
        try:
            with open(_public_bundle(), "rb") as f:
                public = f.read()
        except (ImportError, OSError):
            pass  # no public bundle: the master's certificate alone
        try:
            fd, bundle = tempfile.mkstemp(prefix="det-master-cert-", suffix=".pem")
        except OSError:
            return path  # nowhere to write: trust the master's certificate alone
        with os.fdopen(fd, "wb") as out:
            out.write(public + b"\n" + pem.encode("ascii"))
        atexit.register(_unlink, bundle)
        _bundles[key] = bundle
        return bundle


def _public_bundle() -> str:
    """The CAs requests would trust by default: its environment variables, else certifi's."""
    for var in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        if os.environ.get(var):
            return os.environ[var]

    return str(DEFAULT_CA_BUNDLE_PATH)


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


class _NamedHostAdapter(requests.adapters.HTTPAdapter):
    """Checks the master's certificate against ``name`` instead of the host dialled (and sends
    ``name`` as the TLS server name), for every connection pool of the session."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        self._name = name
        super().__init__(**kwargs)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["assert_hostname"] = self._name
        kwargs["server_hostname"] = self._name
        super().init_poolmanager(*args, **kwargs)


class MasterSession(requests.Session):
    """A requests session that keeps its ``verify`` even where ``REQUESTS_CA_BUNDLE`` or
    ``CURL_CA_BUNDLE`` is set (plain requests lets those replace a session's ``verify``)."""

    def merge_environment_settings(
        self,
        url: str | bytes | None,
        proxies: MutableMapping[str, str] | None,
        stream: bool | None,
        verify: bool | str | None,
        cert: str | tuple[str, str] | None,
    ) -> _Settings:
        settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
        if verify is None and self.verify is not True:
            settings["verify"] = self.verify
        return settings


def session(cert: MasterCert) -> requests.Session:
    """A session that verifies the master as ``cert`` says."""
    s = MasterSession()
    s.verify = cert.verify
    if cert.name:
        s.mount("https://", _NamedHostAdapter(cert.name))
    return s


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps (requests → urllib3 → ssl), outermost first."""
    seen: list[BaseException] = []
    todo: list[Any] = [exc]
    while todo:
        e = todo.pop(0)
        if not isinstance(e, BaseException) or any(e is s for s in seen):
            continue
        seen.append(e)
        todo.extend(e.args)
        todo.extend([getattr(e, "reason", None), e.__cause__, e.__context__])
    return seen


def is_cert_problem(exc: BaseException) -> bool:
    """True when ``exc`` (from requests) is a TLS failure, not a plain connection failure."""
    return any(
        isinstance(e, (ssl.SSLError, ssl.CertificateError, requests.exceptions.SSLError))
        or type(e).__name__ == "CertificateError"  # urllib3 1.26's own hostname check
        for e in _chain(exc)
    )


def describe(exc: BaseException, url: str, hint: str = CERT_FILE_ENV) -> str:
    """One line for a TLS failure talking to the master at ``url``.

    ``hint`` names the setting that supplies a certificate (``master_cert_file`` for the agent).
    """
    chain = _chain(exc)
    for e in chain:
        if isinstance(e, ssl.SSLCertVerificationError) or type(e).__name__ == "CertificateError":
            reason = getattr(e, "verify_message", None) or _short(e)
            if "hostname" in reason.lower() or "match" in reason.lower():
                fix = "set {} to the name the certificate was issued for".format(
                    CERT_NAME_ENV if hint == CERT_FILE_ENV else "master_cert_name"
                )
            else:
                fix = f"set {hint} to the master's certificate"
            return f"cannot verify the master's TLS certificate at {url}: {reason}; {fix}"
    ssl_errors = [e for e in chain if isinstance(e, ssl.SSLError)]
    reason = _short(ssl_errors[-1] if ssl_errors else chain[-1])
    if "WRONG_VERSION_NUMBER" in reason.upper() or "wrong version number" in reason:
        return f"TLS handshake with the master at {url} failed: {reason} (does it serve HTTPS?)"
    return f"TLS handshake with the master at {url} failed: {reason}"


def _short(e: BaseException) -> str:
    if isinstance(e, ssl.SSLError) and e.reason:
        verify_message = getattr(e, "verify_message", None)
        return str(verify_message or str(e.reason).replace("_", " ").lower())
    return " ".join(str(e).split()) or type(e).__name__
