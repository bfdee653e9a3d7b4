"""A real ZeRO-3 DeepSpeed engine of a tiny LoRA Qwen2 (gloo, world size 1, CPU) saved through OpenRLHF's own
`DeepspeedStrategy.save_ckpt`: shared by tests/train/test_checkpoints.py and benchmarks/bench_ckpt_size.py.

Whichever `openrlhf` is importable is used (patched or pristine 0.9.3); gloo must already be up (cpu_trainer.init_gloo)
and OpenRLHF's CUDA barrier replaced by `cpu_barrier` (the caller decides how: monkeypatch or plain setattr).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch

VOCAB = 128
KINDS = ("model_states", "optim_states")


def cpu_barrier() -> None:
    """Stand-in for OpenRLHF's torch_dist_barrier_and_cuda_sync (no CUDA to sync)."""
    torch.distributed.barrier()


def strategy_and_engine(lora_rank: int, *, hidden: int = 64, r: int = 4,
                        targets: tuple[str, ...] = ("q_proj", "v_proj")):
    """(DeepspeedStrategy with args.lora_rank = lora_rank, engine of a 2-layer Qwen2 with LoRA r on `targets`).

    `lora_rank` is what the strategy is told (0 = 0.9.3's behaviour in the patched save); the model always has
    the adapter, so frozen and trainable parameters are the same in every variant.
    """
    import deepspeed
    from openrlhf.utils.deepspeed import DeepspeedStrategy
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    args = SimpleNamespace(param_dtype="bf16", zero_stage=3, ds_tensor_parallel_size=1, local_rank=-1,
                           adam_offload=False, offload=False, lora_rank=lora_rank)
    strategy = DeepspeedStrategy(seed=1, max_norm=1.0, micro_train_batch_size=1, train_batch_size=1,
                                 zero_stage=3, args=args)
    strategy.world_size = 1
    cfg = strategy.get_ds_train_config(is_actor=True)
    cfg["zero_allow_untested_optimizer"] = True
    cfg["bf16"]["enabled"] = False  # fp32 on CPU
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=64))
    model = get_peft_model(model, LoraConfig(r=r, lora_alpha=2 * r, target_modules=list(targets)))
    optim = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optim, config=cfg)
    return strategy, engine


def train_one_step(engine) -> None:
    ids = torch.randint(0, VOCAB, (1, 12))
    loss = engine(input_ids=ids, labels=ids).loss
    engine.backward(loss)
    engine.step()


def param_counts(engine) -> dict[str, int]:
    """Element counts of the trainable (LoRA) and frozen (base) parameters (ZeRO-3: ds_numel, not the shard)."""
    counts = {"trainable": 0, "frozen": 0}
    for p in engine.module.parameters():
        counts["trainable" if p.requires_grad else "frozen"] += getattr(p, "ds_numel", p.numel())
    return counts


def param_bytes(engine) -> dict[str, int]:
    """Full-size bytes of the trainable (LoRA) and frozen (base) parameters (ZeRO-3: ds_numel, not the shard)."""
    sizes = {"trainable": 0, "frozen": 0}
    for p in engine.module.parameters():
        sizes["trainable" if p.requires_grad else "frozen"] += getattr(p, "ds_numel", p.numel()) * p.element_size()
    return sizes


def ckpt_bytes(tag_dir: Path) -> dict[str, int]:
    """Bytes of a checkpoint tag directory, per file kind (*model_states.pt, *optim_states.pt, other) and total."""
    sizes = dict.fromkeys((*KINDS, "other"), 0)
    for f in Path(tag_dir).rglob("*"):
        if f.is_file():
            sizes[next((k for k in KINDS if f.name.endswith(f"{k}.pt")), "other")] += f.stat().st_size
    sizes["total"] = sum(sizes.values())
    return sizes


def saved_frozen_names(tag_dir: Path, engine) -> set[str]:
    """Names of frozen parameters that the checkpoint's model_states files carry (empty: the base is excluded)."""
    frozen = {n for n, p in engine.module.named_parameters() if not p.requires_grad}
    found: set[str] = set()
    for f in Path(tag_dir).glob("*model_states.pt"):
        sd = torch.load(f, map_location="cpu", weights_only=False)
        found |= frozen & set(sd.get("module") or {})
        found |= frozen & set(sd.get("frozen_param_fragments") or {})
    return found


def lora_state(engine) -> dict[str, torch.Tensor]:
    import deepspeed

    named = [(n, p) for n, p in engine.module.named_parameters() if "lora_" in n]
    with deepspeed.zero.GatheredParameters([p for _, p in named]):
        return {n: p.detach().clone() for n, p in named}
