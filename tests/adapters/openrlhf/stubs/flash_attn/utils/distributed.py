"""Stub: all_gather for OpenRLHF's ring_attn_utils; calling it raises."""


def all_gather(*args, **kwargs):  # type: ignore[no-untyped-def]
    raise RuntimeError("flash_attn is a CPU test stub")
