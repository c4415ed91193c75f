"""Curves of an experiment: mean over seeds with a ±1 std band (matplotlib, imported lazily)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ._experiment import ExperimentResult
from ._task import Float

LINE_STYLES = ("-", "--", "-.", ":")
# (metric, title, per-step batch metric that gets a moving average)
PANELS = (
    ("accuracy", "validation accuracy (exact)", False),
    ("accuracy_hard", "accuracy on hard types", False),
    ("entropy", "policy entropy (nats)", False),
    ("kappa_eff_mean", "κ_eff, batch mean", True),
    ("skipped_group_fraction", "skipped-group fraction", True),
    ("kl_to_reference", "KL(π ‖ π_ref)", False),
)


def plot_experiment(result: ExperimentResult, path: str | Path) -> Path:
    """Write the six panels of ``result`` (accuracy, hard-type accuracy, entropy, κ_eff,
    skipped fraction, KL to the reference) against the step to ``path`` (PNG, PDF, SVG).

    Batch metrics (κ_eff, skipped fraction) are noisy step to step: they are drawn as a
    moving average over ``steps // 50`` steps (at least 1).

    Examples:
        >>> import tempfile, pathlib
        >>> from advbudget.sim import experiment_config, run_experiment, plot_experiment
        >>> config = experiment_config("compare", quick=True, estimators=("dr",), steps=3)
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "compare.png"
        >>> path = plot_experiment(run_experiment(config), target)
        >>> path.stat().st_size > 0
        True
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    config = result.config
    window = max(1, config.steps // 50)
    figure, axes = plt.subplots(2, 3, figsize=(15, 8), layout="constrained")
    steps = np.arange(config.steps + 1)
    for axis, (key, title, smoothed) in zip(axes.ravel(), PANELS, strict=True):
        for index, arm in enumerate(result.arms):
            curves = arm.curves(key)
            if smoothed:
                curves = np.stack([_moving_average(row, window) for row in curves])
            mean, spread = _mean_and_std(curves)
            # Line styles keep arms that coincide (Dr and RLOO under Adam) visible.
            style = LINE_STYLES[index % len(LINE_STYLES)]
            (line,) = axis.plot(steps, mean, style, label=arm.label, linewidth=1.4)
            axis.fill_between(
                steps, mean - spread, mean + spread, color=line.get_color(), alpha=0.18, lw=0
            )
        if key == "accuracy":
            axis.axhline(result.oracle_accuracy, color="black", linestyle=":", linewidth=0.8)
        if config.entropy_until is not None and any(c > 0 for c in config.entropy_coefs):
            axis.axvline(config.entropy_until, color="grey", linestyle="--", linewidth=0.8)
        suffix = f" (moving avg, {window} steps)" if smoothed and window > 1 else ""
        axis.set(title=title + suffix, xlabel="step")
        axis.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    figure.suptitle(
        f"advbudget simulate --experiment {config.name}: mean over {len(config.seeds)} seeds, "
        "band ±1 std (dotted: oracle accuracy)"
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _moving_average(values: Float, window: int) -> Float:
    """Trailing mean over ``window`` steps, skipping NaN (steps without a value)."""
    if window <= 1:
        return values
    finite = np.isfinite(values)
    filled = np.where(finite, values, 0.0)
    totals = np.convolve(filled, np.ones(window))[: values.size]
    counts = np.convolve(finite.astype(np.float64), np.ones(window))[: values.size]
    with np.errstate(invalid="ignore", divide="ignore"):
        result: Float = np.where(counts > 0, totals / counts, np.nan)
    return result


def _mean_and_std(curves: Float) -> tuple[Float, Float]:
    """Mean and sample std over seeds (rows) per step, of the finite values; NaN where none."""
    finite = np.isfinite(curves)
    counts = finite.sum(axis=0)
    filled = np.where(finite, curves, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(counts > 0, filled.sum(axis=0) / counts, np.nan)
        squares = np.where(finite, (curves - mean) ** 2, 0.0).sum(axis=0)
        std = np.where(counts > 0, np.sqrt(squares / np.maximum(counts - 1, 1)), np.nan)
    return mean, std
