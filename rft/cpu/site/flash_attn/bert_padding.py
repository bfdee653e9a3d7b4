"""Stub of flash_attn.bert_padding: the names OpenRLHF imports; calling them raises."""

from einops import rearrange  # noqa: F401  (flash_attn re-exports einops' rearrange)

from flash_attn import unavailable

index_first_axis = unavailable("bert_padding.index_first_axis")
pad_input = unavailable("bert_padding.pad_input")
unpad_input = unavailable("bert_padding.unpad_input")
