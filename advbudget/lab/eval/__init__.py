"""Evaluation as in the paper: n samples per problem, graded, avg@n and unbiased pass@k.

Benchmarks AMC23, AIME24, AIME25 and MATH500 load by name from the hub (GPU machines),
or any JSONL of ``problem``/``answer`` from disk; vLLM generates on GPUs, transformers
``generate`` on a CPU. ``advbudget eval`` is the command line.
"""

from ._benchmarks import BENCHMARKS, EvalProblem, load_benchmark
from ._generate import TransformersGenerator, VLLMGenerator, make_generator
from ._metrics import avg_at_k, mean_pass_at_k, pass_at_k
from ._protocol import PAPER_BENCHMARKS, PAPER_TEMPERATURE, protocol_command
from ._run import (
    BenchmarkScore,
    EvalReport,
    ResumeError,
    evaluate,
    grade,
    score,
    score_generations,
    write_outputs,
)

__all__ = [
    "BENCHMARKS",
    "PAPER_BENCHMARKS",
    "PAPER_TEMPERATURE",
    "BenchmarkScore",
    "EvalProblem",
    "EvalReport",
    "ResumeError",
    "TransformersGenerator",
    "VLLMGenerator",
    "avg_at_k",
    "evaluate",
    "grade",
    "load_benchmark",
    "make_generator",
    "mean_pass_at_k",
    "pass_at_k",
    "protocol_command",
    "score",
    "score_generations",
    "write_outputs",
]
