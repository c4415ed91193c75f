"""OpenRLHF (0.11.2): the advbudget estimators inside OpenRLHF's PPO trainer.

Run ``python -m advbudget.adapters.openrlhf`` with any ``openrlhf.cli.train_ppo_ray`` flags
and ``--algo.advantage.estimator reward_budget`` (or ``advbudget_NAME`` for any estimator
of the advbudget catalogue: ``advbudget_group_norm``, ``advbudget_dr_grpo``, a plugin's);
see ``docs/guides/openrlhf.md``. The pieces:

- :func:`compute_advantages_and_returns`: OpenRLHF's advantage step for our estimators
  (:func:`estimator_names`), keeping its length penalties, reward clipping, KL-in-reward and
  returns semantics, with the group shaping from the core and per-sample metrics;
- :func:`cumulative_returns`: OpenRLHF's per-token return loop as one reversed cumsum;
- :func:`install` / :func:`uninstall` / :func:`is_installed`: the patch of OpenRLHF's trainer
  (advantages; κ_eff after each update every ``--advbudget.kappa_every`` steps; the
  dynamic filter's decision for ``--advbudget.skipped_groups resample``; loss normalisers
  that give 0, not NaN, when ``drop`` leaves a step empty);
  :data:`HOOK` is its path for Ray's ``worker_process_setup_hook``, since the trainer runs
  inside a Ray actor;
- :func:`check_openrlhf_version`: :data:`SUPPORTED_OPENRLHF`, checked by :func:`install`.

``openrlhf``, ``ray`` and ``torch`` are imported only when these functions run.
"""

from __future__ import annotations

from ._estimators import compute_advantages_and_returns, core_estimator, estimator_names
from ._hooks import HOOK, install, is_installed, uninstall
from ._returns import cumulative_returns
from ._version import SUPPORTED_OPENRLHF, check_openrlhf_version

__all__ = [
    "HOOK",
    "SUPPORTED_OPENRLHF",
    "check_openrlhf_version",
    "compute_advantages_and_returns",
    "core_estimator",
    "cumulative_returns",
    "estimator_names",
    "install",
    "is_installed",
    "uninstall",
]
