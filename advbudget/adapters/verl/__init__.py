"""verl adapter: ``algorithm.adv_estimator=reward_budget`` (and ``advbudget_NAME`` for every
estimator of the advbudget catalogue: ``advbudget_grpo``, ``advbudget_dr``, a plugin's)
computed by the advbudget core.

Importing this module registers names with verl, and changes nothing else: the estimators
(``register_adv_est``) and the ``advbudget_*`` v1 trainer modes (``register_trainer``),
when verl is installed (without verl it imports cleanly and registers nothing). verl's own
functions and methods stay verl's until a run selects an advbudget trainer mode or
feature (:mod:`._hooks` lists every private verl symbol we touch, and when). verl computes
advantages inside its ``TaskRunner`` Ray actor, not in the process you launch, so the
import must happen there. Two hooks do it, both run by ``import verl`` in every process:

- the ``verl.plugins`` entry point (verl >= 0.9), declared by advbudget's package metadata:
  nothing to do once advbudget is installed where verl runs
  (``VERL_USE_EXTERNAL_PLUGINS=none`` turns it off);
- ``VERL_USE_EXTERNAL_MODULES=advbudget.adapters.verl`` (verl >= 0.6.1; on several nodes
  pass it to Ray: ``+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=
  advbudget.adapters.verl``).

verl swallows a plugin's import errors, so a failure here is printed loudly on stderr.
Options and conventions: :mod:`advbudget.adapters.verl._estimators`. Metrics in verl's
logs: :func:`batch_metrics` and :func:`register_trainers`.
"""

from __future__ import annotations

import importlib.util
import os
import warnings

from ._estimators import (
    compute_result,
    estimator_function,
    estimator_names,
    register_estimators,
    report_failure,
)
from ._hooks import install_requested
from ._metrics import METRIC_PREFIX, batch_metrics
from ._trainer import register_trainers
from ._version import SUPPORTED_VERL, check_verl_version

__all__ = [
    "METRIC_PREFIX",
    "SUPPORTED_VERL",
    "batch_metrics",
    "check_verl_version",
    "compute_result",
    "estimator_function",
    "estimator_names",
    "register_estimators",
    "register_trainers",
]

if importlib.util.find_spec("verl") is not None:
    try:
        check_verl_version()
        register_estimators()
    except Exception as error:
        report_failure(error)
        raise
    # The metrics trainers need verl's v1 trainer (and TransferQueue); a failure there must
    # not cost the estimators, so it is reported and not raised. ADVBUDGET_VERL_TRAINERS=0
    # skips them (saves ~1.5 s of imports in processes that never build a trainer).
    if os.environ.get("ADVBUDGET_VERL_TRAINERS", "1") != "0":
        try:
            # verl's trainer modules warn on import (ray's state API, optional engines);
            # under `-W error` that would cost the trainers.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                register_trainers()
        except Exception as error:
            report_failure(error, what="the verl metrics trainers (trainer.v1.trainer_mode)")
    # An advbudget_* trainer with skipped_groups=drop starts the actor's workers with the
    # kept-row count switched on (its worker environment); no other process is patched.
    try:
        install_requested()
    except Exception as error:
        report_failure(
            error,
            what="skipped_groups=drop's sequence count (verl's TrainingWorker)",
            consequence="With drop, seq-mean-* losses keep verl's constant row count.",
        )
