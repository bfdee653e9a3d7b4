"""gpt-oss model helpers: MXFP4 weights, rotary frequencies, the routed-expert loop, the attention paths."""
