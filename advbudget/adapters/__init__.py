"""Framework adapters (verl, TRL, OpenRLHF, tunix, SkyRL): each translates a framework's
batch into arrays, calls the core, and writes the advantages back. Each imports its
framework lazily, so nothing here is imported by ``import advbudget``.

Each framework's conventions (how it names our estimators, the constants of the ones it
has too) are a :class:`Convention` row in its folder: :func:`get_convention`."""

from ._convention import CONVENTIONS, FRAMEWORKS, Convention, get_convention

__all__ = ["CONVENTIONS", "FRAMEWORKS", "Convention", "get_convention"]
