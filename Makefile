# headscale-ha: `make plan` (offline plan, STACK=name or every stack) and `make test`.
# Each target bootstraps .venv from the pinned requirements when they changed. `make deps` installs the Debian
# packages in debian-packages.txt (the real tools some tests run); REQUIRE_REAL_TOOLS=1 make test fails when a
# real-tool test is skipped.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUNTIME_STAMP := $(VENV)/.runtime-installed
DEV_STAMP := $(VENV)/.dev-installed
# checkov's pins clash with the program's: it gets an environment of its own.
CHECKOV_VENV := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
STACK ?=
VERBOSE ?=
SITE ?=
LOST ?=
CONFIRM ?=
VERSION ?=
IMAGE ?=
CRDS ?=
BASE ?= HEAD
# Given to the tools whose hints name an option, so that they name these make variables rather than their flags.
VIA_MAKE := HEADSCALE_HA_VIA_MAKE=1
ASSUME_SECRETS ?=
DEBIAN_PACKAGES := $(strip $(shell sed -e 's/\#.*//' debian-packages.txt))
# apt-get runs as root: directly when we are root, else through sudo.
AS_ROOT := $(if $(filter 0,$(shell id -u)),,$(if $(shell command -v sudo),sudo,NO_SUDO))

.PHONY: deps real-tools plan validate crd-schemas checkov test test-real test-all lint bench docs diff clean promote demote upgrade

deps:
	@missing=$$(for package in $(DEBIAN_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' "$$package" 2>/dev/null | grep -q 'ok installed' || echo "$$package"; done); \
	if [ -z "$$missing" ]; then echo "deps: installed: $(DEBIAN_PACKAGES)"; exit 0; fi; \
	missing=$$(echo $$missing); \
	if ! command -v apt-get >/dev/null 2>&1; then \
	  echo "deps: no apt-get here; install the equivalents of: $$missing" >&2; exit 1; fi; \
	if [ "$(AS_ROOT)" = NO_SUDO ]; then \
	  echo "deps: not root and no sudo; as root run: apt-get install $$missing" >&2; exit 1; fi; \
	echo "deps: installing $$missing"; \
	$(AS_ROOT) apt-get update -qq && \
	$(AS_ROOT) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing

$(PY):
	$(PYTHON) -m venv $(VENV)

# The editable install links the package's files as they are when it is made (pyproject.toml: strict mode, which
# type checkers follow). PACKAGE_LIST holds their names, rewritten only when a file is added or removed, so that
# the next target reinstalls then and only then.
PACKAGE_DIRS := headscale_ha headscale_provider components guardrails package policy program provider
PACKAGE_LIST := $(VENV)/.package-files
PACKAGE_FILES := $(shell git ls-files --cached --others --exclude-standard -- $(PACKAGE_DIRS) 2>/dev/null | sort)
$(shell mkdir -p $(VENV) && printf '%s\n' $(PACKAGE_FILES) >$(PACKAGE_LIST).new \
  && { cmp -s $(PACKAGE_LIST).new $(PACKAGE_LIST) || mv $(PACKAGE_LIST).new $(PACKAGE_LIST); }; rm -f $(PACKAGE_LIST).new)

$(RUNTIME_STAMP): requirements.txt pyproject.toml $(PACKAGE_LIST) | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

$(DEV_STAMP): requirements.txt requirements-dev.txt pyproject.toml $(PACKAGE_LIST) | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $(RUNTIME_STAMP) $@

$(CHECKOV_STAMP): requirements-checkov.txt
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-checkov.txt
	touch $@

checkov: $(CHECKOV_STAMP)

plan: $(RUNTIME_STAMP)
	$(VIA_MAKE) $(PY) -m tools.plan $(if $(STACK),--stack $(STACK)) $(if $(VERBOSE),--verbose) $(foreach key,$(ASSUME_SECRETS),--assume-secret $(key))

# The plan's rendered objects, each stack on its own, against the Kubernetes schemas the pinned kubernetes-validate
# bundles, the project's CRD schemas (schemas/crds) and Pod Security admission (tools/validate.py).
validate: plan $(DEV_STAMP)
	$(PY) -m tools.validate $(if $(STACK),--stack $(STACK))

# Regenerate schemas/crds from CRD YAML: CRDS="a.yaml b.yaml", or ../shared/reference/crds when it is beside.
crd-schemas: $(RUNTIME_STAMP)
	$(PY) -m tools.crd_schemas --write $(CRDS)

# Every shell script the project ships or runs: the pods' scripts, CI's entry point, the commit hook, the stand-in.
SHELL_SCRIPTS := '*.sh' .ci/run .githooks/commit-msg tests/models/standin_language_host/pulumi-language-python

lint: $(DEV_STAMP)
	$(PY) -m ruff check --no-cache .
	$(PY) -m ruff format --check --no-cache .
	git ls-files -z $(SHELL_SCRIPTS) | xargs -0 shellcheck -x -P SCRIPTDIR --severity=style
	$(PY) -m pyright --warnings

# pytest-xdist workers (auto: one per core); each takes whole test files. The tiers: tests/workers.py.
TEST_WORKERS ?= auto
# The everyday tier spends much of its time waiting on the processes it runs (SQLite, Litestream, promtool,
# busybox, checkov), so it takes one worker more than the cores unless TEST_WORKERS says otherwise. On 2 cores:
# pytest 672 s with 2 workers, 562 s with 3. The real tier keeps one per core: its labs are
# timed against the machine.
EVERYDAY_WORKERS := $(if $(filter auto,$(TEST_WORKERS)),$(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 ))),$(TEST_WORKERS))

# lint (which first builds the dev environment) and checkov's environment are independent: on a fresh clone they
# are made side by side, each one's output kept whole.
SET_UP := $(MAKE) --no-print-directory -j2 --output-sync=target lint checkov

# Everyday: lint, then every test that runs no actor `make real-tools` builds, spread over the cores.
test:
	@$(SET_UP)
	$(PY) -m pytest -n $(EVERYDAY_WORKERS) --dist loadfile --tier everyday

# The real-actor tier alone: the runbooks with the real Pulumi CLI on the lab (one unit, one file after another),
# and beside them every other test of a built actor (the witness lease on a real API server, a real Headscale).
test-real: $(DEV_STAMP) real-tools
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --tier real

# What CI runs (.ci/run): both tiers in one pytest run, the runbooks one unit on one worker, started first
# (tests/workers.py), every other file beside it. real-tools comes after the set-up: it shares the runtime
# environment the dev environment's install writes.
test-all:
	@$(SET_UP)
	@$(MAKE) --no-print-directory real-tools
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The real actors (Pulumi CLI, pulumi-kubernetes, Headscale, etcd, the Kubernetes control plane, kwok), built from
# the pins in tools/real_tools.json through the Go module proxy into ~/.cache/headscale-ha/real-tools/<hash>
# (HEADSCALE_HA_REAL_TOOLS moves it): cold, tens of minutes; warm, seconds. It prints each binary's version.
real-tools: $(RUNTIME_STAMP)
	$(PY) -m tools.real_tools

# Offline preview: what changes from BASE (a git ref) to the working tree, per stack (tools/diff/). Changes are
# what a diff is for, so `make diff` succeeds with them; make itself can only fail with 2 (and says so on a line of
# its own) on a DATA LOSS or an error. CI gates on `.venv/bin/python -m tools.diff` (0 none, 1 changes, 3 DATA
# LOSS, 2 error).
diff: $(RUNTIME_STAMP)
	@$(PY) -m tools.diff --base $(BASE) $(if $(STACK),--stack $(STACK)) || { status=$$?; test $$status -eq 1 || exit $$status; }

# Generated docs: the component package's schema types and schema (plugin/schema.json, docs/package.md), the
# README's blocks (configuration reference, recovery and alerts tables) and docs/availability/<stack>.md; a test
# fails when any is stale.
docs: $(RUNTIME_STAMP)
	$(PY) -m tools.package_types --write
	$(PY) -m tools.package_schema --write
	$(PY) -m tools.config_reference --write
	$(PY) -m tools.recovery_table --write
	$(PY) -m tools.alerts_table --write
	$(PY) -m tools.availability_docs --write

# The runbooks (tools/runbook.py, the `failover` output's commands): each prints every pulumi and kubectl command
# it runs, stops at the first that fails, and is safe to run again. LOST=<the old active> skips that site's fence
# after you type its name (or CONFIRM=<the same name>, without a terminal). PLAN=1 prints what it would run and
# needs neither the Pulumi CLI nor a cluster. Each `pulumi up` is previewed and asked for at the terminal, unless
# YES=1.
RUNBOOK_TOOL := $(VIA_MAKE) $(PY) -m tools.runbook
RUNBOOK_FLAGS = $(if $(PLAN),--plan) $(if $(YES),--yes)
promote: $(RUNTIME_STAMP)
	@test -n "$(SITE)" || { echo "promote: SITE=<the site to make active> is required" >&2; exit 2; }
	@$(RUNBOOK_TOOL) promote $(SITE) $(if $(LOST),--lost $(LOST)) $(if $(CONFIRM),--confirm-lost $(CONFIRM)) $(RUNBOOK_FLAGS)

demote: $(RUNTIME_STAMP)
	@test -n "$(SITE)" || { echo "demote: SITE=<the returning former active> is required" >&2; exit 2; }
	@$(RUNBOOK_TOOL) demote $(SITE) $(RUNBOOK_FLAGS)

upgrade: $(RUNTIME_STAMP)
	@test -n "$(VERSION)" -a -n "$(IMAGE)" || { echo "upgrade: VERSION=<x.y.z> IMAGE=<ref with that tag> are required" >&2; exit 2; }
	@$(RUNBOOK_TOOL) upgrade $(VERSION) $(IMAGE) $(RUNBOOK_FLAGS)

bench: $(DEV_STAMP)
	@for script in bench/[!_]*.py; do name=$${script#bench/}; echo "== $$script"; $(PY) -m bench.$${name%.py} || exit 1; done

clean:
	rm -rf rendered .pytest_cache .ruff_cache
