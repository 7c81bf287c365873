"""A fake `pynvml` module for device-discovery tests.

This is a mock of hardware we do not have (NVIDIA GPUs and their driver): the test machines have
no GPU, so the NVML path is exercised against this stand-in, injected with
`monkeypatch.setitem(sys.modules, "pynvml", make_pynvml(...))`. It implements only the calls
`det.agent.devices` makes, with NVML's names and return shapes.
"""

from __future__ import annotations

import types
from dataclasses import dataclass


@dataclass(frozen=True)
class FakeGpu:
    uuid: str
    name: str
    memory_bytes: int


class NVMLError(Exception):
    pass


@dataclass(frozen=True)
class _Memory:
    total: int
    free: int
    used: int


def make_pynvml(
    gpus: list[FakeGpu], *, init_error: str | None = None, bytes_strings: bool = False
) -> types.ModuleType:
    """A module object standing in for `pynvml` with `gpus` installed.

    `init_error` makes `nvmlInit` fail like a machine without a driver; `bytes_strings` returns
    names and UUIDs as bytes, as old pynvml releases did.
    """
    mod = types.ModuleType("pynvml")
    state = {"initialized": False, "shutdowns": 0}

    def _text(s: str) -> str | bytes:
        return s.encode() if bytes_strings else s

    def nvmlInit() -> None:
        if init_error:
            raise NVMLError(init_error)
        state["initialized"] = True

    def nvmlShutdown() -> None:
        state["initialized"] = False
        state["shutdowns"] += 1

    def _check() -> None:
        if not state["initialized"]:
            raise NVMLError("Uninitialized")

    def nvmlDeviceGetCount() -> int:
        _check()
        return len(gpus)

    def nvmlDeviceGetHandleByIndex(index: int) -> FakeGpu:
        _check()
        return gpus[index]

    def nvmlDeviceGetUUID(handle: FakeGpu) -> str | bytes:
        return _text(handle.uuid)

    def nvmlDeviceGetName(handle: FakeGpu) -> str | bytes:
        return _text(handle.name)

    def nvmlDeviceGetMemoryInfo(handle: FakeGpu) -> _Memory:
        return _Memory(total=handle.memory_bytes, free=handle.memory_bytes, used=0)

    for fn in (
        nvmlInit,
        nvmlShutdown,
        nvmlDeviceGetCount,
        nvmlDeviceGetHandleByIndex,
        nvmlDeviceGetUUID,
        nvmlDeviceGetName,
        nvmlDeviceGetMemoryInfo,
    ):
        setattr(mod, fn.__name__, fn)
    mod.NVMLError = NVMLError  # type: ignore[attr-defined]
    mod.state = state  # type: ignore[attr-defined]
    return mod
