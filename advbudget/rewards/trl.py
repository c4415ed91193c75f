"""Kept for earlier imports: a re-export of :mod:`advbudget.adapters.trl.rewards`, where
TRL's reward functions now live."""

from advbudget.adapters.trl.rewards import *  # noqa: F403
