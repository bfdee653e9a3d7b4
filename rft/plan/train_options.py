"""Training options the launch checks and the patched trainer decide alike: the loss aggregation in force, the
reference from the actor (--ref_from_actor), and the
max_lora_rank a vLLM engine serves an adapter of a given rank at. Stdlib only, so Ray workers import it cheaply.
"""

from __future__ import annotations

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The max_lora_rank values vLLM 0.15's LoRAConfig accepts."""


def served_lora_rank(rank: int) -> int:
    """The smallest max_lora_rank vLLM accepts that holds an adapter of rank `rank`; ValueError names the rank."""
    if rank < 1:
        raise ValueError(f"LoRA rank {rank}: native vLLM LoRA needs --lora_rank > 0")
    for allowed in VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ValueError(f"LoRA rank {rank} exceeds vLLM's largest max_lora_rank {VLLM_LORA_RANKS[-1]}")


def uses_actor_as_reference(args) -> bool:
    """True when the run has a reference (--init_kl_coef > 0) and takes it from the LoRA actor with its adapter
    disabled (--ref_from_actor, rft.plan.flags): no reference group is placed or loaded."""
    return getattr(args, "init_kl_coef", 0) > 0 and bool(getattr(args, "ref_from_actor", False))


def rollout_lag(args) -> int:
    """Optimizer steps a batch's rollouts lag the policy that trains on it: --async_queue_size with --async_train
    (the sampler runs that many batches ahead), else 0."""
    return int(getattr(args, "async_queue_size", 1)) if getattr(args, "async_train", False) else 0


MODES = ("microbatch_mean", "token_mean", "dr_grpo_constant")


def default_aggregation(advantage_estimator: str) -> str:
    """The mode an estimator's paper prescribes: Dr. GRPO's constant for dr_grpo, the token mean otherwise."""
    return "dr_grpo_constant" if advantage_estimator == "dr_grpo" else "token_mean"


def window_capable(args) -> bool:
    """True when micro-batches are plain data-parallel shards (no dynamic batch, ring attention or DS tensor
    parallelism), the case the window modes are written for."""
    return not (getattr(args, "use_dynamic_batch", False) or getattr(args, "ring_attn_size", 1) > 1
                or getattr(args, "ds_tensor_parallel_size", 1) > 1)


def aggregation_in_force(args) -> str:
    """`--loss_aggregation` if given, else the estimator's default where the window modes apply and 0.9.3's
    microbatch_mean elsewhere (pristine 0.9.3 has no flag: microbatch_mean)."""
    if not hasattr(args, "loss_aggregation"):
        return "microbatch_mean"
    if args.loss_aggregation:
        return args.loss_aggregation
    return default_aggregation(args.advantage_estimator) if window_capable(args) else "microbatch_mean"


def describe(mode: str, generate_max_len: int | None = None) -> str:
    """One line naming the aggregation and what it divides by (the dry run and the run record)."""
    if mode == "token_mean":
        return "token_mean (token sum of each optimizer step / its action tokens on all ranks)"
    if mode == "dr_grpo_constant":
        return (f"dr_grpo_constant (token sum of each optimizer step / ({generate_max_len} generate_max_len x "
                "its samples on all ranks))")
    return "microbatch_mean (OpenRLHF 0.9.3: token mean per micro-batch, micro-batches weighed equally)"


def validate(mode: str | None, *, use_dynamic_batch: bool, ring_attn_size: int, ds_tensor_parallel_size: int) -> None:
    """Raise ValueError for an explicit window mode where micro-batches are not plain data-parallel shards."""
    if mode not in (None, *MODES):
        raise ValueError(f"--loss_aggregation {mode!r}: use one of {', '.join(MODES)}")
    if mode in (None, "microbatch_mean"):
        return
    for flag, on in (("--use_dynamic_batch", use_dynamic_batch), ("--ring_attn_size > 1", ring_attn_size > 1),
                     ("--ds_tensor_parallel_size > 1", ds_tensor_parallel_size > 1)):
        if on:
            raise ValueError(f"--loss_aggregation {mode} is not implemented with {flag}; "
                             "use --loss_aggregation microbatch_mean")
