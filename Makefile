# msprlab — every target uses the project's own virtual environment in .venv.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo run test test-slow test-parity regress bench lint typecheck clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)  ## create .venv and install msprlab with its dev tools

run: setup  ## the main job: the default experiment end to end (LoCoMo)
	$(BIN)/msprlab run locomo

demo: setup  ## the engine on the spec's worked examples
	$(BIN)/msprlab demo

test: setup  ## the default test run (fast; slow and parity tests excluded)
	$(BIN)/pytest -q -m "not slow and not parity" -n 2

test-slow: setup  ## slow tests only
	$(BIN)/pytest -q -m "slow"

test-parity: setup  ## differential tests against the ContextKit library itself
	$(BIN)/pip install --quiet -e '.[dev,parity]'
	$(BIN)/pytest -q -m "parity and not slow" -n 2

regress: setup  ## the ranking-quality gate: the frozen benchmark against experiments/regress/
	$(BIN)/msprlab regress --root build/regress

bench: setup  ## speed figures, printed as ratios measured side by side
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	PYTHONPATH=tests $(BIN)/python -m bench.bench_engine
	PYTHONPATH=tests $(BIN)/python -m bench.bench_ingest
	PYTHONPATH=tests $(BIN)/python -m bench.bench_metrics
	PYTHONPATH=tests $(BIN)/python -m bench.bench_replay
	PYTHONPATH=tests $(BIN)/python -m bench.bench_tune
	PYTHONPATH=tests $(BIN)/python -m bench.bench_config  # a configuration search on LoCoMo (minutes)
	PYTHONPATH=tests $(BIN)/python -m bench.bench_scenario
	PYTHONPATH=tests $(BIN)/python -m bench.bench_world  # 250k memories end to end (minutes)

# mypy resolves msprlab.* through a link tree, since the import packages map to
# top-level folders (pyproject's package-dir) that mypy cannot follow on its own.
typecheck: setup
	@mkdir -p build/typecheck/msprlab
	@for p in engine experiments datasets reports; do ln -sfn $(CURDIR)/$$p build/typecheck/msprlab/$$p; done
	cd build/typecheck && MYPYPATH=. $(CURDIR)/$(BIN)/mypy --config-file $(CURDIR)/pyproject.toml -p msprlab.engine

lint: setup typecheck  ## ruff and mypy (strict on msprlab.engine)
	$(BIN)/ruff check engine experiments datasets reports tests

clean:
	rm -rf build .pytest_cache .mypy_cache .ruff_cache
