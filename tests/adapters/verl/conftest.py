"""Shared pieces of the verl adapter tests (batches: :mod:`advbudget.adapters.verl.testing`)."""

from __future__ import annotations

import pytest

# verl 0.9.1 warns at import about optional engines (megatron, mindspeed) and deprecations.
VERL_WARNINGS = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::DeprecationWarning", "ignore::FutureWarning"
)


# cpu_loop/ is the CPU harness the loop tests run verl with (PYTHONPATH of a subprocess);
# importing it here would register a platform and patch torch in the test process.
collect_ignore = ["cpu_loop"]
