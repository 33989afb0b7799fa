# One-command set-up: each target creates .venv when missing.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint sim bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py && $(BIN)/python examples/orders_pipeline.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

# the suite, then the replica-lifecycle suites again with the other hosting (streams in
# shared hosts; buckets in dedicated actors), then the multi-node suite
test: lint
	$(BIN)/python -m pytest
	RAYJET_TEST_HOSTING=shared $(BIN)/python -m pytest tests/cluster tests/sourcing
	RAYJET_TEST_HOSTING=dedicated $(BIN)/python -m pytest tests/kv tests/objectstore
	$(BIN)/python -m pytest tests/multinode
	RAYJET_TEST_HOSTING=shared $(BIN)/python -m pytest tests/multinode

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
