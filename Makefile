VENV ?= .venv
PY := $(VENV)/bin/python
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: setup test lint demo
setup: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

test: setup
	$(PY) -m ruff check src tests
	$(PY) -m mypy
	$(PY) -m pytest -q
