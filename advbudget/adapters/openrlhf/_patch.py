"""The patch of OpenRLHF's ``RemoteExperienceMaker.compute_advantages_and_returns``.

:func:`install` wraps the method (openrlhf 0.11.2, ``experience_maker.py`` line 238): for
our estimator names (:data:`~advbudget.adapters.openrlhf.ESTIMATORS`) it runs
:func:`~advbudget.adapters.openrlhf.compute_advantages_and_returns`; for every other name
OpenRLHF's own method, unchanged. The method runs inside the ``PPOTrainer`` Ray actor, so
the patch must be installed there: pass ``HOOK`` as Ray's ``worker_process_setup_hook``::

    ray.init(runtime_env={"worker_process_setup_hook": HOOK})
    # or: ray job submit --runtime-env-json '{"worker_process_setup_hook":
    #      "advbudget.adapters.openrlhf.install"}' -- python3 -m openrlhf.cli.train_ppo_ray ...
"""

from __future__ import annotations

import functools
from typing import Any

from ._advantages import ESTIMATORS, compute_advantages_and_returns

HOOK = "advbudget.adapters.openrlhf.install"
_MARK = "_advbudget_original"


def _maker_class() -> Any:
    from openrlhf.trainer.ppo_utils import (  # type: ignore[import-not-found, unused-ignore]
        experience_maker,
    )

    return experience_maker.RemoteExperienceMaker


def install() -> None:
    """Patch ``RemoteExperienceMaker`` in this process (idempotent)."""
    cls = _maker_class()
    original = cls.compute_advantages_and_returns
    if hasattr(original, _MARK):
        return

    @functools.wraps(original)
    def compute_advantages_and_returns_patched(self: Any, experiences: list[Any]) -> Any:
        if self.strategy.args.algo.advantage.estimator in ESTIMATORS:
            import torch

            with torch.no_grad():
                return compute_advantages_and_returns(self, experiences)
        return original(self, experiences)

    setattr(compute_advantages_and_returns_patched, _MARK, original)
    cls.compute_advantages_and_returns = compute_advantages_and_returns_patched


def uninstall() -> None:
    """Restore OpenRLHF's own method (a no-op when not installed)."""
    cls = _maker_class()
    original = getattr(cls.compute_advantages_and_returns, _MARK, None)
    if original is not None:
        cls.compute_advantages_and_returns = original


def is_installed() -> bool:
    """Whether the patch is active in this process."""
    return hasattr(_maker_class().compute_advantages_and_returns, _MARK)
