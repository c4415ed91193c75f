"""The paper's evaluation as one ``advbudget eval`` command line: what the training
examples run on their final model, and what ``advbudget eval`` does by default."""

from __future__ import annotations

import os
import sys

# AMC23, AIME24, AIME25 and MATH500, n samples each at temperature 0.7: avg@n and pass@n.
PAPER_BENCHMARKS = "amc23,aime24,aime25,math500"
PAPER_TEMPERATURE = 0.7


def protocol_command(
    model: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    n: int,
    max_new_tokens: int,
    smoke: bool = False,
) -> list[str]:
    """``advbudget eval`` of ``model`` as the paper evaluates (vLLM), run by this Python.

    ``smoke=True`` keeps every setting but scores the packaged sample benchmark with
    transformers on a CPU and DAPO's answer check (what the examples' ``--smoke`` runs).

    Examples:
        >>> from advbudget.lab.eval import protocol_command
        >>> protocol_command("out/final", "out/eval", n=8, max_new_tokens=512)[3:9]
        ['eval', '--model', 'out/final', '--n', '8', '--k']
    """
    command = [
        sys.executable, "-c", "from advbudget.lab.cli import main; main()", "eval",
        "--model", str(model), "--n", str(n), "--k", str(n),
        "--temperature", str(PAPER_TEMPERATURE),
        "--max-new-tokens", str(max_new_tokens),
        "--output-dir", str(output_dir),
    ]  # fmt: skip
    if smoke:
        from ..data import sample_path

        command += ["--benchmarks", str(sample_path("eval")), "--backend", "transformers",
                    "--grader", "dapo"]  # fmt: skip
    else:
        command += ["--benchmarks", PAPER_BENCHMARKS, "--backend", "vllm"]
    return command
