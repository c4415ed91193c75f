"""Each framework's data writer, from its adapter's folder
(``advbudget/adapters/<framework>/data.py``: :func:`write_verl`, :func:`write_trl`,
:func:`write_openrlhf`, :func:`write_tunix`, :func:`write_skyrl`). Each is loaded by its
file when first asked for: ``advbudget data prepare`` runs without any trainer, an
adapter's package may need its framework, and a writer imports this package's helpers
(:mod:`advbudget.adapters._datafiles`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from advbudget.adapters._datafiles import Splits
from advbudget.adapters._files import adapter_module

if TYPE_CHECKING:  # the functions themselves, for type checkers and the API docs
    pass

Writer = Callable[[Splits, str | os.PathLike[str]], list[Path]]

#: The formats, in the order ``advbudget data prepare`` lists them.
_FORMATS = ("verl", "trl", "openrlhf", "tunix", "skyrl")


class _Writers(Mapping[str, Writer]):
    """format -> its writer, each loaded from its adapter's folder when first asked for."""

    def __getitem__(self, framework: str) -> Writer:
        if framework not in _FORMATS:
            raise KeyError(framework)
        writer: Writer = getattr(adapter_module(framework, "data"), f"write_{framework}")
        return writer

    def __iter__(self) -> Iterator[str]:
        return iter(_FORMATS)

    def __len__(self) -> int:
        return len(_FORMATS)


WRITERS: Mapping[str, Writer] = _Writers()


def writer_named(name: str) -> Writer | None:
    """``write_<format>`` for a module ``__getattr__``; None for any other name."""
    framework = name.removeprefix("write_")
    return WRITERS[framework] if name.startswith("write_") and framework in WRITERS else None


def __getattr__(name: str) -> Writer:
    writer = writer_named(name)
    if writer is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return writer
