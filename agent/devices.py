"""Device discovery: one slot per NVIDIA GPU (through NVML), else CPU slots.

`pynvml` (the `nvidia-ml-py` package) is imported lazily: machines without it, or without a
driver, simply have no GPUs.
"""

from __future__ import annotations

import importlib
import logging
import platform
from dataclasses import dataclass
from typing import Any, Literal

from det.common.agent_protocol import HeartbeatSlot

logger = logging.getLogger(__name__)

SlotKind = Literal["cuda", "cpu"]


@dataclass(frozen=True)
class Slot:
    id: str
    type: SlotKind
    uuid: str | None
    brand: str
    memory_mb: int

    def to_wire(self) -> HeartbeatSlot:
        return {
            "id": self.id,
            "type": self.type,
            "uuid": self.uuid,
            "brand": self.brand,
            "memoryMb": self.memory_mb,
        }


def _text(value: Any) -> str:
    # Older pynvml releases return bytes, newer ones str.
    return value.decode() if isinstance(value, bytes) else str(value)


def discover_gpus() -> list[Slot]:
    """GPUs seen by NVML, or [] when NVML (the module or the driver) is not available."""
    try:
        nvml: Any = importlib.import_module("pynvml")
    except ImportError:
        logger.debug("pynvml not installed: no GPUs")
        return []
    try:
        nvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        logger.info("NVML unavailable (%s): no GPUs", e)
        return []
    try:
        slots = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            slots.append(
                Slot(
                    id=str(index),
                    type="cuda",
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    brand=_text(nvml.nvmlDeviceGetName(handle)),
                    memory_mb=int(memory.total) // (1024 * 1024),
                )
            )
        return slots
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception as e:
            logger.debug("nvmlShutdown failed: %s", e)


def _cpu_brand() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def cpu_slots(count: int) -> list[Slot]:
    brand = _cpu_brand()
    return [Slot(id=str(i), type="cpu", uuid=None, brand=brand, memory_mb=0) for i in range(count)]


def discover_slots(slot_type: str, artificial_slots: int = 0) -> list[Slot]:
    """The agent's slots for a configured `slot_type` (auto|gpu|cpu|none).

    `artificial_slots` > 0 forces that many CPU slots (tests, and clusters that schedule CPU
    work by slot count); `auto` uses the GPUs when NVML finds any, else one CPU slot.
    """
    if slot_type == "none":
        return []
    if artificial_slots > 0:
        return cpu_slots(artificial_slots)
    if slot_type == "cpu":
        return cpu_slots(1)
    gpus = discover_gpus()
    if slot_type == "gpu" and not gpus:
        raise RuntimeError("slot_type is gpu but NVML found no GPU")
    return gpus or cpu_slots(1)
