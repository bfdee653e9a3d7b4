"""rft's own OpenRLHF flags: `add_flags` registers every one on `train_ppo_ray`'s parser, `finish` validates and
derives them after parsing. Stdlib only: the launch runs the patched parser without ray, torch or vLLM."""

from __future__ import annotations

import argparse

from rft.plan.train_options import MODES
from rft.plan.train_options import validate as validate_loss_aggregation

_SWITCHES = {
    "--vllm_sync_lora_via_object_store": (
        "(rft) With --lora_rank > 0: after each step send only the LoRA adapter (A, B, scaling) to the vLLM engines "
        "through the Ray object store; each engine writes W0 + scaling*B@A into its weights. No NCCL group between "
        "trainer and engines. (--vllm_sync_with_ray is Ray-collective NCCL, unrelated.)"
    ),
    "--vllm_sync_lora_native": (
        "(rft) With --lora_rank > 0: the vLLM engines serve base + adapter (enable_lora) instead of merging the "
        "adapter into their weights; it still travels through the Ray object store (implies "
        "--vllm_sync_lora_via_object_store) and is loaded under a new adapter id every step. No bf16 rounding of "
        "small updates into the base weights; generation runs the LoRA kernels."
    ),
    "--vllm_sync_lora_skip": (
        "(rft, ablation) never send the adapter to vLLM: rollouts stay on the base model while the trainer moves. "
        "Only to show that the sync matters (the CPU profile's sync-off run); never for training."
    ),
    "--lora_sync_probe": (
        "(rft, smoke runs) score a fixed probe prompt in every vLLM engine before the first LoRA sync and after each "
        "one; logs lora_sync_probe_logprob and lora_sync_probe_delta (the smallest change of any engine since before "
        "the first sync: 0 when an adapter never arrived)"
    ),
    "--ref_from_actor": (
        "(rft) LoRA only: the reference log-probs from the actor with its adapter disabled (PEFT disable_adapter) "
        "instead of a second copy of the base model; no reference group is created"
    ),
    "--offload": (
        "(rft) Offload ZeRO-3 parameters of the trained models to CPU (DeepSpeed offload_param); requires "
        "--zero_stage 3"
    ),
    "--prompt_history": (
        "rft: skip a prompt whose last groups were uniform with probability min(max_skip, 1 - explore**streak)"
    ),
    "--prompt_data_in_order": "rft: feed the prompts in the file's order every pass (no shuffle): a curriculum",
}


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Register every rft flag, with its help text, on OpenRLHF's `train_ppo_ray` parser."""
    for flag, help_text in _SWITCHES.items():
        parser.add_argument(flag, action="store_true", default=False, help=help_text)
    parser.add_argument(
        "--lora_sync_probe_recipe_lr", type=float, default=0.0,
        help="(rft, smoke runs) the recipe's learning rate: with --lora_sync_probe the workers also report how much "
        "of the update that LR would make in rft.train.sync_probe.RECIPE_STEPS steps survives bf16 rounding",
    )
    parser.add_argument(
        "--vllm_call_timeout", type=float, default=None,
        help="(rft) seconds without any answer from the vLLM engines a call waits on before the run fails naming the "
        "silent engines (rollouts, weight sync, probe, sleep/wake-up); any answer restarts the clock; <= 0 waits "
        "forever (default rft.train.engine_calls.DEFAULT_TIMEOUT_S, 600)",
    )
    parser.add_argument(
        "--loss_aggregation", type=str, default=None, choices=list(MODES),
        help="(rft) How the token losses of an optimizer step combine: token_mean (over every action token of the "
        "step on all ranks), dr_grpo_constant (token sum / (generate_max_len x samples)), microbatch_mean (0.9.3: "
        "a mean per micro-batch); default dr_grpo_constant for dr_grpo, token_mean otherwise",
    )
    parser.add_argument(
        "--vllm_pretrain", type=str, default=None,
        help="(rft) Model the vLLM engines load (default: --pretrain). Lets the actor/reference train from a bf16 "
        "copy made by convert_mxfp4.py while vLLM serves the MXFP4 original; needs --lora_rank > 0 when it differs "
        "(the adapter sync touches attention only, which both checkpoints hold identically in bf16)",
    )
    parser.add_argument(
        "--dynamic_filtering_key", type=str, default="score", choices=["score", "correctness"],
        help="rft: what --dynamic_filtering_reward_range applies to: the group mean of scores or of correctness",
    )
    parser.add_argument("--prompt_history_explore", type=float, default=0.25, help="rft: see --prompt_history")
    parser.add_argument("--prompt_history_max_skip", type=float, default=0.95, help="rft: see --prompt_history")


def finish(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """Validate the rft flags of parsed `args` (parser.error names the flag) and derive the implied ones."""
    if args.offload and args.zero_stage != 3:
        parser.error(f"--offload requires --zero_stage 3 (got --zero_stage {args.zero_stage})")
    try:  # the window modes assume plain data-parallel micro-batches (rft.train.loss_aggregation)
        validate_loss_aggregation(args.loss_aggregation, use_dynamic_batch=args.use_dynamic_batch,
                                  ring_attn_size=args.ring_attn_size,
                                  ds_tensor_parallel_size=args.ds_tensor_parallel_size)
    except ValueError as e:
        parser.error(str(e))
    # 0.9.3's full-weight sync ships PEFT parameter names that vLLM silently skips, so a LoRA run would keep
    # sampling from the base model; only the object-store adapter sync is correct for LoRA.
    if args.vllm_sync_lora_native:
        if args.lora_rank <= 0:
            parser.error("--vllm_sync_lora_native requires --lora_rank > 0")
        args.vllm_sync_lora_via_object_store = True  # the native mode's transport
    if args.ref_from_actor and args.lora_rank <= 0:
        parser.error("--ref_from_actor requires --lora_rank > 0 (the reference is the actor without its adapter)")
    if args.vllm_sync_lora_via_object_store and args.lora_rank <= 0:
        parser.error("--vllm_sync_lora_via_object_store requires --lora_rank > 0")
    if args.vllm_sync_lora_via_object_store and args.vllm_sync_with_ray:
        parser.error("--vllm_sync_lora_via_object_store and --vllm_sync_with_ray are mutually exclusive")
    engines = (args.vllm_num_engines or 0) > 0
    if args.lora_rank > 0 and engines and not args.vllm_sync_lora_via_object_store:
        parser.error(
            "--lora_rank > 0 with vLLM engines needs --vllm_sync_lora_via_object_store: OpenRLHF 0.9.3's weight sync "
            "sends PEFT names that vLLM ignores (rollouts would stay on the base model)"
        )
    # vLLM may serve another copy of the policy (the MXFP4 original of a bf16 --pretrain). Only the LoRA adapter
    # sync keeps them in step; 0.9.3's full-weight sync would push bf16 experts into the engines' layout.
    if args.vllm_pretrain is None:
        args.vllm_pretrain = args.pretrain
    elif args.vllm_pretrain != args.pretrain and args.lora_rank <= 0 and engines:
        parser.error(
            f"--vllm_pretrain {args.vllm_pretrain} differs from --pretrain {args.pretrain}: needs --lora_rank > 0 "
            "(full-weight sync to vLLM assumes both load the same checkpoint)"
        )
    return args
