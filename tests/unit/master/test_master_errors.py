"""One error root for the master: every exception class the master defines is a MasterError,
but for the ones master/errors.py names as outside the tree on purpose."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import det.master
from det.master import config, expconf
from det.master.errors import APIError, InvalidArgument, MasterError

# Named in master/errors.py's docstring, with the reason.
OUTSIDE = {
    "det.master.deferred.Deferred",
    "det.master.provisioner.fetch_release.FetchError",
    "det.master.provisioner.logship.ShipError",
    "det.master.proxy._Redirect",
    "det.master.tls._Encrypted",
}


def _exception_classes() -> set[type[BaseException]]:
    found: set[type[BaseException]] = set()
    for info in pkgutil.walk_packages(det.master.__path__, "det.master."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == info.name:
                found.add(obj)
    return found


def test_every_master_exception_is_under_the_root() -> None:
    classes = _exception_classes()
    names = {f"{c.__module__}.{c.__qualname__}" for c in classes}
    assert names >= OUTSIDE  # the exceptions are still there (else drop them here and there)
    stray = sorted(
        f"{c.__module__}.{c.__qualname__}"
        for c in classes
        if not issubclass(c, MasterError) and f"{c.__module__}.{c.__qualname__}" not in OUTSIDE
    )
    assert stray == []
    assert len(classes) > 10


def test_config_errors_stay_value_errors_and_api_errors_keep_their_status() -> None:
    for cls in (config.MasterConfigError, expconf.ConfigError):
        assert issubclass(cls, MasterError) and issubclass(cls, ValueError)
    assert issubclass(InvalidArgument, APIError) and InvalidArgument("x").status == 400
