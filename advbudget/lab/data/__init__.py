"""Training data for RL on math: DAPO-Math-17K in; verl, TRL, OpenRLHF, tunix and SkyRL files
out.

``import advbudget.lab.data`` is light: pyarrow and ``datasets`` are imported only by the
functions that read or write files. The command line is ``advbudget data prepare``
(:mod:`advbudget.lab.cli._data`).

Example:
    >>> from advbudget.lab.data import deduplicate, load_problems, sample_path
    >>> unique, report = deduplicate(load_problems(sample_path()))
    >>> report.rows_before, report.rows_after
    (64, 64)
"""

from typing import TYPE_CHECKING, Any

from advbudget.adapters._datafiles import DAPO_DATA_SOURCE, DAPO_REWARD_STYLE

from ._load import load_problems
from ._prepare import (
    FORMATS,
    DedupReport,
    PreparedData,
    check_split_options,
    deduplicate,
    parse_formats,
    prepare,
    split_problems,
)
from ._problems import (
    DAPO_PROMPT_PREFIX,
    DAPO_PROMPT_SUFFIX,
    DEFAULT_SOURCE,
    DataError,
    Problem,
    dapo_prompt,
    extract_problem,
)
from ._samples import sample_path
from ._writers import writer_named

if TYPE_CHECKING:
    from ._writers import write_openrlhf, write_skyrl, write_trl, write_tunix, write_verl

__all__ = [
    "DAPO_DATA_SOURCE",
    "DAPO_PROMPT_PREFIX",
    "DAPO_PROMPT_SUFFIX",
    "DAPO_REWARD_STYLE",
    "DEFAULT_SOURCE",
    "FORMATS",
    "DataError",
    "DedupReport",
    "PreparedData",
    "Problem",
    "check_split_options",
    "dapo_prompt",
    "deduplicate",
    "extract_problem",
    "load_problems",
    "parse_formats",
    "prepare",
    "sample_path",
    "split_problems",
    "write_openrlhf",
    "write_skyrl",
    "write_trl",
    "write_tunix",
    "write_verl",
]


def __getattr__(name: str) -> Any:
    # The writers live in the adapters' folders, loaded when first asked for (._writers).
    writer = writer_named(name)
    if writer is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return writer
