"""``python -m verlcpu env|overrides [N_GPUS]``: the environment (``KEY=VALUE`` lines) and
the hydra overrides (one a line) of a CPU run, for shell scripts (examples/verl_qwen3.sh)."""

from __future__ import annotations

import sys

from verlcpu import env, overrides

what = sys.argv[1] if len(sys.argv) > 1 else "overrides"
n_gpus = int(sys.argv[2]) if len(sys.argv) > 2 else 1
if what == "env":
    print("\n".join(f"{key}={value}" for key, value in env().items()))
elif what == "overrides":
    print("\n".join(overrides(n_gpus)))
else:
    sys.exit(f"usage: python -m verlcpu env|overrides [N_GPUS], not {what!r}")
