"""Reward file for the CPU loop (``--reward.remote_url``): advbudget's own OpenRLHF reward
file grades each response (its ``scores`` and ``extra_logs`` are kept), then the reward is
replaced by the parity of a hash of the response (+1 / -1; +1 / 0 with
``ADVBUDGET_PARITY_LOW=0``, for spo, which takes rewards in [0, 1]).

Why: a tiny random model never answers a DAPO problem, so the real reward is -1 for every
sample; every group is then constant, our estimators skip it (no advantage, no κ_eff pair)
and the loop would test nothing. A hash of the text varies within a group and is
deterministic for a given response.
"""

from __future__ import annotations

import os
import zlib
from typing import Any

from advbudget.adapters.openrlhf.rewards import reward_func as graded


def reward_func(queries: list[str], prompts: list[str], labels: list[str], **kwargs: Any) -> Any:
    import torch

    low = float(os.environ.get("ADVBUDGET_PARITY_LOW", "-1"))
    out = graded(queries, prompts, labels, **kwargs)
    pairs = zip(queries, prompts, strict=True)
    responses = [q[len(p) :] if q.startswith(p) else q for q, p in pairs]
    out["rewards"] = torch.tensor([1.0 if zlib.crc32(r.encode()) % 2 else low for r in responses])
    return out
