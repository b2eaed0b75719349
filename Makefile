# The two commands a newcomer needs: `make serve` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Test workers (pytest-xdist): most tests wait on containers and processes, so two
# workers keep a 2-core machine busy. TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2

.PHONY: serve test test-fast install venv bench lint clean proto

$(BIN)/python:
	@scripts/ensure-system-deps.sh venv
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip "setuptools>=77" wheel

# Reinstall only when the package metadata changes.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[server,test]'
	@touch $(STAMP)

install: $(STAMP)

serve: install
	$(BIN)/berth migrate
	$(BIN)/berth admin bootstrap
	$(BIN)/berth serve

# The import contracts first (pyproject.toml): seconds, and a broken layer fails fast.
test: install
	$(BIN)/lint-imports
	@scripts/ensure-system-deps.sh test
	@scripts/start-dockerd.sh
	@scripts/clear-test-leftovers.sh
	@PYTHON=$(BIN)/python scripts/build-test-images.sh
	$(BIN)/python -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

# The everyday lane: no containers, no agent processes, no long flows (both databases;
# PostgreSQL and Redis are local processes). `make test` is what CI runs.
test-fast: install
	$(BIN)/lint-imports
	@scripts/ensure-system-deps.sh test
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --fast $(PYTEST_ARGS)

bench: install
	$(BIN)/python benchmarks/projects_list.py --rounds 5

# Regenerate the agent protocol stubs (committed; a test checks they match) into
# protocol/v1/ from proto/: compiled from -Iproto, the descriptor keeps the file name
# protocol/v1/agent.proto it always had.
proto: install
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=. --grpc_python_out=. --pyi_out=. \
		proto/protocol/v1/agent.proto

lint: install
	$(BIN)/pip install --quiet ruff
	$(BIN)/ruff check .
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .import_linter_cache
