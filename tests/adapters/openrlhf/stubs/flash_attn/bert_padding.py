"""Stub: the names OpenRLHF's ring_attn_utils imports; calling any of them raises."""


def _stub(*args, **kwargs):  # type: ignore[no-untyped-def]
    raise RuntimeError("flash_attn is a CPU test stub")


index_first_axis = pad_input = rearrange = unpad_input = _stub
