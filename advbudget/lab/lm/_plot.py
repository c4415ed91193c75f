"""Curves of the LM experiment: mean over seeds with a ±1 SE band (matplotlib, lazily)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

PANELS = (
    ("routine/avg@{n}", "routine accuracy (avg@{n}, validation)"),
    ("hard/avg@{n}", "hard accuracy (avg@{n}, validation)"),
    ("hard/pass@{n}", "hard pass@{n} (validation)"),
    ("entropy", "token entropy (nats, validation samples)"),
    ("kappa_eff", "κ_eff (batch mean)"),
    ("skipped_group_fraction", "skipped-group fraction"),
    ("kl_to_warm_start", "KL to the warm start (per token)"),
    ("reward", "training reward"),
)


def band(curves: list[list[float | None]]) -> tuple[list[int], list[float], list[float]]:
    """Steps where every seed has a value, the mean there and the standard error."""
    steps, means, errors = [], [], []
    for step in range(min(len(c) for c in curves)):
        values = [c[step] for c in curves]
        finite = [v for v in values if v is not None and not math.isnan(v)]
        if len(finite) != len(values):
            continue
        mean = sum(finite) / len(finite)
        var = sum((v - mean) ** 2 for v in finite) / (len(finite) - 1) if len(finite) > 1 else 0
        steps.append(step)
        means.append(mean)
        errors.append(math.sqrt(var / len(finite)))
    return steps, means, errors


def plot_curves(record: dict[str, Any], path: Path) -> Path:
    """Write the experiment's curves (8 panels against the step) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = record["config"]["eval_samples"]
    estimators = record["config"]["estimators"]
    figure, axes = plt.subplots(2, 4, figsize=(17, 7.5))
    for axis, (key, title) in zip(axes.flat, PANELS, strict=True):
        key = key.format(n=samples)
        for estimator in estimators:
            curves = [r["history"][key] for r in record["runs"] if r["estimator"] == estimator]
            if not curves:
                continue
            steps, means, errors = band(curves)
            if key in ("kappa_eff", "skipped_group_fraction", "reward"):
                steps, means, errors = _smooth(steps, means, errors, window=10)
            (line,) = axis.plot(steps, means, label=estimator, lw=1.4)
            low = [m - e for m, e in zip(means, errors, strict=True)]
            high = [m + e for m, e in zip(means, errors, strict=True)]
            axis.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, lw=0)
        axis.set_title(title.format(n=samples), fontsize=10)
        axis.set_xlabel("RL step")
        axis.grid(alpha=0.3)
    axes.flat[0].legend()
    seeds = len(record["config"]["seeds"])
    figure.suptitle(
        f"advbudget experiment lm: mean over {seeds} seeds, band ±1 SE "
        "(κ_eff, skipped, reward: 10-step running mean)",
        fontsize=11,
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _smooth(
    steps: list[int], means: list[float], errors: list[float], window: int
) -> tuple[list[int], list[float], list[float]]:
    """Running mean over ``window`` points (per-step batch metrics are noisy)."""
    if len(means) < window:
        return steps, means, errors
    out_m = [sum(means[i - window : i]) / window for i in range(window, len(means) + 1)]
    out_e = [sum(errors[i - window : i]) / window for i in range(window, len(errors) + 1)]
    return steps[window - 1 :], out_m, out_e
