"""The patched OpenRLHF `ActorPPOTrainer` on CPU: real argparse, real DeepSpeed ZeRO-3 engine on gloo, tiny LoRA Llama.

Stand-ins only for hardware: the CPU profile's own `torch.cuda` stand-ins (`rft.cpu.standins.install`, which
the callers run first); the DeepSpeed config gets bf16 off and a torch AdamW (FusedAdam needs CUDA) (`cpu_ds_config`).
The patched `openrlhf` must already be importable (the `patched_openrlhf` fixture, or PYTHONPATH in a subprocess).
"""

from __future__ import annotations

import os

import torch

from rft.cpu.local_ray import free_port
from rft.cpu.standins import install_in_order_allgather

# flags every test run needs (OpenRLHF validation wants a prompt source, a reward and batch sizes)
BASE_FLAGS = ["--pretrain", "tiny", "--prompt_data", "d", "--actor_num_gpus_per_node", "1",
              "--micro_rollout_batch_size", "1", "--advantage_estimator", "group_norm", "--n_samples_per_prompt", "2",
              "--remote_rm_url", "rft/reward/exact_match.py", "--rollout_batch_size", "1", "--zero_stage", "3"]
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def init_gloo(rank: int = 0, world_size: int = 1, port: int | None = None) -> None:
    """torch.distributed on gloo through DeepSpeed (no-op if a group already exists), with its in-order all-gather."""
    import deepspeed

    install_in_order_allgather()  # gloo, unlike NCCL, completes async gathers out of order (see cpu_standins)
    if torch.distributed.is_initialized():
        return
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port or free_port()), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK="0")
    deepspeed.init_distributed(dist_backend="gloo")


def trainer_args(extra: list[str]):
    """The namespace OpenRLHF's own (patched) train_ppo_ray parser and validation produce for BASE_FLAGS + extra."""
    from rft.launch.openrlhf_cli import parse_args

    return parse_args(BASE_FLAGS + extra).args


def tiny_llama_config(num_hidden_layers: int = 2):
    """A 2-layer GQA Llama config, small enough for CPU (the same shape tests/train/test_lora_merge.py uses)."""
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=num_hidden_layers,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                       rms_norm_eps=1e-6, tie_word_embeddings=False, attn_implementation="eager")


def tiny_lora_model(args, seed: int = 0):
    """(PEFT LoRA model, base state dict) in fp32, with the LoraConfig OpenRLHF's Actor builds from `args`."""
    from peft import LoraConfig, TaskType, get_peft_model
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    hf = LlamaForCausalLM(tiny_llama_config())
    base = {k: v.detach().clone() for k, v in hf.state_dict().items()}
    hf.enable_input_require_grads()
    lcfg = LoraConfig(task_type=TaskType.CAUSAL_LM, r=args.lora_rank, lora_alpha=args.lora_alpha,
                      target_modules=args.target_modules, lora_dropout=args.lora_dropout, bias="none")
    return get_peft_model(hf, lcfg), base


def cpu_ds_config(strategy) -> None:
    """Make the strategy's DeepSpeed train config run on CPU (fp32, torch optimizer), no persistent params."""
    original = strategy.get_ds_train_config

    def config(is_actor):
        cfg = original(is_actor)
        cfg["bf16"]["enabled"] = False
        cfg["zero_allow_untested_optimizer"] = True
        # tiny tensors would stay gathered for good (persistent below ~1e5 elements); real LoRA A/B at
        # r=64 are above that, so release every parameter after use, as at full size
        cfg["zero_optimization"]["stage3_param_persistence_threshold"] = 0
        return cfg

    strategy.get_ds_train_config = config


def build_trainer(args, model: torch.nn.Module, *, lr: float = 1e-2, vllm_engines=None, optimizer=None):
    """The real patched ActorPPOTrainer around a real ZeRO-3 DeepSpeed engine of `model` (gloo must be up);
    `optimizer(params)` replaces the default AdamW."""
    from openrlhf.models import Actor
    from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer
    from openrlhf.utils import get_strategy
    from transformers.trainer import get_scheduler

    strategy = get_strategy(args)
    strategy.world_size = torch.distributed.get_world_size()
    cpu_ds_config(strategy)
    actor = Actor(model)  # given a module, Actor sets neither of these two (it does for a checkpoint path)
    actor.packing_samples, actor.temperature = args.packing_samples, args.temperature
    model.config.use_cache = False
    params = [p for p in model.parameters() if p.requires_grad]
    optim = optimizer(params) if optimizer else torch.optim.AdamW(params, lr=lr, betas=args.adam_betas)
    sched = get_scheduler("constant", optim)
    actor, optim, sched = strategy.prepare((actor, optim, sched), is_rlhf=True)
    return ActorPPOTrainer(strategy, actor, ema_model=None, actor_optim=optim, actor_scheduler=sched,
                           micro_train_batch_size=args.micro_train_batch_size, eps_clip=args.eps_clip,
                           vllm_engines=vllm_engines)
