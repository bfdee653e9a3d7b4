"""Import-only stand-in for flash_attn: the names OpenRLHF imports at module level, each raising when called.

Used where no flash-attn kernel runs: the CPU profile (no CPU build exists) and the GPU node's environment, whose
recipes use eager attention (rft/provision/train_env.py installs it there as flash-attn 2.8.3+rft.standin).
"""

__version__ = "0.0.0+stub"


def unavailable(name: str):
    """Return a function that raises: the real flash_attn kernel `name` is not installed."""

    def _raise(*args, **kwargs):
        raise RuntimeError(f"flash_attn.{name}: this flash_attn is rft's import-only stand-in; install the real "
                           "flash-attn 2.8.3 (pip install --no-build-isolation flash-attn==2.8.3) to call its kernels")

    return _raise
