"""Stub of flash_attn.utils.distributed: `all_gather` raises when called."""

from flash_attn import unavailable

all_gather = unavailable("utils.distributed.all_gather")
