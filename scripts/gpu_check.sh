#!/usr/bin/env bash
# GPU throughput check, streaming (flex) vs causal (sdpa) attention, LoRA and full fine-tuning on the 3B configs;
# see scripts/gpu_check.py. From anywhere: bash scripts/gpu_check.sh [--steps 20] [--models ...] [--modes ...]
# Imports clocktune from the tree (nothing to install), ends within 480 s, and keeps the output in gpu_check.out.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"
# -u: rows reach gpu_check.out as they finish, even if the timeout ends the run.
timeout 480 "$PYTHON" -u scripts/gpu_check.py "$@" 2>&1 | tee gpu_check.out
