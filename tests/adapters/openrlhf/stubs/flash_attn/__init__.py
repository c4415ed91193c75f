"""Import stub of flash_attn for OpenRLHF on CPU (tests only): nothing here runs."""

__version__ = "0.0.0+stub"
