# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Extra groups installed into the venv; CI (.ci/run) sets EXTRAS=dev,capture,dask,hta.
EXTRAS ?= dev
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
TORCH_PIN := torch==2.13.0

.PHONY: all venv demo test lint format bench sample-traces clean

all: test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	@case ",$(EXTRAS)," in *,capture,*) $(BIN)/python -m pip install -q "$(TORCH_PIN)";; esac
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/tracescale analyze sample_traces/sim_gpu_strong

# Every test, spread over one worker per core (pytest-xdist); the ten slowest are listed so a
# slow newcomer shows up in the run that added it.
PYTEST_WORKERS ?= auto
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --durations=10

lint: $(STAMP)
	$(BIN)/ruff check tracescale tests examples
	$(BIN)/ruff format --check tracescale tests examples
	$(BIN)/mypy tracescale

format: $(STAMP)
	$(BIN)/ruff check --fix tracescale tests examples
	$(BIN)/ruff format tracescale tests examples

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_ingest.py
	$(BIN)/python benchmarks/bench_ingest.py --large-gb 1
	$(BIN)/python benchmarks/bench_scale.py
	$(BIN)/python benchmarks/bench_replay.py
	$(BIN)/python benchmarks/bench_replay.py --pipeline
	$(BIN)/python benchmarks/bench_shapes.py

sample-traces:
	$(MAKE) EXTRAS=dev,capture venv
	bash scripts/make_sample_traces.sh $(BIN)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
