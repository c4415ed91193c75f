"""Adapter modules import their framework: collect their doctests only where it is installed.

Each framework is tested in its own environment (they pin conflicting versions); the core
environment has none of them.
"""

import importlib.util

collect_ignore_glob = [
    f"advbudget/adapters/{framework}/*"
    for framework in ("verl", "trl", "openrlhf", "tunix")
    if importlib.util.find_spec(framework) is None
]
if importlib.util.find_spec("tunix") is None:
    collect_ignore_glob.append("advbudget/rewards/tunix.py")
