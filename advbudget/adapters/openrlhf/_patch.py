"""The patch of OpenRLHF's trainer: our estimators and the κ_eff pass.

:func:`install` wraps two methods (openrlhf 0.11.2):

- ``RemoteExperienceMaker.compute_advantages_and_returns`` (``experience_maker.py``): for our
  estimator names (:data:`~advbudget.adapters.openrlhf.ESTIMATORS`) it runs
  :func:`~advbudget.adapters.openrlhf.compute_advantages_and_returns`, for every other name
  OpenRLHF's own method, unchanged;
- ``BasePPOTrainer.ppo_train`` (``ppo_trainer.py``; the sync ``PPOTrainer`` and the async
  ``TrainingActor`` both inherit it): after the update, every ``--advbudget.kappa_every``
  steps, adds ``advbudget/kappa_eff/*`` to the status OpenRLHF logs.

Both run inside a Ray actor (``PPOTrainer``), not the driver, so the patch must be installed
there: pass :data:`HOOK` as Ray's ``worker_process_setup_hook``::

    ray.init(runtime_env={"worker_process_setup_hook": HOOK})
    # or: ray job submit --runtime-env-json '{"worker_process_setup_hook":
    #      "advbudget.adapters.openrlhf.install"}' -- python3 -m advbudget.adapters.openrlhf ...
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ._advantages import ESTIMATORS, compute_advantages_and_returns
from ._kappa import after_update
from ._version import check_openrlhf_version

HOOK = "advbudget.adapters.openrlhf.install"
_MARK = "_advbudget_original"


def _targets() -> list[tuple[Any, str, Callable[[Any], Any]]]:
    """(class, method name, wrapper factory) of every method we patch."""
    from openrlhf.trainer import ppo_trainer
    from openrlhf.trainer.ppo_utils import experience_maker

    return [
        (
            experience_maker.RemoteExperienceMaker,
            "compute_advantages_and_returns",
            _wrap_compute_advantages_and_returns,
        ),
        (ppo_trainer.BasePPOTrainer, "ppo_train", _wrap_ppo_train),
    ]


def _wrap_compute_advantages_and_returns(original: Any) -> Any:
    @functools.wraps(original)
    def compute_advantages_and_returns_patched(self: Any, experiences: list[Any]) -> Any:
        if self.strategy.args.algo.advantage.estimator in ESTIMATORS:
            import torch

            with torch.no_grad():
                return compute_advantages_and_returns(self, experiences)
        return original(self, experiences)

    return compute_advantages_and_returns_patched


def _wrap_ppo_train(original: Any) -> Any:
    @functools.wraps(original)
    def ppo_train_patched(self: Any, global_steps: int) -> Any:
        status = original(self, global_steps)
        if self.args.algo.advantage.estimator in ESTIMATORS:
            status.update(after_update(self, global_steps))
        return status

    return ppo_train_patched


def install() -> None:
    """Patch OpenRLHF's trainer in this process (idempotent); raises ImportError on an
    OpenRLHF version the patch was not checked against."""
    check_openrlhf_version()
    for cls, name, wrap in _targets():
        original = getattr(cls, name)
        if hasattr(original, _MARK):
            continue
        patched = wrap(original)
        setattr(patched, _MARK, original)
        setattr(cls, name, patched)


def uninstall() -> None:
    """Restore OpenRLHF's own methods (a no-op when not installed)."""
    for cls, name, _ in _targets():
        original = getattr(getattr(cls, name), _MARK, None)
        if original is not None:
            setattr(cls, name, original)


def is_installed() -> bool:
    """Whether the patch is active in this process."""
    return all(hasattr(getattr(cls, name), _MARK) for cls, name, _ in _targets())
