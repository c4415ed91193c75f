"""OpenRLHF (0.11.2): group advantages from the advbudget core inside OpenRLHF's PPO trainer.

WORK IN PROGRESS (see ``STATUS.md`` in this folder): the pieces that exist are

- :func:`cumulative_returns`: OpenRLHF's per-token return loop as one reversed cumsum;
- :func:`compute_advantages_and_returns`: OpenRLHF's ``RemoteExperienceMaker.
  compute_advantages_and_returns`` for our estimators (:data:`ESTIMATORS`), keeping its length
  penalties, reward clipping, KL-in-reward and returns semantics.

- :func:`install` / :func:`uninstall` / :func:`is_installed`: the patch of
  ``RemoteExperienceMaker.compute_advantages_and_returns``; :data:`HOOK` is its path for Ray's
  ``worker_process_setup_hook`` (the method runs inside the ``PPOTrainer`` Ray actor).

- ``python -m advbudget.adapters.openrlhf``: OpenRLHF's ``train_ppo_ray`` with our names,
  ``--advbudget.budget`` and ``--advbudget.parse_only`` (see ``__main__.py``).

Still missing: the kappa_eff metric, the benchmark, docs.

``openrlhf`` and ``torch`` are imported only when these functions run.
"""

from __future__ import annotations

from ._advantages import ESTIMATORS, compute_advantages_and_returns, core_estimator
from ._patch import HOOK, install, is_installed, uninstall
from ._returns import cumulative_returns

__all__ = [
    "ESTIMATORS",
    "HOOK",
    "compute_advantages_and_returns",
    "core_estimator",
    "cumulative_returns",
    "install",
    "is_installed",
    "uninstall",
]
