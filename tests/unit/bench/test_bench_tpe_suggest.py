"""bench/tpe_suggest.py times the proposals the Gaussian-process step makes, with det's gp.py or
the one given."""

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from det.master.searcher import tpe

ROOT = Path(__file__).resolve().parents[3]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_tpe_suggest", ROOT / "bench" / "tpe_suggest.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load()


def test_only_the_proposals_made_with_the_model_are_timed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """14 trials report before the model is used (3 x 4 dimensions + 2): of 20 trials, the
    proposals after the 14th to the 19th; each of them fitted a model once (a gp.py that counts
    its fits stands in for det's, as ``--gp`` loads one)."""
    counting = tmp_path / "gp.py"
    counting.write_text(
        (ROOT / "master" / "searcher" / "gp.py").read_text()
        + "\nFITS = []\n_fit = fit\n\n\ndef fit(*a, **k):\n    FITS.append(1)\n    return _fit(*a, **k)\n"
    )
    module = bench.load_gp(counting)
    monkeypatch.setattr(tpe, "gp", module)
    start = max(tpe.GP_MIN, tpe.GP_MIN_PER_DIM * len(bench.SPACE) + 2)
    timed = bench.proposals(seed=0, trials=20)
    assert start == 14 and len(timed) == 20 - start
    assert len(module.FITS) == len(timed)
    assert all(t > 0 for t in timed)
