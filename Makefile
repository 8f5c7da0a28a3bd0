# headscale-ha: `make plan` (offline plan, STACK=name or every stack) and `make test`.
# Each target bootstraps .venv from the pinned requirements when they changed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUNTIME_STAMP := $(VENV)/.runtime-installed
DEV_STAMP := $(VENV)/.dev-installed
STACK ?=
ASSUME_SECRETS ?=

.PHONY: plan test lint bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(RUNTIME_STAMP): requirements.txt | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

$(DEV_STAMP): requirements.txt requirements-dev.txt | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $(RUNTIME_STAMP) $@

plan: $(RUNTIME_STAMP)
	$(PY) -m offline.plan $(if $(STACK),--stack $(STACK)) $(foreach key,$(ASSUME_SECRETS),--assume-secret $(key))

lint: $(DEV_STAMP)
	$(PY) -m ruff check --no-cache .

test: lint
	$(PY) -m pytest

bench: $(DEV_STAMP)
	@for script in bench/[!_]*.py; do echo "== $$script"; $(PY) $$script || exit 1; done

clean:
	rm -rf rendered .pytest_cache .ruff_cache
