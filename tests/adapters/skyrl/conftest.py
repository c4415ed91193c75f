"""Shared pieces of the SkyRL adapter tests (real skyrl 0.4.0, torch on CPU)."""

from __future__ import annotations

import pytest

# cpu_loop/ is the CPU harness the loop test runs SkyRL with (PYTHONPATH of a subprocess);
# its modules patch torch and Ray when imported, never here.
collect_ignore = ["cpu_loop"]

# SkyRL's stack (ray, transformers, vLLM-less imports) warns at import about optional parts.
SKYRL_WARNINGS = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::DeprecationWarning", "ignore::FutureWarning"
)
