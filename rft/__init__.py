"""rft: GRPO reinforcement fine-tuning of reasoning models on competition math, on OpenRLHF 0.9.3."""

__version__ = "0.1.0"
