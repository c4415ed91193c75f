"""Kept for ``custom_reward_function.path=pkg://advbudget.rewards.verl``: a re-export of
:mod:`advbudget.adapters.verl.rewards`, where verl's reward wrapper now lives."""

from advbudget.adapters.verl.rewards import *  # noqa: F403
