PY ?= .venv/bin/python

.PHONY: fmt check test test-unit

fmt:
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

check:
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .
	$(PY) scripts/check_layers.py
	$(PY) scripts/count_untyped.py
	$(PY) scripts/count_master_tests.py
	scripts/mypy-tree.sh build/mypy
	MYPYPATH=build/mypy $(PY) -m mypy -p det
	cd build/mypy && PYTHONPATH=. $(abspath $(PY)) -c 'import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())' ../../.importlinter

test:
	$(PY) -m pytest

test-unit:
	$(PY) -m pytest tests/unit
