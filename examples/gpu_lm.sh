#!/usr/bin/env bash
# `advbudget experiment lm` on one GPU: the gpu preset (a 4-layer, 128-wide Qwen3,
# grpo/dr/budget/rloo x 8 seeds x 400 steps of 16 prompts, 8 runs side by side),
# sized for 8 minutes on one H200. A bare GPU machine has PyTorch, transformers and
# accelerate; this installs what else is missing of WHEELS (from the index, or with no
# network from WHEEL_DIR, a folder of wheels fetched elsewhere with `pip download`) and
# runs advbudget from this checkout (on PYTHONPATH: no build, no network).
# Results: gpu_lm/lm.json, lm_trl_logs.json.gz, lm.png.
#
#   bash examples/gpu_lm.sh            # install what is missing, run the gpu preset on cuda
#   bash examples/gpu_lm.sh --dry-run  # install nothing; the same command on the CPU with
#                                      # the quick preset, into $HOME/gpu_lm_dry_run
# Extra arguments go to the command (e.g. --seeds 2).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
DRY_RUN=0
if [[ "${1:-}" == "--dry-run" ]]; then
  DRY_RUN=1
  shift
fi
WHEELS=(
  "trl>=1.13.0,<1.17" "datasets>=3.0" "pandas>=2.0" "pyarrow>=15"
  "array-api-compat>=1.11" "typer>=0.12" "rich>=13" "matplotlib>=3.8"
)
missing=$("$PYTHON" - "${WHEELS[@]}" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version

from packaging.requirements import Requirement

for text in sys.argv[1:]:
    requirement = Requirement(text)
    try:
        ok = requirement.specifier.contains(version(requirement.name), prereleases=True)
    except PackageNotFoundError:
        ok = False
    if not ok:
        print(text)
PY
)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ((DRY_RUN)); then
  echo "would install: ${missing:-nothing}"
  exec "$PYTHON" -m advbudget.lab.cli experiment lm --preset quick --device cpu \
    --output-dir "$HOME/gpu_lm_dry_run" "$@"
fi
if [[ -n "$missing" ]]; then
  # Only what is missing: pip keeps the machine's torch, transformers and accelerate.
  mapfile -t wheels <<<"$missing"
  source=()
  [[ -n "${WHEEL_DIR:-}" ]] && source=(--no-index --find-links "$WHEEL_DIR")
  "$PYTHON" -m pip install "${source[@]+"${source[@]}"}" "${wheels[@]}"
fi
"$PYTHON" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'"
time "$PYTHON" -m advbudget.lab.cli experiment lm --preset gpu --device cuda --output-dir gpu_lm "$@"
