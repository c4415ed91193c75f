"""The estimator catalogue as a Markdown page (``docs/estimators.md``, ``advbudget
estimators --markdown``): generated from the catalogue and the conventions table, so the
page cannot drift from the code (a test compares them)."""

from __future__ import annotations

from advbudget.adapters import CONVENTIONS
from advbudget.core import EstimatorSpec
from advbudget.core._weights import GROUP_WEIGHTS, logistic_weight
from advbudget.core.estimators import BUILTINS

WEIGHTS_GROUP_SIZE = 8

HEADER = """# Estimators

Every outcome advantage estimator advbudget computes, generated from its catalogue
(`advbudget estimators --markdown > docs/estimators.md`; a test checks that this page is
what that command prints). Each runs on numpy, torch, jax and any Array API namespace
through `compute_advantages(rewards, NAME, ...)`, and in every trainer by name: `NAME`
(or an alias) in TRL's `advantage_estimator=`, `advbudget_NAME` in verl's
`algorithm.adv_estimator=` and OpenRLHF's `--algo.advantage.estimator`. An estimator a
trainer also has itself (its *mirror*, named in the table) keeps that trainer's constants
there, so switching to our name changes no number; every other keeps the core's defaults.
Add your own with `register_estimator` or an `advbudget.estimators` entry point: it then
works in every trainer by the same rule, and `advbudget estimators` lists it (this page
lists the built-ins).

G is the group's size, r a rollout's reward, mean / std / min the group's.
"""


def _code(text: str) -> str:
    return f"`{text}`"


def _options(spec: EstimatorSpec) -> str:
    if not spec.options:
        return "none"
    return ", ".join(
        f"`{o.name}={o.default!r}`" + (f" ({o.doc})" if o.doc else "") for o in spec.options
    )


def _frameworks(spec: EstimatorSpec) -> str:
    parts = []
    for convention in CONVENTIONS.values():
        names = " / ".join(_code(convention.name_of(n)) for n in spec.names)
        names += "".join(
            f" / {_code(extra)}"
            for extra, core in convention.extra_names.items()
            if core == spec.name
        )
        own = convention.own_names.get(spec.name)
        mirror = f" (mirrors {convention.framework}'s {own})" if own else ""
        if spec.turns:
            mirror = " refused (no adapter passes a trainer's multi-turn rows yet)"
        elif spec.components and not convention.components:
            mirror = " refused (one reward per rollout there)"
        elif spec.components:
            mirror += f"; its components: {convention.components}"
        parts.append(f"{convention.framework}: {names}{mirror}")
    return "; ".join(parts)


def _skips(spec: EstimatorSpec) -> str:
    if spec.turns:
        rule = "only groups without any reward: a group whose trajectories tie keeps its step part"
    elif spec.skips == "never":
        rule = (
            "never (only groups without any reward): its advantages are not 0 on a constant group"
        )
    else:
        rule = "groups with no reward gap, or of one"
    return rule + "".join(f"; {note}" for note in _singletons(spec))


def _singletons(spec: EstimatorSpec) -> list[str]:
    """Where a framework's own estimator treats a group of one otherwise (its mirror too)."""
    notes = []
    for convention in CONVENTIONS.values():
        if not convention.is_mirror(spec):
            continue
        singletons = convention.settings(spec)["singletons"]
        if singletons == "raw":
            notes.append(f'{convention.framework} scores a group of one raw (`singletons="raw"`)')
        elif singletons == "refuse":
            notes.append(f'{convention.framework} refuses a group of one (`singletons="refuse"`)')
    return notes


def _weights_section() -> list[str]:
    """``group_weight=``: what each weight is, and GRPO-LEAD's multipliers for k of G."""
    import numpy as np

    lead = GROUP_WEIGHTS["grpo_lead"]
    g = WEIGHTS_GROUP_SIZE
    share = np.arange(1, g) / g
    up = logistic_weight(np, share, **lead)
    down = logistic_weight(np, 1 - share, **lead)
    lines = [
        "",
        "## Difficulty weights: `group_weight=`",
        "",
        "Any estimator above but those of turns takes `compute_advantages(..., "
        "group_weight=W)`: each group's "
        "advantages are multiplied by a weight of its solved share p̂ (the fraction of its "
        "rollouts with a reward that reach `solved_reward`, default 1.0, within the tie "
        "tolerance). Skipped groups keep advantage 0; `result.weights` holds each rollout's "
        "weight and the metrics report `group_weight_mean`, `_min` and `_max`.",
        "",
        "- `grpo_lead` (GRPO-LEAD, arXiv 2504.09696): "
        "`w(x) = floor + (ceiling − floor) / (1 + exp(steepness·(x − midpoint)))`; a "
        "positive advantage gets `w(p̂)`, a negative one `w(1 − p̂)`. Options: "
        + ", ".join(f"`{k}={v:g}`" for k, v in lead.items())
        + ".",
        "- `dqw` (DGPO's question weights, arXiv 2601.20614): over the batch's kept groups, "
        "`λ = n_kept · softmax(−d / temperature)` with `d = p̂` (1 where p̂ = 0); skipped "
        "groups weigh 1. Options: "
        + ", ".join(f"`{k}={v:g}`" for k, v in GROUP_WEIGHTS["dqw"].items())
        + ". The estimator `dgpo` applies it to its own advantages.",
        "- a callable `fn(p_hat)`: `p_hat` holds one solved share per group, in group "
        "order; it returns one finite weight per group.",
        "",
        'A name takes options as a mapping: `{"name": "grpo_lead", "steepness": 12}`. '
        f"GRPO-LEAD's multipliers for k of G = {g} correct (`advbudget explain "
        "--estimators grpo,grpo+grpo_lead` shows the advantages and slopes with and "
        "without the weight; `--group-weight grpo_lead` weighs every column):",
        "",
        "| k | " + " | ".join(str(k) for k in range(1, g)) + " |",
        "|---|" + "---|" * (g - 1),
        "| correct rollout | " + " | ".join(f"{w:.3f}" for w in up) + " |",
        "| wrong rollout | " + " | ".join(f"{w:.3f}" for w in down) + " |",
    ]
    return lines


def _memory_section() -> list[str]:
    """``state=``/``prompt_ids=``: the rules of the estimators with memory, and where each
    trainer finds a prompt's identity and keeps the state."""
    names = ", ".join(f"`{spec.name}`" for spec in BUILTINS if spec.tracker is not None)
    return [
        "",
        "## Memory across steps: `state=`, `prompt_ids=`",
        "",
        f"{names} score each rollout against what its prompt's earlier rewards built. Pass "
        "the same `advbudget.EstimatorState()` to every call, with `prompt_ids=`: one stable "
        "identity per rollout (a dataset index, Python's or numpy's int, or the prompt "
        "text, keyed by "
        "`advbudget.metrics.prompt_key`; not a per-step uuid). A call scores every rollout "
        "against the memory as the call found it, then updates each prompt once, from its "
        "rollouts with a reward (a prompt whose rollouts are all NaN is not touched). An "
        "unseen prompt starts from the prior (`spo`: `prior=(0.5, 0.5)`, or per-rollout "
        "arrays such as offline pass rates; `rae`: a baseline of 0). One state serves one "
        "estimator; `state.state_dict()` is JSON and "
        "`EstimatorState.from_state_dict(d)` continues exactly. Memory is O(prompts); a "
        "call makes a few vectorised passes and sorts over the batch (integer ids need no "
        "Python loop over the rollouts, text ids are hashed once each; costs in "
        "`benchmarks/results/state.md`). Refused inside `jax.jit`, and with "
        "`skipped_groups=resample` (which would score a step's prompts once per generation "
        "round).",
        "",
        "`spo`'s KL-adaptive forgetting: ρ = clip(2^(-D/0.06), 0.875, 0.96) per prompt, D "
        "the mean |Δ log-prob| over the tokens of the prompt's last response between the "
        "policy that scored it then and the current one (0 for a prompt seen first), so a "
        "policy that moved far on a prompt forgets its old successes faster. "
        "`advbudget.core.spo_rho(drift)` gives the values to pass as `rho=`; an adapter "
        'given `rho="kl"` measures D itself: it keeps each prompt\'s last response and '
        "its token log-probs, and scores it again with the policy when the prompt comes "
        "back (one extra forward pass over one response per prompt of the step, 1/G of the "
        "batch). SPO's reference measures after the actor update, the adapters when they "
        "compute the advantages, before it (so D leaves out the step's own update); the "
        "responses are kept in memory only, as the reference keeps them, so after a resume a "
        "prompt counts as first seen until it comes back.",
        "",
        "In the trainers (the same option as any estimator; the state is saved with the "
        "trainer's checkpoint and restored on resume):",
        "",
        *[f"- {c.framework}: {c.memory}." for c in CONVENTIONS.values()],
    ]


def estimators_markdown() -> str:
    """The page: a summary table, then one section per estimator."""
    lines = [HEADER, "| name | advantage | from |", "|---|---|---|"]
    for spec in BUILTINS:
        aliases = "".join(f", `{a}`" for a in spec.aliases)
        lines.append(f"| `{spec.name}`{aliases} | {spec.formula} | {spec.reference} |")
    for spec in BUILTINS:
        lines += ["", f"## `{spec.name}`", ""]
        lines.append(f"- **advantage**: {spec.formula}")
        lines.append(f"- **from**: {spec.reference}")
        if spec.aliases:
            lines.append(f"- **aliases**: {', '.join(_code(a) for a in spec.aliases)}")
        if spec.components:
            lines.append(
                "- **rewards**: reward components, `[N, K]` (one column per component) or a "
                'mapping name -> `[N]` (`{"format": ..., "accuracy": ...}`); each is checked '
                "and grouped on its own"
            )
        if spec.turns:
            lines.append(
                "- **rows**: the turns of multi-turn trajectories, one row each: "
                "`trajectory_ids=` and `group_ids=` (prompts), one label per row; every input "
                "per row (see [Multi-turn rows](multi-turn.md))"
            )
        lines.append(f"- **options**: {_options(spec)}")
        inputs = ", ".join(f"`{i.name}=` ({i.doc})" for i in spec.inputs) or "none"
        lines.append(f"- **extra inputs**: {inputs}")
        lines.append(f"- **skipped groups**: {_skips(spec)}")
        if spec.batch_statistics:
            lines.append(f"- **batch statistics**: {spec.batch_statistics}")
        if spec.tracker is not None:
            fields = ", ".join(spec.tracker.fields)
            lines.append(
                f"- **memory**: per prompt ({fields}), across steps: `state=`, `prompt_ids=` "
                "(see [Memory across steps](#memory-across-steps-state-prompt_ids))"
            )
        lines.append(f"- **in the trainers**: {_frameworks(spec)}")
    lines += _weights_section()
    lines += _memory_section()
    lines += [
        "",
        "## Where each trainer gets the whole batch",
        "",
        "Estimators with batch statistics need every rollout of the step at once:",
        "",
    ]
    lines += [f"- {c.framework}: {c.whole_batch}." for c in CONVENTIONS.values()]
    return "\n".join(lines) + "\n"
