# Two commands: `make run` (embedded default: SQLite, eager Celery, demo data) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
HOST ?= 127.0.0.1
PORT ?= 8000

# In CI the suite runs against the machine's real PostgreSQL and Redis (never skipped there).
ifeq ($(CI),true)
export DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/traceviz
export TRACEVIZ_TEST_REDIS_URL ?= redis://127.0.0.1:6379/0
endif

.PHONY: install run test lint format bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "traceviz needs Python 3.11 or newer (found %d.%d); set PYTHON=python3.11" % sys.version_info[:2])'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py load_demo
	$(BIN)/python manage.py runserver $(HOST):$(PORT)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/python manage.py makemigrations --check --dry-run

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python bench/ingest.py

clean:
	rm -rf $(VENV) staticfiles test-artifacts .pytest_cache
