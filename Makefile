# One-command set-up: each target creates .venv when missing.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint sim bench clean natspy goldens

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

# the suite (streams and buckets in shared replica hosts, the default), then the
# replica-lifecycle tests again with dedicated replica actors (kills, restarts, scaling,
# snapshots, consumers in their stream's leader, mirrors; buckets) and every client call
# by Ray actor call (the fallback of the data plane's requests), then the multi-node
# suite, then nats.py's own JetStream tests through the NATS gateway. Tests that choose
# their hosting themselves (self-start, consumers beside a dedicated stream) run once.
DEDICATED_RERUN := $(addprefix tests/cluster/,test_faults.py test_scaling.py \
	test_snapshot_restart.py test_leader_consumers.py) tests/sourcing/test_mirrors_sources.py

# Two pytest workers, a test file each at a time (a file's fixtures stay in one process): each
# has a Ray of its own, and while one waits on processes starting, the other computes.
PARALLEL := -n 2 --dist loadfile

test: lint
	$(BIN)/python -m pytest $(PARALLEL) --durations=15
	RAYJET_TEST_HOSTING=dedicated RAYJET_DIRECT_CALLS=0 $(BIN)/python -m pytest $(PARALLEL) \
		$(DEDICATED_RERUN) tests/kv tests/objectstore
	$(BIN)/python -m pytest tests/multinode
	$(BIN)/python tests/natspy/run.py

# nats.py 2.14.0's tests/test_js.py against the gateway, with a per-class report
natspy: $(STAMP)
	$(BIN)/python tests/natspy/run.py --report natspy-report.md

# what nats-server answers the differential scenarios of nats.py and the JavaScript client
# (tests/differential/goldens/), after changing a scenario or upgrading a server or client
goldens: $(STAMP)
	$(BIN)/python -m tests.differential.regenerate

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info natspy-report.md
