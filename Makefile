SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
# Two installs, each remembered by a stamp: `make run` needs only the package and its `local`
# extra (the embedded endpoint); everything else (tests, CDK, the benchmark, lint,
# mutmut) is the `dev` extra, installed by `make setup` for test, lint, synth, bench, drills.
# Versions come from requirements.txt. The dev install includes the local one, so it stamps both.
LOCAL_STAMP := $(VENV)/.installed-local
DEV_STAMP := $(VENV)/.installed-dev
PIP_INSTALL := $(PY) -m pip install --quiet -c requirements.txt
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export AWS_ACCOUNT_ID_ENDPOINT_MODE := disabled

.PHONY: setup setup-local run test check lint synth roles drills bench mutants clean

setup: $(DEV_STAMP)

setup-local: $(LOCAL_STAMP)

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(LOCAL_STAMP): requirements.txt pyproject.toml | $(PY)
	$(PIP_INSTALL) -e '.[local]'
	touch $@

$(DEV_STAMP): requirements.txt pyproject.toml | $(PY)
	$(PIP_INSTALL) -e '.[dev]'
	touch $@ $(LOCAL_STAMP)

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch node_modules/.installed

# `make run PORT=4567 API_PORT=8081`: other ports for the AWS endpoint and the HTTP API. Only
# from make's command line: a PORT in the environment is most likely another program's
# (`turnstile local` reads TURNSTILE_PORT and TURNSTILE_API_PORT from the environment itself).
# TURNSTILE_MAKE_RUN=1: its error lines name PORT and API_PORT, not --port and --api-port.
from_command_line = $(if $(filter command line,$(origin $(1))),$(2) $($(1)))
RUN_OPTIONS = $(strip $(call from_command_line,PORT,--port) $(call from_command_line,API_PORT,--api-port))

run: setup-local
	TURNSTILE_MAKE_RUN=1 $(VENV)/bin/turnstile local$(if $(RUN_OPTIONS), $(RUN_OPTIONS))

# The whole suite, on every core (pytest-xdist; worksteal evens out the long tests).
test: setup node_modules/.installed
	$(VENV)/bin/ruff check functions tools benchmark cdk tests
	$(PY) -m pytest -n auto --dist worksteal

# The inner loop: lint, the pure tests and the store contract (about 25 s on 2 cores).
check: setup
	$(VENV)/bin/ruff check functions tools benchmark cdk tests
	$(PY) -m pytest -n auto --dist worksteal tests/unit tests/contract

# `make bench`: the quick preset (6 events) and the hot one (one event, 32 producers, far
# fewer seats than asked), drawn in one figure, then the lifecycle preset (holds, confirms,
# cancels, a waitlist: about a minute). New runs go to $(BENCH_OUT), which git
# ignores; the reference run that results/README.md quotes (results/bench*.json, bench.png)
# changes only when someone copies a new run over it and updates the README's figures.
BENCH_OUT := results/latest

bench: setup
	mkdir -p $(BENCH_OUT)
	$(VENV)/bin/turnstile bench --quick --json $(BENCH_OUT)/bench.json
	$(VENV)/bin/turnstile bench --hot --json $(BENCH_OUT)/bench-hot.json
	$(PY) -m turnstile_bench.plot $(BENCH_OUT)/bench.json $(BENCH_OUT)/bench-hot.json \
		--out $(BENCH_OUT)/bench.png
	$(VENV)/bin/turnstile bench --lifecycle --json $(BENCH_OUT)/bench-lifecycle.json

# `make bench-demo`: the point in under two minutes (one event of 40 seats, 240 signups, every
# way), its JSON and figure into $(BENCH_OUT); results/demo.* is the committed reference.
.PHONY: bench-demo
bench-demo: setup
	mkdir -p $(BENCH_OUT)
	$(VENV)/bin/turnstile bench --demo --json $(BENCH_OUT)/demo.json --plot $(BENCH_OUT)/demo.png

drills: setup
	TURNSTILE_DRILL_SCALE=$${TURNSTILE_DRILL_SCALE:-5} $(PY) -m pytest tests/drills -s -q

# Mutation testing of the safety-critical modules (mutmut), not part of `make test`:
# `make mutants`, or some of them: `make mutants MODULES="rules audit"`; after adding
# tests, `make mutants MODULES=store MUTANTS_FLAGS=--survivors` reruns only the last
# survivors. Results in results/mutants.md; fails while a survivor is neither killed nor
# explained.
mutants: setup
	$(PY) tests/mutation/run.py $(MUTANTS_FLAGS) $(MODULES)

synth: setup node_modules/.installed
	npx --no-install cdk synth --quiet

# The functions' IAM policies as `turnstile local` enforces them, written from a fresh
# synthesis of the stack (tools/turnstile_tools/local/roles.json; `make test` fails while it
# differs). Run it after changing a grant (cdk/turnstile_cdk/permissions.py), and commit it.
roles: setup
	PYTHONPATH=cdk $(PY) -m turnstile_cdk.local_roles

lint: setup
	$(VENV)/bin/ruff check functions tools benchmark cdk tests

clean:
	rm -rf $(VENV) cdk.out .turnstile .pytest_cache .hypothesis .mutmut mutants
