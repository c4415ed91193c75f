"""Framework adapters (verl, TRL, OpenRLHF, tunix, SkyRL): each translates a framework's
batch into arrays, calls the core, and writes the advantages back. Each imports its
framework lazily, so nothing here is imported by ``import advbudget``."""
