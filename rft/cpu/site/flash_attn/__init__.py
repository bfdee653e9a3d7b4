"""Import-only stand-in for flash_attn (no CPU build exists); nothing here computes anything."""

__version__ = "0.0.0+stub"


def unavailable(name: str):
    """Return a function that raises: the real flash_attn kernel `name` is not installed."""

    def _raise(*args, **kwargs):
        raise RuntimeError(f"flash_attn.{name} is a test stub: the real kernel is only on GPU nodes")

    return _raise
