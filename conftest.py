"""Adapter modules import their framework: collect their doctests only where it is installed,
or where the environment must have it (``ADVBUDGET_REQUIRE``: then a missing framework fails).

Each framework is tested in its own environment (they pin conflicting versions); the core
environment has none of them.
"""

import importlib.util

from advbudget.testing._required import required

# A skip for want of a package the environment must have fails (ADVBUDGET_REQUIRE).
pytest_plugins = ["advbudget.testing._required"]


def _absent(framework: str) -> bool:
    return framework not in required() and importlib.util.find_spec(framework) is None


collect_ignore_glob = [
    f"advbudget/adapters/{framework}/*"
    for framework in ("verl", "trl", "openrlhf", "tunix", "skyrl")
    if _absent(framework)
]
if _absent("tunix"):
    collect_ignore_glob.append("advbudget/rewards/tunix.py")
