# clocktune: `make demo` sets up and runs the main job on the embedded default; `make test` sets up and tests.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
OUT     ?= runs/demo

.PHONY: setup demo test lint format bench clean

setup: $(STAMP)

# torch first and pinned: on a CPU machine this resolves to the local CPU build; with a GPU, the normal wheel.
$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[train,dev]"
	touch $(STAMP)

demo: setup
	$(BIN)/clocktune-datagen generate --config configs/datagen/default.yaml --num 2000 --seed 0 --out $(OUT)/data --num-proc 2
	$(BIN)/clocktune-datagen validate $(OUT)/data/data
	$(BIN)/clocktune-datagen show $(OUT)/data/data/train-00000-of-00004.jsonl --index 1 --png $(OUT)/timeline.png

test: setup
	$(BIN)/python -m pytest

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: setup
	$(BIN)/python scripts/bench_datagen.py

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
