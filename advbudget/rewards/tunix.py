"""Kept for ``reward_functions="['advbudget.rewards.tunix']"``: an alias of
:mod:`advbudget.adapters.tunix.rewards`, where tunix's reward now lives. tunix's CLI takes
only the functions *defined* in the module it imports (``__module__`` equal to its name),
so this path is that module itself, not a star re-export of it."""

import sys

from advbudget.adapters.tunix import rewards
from advbudget.adapters.tunix.rewards import *  # noqa: F403

sys.modules[__name__] = rewards
