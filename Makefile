# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# parallel test processes (pytest-xdist): one per core and one more, since many probes
# spend their time waiting on processes and servers of their own; `make test
# TEST_WORKERS=0` runs in one
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))

.PHONY: run test lint migrate bench bench-guard fuzz clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

run: $(STAMP)  ## start the service (embedded PostgreSQL unless EVENTS_DATABASE_URL is set)
	$(BIN)/events-svc serve

migrate: $(STAMP)
	$(BIN)/events-svc migrate

test: $(STAMP)  ## the whole suite against a real PostgreSQL (and a real Redis, from a wheel)
	scripts/ensure-debian-packages libreoffice-calc-nogui=soffice chromium=chromium poppler-utils=pdftoppm pgbouncer=pgbouncer  # the export probe's spreadsheet engine; the console's browser; the PDF probes' rasteriser; the transaction-pooling probes' PgBouncer
	$(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

lint: $(STAMP)  ## format check, lint, import contracts, the faces' and the outbound edge's rules, strict typing
	$(BIN)/ruff format --check src tests bench scripts/check-faces scripts/check-outbound
	$(BIN)/ruff check src tests bench scripts/check-faces scripts/check-outbound
	$(BIN)/lint-imports
	$(BIN)/python scripts/check-faces
	$(BIN)/python scripts/check-outbound
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

bench: $(STAMP)  ## the hot-event registration benchmark (embedded PostgreSQL unless EVENTS_BENCH_ADMIN_URL), then the hot path's guard
	$(BIN)/python -m bench $(BENCH_ARGS)
	$(BIN)/python -m bench.guard --rounds 3

bench-guard: $(STAMP)  ## the hot path against its baseline commit, a-b-b-a (under 3 minutes); exits 1 when more than 20 % slower
	$(BIN)/python -m bench.guard $(GUARD_ARGS)

fuzz: $(STAMP)  ## the OpenAPI probe with many examples; ends with operations, cases, failures
	EVENTS_FUZZ_EXAMPLES=$${EVENTS_FUZZ_EXAMPLES:-200} $(BIN)/pytest tests/probes/test_fuzz.py -q $(PYTEST_ARGS)
