"""Curves of an experiment: mean over seeds with a ±1 std band (matplotlib, imported lazily)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ._experiment import ExperimentResult
from ._report import _pm
from ._task import Float

LINE_STYLES = ("-", "--", "-.", ":")
# (metric, title, y-axis label, scale, per-step batch metric that gets a moving average)
PANELS = (
    ("accuracy", "held-out accuracy (exact)", "accuracy (points, % solved)", 100.0, False),
    ("accuracy_hard", "accuracy on hard types", "accuracy (points, % solved)", 100.0, False),
    (
        "hard_types_discovered",
        "hard types discovered",
        "types (specialist prob. > 0.5)",
        1.0,
        False,
    ),
    ("entropy", "policy entropy", "entropy (nats)", 1.0, False),
    ("kappa_eff_mean", "κ_eff, batch mean", "κ_eff (dimensionless)", 1.0, True),
    ("skipped_group_fraction", "skipped groups", "fraction of groups (no reward gap)", 1.0, True),
)


def plot_experiment(result: ExperimentResult, path: str | Path) -> Path:
    """Write the six panels of ``result`` (accuracy, hard-type accuracy, hard types
    discovered, entropy, κ_eff, skipped fraction) against the step to ``path`` (PNG, PDF,
    SVG). The accuracy panels draw the policy-class ceiling (dashed) and the oracle
    (dotted); the title names the experiment and the regime.

    Batch metrics (κ_eff, skipped fraction) are noisy step to step: they are drawn as a
    moving average over ``steps // 50`` steps (at least 1).

    Examples:
        >>> import tempfile, pathlib
        >>> from advbudget.lab.sim import experiment_config, run_experiment, plot_experiment
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
    ceiling = result.ceiling
    for axis, (key, title, ylabel, scale, smoothed) in zip(axes.ravel(), PANELS, strict=True):
        for index, arm in enumerate(result.arms):
            curves = scale * arm.curves(key)
            if smoothed:
                curves = np.stack([_moving_average(row, window) for row in curves])
            mean, spread = _mean_and_std(curves)
            # Line styles keep arms that coincide (Dr and RLOO under Adam) visible.
            style = LINE_STYLES[index % len(LINE_STYLES)]
            finite = np.isfinite(mean)  # steps between evaluations hold NaN
            (line,) = axis.plot(steps[finite], mean[finite], style, label=arm.label, linewidth=1.4)
            axis.fill_between(
                steps[finite],
                (mean - spread)[finite],
                (mean + spread)[finite],
                color=line.get_color(),
                alpha=0.18,
                lw=0,
            )
        if key == "accuracy":
            axis.axhline(
                100 * ceiling.accuracy,
                color="black",
                linestyle="--",
                linewidth=0.9,
                label=f"ceiling {100 * ceiling.accuracy:.1f}",
            )
            axis.axhline(
                100 * result.oracle_accuracy,
                color="black",
                linestyle=":",
                linewidth=0.8,
                label=f"oracle {100 * result.oracle_accuracy:.1f}",
            )
        if key == "accuracy_hard":
            axis.axhline(100 * ceiling.accuracy_hard, color="black", linestyle="--", linewidth=0.9)
        if key == "hard_types_discovered":
            axis.axhline(
                ceiling.hard_types_discovered, color="black", linestyle="--", linewidth=0.9
            )
        if config.entropy_until is not None and any(c > 0 for c in config.entropy_coefs):
            axis.axvline(config.entropy_until, color="grey", linestyle="--", linewidth=0.8)
        suffix = f" (moving avg, {window} steps)" if smoothed and window > 1 else ""
        axis.set(title=title + suffix, xlabel="training step", ylabel=ylabel)
        axis.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    task = config.task
    figure.suptitle(
        f"{config.name}, {config.regime} regime ({task.routine_types} routine + "
        f"{task.hard_types} hard types): mean over {len(config.seeds)} seeds, band ±1 std; "
        "dashed: policy-class ceiling, dotted: oracle"
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


def plot_map(
    data: dict[str, Any], path: str | Path, *, metadata: dict[str, Any] | None = None
) -> Path:
    """Heatmaps of budget − each other estimator (final accuracy, points) over the map's
    grid, each cell annotated with mean ± SE over the paired seeds.

    Examples:
        >>> import tempfile, pathlib
        >>> from advbudget.lab.sim import map_config, run_map
        >>> from advbudget.lab.sim._plot import plot_map
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "map.png"
        >>> plot_map(run_map(map_config(quick=True, steps=3)), target).stat().st_size > 0
        True
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    config = data["config"]
    others = config["estimators"][1:]
    hard, totals = config["hard_types"], config["total_types"]
    cells = {(c["hard_types"], c["total_types"]): c for c in data["cells"]}
    figure, axes = plt.subplots(
        1,
        len(others),
        figsize=(5.2 * len(others) + 0.8, 4.4),
        layout="constrained",
        squeeze=False,
    )
    values = {
        other: np.array(
            [[100 * cells[(h, t)]["difference"][other]["mean"] for t in totals] for h in hard]
        )
        for other in others
    }
    limit = max(1.0, max(float(np.abs(v).max()) for v in values.values()))
    image = None
    for axis, other in zip(axes[0], others, strict=True):
        image = axis.imshow(values[other], cmap="RdBu", vmin=-limit, vmax=limit, origin="lower")
        for i, h in enumerate(hard):
            for j, t in enumerate(totals):
                difference = cells[(h, t)]["difference"][other]
                strong = abs(100 * difference["mean"]) > 0.6 * limit  # dark cell: white text
                axis.text(
                    j,
                    i,
                    f"{100 * difference['mean']:+.1f}\n{_pm(difference['se'])}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if strong else "black",
                )
        axis.set_xticks(range(len(totals)), [f"1/{t}\n({100 / t:.1f} %)" for t in totals])
        axis.set_yticks(range(len(hard)), [str(h) for h in hard])
        axis.set(
            xlabel="frequency of each hard type (share of prompts)",
            ylabel="number of hard types",
            title=f"budget − {other}",
        )
    assert image is not None
    figure.colorbar(image, ax=axes[0].tolist(), label="final accuracy difference (points)")
    figure.suptitle(
        f"Where budgeting helps: final held-out accuracy at step {config['steps']}, "
        f"mean ± SE over {len(config['seeds'])} paired seeds (all types equally frequent)",
        fontsize=10,
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110, metadata=metadata)
    plt.close(figure)
    return path
