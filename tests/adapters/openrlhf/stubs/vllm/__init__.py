"""Import stub of vllm for OpenRLHF on CPU (tests only): importable, never usable."""

__version__ = "0.0.0+stub"


class _Stub:
    def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("vllm is a CPU test stub")


class SamplingParams(_Stub):
    pass


class AsyncEngineArgs(_Stub):
    pass


class AsyncLLMEngine(_Stub):
    pass


class LLM(_Stub):
    pass
