from __future__ import annotations

import sys

import pytest

from det.agent.devices import discover_slots
from tests.fakes.nvml import FakeGpu, make_pynvml

A100 = FakeGpu("GPU-1111", "NVIDIA A100-SXM4-40GB", 40 * 1024**3)
T4 = FakeGpu("GPU-2222", "Tesla T4", 16 * 1024**3)


def test_one_cuda_slot_per_gpu_with_uuid_brand_and_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = make_pynvml([A100, T4])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    slots = discover_slots("auto")
    assert [s.to_wire() for s in slots] == [
        {
            "id": "0",
            "type": "cuda",
            "uuid": "GPU-1111",
            "brand": "NVIDIA A100-SXM4-40GB",
            "memoryMb": 40960,
        },
        {"id": "1", "type": "cuda", "uuid": "GPU-2222", "brand": "Tesla T4", "memoryMb": 16384},
    ]
    assert fake.state["shutdowns"] == 1  # NVML is released after discovery


def test_old_pynvml_bytes_are_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([T4], bytes_strings=True))
    (slot,) = discover_slots("gpu")
    assert (slot.uuid, slot.brand) == ("GPU-2222", "Tesla T4")


def test_no_driver_falls_back_to_one_cpu_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([A100], init_error="Driver Not Loaded"))
    slots = discover_slots("auto")
    assert [(s.id, s.type, s.uuid) for s in slots] == [("0", "cpu", None)]


def test_missing_pynvml_module_means_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    assert [s.type for s in discover_slots("auto")] == ["cpu"]


def test_gpu_slot_type_without_gpus_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([]))
    with pytest.raises(RuntimeError, match="no GPU"):
        discover_slots("gpu")


def test_artificial_slots_override_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([A100]))
    slots = discover_slots("auto", artificial_slots=3)
    assert [(s.id, s.type) for s in slots] == [("0", "cpu"), ("1", "cpu"), ("2", "cpu")]


def test_cpu_slot_type_ignores_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([A100]))
    assert [s.type for s in discover_slots("cpu")] == ["cpu"]


def test_slot_type_none_has_no_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([A100]))
    assert discover_slots("none", artificial_slots=2) == []
