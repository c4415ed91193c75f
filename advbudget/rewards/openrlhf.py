"""Kept for ``--reward.remote_url /abs/path/to/advbudget/rewards/openrlhf.py`` and earlier
imports: :mod:`advbudget.adapters.openrlhf.rewards`, where OpenRLHF's reward file now lives.
OpenRLHF loads this file by path and takes its ``reward_func`` (the star import); imported
by name, this path is that module itself (its private helpers and logger too)."""

import sys

from advbudget.adapters.openrlhf import rewards
from advbudget.adapters.openrlhf.rewards import *  # noqa: F403

if __name__ == "advbudget.rewards.openrlhf":  # not when loaded by path under another name
    sys.modules[__name__] = rewards
