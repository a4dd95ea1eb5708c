# Two commands: `make run` (embedded default: SQLite, eager Celery, demo data) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# uv installs the environments (the server's and each producer's) several times faster than pip;
# pip installs uv itself into the server's environment first.
UV := $(BIN)/uv
STAMP := $(VENV)/.installed-stamp
HOST ?= 127.0.0.1
PORT ?= 8000

SHELL := /bin/bash

# pytest-xdist workers per pass: 2 measured fastest on the 2-core CI machine (auto: one per
# CPU; 0: a single process, easier to debug).
TEST_WORKERS ?= 2
PYTEST = $(BIN)/python -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)
# The PostgreSQL pass's database: DATABASE_URL when set (pytest-django tests in test_<name>_gw<N>).
TEST_DATABASE_URL := $(or $(DATABASE_URL),postgres://postgres@127.0.0.1:5432/traceviz)
TEST_PASSES := sqlite postgresql

# With CI=true `make test` runs the whole suite twice and fails if either pass fails: on SQLite,
# the embedded default `make run` uses (tests marked postgres deselected), then on the machine's
# PostgreSQL. Redis and Chromium are required in both: a missing service fails, never skips.
ifeq ($(CI),true)
export TRACEVIZ_TEST_REDIS_URL ?= redis://127.0.0.1:6379/0
endif

.PHONY: install producers run test test-sqlite test-postgresql test-client lint format bench clean

# Real producer libraries whose pins cannot share the server's environment (Strands and
# OpenLLMetry pin OpenTelemetry apart) run in environments of their own, one per directory of
# tests/producers with a requirements.txt: .venv-producers/NAME, rebuilt when its requirements
# change (the copy kept in it is the stamp). The suite's producer fixture runs
# tests/producers/NAME/run.py there against its live server. A build that fails fails CI; on
# another machine its tests skip, saying why.
PRODUCERS := $(patsubst tests/producers/%/requirements.txt,%,$(wildcard tests/producers/*/requirements.txt))
PRODUCER_VENVS := .venv-producers

# The server depends on the producer client, its own distribution in client/: one uv command
# installs both, so that traceviz-client comes from client/ (it is not on a package index).
$(STAMP): pyproject.toml client/pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "traceviz needs Python 3.11 or newer (found %d.%d); set PYTHON=python3.11" % sys.version_info[:2])'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip uv
	$(UV) pip install --quiet --python $(BIN)/python -e ./client -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

producers: $(STAMP)
	@for name in $(PRODUCERS); do \
	  requirements=tests/producers/$$name/requirements.txt; venv=$(PRODUCER_VENVS)/$$name; \
	  cmp -s $$requirements $$venv/requirements.txt && continue; \
	  echo "make producers: building $$venv from $$requirements"; \
	  if ! { rm -rf $$venv && $(UV) venv --quiet --python $(PYTHON) $$venv && \
	    $(UV) pip install --quiet --python $$venv/bin/python -r $$requirements && \
	    cp $$requirements $$venv/requirements.txt; }; then \
	    rm -rf $$venv; \
	    if [ "$(CI)" = true ]; then exit 1; fi; \
	    echo "make producers: could not build $$venv: the $$name producer's tests will skip"; \
	  fi; \
	done

# A development server: DEBUG on (a server with DEBUG off refuses the built-in SECRET_KEY).
# Without a broker nothing else runs the periodic tasks (alerts, stalls, outbox retries), so
# run_scheduler runs beside runserver, and run_projector folds what ingest left dirty (answers
# sent with Prefer: respond-async); both stop with it (Ctrl-C or runserver exiting).
run: export DEBUG ?= true
# Links in notifications point at the server make run starts.
run: export TRACEVIZ_SITE_URL ?= http://$(HOST):$(PORT)
run: $(STAMP)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py collectstatic --noinput --verbosity 0
	$(BIN)/python manage.py load_demo --host '$(HOST)' --port '$(PORT)'
	@$(BIN)/python manage.py run_scheduler & scheduler=$$!; \
	  $(BIN)/python manage.py run_projector & projector=$$!; \
	  trap 'kill $$scheduler $$projector 2>/dev/null; wait $$scheduler $$projector' EXIT; \
	  trap 'exit 130' INT TERM; \
	  $(BIN)/python manage.py runserver $(HOST):$(PORT)

test: $(STAMP) producers test-client
ifeq ($(CI),true)
	@rm -f $(TEST_PASSES:%=test-artifacts/pytest-%.summary)
	@$(MAKE) --no-print-directory -k $(TEST_PASSES:%=test-%); status=$$?; \
	  echo "make test: CI=true, two passes"; \
	  cat $(TEST_PASSES:%=test-artifacts/pytest-%.summary) 2>/dev/null; exit $$status
else
	$(PYTEST)
endif

# The producer client as producers get it: its wheel built from client/, installed alone in a
# fresh environment (no Django, no dependencies), and its tests (standard library unittest) run
# there against that installed wheel.
CLIENT_BUILD := test-artifacts/client
# Without PYTHONPATH, which could lend it the client's source instead of the wheel.
CLIENT_PYTHON := env -u PYTHONPATH $(CLIENT_BUILD)/venv/bin/python
test-client: $(STAMP)
	rm -rf $(CLIENT_BUILD) client/build
	$(UV) build --quiet --wheel --out-dir $(CLIENT_BUILD) client
	rm -rf client/build
	$(UV) venv --quiet --python $(PYTHON) $(CLIENT_BUILD)/venv
	$(UV) pip install --quiet --no-index --python $(CLIENT_BUILD)/venv/bin/python \
	  $(CLIENT_BUILD)/traceviz_client-*.whl
	$(CLIENT_PYTHON) -c 'import traceviz_client as c; print("make test-client: testing", c.__file__)'
	$(CLIENT_PYTHON) -m unittest discover --start-directory client/tests

# One pass each (CI=true make test runs both), so that CI keeps to its 20 minutes: a test runs
# in one pass where the database does not matter to it. The SQLite pass leaves the browser tests
# and the real producers' subprocesses to the PostgreSQL pass; the PostgreSQL pass leaves the
# tests that ask for no database at all (marked dbless by tests/conftest.py: the contract,
# redaction, replay, OTLP mapping...) to the SQLite pass. `make test` outside CI runs the whole
# suite on SQLite, the embedded default.
test-sqlite: $(STAMP) producers
	$(call test_pass,sqlite,env -u DATABASE_URL TRACEVIZ_TEST_DATABASE=sqlite,-m "not postgres and not browser and not producers")

test-postgresql: $(STAMP) producers
	$(call test_pass,postgresql,env DATABASE_URL='$(TEST_DATABASE_URL)' TRACEVIZ_TEST_DATABASE=postgresql,-m "not dbless or postgres or browser or producers")

# test_pass NAME,ENVIRONMENT,PYTEST-OPTIONS: the output is kept in test-artifacts/pytest-NAME.log
# and the pass's summary line (pytest's closing line, timed) in test-artifacts/pytest-NAME.summary.
define test_pass
	@mkdir -p test-artifacts
	@echo "make test: $(1) pass"
	@set -o pipefail; start=$$SECONDS; \
	  $(2) $(PYTEST) $(3) 2>&1 | tee test-artifacts/pytest-$(1).log; status=$$?; \
	  closing=$$(tail -n 1 test-artifacts/pytest-$(1).log | sed -e 's/^=* *//' -e 's/ *=*$$//'); \
	  verdict=$$([ $$status -eq 0 ] && echo passed || echo "FAILED (exit $$status)"); \
	  echo "$(1) pass $$verdict in $$((SECONDS - start)) s: $$closing" \
	    | tee test-artifacts/pytest-$(1).summary; \
	  exit $$status
endef

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python manage.py makemigrations --check --dry-run

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python bench/ingest.py

clean:
	rm -rf $(VENV) $(PRODUCER_VENVS) staticfiles test-artifacts .pytest_cache
