#!/usr/bin/env bash
# The core benchmark on a CUDA machine: torch and jax arrays on the GPU, N up to 16M.
# Writes benchmarks/results/gpu.json and gpu.md; `python benchmarks/report.py` then adds
# them to benchmarks/RESULTS.md. Needs a CUDA torch and jax[cuda12] in the environment.
set -euo pipefail
cd "$(dirname "$0")/.."
python benchmarks/core.py --device cuda --backends torch,jax --torch-threads 0 \
  --sizes 65536,1048576,16777216 --output benchmarks/results/gpu.json "$@"
