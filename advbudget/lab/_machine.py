"""What an experiment or benchmark ran on: one probe for every JSON record.

Floating-point results of the same code differ across machines through the CPU's vector
instructions (AVX-512 or AVX2 kernels sum in a different order) and across library
versions, so a record keeps both, with the package versions read from their metadata
(nothing is imported that the caller has not imported already).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_PACKAGES", "cpu_flags", "machine_info"]

#: The packages whose versions change an experiment's numbers.
DEFAULT_PACKAGES = ("advbudget", "numpy", "torch", "transformers", "trl", "accelerate", "jax")

# The instruction-set flags that decide which kernels numpy, torch and XLA run.
_VECTOR_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
    "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile", "asimd", "sve",
)  # fmt: skip


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """The CPU's model name and its vector-instruction flags (Linux: /proc/cpuinfo;
    elsewhere only what :mod:`platform` knows)."""
    model, flags = platform.processor() or platform.machine(), set[str]()
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {"model": model, "vector_flags": None}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and value.strip():
            model = value.strip()
        elif key in ("flags", "Features"):  # x86, arm
            flags.update(value.split())
    return {"model": model, "vector_flags": [f for f in _VECTOR_FLAGS if f in flags]}


def machine_info(packages: Iterable[str] = DEFAULT_PACKAGES) -> dict[str, Any]:
    """Date, platform, CPU (model, vector flags, count, load), Python, the versions of
    ``packages`` (None where not installed) and, when torch is already imported, its
    threads, CPU capability and GPU."""
    versions: dict[str, str | None] = {}
    for name in packages:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    info: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "cpu": cpu_flags(),
        "cpu_count": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()]
        if hasattr(os, "getloadavg")
        else None,
        "python": platform.python_version(),
        "packages": versions,
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch_threads"] = torch.get_num_threads()
        info["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        info["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return info
