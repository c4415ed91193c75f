"""Timing, not a test: OpenRLHF's compute_advantages_and_returns vs ours (group_norm mirror).

    .venv-openrlhf/bin/python tests/adapters/openrlhf/bench_compare.py 8   # micro batch size

Run from the repository root; N = 4096 samples (512 prompts x 8), KL 0.01, 1 thread.
Seed of the issue's benchmark (``benchmarks/openrlhf.py``, not written yet).
"""

from __future__ import annotations

import copy
import sys
import time
import warnings
from typing import Any


def main(micro_batch: int) -> None:
    sys.path.insert(0, "tests/adapters/openrlhf/stubs")
    sys.path.insert(0, ".")
    warnings.simplefilter("ignore")
    import torch

    from advbudget.adapters.openrlhf import compute_advantages_and_returns
    from tests.adapters.openrlhf.conftest import make_args, make_experiences, make_maker

    torch.set_num_threads(1)

    def openrlhf(length: int, experiences: list[Any]) -> None:
        maker = make_maker(make_args("group_norm", 8, max_new_tokens=length), 0.01)
        maker.compute_advantages_and_returns(experiences)

    def ours(length: int, experiences: list[Any]) -> None:
        maker = make_maker(make_args("advbudget_group_norm", 8, max_new_tokens=length), 0.01)
        compute_advantages_and_returns(maker, experiences)

    for length in (16, 256):
        experiences = make_experiences(512, 8, length=length, micro_batch=micro_batch)
        best = {}
        for name, fn in (("openrlhf", openrlhf), ("ours", ours)):
            times = []
            for _ in range(3):
                batch = copy.deepcopy(experiences)
                start = time.perf_counter()
                fn(length, batch)
                times.append(time.perf_counter() - start)
            best[name] = min(times)
        print(
            f"N=4096 L={length} micro_batch={micro_batch}: "
            f"openrlhf {best['openrlhf'] * 1e3:.1f} ms, ours {best['ours'] * 1e3:.1f} ms, "
            f"x{best['openrlhf'] / best['ours']:.1f}"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8)
