# `make run` and `make test` are the whole set-up: both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# DESIGN.md: torch first and pinned, or a looser pin pulls several GB of CUDA wheels.
TORCH ?= torch==2.13.0

CONFIG ?= configs/default.yaml
CORPUS ?=
EVAL_DATA ?=
ARTIFACTS ?=
SET ?=
RUN_ARGS = --config $(CONFIG) $(foreach c,$(CORPUS),--corpus $(c)) \
	$(if $(EVAL_DATA),--eval-data $(EVAL_DATA)) $(if $(ARTIFACTS),--artifacts $(ARTIFACTS)) \
	$(foreach s,$(SET),--set $(s))

.PHONY: run test test-quick lint format bench clean venv
.DEFAULT_GOAL := run

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	# `use`: TensorFlow's CPU wheel (about 60 s and 1.4 GB more), so that the suite scores the USE row too;
	# `onnx`: onnx, onnxscript and onnxruntime (about 40 MB), for `cpipe export --onnx` and its tests;
	# `mlflow`: mlflow-skinny (about 4 MB and 20 MB of dependencies), for tracking.mlflow and its tests.
	$(BIN)/python -m pip install -q -e ".[test,use,onnx,mlflow]"
	touch $@

venv: $(STAMP)

run: $(STAMP)
	$(BIN)/cpipe run $(RUN_ARGS)

# Two pytest-xdist workers, a test module's tests on one (its module fixtures are made once): in one process
# the slow tests kept 2 cores 59% busy (much of a whole-flow run is one Python process at a time), on two
# workers the suite 89% (docs/contributing.md, Tests). TEST_WORKERS=1 runs it in one process, as plain pytest does.
TEST_WORKERS ?= 2
XDIST = $(if $(filter 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

# --durations: the log ends with the 30 slowest tests, so that a CI run shows where the suite's minutes go.
test: lint
	$(BIN)/python -m pytest $(XDIST) --durations=30 $(PYTEST_ARGS)

# ruff (pyproject.toml): the lint rules and the format, checked before the tests; `make format` applies both.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The suite without the slow tests: those that start processes (Ray, a Prefect server, worker processes),
# compile, or run whole flows (pyproject.toml's markers).
test-quick: lint
	$(BIN)/python -m pytest -m "not slow" $(XDIST) $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench.filter_throughput
	$(BIN)/python -m bench.train_step_overhead
	$(BIN)/python -m bench.corpus_filter_scale
	$(BIN)/python -m bench.translate_throughput --threads 1
	$(BIN)/python -m bench.gradcache_memory --threads 1
	$(BIN)/python -m bench.encode_throughput --threads 1
	$(BIN)/python -m bench.evaluate_parallel --repeats 3 --kfold 5
	$(BIN)/python -m bench.long_document_memory

clean:
	rm -rf $(VENV) artifacts
