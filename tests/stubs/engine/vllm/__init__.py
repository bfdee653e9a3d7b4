"""Import-only stand-in for vLLM 0.15 (needs a GPU); engines and samplers raise when used."""

__version__ = "0.15.0"


class SamplingParams:
    """Holds the keyword arguments it is given, like vllm.SamplingParams' public attributes."""

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

    def __repr__(self) -> str:
        return f"SamplingParams({self.__dict__!r})"


class _Unavailable:
    """Any attempt to build a real engine from the stub fails loudly."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError(f"vllm.{type(self).__name__} is a test stub: vLLM only runs on GPU nodes")


class AsyncEngineArgs(_Unavailable):
    pass


class AsyncLLMEngine(_Unavailable):
    pass


class LLM(_Unavailable):
    pass
