"""The launch rules: flags beyond OpenRLHF's own checks, data, GPUs, disk and patches, applied by `run_checks`.

Each rule reads the parsed OpenRLHF arguments and adds notes, warnings, NEEDS (blocking a launch, not a dry run)
or errors to a `Report`; nothing here changes the machine but one live judge call with REWARD=judge.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from rft.data.problems import problem_hash
from rft.io import iter_jsonl_lines, sha256_file
from rft.launch.judge_check import judge_rule
from rft.plan.lr_schedule import Schedule, evaluate, report, schedule_from_args, suggest, suggestion_line
from rft.plan.openrlhf_cli import OPENRLHF_DIR_ENV, FlagError, installed_root, openrlhf_root, parse_args
from rft.plan.train_options import (
    aggregation_in_force,
    describe,
    rollout_lag,
    served_lora_rank,
    uses_actor_as_reference,
)
from rft.provenance import REPO_ROOT, patch_state
from rft.provision import host
from rft.provision.prereqs import host_ram_problem
from rft.provision.transport import env_warnings, nccl_env, topology_warnings
from rft.reward.settings import RewardSettingsError, load_settings


@dataclass(frozen=True)
class Profile:
    """What a launch script needs from the machine."""

    name: str
    entry: str  # "ppo" (Ray, train_ppo_ray) or "sft" (DeepSpeed launcher, train_sft)
    min_gpu_mem_gib: float
    min_free_disk_gib: float
    sft_gpus: int = 0  # GPUs the DeepSpeed launcher uses (sft only)
    cpu: bool = False  # the CPU demonstration: logical GPUs in a private Ray, no attempt tag, dirty tree allowed
    data_disk: bool = False  # the node's layout: outputs and caches (rft/provision/caches.py) under $DATA_ROOT


PROFILES = {
    # H100 80GB reports ~79.6 GiB; 75 leaves room for driver differences but refuses 40/48 GB cards.
    "20b": Profile("20b", "ppo", min_gpu_mem_gib=75, min_free_disk_gib=50, data_disk=True),
    "120b": Profile("120b", "ppo", min_gpu_mem_gib=75, min_free_disk_gib=100, data_disk=True),
    "small": Profile("small", "ppo", min_gpu_mem_gib=20, min_free_disk_gib=10),
    "sft": Profile("sft", "sft", min_gpu_mem_gib=75, min_free_disk_gib=50, sft_gpus=8, data_disk=True),
    # train_grpo_cpu.sh: a tiny random model on a machine without GPUs (what `make demo` runs)
    "cpu": Profile("cpu", "ppo", min_gpu_mem_gib=0, min_free_disk_gib=1, cpu=True),
}


@dataclass
class Report:
    """Check outcomes: errors always abort; `blocking` aborts a launch but not a dry run."""

    errors: list[str] = field(default_factory=list)
    blocking: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"  ok    {n}" for n in self.notes]
        lines += [f"  WARN  {w}" for w in self.warnings]
        lines += [f"  NEEDS {b}" for b in self.blocking]
        lines += [f"  ERROR {e}" for e in self.errors]
        return "\n".join(lines)

    def add(self, found: list[tuple[str, str]]) -> None:
        """Each (kind, message) onto its list: errors, blocking, warnings or notes."""
        for kind, text in found:
            getattr(self, kind).append(text)


def prompt_filter_note(a, sched) -> str:
    """What --dynamic_filtering / --prompt_history do to the run length (the LR schedule's model stays exact)."""
    what = []
    if getattr(a, "dynamic_filtering", False):
        lo, hi = a.dynamic_filtering_reward_range
        what.append(f"groups with {getattr(a, 'dynamic_filtering_key', 'score')} mean outside ({lo:g}, {hi:g}) "
                    "dropped and refilled")
    if getattr(a, "prompt_history", False):
        what.append(f"uniform prompts skipped before rollout (explore {a.prompt_history_explore:g}, "
                    f"max skip {a.prompt_history_max_skip:g})")
    return (f"prompt filter: {'; '.join(what)}; the run still does {sched.rollout_steps} rollout steps "
            f"({sched.total_steps} scheduler steps), over more passes of the pool")


def is_gpt_oss(pretrain: str | None) -> bool:
    """True for a gpt-oss checkpoint: by name, or by model_type in a local config.json."""
    if not pretrain:
        return False
    if re.search(r"gpt[-_]oss", pretrain, re.IGNORECASE):
        return True
    cfg = Path(pretrain) / "config.json"
    if cfg.is_file():
        try:
            return json.loads(cfg.read_text()).get("model_type") == "gpt_oss"
        except (OSError, json.JSONDecodeError):
            return False
    return False


def attention_rule(args: argparse.Namespace, argv: list[str]) -> tuple[list[str], list[str]]:
    """gpt-oss must keep its attention sinks: refuse flash_attention_2 / sdpa and --packing_samples; WARN that
    rft_flex's training backward has not compiled on a GPU yet."""
    if not is_gpt_oss(args.pretrain):
        return [], []
    if args.packing_samples:
        cause = "--packing_samples"
        for flag in ("--use_dynamic_batch", "--ring_attn_size"):
            if flag in argv and flag != "--packing_samples":
                cause = f"{flag} (which turns on --packing_samples)"
        return [
            f"{cause} with gpt-oss: OpenRLHF 0.9.3 then forces --attn_implementation flash_attention_2, which "
            "silently drops gpt-oss attention sinks (trainer and vLLM log-probs disagree, ratios explode); "
            "remove it and use --attn_implementation eager"
        ], []
    impl = args.attn_implementation
    if impl in ("flash_attention_2", "sdpa"):
        why = (
            "drops gpt-oss attention sinks" if impl == "flash_attention_2" else "is not supported for gpt-oss"
        )
        default = "" if "--attn_implementation" in argv else " (OpenRLHF's default)"
        return [f"--attn_implementation {impl}{default} {why}; use --attn_implementation eager"], []
    if impl not in ("eager", "rft_eager_fp32", "rft_flex"):  # rft.gptoss.attention.PATHS: sinks kept in both passes
        return [], [
            f"--attn_implementation {impl}: make sure it honours gpt-oss attention sinks in forward and backward"
        ]
    if impl == "rft_flex":  # a WARN: the failure is loud, and on another torch than the node's (docs/attention.md)
        return [], [
            "--attn_implementation rft_flex is untested for training: torch inductor failed to compile flex "
            "attention's backward (triton CompilationError) on the one GPU check (torch 2.11, docs/gpu-check.md); "
            "the node's torch 2.9.1 is untried. Run SMOKE=1 first: a failure stops the first training step"
        ]
    return [], []


def checkpointing_rule(args: argparse.Namespace) -> list[str]:
    """ZeRO-3 with frozen weights (a LoRA base) and non-reentrant checkpointing fails at the first backward: DeepSpeed
    0.18.5 frees the frozen weights between the forward and the recompute, whose shape check then raises."""
    frozen = args.lora_rank > 0 or args.load_in_4bit
    if args.zero_stage == 3 and args.gradient_checkpointing and frozen and not args.gradient_checkpointing_use_reentrant:
        return ["--gradient_checkpointing under ZeRO-3 with a frozen base (--lora_rank) needs "
                "--gradient_checkpointing_use_reentrant: DeepSpeed 0.18.5 partitions the frozen weights again during "
                "the non-reentrant recompute and torch raises CheckpointError ('Recomputed values ... different "
                "metadata') at the first backward (docs/gpu-check.md#the-trainer-phases)"]
    return []


def installed_version(dist: str) -> str | None:
    """The installed version of distribution `dist` in this interpreter (None: not installed)."""
    import importlib.metadata as md

    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def flash_attn_rule(args: argparse.Namespace, flash_attn_version: str | None) -> list[str]:
    """Refuse what calls flash-attn kernels when the environment holds rft's import-only stand-in."""
    if not (flash_attn_version or "").endswith("+rft.standin"):
        return []
    uses = [f for f, on in (("--attn_implementation flash_attention_2", args.attn_implementation == "flash_attention_2"),
                            ("--packing_samples", args.packing_samples)) if on]
    if not uses:
        return []
    return [f"{' and '.join(uses)} call flash-attn kernels, and this environment's flash-attn is rft's import-only "
            "stand-in (make train installs it instead of an hour's build): use --attn_implementation eager or sdpa, "
            "or install the real one (pip install --no-build-isolation flash-attn==2.8.3, needs nvcc)"]


def lora_sync_rule(args: argparse.Namespace, rep: Report) -> None:
    """Name the LoRA weight-sync mode the run will use (LORA_SYNC in the scripts); native needs a vLLM-sized rank."""
    if args.lora_rank <= 0 or not (args.vllm_num_engines or 0):
        return
    if getattr(args, "vllm_sync_lora_native", False):
        try:
            rank = served_lora_rank(args.lora_rank)
        except ValueError as e:
            rep.errors.append(f"LoRA sync native: {e}")
            return
        note = f"LoRA sync: native (vLLM enable_lora, max_lora_rank {rank}; the adapter is reloaded every step)"
        if is_gpt_oss(getattr(args, "vllm_pretrain", None) or args.pretrain):
            rep.warnings.append(
                "LoRA sync native on gpt-oss: enable_lora switches vLLM's MoE to its LoRA (Triton) experts, a "
                "kernel path not measured for speed or agreement here; compare vllm_kl with LORA_SYNC=merge"
            )
        rep.notes.append(note)
    elif getattr(args, "vllm_sync_lora_via_object_store", False):
        rep.notes.append("LoRA sync: merge (W0 + s·B@A written into the engines' weights every step)")


def levers_rule(a: argparse.Namespace, rep: Report, facts: dict) -> None:
    """Name the step-time levers in force (docs/step-time.md#levers); the rollout lag goes into the run record, where
    the monitor's agreement check reads how many steps vllm_kl and mismatch_* may trail the policy."""
    facts["rollout_lag"] = lag = rollout_lag(a)
    if lag:
        rep.notes.append(f"--async_train: generation overlaps training; rollouts lag the policy by {lag} step(s) "
                         "(the IS correction weighs them; the monitor judges vllm_kl over the last lag+2 steps)")
    if uses_actor_as_reference(a):
        rep.notes.append("--ref_from_actor: reference log-probs from the actor with its adapter disabled; no "
                         "reference model is loaded or placed")
    if a.lora_rank > 0 and a.zero_stage < 3:
        rep.notes.append(f"--zero_stage {a.zero_stage} with LoRA: the frozen base replicated on every actor rank "
                         "(no per-micro-batch gathers); each rank loads the whole model")


def loss_and_sampling_rule(a: argparse.Namespace, rep: Report, facts: dict) -> None:
    """Name the loss aggregation in force (note + run record); warn about a truncated rollout distribution (top_p /
    top_k / min_p), naming what it does to the IS correction and to the mismatch_* metrics."""
    mode = aggregation_in_force(a)
    facts["loss_aggregation"] = mode
    given = "--loss_aggregation" if getattr(a, "loss_aggregation", None) else f"default for {a.advantage_estimator}"
    rep.notes.append(f"loss aggregation: {describe(mode, a.generate_max_len)} ({given})")
    truncating = [f"--{k} {v:g}" for k, v, off in (("top_p", getattr(a, "top_p", 1.0), 1.0),
                                                   ("top_k", getattr(a, "top_k", -1), -1),
                                                   ("min_p", getattr(a, "min_p", 0.0), 0.0))
                  if v is not None and v != off and not (k == "top_k" and v <= 0)]
    if not truncating:
        return
    what = (f"{' '.join(truncating)}: vLLM samples from the truncated distribution and returns log-probs "
            "renormalised over the kept tokens, while the trainer scores the full vocabulary, so every "
            "rollout/trainer ratio carries the log of the kept mass")
    if a.enable_vllm_is_correction:
        rep.warnings.append(f"sampling: {what}; the IS correction reweights every token by that ratio (TIS clamps "
                            "the low ones, icepop zeroes them) and mismatch_* measure the truncation, so the agreement "
                            "check will flag it. Sample with top_p 1 (no top_k/min_p) to train the loss you mean")
    else:
        rep.warnings.append(f"sampling: {what}; mismatch_* measure that truncation (the agreement check will "
                            "flag it), and the loss treats the truncated rollouts as on-policy")


def looks_local(path: str | None) -> bool:
    """A filesystem path rather than a hub id (absolute, ./, ../ or ~)."""
    return bool(path) and path.startswith(("/", "./", "../", "~"))


def model_rule(a: argparse.Namespace, rep: Report) -> None:
    """The actor checkpoint (--pretrain) and the one vLLM serves (--vllm_pretrain): present, and how MXFP4 loads."""
    from rft.gptoss.mxfp4 import is_mxfp4_checkpoint

    actor, served = a.pretrain, getattr(a, "vllm_pretrain", None) or a.pretrain
    if actor != served:
        rep.notes.append(f"model: actor/reference train from {actor}; vLLM serves {served}")
    path = Path(actor).expanduser() if actor else None
    if path is not None and looks_local(actor) and not (path / "config.json").is_file():
        hint = f"; make it with: python convert_mxfp4.py {served} {actor}" if actor != served else ""
        rep.blocking.append(f"model: --pretrain {actor} has no config.json{hint}")
    elif path is not None and path.is_dir() and is_mxfp4_checkpoint(path):
        rep.warnings.append(
            f"model: --pretrain {actor} is MXFP4: dequantized to bf16 at every start, rank 0 holding the whole bf16 "
            "model (2 bytes/parameter) in host RAM; a bf16 copy from convert_mxfp4.py avoids both"
        )


def host_ram_rule(profile: Profile, a: argparse.Namespace) -> list[str]:
    """Host RAM available now against what the profile holds at once: the figures `make train` checks
    (rft/provision/prereqs.py host_ram_terms), with this command's --offload, --zero_stage and --ref_from_actor."""

    if profile.name not in ("20b", "120b"):
        return []
    line = host_ram_problem(host.mem_available_gib(), profile.name, bool(getattr(a, "offload", False)),
                            getattr(a, "zero_stage", 3), uses_actor_as_reference(a))
    return [line] if line else []


def placement_rules(a: argparse.Namespace) -> list[str]:
    """The placement assertions 0.9.3's train() makes after Ray starts, checked before."""
    errors = []
    if (a.colocate_actor_ref or a.colocate_all_models) and a.init_kl_coef > 0 and not uses_actor_as_reference(a):
        if (a.actor_num_nodes, a.actor_num_gpus_per_node) != (a.ref_num_nodes, a.ref_num_gpus_per_node):
            errors.append(
                "--colocate_actor_ref/--colocate_all_models with --init_kl_coef > 0 needs --ref_num_nodes and "
                f"--ref_num_gpus_per_node equal to the actor's ({a.actor_num_nodes}x{a.actor_num_gpus_per_node}), "
                f"got {a.ref_num_nodes}x{a.ref_num_gpus_per_node}"
            )
    if a.colocate_all_models and not a.async_train and (a.vllm_num_engines or 0) > 0:
        actor, vllm = (
            a.actor_num_nodes * a.actor_num_gpus_per_node,
            a.vllm_num_engines * a.vllm_tensor_parallel_size,
        )
        if actor != vllm:
            errors.append(
                f"--colocate_all_models needs actor GPUs ({actor}) == --vllm_num_engines x "
                f"--vllm_tensor_parallel_size ({vllm})"
            )
    if getattr(a, "offload", False) and a.zero_stage != 3:
        errors.append("--offload (parameter offload) needs --zero_stage 3")
    return errors


def gpus_needed(a: argparse.Namespace) -> int:
    """GPUs the Ray placement of a train_ppo_ray command asks for."""
    shared = a.colocate_all_models
    actor = a.actor_num_nodes * a.actor_num_gpus_per_node
    vllm = (a.vllm_num_engines or 0) * a.vllm_tensor_parallel_size
    if shared and not a.async_train:
        vllm = 0
    ref = 0
    if a.init_kl_coef > 0 and not (a.colocate_actor_ref or shared or uses_actor_as_reference(a)):
        ref = a.ref_num_nodes * a.ref_num_gpus_per_node
    critic = 0 if not a.critic_pretrain or shared else a.critic_num_nodes * a.critic_num_gpus_per_node
    reward = 0
    if not a.remote_rm_url and not shared and not (a.critic_pretrain and a.colocate_critic_reward):
        reward = a.reward_num_nodes * a.reward_num_gpus_per_node
    return actor + vllm + ref + critic + reward


def eval_rule(a: argparse.Namespace) -> list[str]:
    """Greedy eval with n > 1 only measures vLLM nondeterminism (never combine them)."""
    if getattr(a, "eval_dataset", None) and a.eval_temperature == 0 and a.eval_n_samples_per_prompt > 1:
        return [
            f"--eval_temperature 0 with --eval_n_samples_per_prompt {a.eval_n_samples_per_prompt}: near-identical "
            "samples; use n=1 for greedy_pass@1 or temperature 0.6 for sampling_pass@n"
        ]
    return []


# ---------------------------------------------------------------- data


def data_files(a: argparse.Namespace, entry: str) -> dict[str, list[str]]:
    """Local files the command reads, by role."""
    train = a.prompt_data if entry == "ppo" else a.dataset
    roles = {
        "train": [p.split("@")[0].strip() for p in (train or "").split(",") if p.strip()],
        "eval": [p.split("@")[0].strip() for p in (a.eval_dataset or "").split(",") if p.strip()],
    }
    if entry == "ppo" and a.remote_rm_url and a.remote_rm_url[0].endswith(".py"):
        roles["reward"] = [a.remote_rm_url[0]]
    return roles


MAX_UNLABELLED = 0.01  # rows without a label the run may carry (scored 0, counted as label_missing)


def scan_jsonl(path: str, keys: list[str], label_key: str | None = None) -> tuple[dict[str, str], list[str]]:
    """(problem_hash -> 'file:line' for every row, 'file:line' of rows without `label_key`).

    ValueError names file:line on a bad row; rows without a label are returned, not refused, unless more than
    MAX_UNLABELLED of the file lacks one.
    """
    seen: dict[str, str] = {}
    unlabelled: list[str] = []
    rows = 0
    for lineno, row in iter_jsonl_lines(path):
        rows += 1
        for key in keys:
            value = row.get(key)
            if value is None or (isinstance(value, str) and not value.strip()):
                if key == label_key:
                    unlabelled.append(f"{path}:{lineno}")
                    continue
                raise ValueError(
                    f"{path}:{lineno}: missing or empty key {key!r} (configured by the launch flags)"
                )
        text = row[keys[0]]
        if not isinstance(text, str):
            raise ValueError(f"{path}:{lineno}: {keys[0]!r} must be a string, got {type(text).__name__}")
        seen.setdefault(problem_hash(text), f"{path}:{lineno}")
    if not seen:
        raise ValueError(f"{path}: no rows")
    if len(unlabelled) > MAX_UNLABELLED * rows:
        raise ValueError(
            f"{unlabelled[0]}: missing or empty key {label_key!r} (configured by the launch flags); "
            f"{len(unlabelled)} of {rows} rows lack it (more than {MAX_UNLABELLED:.0%})"
        )
    return seen, unlabelled


def check_data(a: argparse.Namespace, entry: str, rep: Report) -> dict[str, str]:
    """Existence, keys and train/eval disjointness; returns {path: sha256} of the files found."""
    roles = data_files(a, entry)
    keys = [a.input_key] + ([a.label_key] if entry == "ppo" and a.label_key else [])
    if entry == "sft" and a.output_key:
        keys.append(a.output_key)
    hashes: dict[str, dict[str, str]] = {}
    digests: dict[str, str] = {}
    for role, paths in roles.items():
        for path in paths:
            if not os.path.isfile(path):
                rep.blocking.append(f"{role} file {path} not found")
                continue
            digests[path] = sha256_file(path)
            if role == "reward":
                continue
            if not path.endswith((".jsonl", ".json")):
                rep.errors.append(f"{path}: expected a local .jsonl file")
                continue
            try:
                seen, unlabelled = scan_jsonl(path, keys, a.label_key if entry == "ppo" else None)
            except ValueError as e:
                rep.errors.append(str(e))
                continue
            hashes.setdefault(role, {}).update(seen)
            if unlabelled:
                rep.warnings.append(
                    f"data: {len(unlabelled)} row(s) of {path} without {a.label_key!r} (e.g. {unlabelled[0]}): "
                    "the reward scores them 0 and the metrics count them as label_missing"
                )
            rep.notes.append(f"data: {path} ({role}) keys {keys} present")
    common = set(hashes.get("train", {})) & set(hashes.get("eval", {}))
    if common:
        ex = sorted(common)[:3]
        pairs = "; ".join(f"{hashes['train'][h]} = {hashes['eval'][h]}" for h in ex)
        rep.errors.append(f"train and eval share {len(common)} problems by problem_hash, e.g. {pairs}")
    elif "train" in hashes and "eval" in hashes:
        rep.notes.append(
            f"data: train ({len(hashes['train'])}) and eval ({len(hashes['eval'])}) disjoint by problem hash"
        )
    return digests


# ---------------------------------------------------------------- resources


def transport_rule(env: Mapping[str, str], gpus: int, nodes: int, rep: Report, facts: dict) -> None:
    """The GPU topology and the NCCL_* environment into the run record; a GPU pair without NVLink or a variable
    that turns a transport off is a warning (rft/provision/transport.py)."""
    topology = host.gpu_topology(dict(env))
    facts["gpu_topology"], facts["nccl_env"] = topology, nccl_env(dict(env))
    rep.warnings += topology_warnings(topology, gpus) + env_warnings(dict(env), nodes)


def _gpu_label(g: dict) -> str:
    return f"{g['index']}:{g['name']} {g['memory_gib']} GiB"


def check_gpus(
    needed: int, profile: Profile, gpus: list[dict] | None, rep: Report, ray_address: str | None = None
) -> None:
    """GPU count and memory against the command's placement (not the count on an existing Ray cluster)."""
    if gpus is None or not gpus:
        rep.blocking.append(
            f"GPUs: this launch needs {needed} GPU(s) with >= {profile.min_gpu_mem_gib:g} GiB each; nvidia-smi "
            "found none on this machine (use --dry-run to check the configuration here)"
        )
        return
    small = [g for g in gpus if g["memory_gib"] < profile.min_gpu_mem_gib]
    if small:
        rep.blocking.append(
            f"GPUs: {len(small)} GPU(s) below {profile.min_gpu_mem_gib:g} GiB "
            f"({', '.join(_gpu_label(g) for g in small)})"
        )
    if ray_address:
        rep.notes.append(f"GPUs: existing Ray cluster {ray_address}: {needed} needed, count not checked here")
    elif len(gpus) < needed:
        rep.blocking.append(f"GPUs: the command places {needed} GPUs, this node has {len(gpus)}")
    else:
        rep.notes.append(
            f"GPUs: {len(gpus)} x {gpus[0]['name']} ({gpus[0]['memory_gib']} GiB), {needed} needed"
        )


EM_REWARD_FILE = "reward_func_em.py"


def em_settings_rule(a: argparse.Namespace, rep: Report, env: Mapping[str, str]) -> None:
    """reward_func_em.py reads reward.toml when each vLLM engine loads it: the file must load here first."""
    urls = getattr(a, "remote_rm_url", None) or []
    if not urls or Path(urls[0]).name != EM_REWARD_FILE:
        return
    try:
        settings = load_settings(env=env)
    except RewardSettingsError as e:
        rep.errors.append(f"reward: {e}")
        return
    rep.notes.append(f"reward: exact match, scheme {settings.scheme} ({settings.source})")


CPU_SITE = REPO_ROOT / "rft" / "cpu" / "site"


def standins_rule(profile: Profile, env: Mapping[str, str], gpus: list[dict] | None) -> list[str]:
    """The CPU stand-ins never reach a GPU node: the cpu profile refuses GPUs, a GPU profile the stand-ins."""
    if profile.cpu:
        if gpus:
            return [
                f"CPU profile on a GPU node: nvidia-smi lists {len(gpus)} GPU(s) ({_gpu_label(gpus[0])}, ...); the "
                "CPU demonstration replaces torch.cuda with stand-ins and skips every GPU, disk and git check. "
                "Use a GPU launch script (train_grpo_20b_a28a.sh, ...) or `make train`"
            ]
        return []
    errors = []
    if env.get("RFT_CPU_STANDINS"):
        errors.append(
            f"RFT_CPU_STANDINS={env['RFT_CPU_STANDINS']} is set: the CPU profile's torch.cuda stand-ins must not "
            f"reach a {profile.name} launch; unset it"
        )
    site = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
            if p and (Path(p).resolve() == CPU_SITE.resolve() or Path(p).parts[-3:] == ("rft", "cpu", "site"))]
    if site:
        errors.append(
            f"PYTHONPATH holds {site[0]} (the CPU profile's sitecustomize and flash_attn stand-in): remove it "
            f"before a {profile.name} launch"
        )
    return errors


def check_disk(paths: list[str], min_gib: float, rep: Report) -> None:
    """Free space where checkpoints and saved models go."""
    for path in paths:
        base = host.existing_ancestor(path)
        free = host.free_gib(base)
        msg = f"disk: {path} ({base}) has {free:.0f} GiB free"
        if free < min_gib:
            rep.blocking.append(f"{msg}, needs >= {min_gib:g} GiB")
        else:
            rep.notes.append(msg)


# ---------------------------------------------------------------- patches and the whole set


def patched_scratch_copy(dest: Path, source: Path) -> Path | None:
    """Copy `source`/openrlhf/ into `dest` and apply the patch series there; None if that fails."""
    script = REPO_ROOT / "apply_patches.sh"
    if not script.is_file():
        return None
    shutil.copytree(source / "openrlhf", dest / "openrlhf", ignore=shutil.ignore_patterns("__pycache__"))
    res = subprocess.run(
        ["bash", str(script), "--target", str(dest)], capture_output=True, text=True, cwd=REPO_ROOT
    )
    return dest if res.returncode == 0 else None



def smoke_mode(env: Mapping[str, str] | None = None) -> bool:
    """RFT_SMOKE=1 (SMOKE=1 in the launch scripts): a smoke run, a few steps on purpose."""
    return (os.environ if env is None else env).get("RFT_SMOKE") == "1"


def sft_gpus(profile: Profile, env: Mapping[str, str] | None = None) -> int:
    """GPUs for the DeepSpeed launcher: NUM_GPUS from the environment, else the profile's."""
    value = (os.environ if env is None else env).get("NUM_GPUS", "").strip()
    return int(value) if value.isdigit() else profile.sft_gpus


@dataclass
class Check:
    """What every rule reads: the profile, the command (argv and OpenRLHF's parse of it), the launcher's environment
    (read once by its entry point) and the record's facts; rules run in table order, and the LR preflight leaves its
    schedule here for the judge's cost estimate."""

    profile: Profile
    argv: list[str]
    env: Mapping[str, str]
    args: argparse.Namespace
    facts: dict
    lr_pool: int | None = None
    pool_if_absent: int | None = None
    judge_live: bool = True
    sched: Schedule | None = None

    @property
    def ppo(self) -> bool:
        """A GRPO launch (Ray, train_ppo_ray)."""
        return self.profile.entry == "ppo"

    @property
    def needed(self) -> int:
        """GPUs the command places (GRPO), or the DeepSpeed launcher's count (SFT)."""
        return gpus_needed(self.args) if self.ppo else sft_gpus(self.profile, self.env)

    @cached_property
    def gpus(self) -> list[dict] | None:
        """This node's GPUs, read once per launch (rft/provision/host.py)."""
        return host.gpu_inventory()


Finding = tuple[str, str]
"""(kind, message): kind is the Report list it goes to: errors, blocking, warnings or notes."""
Rule = Callable[[Check], list[Finding]]


def findings(rep: Report) -> list[Finding]:
    """A report's entries as findings, kind by kind."""
    return [(kind, text) for kind in ("errors", "blocking", "warnings", "notes") for text in getattr(rep, kind)]


def filled(fill: Callable[[Report], object]) -> list[Finding]:
    """The findings a check that writes into a report writes."""
    rep = Report()
    fill(rep)
    return findings(rep)


def of(kind: str, texts: list[str]) -> list[Finding]:
    """Messages as findings of one kind."""
    return [(kind, t) for t in texts]


def attention_rules(c: Check) -> list[Finding]:
    """The attention path, flash-attn and gradient checkpointing."""
    errs, warns = attention_rule(c.args, c.argv)
    errs += flash_attn_rule(c.args, installed_version("flash-attn")) + checkpointing_rule(c.args)
    return of("errors", errs) + of("warnings", warns)


def model_rules(c: Check) -> list[Finding]:
    """The actor's and the served checkpoint: present, and how MXFP4 loads."""
    return filled(lambda rep: model_rule(c.args, rep))


def grpo_rules(c: Check) -> list[Finding]:
    """LoRA sync, loss and sampling, the levers, the placement and the eval settings of a GRPO command."""
    if not c.ppo:
        return []
    found = filled(lambda rep: lora_sync_rule(c.args, rep))
    found += filled(lambda rep: loss_and_sampling_rule(c.args, rep, c.facts))
    found += filled(lambda rep: levers_rule(c.args, rep, c.facts))
    return found + of("errors", placement_rules(c.args)) + of("warnings", eval_rule(c.args))


def data_rule(c: Check) -> list[Finding]:
    """The data files: present, their keys, train and eval disjoint; their SHA-256 into the facts."""
    rep = Report()
    c.facts["data_sha256"] = check_data(c.args, c.profile.entry, rep)
    return findings(rep)


def lr_preflight_rule(c: Check) -> list[Finding]:
    """The LR schedule over the pool (rft/plan/lr_schedule.py); the schedule stays in `c` for the judge's rule."""
    if not c.ppo:
        return []
    a, env, rep = c.args, c.env, Report()
    try:
        try:
            c.sched = schedule_from_args(a, c.lr_pool)
        except FileNotFoundError:
            if c.pool_if_absent is None:
                raise
            c.sched = schedule_from_args(a, c.pool_if_absent)  # data not here: size it from --pool N
            rep.warnings.append(f"LR preflight: pool taken from --pool {c.pool_if_absent} (--prompt_data not found)")
    except (ValueError, FileNotFoundError) as e:
        rep.blocking.append(f"LR preflight: cannot size the pool ({e})")
        return findings(rep)
    sched = c.sched
    verdict = evaluate(sched)
    c.facts["lr_preflight"] = report(sched, verdict)
    # a smoke run is a few steps on purpose: the schedule rules do not apply to it
    (rep.warnings if smoke_mode(env) else rep.errors).extend(f"LR preflight: {e}" for e in verdict.errors)
    hints = suggest(sched) if not verdict.ok and not smoke_mode(env) else []
    if hints:
        rep.errors.append(f"LR preflight: {suggestion_line(hints)}")
    rep.warnings += [f"LR preflight: {w}" for w in verdict.warnings]
    if verdict.ok:
        rep.notes.append(
            f"LR preflight: {sched.total_steps} scheduler steps, warm-up {sched.warmup_steps}, "
            f"{sched.steps_per_rollout:g} per rollout step"
        )
    if getattr(a, "dynamic_filtering", False) or getattr(a, "prompt_history", False):
        rep.notes.append(prompt_filter_note(a, sched))
    return findings(rep)


def reward_rules(c: Check) -> list[Finding]:
    """The exact-match reward's settings file, and the judge's credentials, cost and one live call."""
    if not c.ppo:
        return []
    steps = c.sched.rollout_steps if c.sched is not None else None
    return filled(lambda rep: em_settings_rule(c.args, rep, c.env)) + filled(
        lambda rep: judge_rule(c.args, rep, steps, live=c.judge_live, env=c.env))


def standins_rules(c: Check) -> list[Finding]:
    """The CPU profile's stand-ins never on a GPU node."""
    return of("errors", standins_rule(c.profile, c.env, c.gpus))


def smoke_rule(c: Check) -> list[Finding]:
    """SMOKE=1: a GRPO command with a LoRA adapter and an engine; what the smoke run will do."""
    a = c.args
    if not smoke_mode(c.env):
        return []
    if c.profile.entry == "sft":
        return [("errors", "SMOKE=1 checks a GRPO run's LoRA sync to vLLM: an SFT launch has no smoke run")]
    if a.lora_rank <= 0 or not (a.vllm_num_engines or 0):
        return [("errors", "SMOKE=1 checks the LoRA sync to vLLM: this command has no LoRA adapter or no engine")]
    return [("notes",
             f"smoke run: {a.max_samples} prompts = {a.max_samples // max(a.rollout_batch_size, 1)} rollout step(s), "
             f"lr {a.actor_learning_rate:g}, eval and checkpoints off, sync probe on; PASS/FAIL at the end")]


def gpu_rules(c: Check) -> list[Finding]:
    """The CPU profile's logical GPUs, or this node's GPUs, their topology and the NCCL_* environment."""
    skip_lora = getattr(c.args, "vllm_sync_lora_skip", False)
    if c.profile.cpu:
        found = [("notes", f"GPUs: none used; {c.needed} logical GPU(s) in the private Ray on 127.0.0.1 (CPU profile)")]
        if skip_lora:
            found.append(("warnings", "--vllm_sync_lora_skip: the ablation run, rollouts stay on the base model"))
        return found
    c.facts["gpus"] = c.gpus
    found = filled(lambda rep: check_gpus(c.needed, c.profile, c.gpus, rep, c.env.get("RAY_ADDRESS")))
    nodes = getattr(c.args, "actor_num_nodes", 1) or 1
    found += filled(lambda rep: transport_rule(c.env, len(c.gpus or []), nodes, rep, c.facts))
    if skip_lora:
        found.append(("errors", "--vllm_sync_lora_skip is an ablation for the CPU profile: it would train nothing"))
    return found


def resource_rules(c: Check) -> list[Finding]:
    """Host RAM for the model loads, and disk where checkpoints and saved models go."""
    found = of("blocking", host_ram_rule(c.profile, c.args))
    return found + filled(lambda rep: check_disk([c.args.save_path, c.args.ckpt_path], c.profile.min_free_disk_gib, rep))


RULES: list[Rule] = [
    attention_rules,
    model_rules,
    grpo_rules,
    data_rule,
    lr_preflight_rule,
    reward_rules,
    standins_rules,
    smoke_rule,
    gpu_rules,
    resource_rules,
]
"""The launch checks, in the order their findings are reported."""


def parse_command(
    profile: Profile, argv: list[str], env: Mapping[str, str], facts: dict
) -> tuple[list[Finding], argparse.Namespace | None]:
    """The patch series' state, then the command parsed by OpenRLHF's own parser (on a patched scratch copy when
    the installed library is not patched); no namespace when the flags are refused."""
    override = env.get(OPENRLHF_DIR_ENV)
    state = patch_state(target=override)
    patched, patch_out = state.applied, state.output
    facts["patches"] = {"applied": patched, "check_output": patch_out}
    found: list[Finding] = [
        ("notes", "patches: all applied") if patched else
        ("blocking",
         f"patches: not all applied to the installed openrlhf (run bash apply_patches.sh): {patch_out.splitlines()[-1:]}")
    ]
    where = "the installed (patched) OpenRLHF" if patched else "the installed OpenRLHF"
    with tempfile.TemporaryDirectory(prefix="rft-openrlhf-") as tmp:
        root = openrlhf_root(env)
        if not patched and not override and patched_scratch_copy(Path(tmp), installed_root()):
            root = Path(tmp)  # check the flags the patched library will have
            where = "a scratch copy of the installed OpenRLHF with the patch series applied"
        try:
            parsed = parse_args(argv, profile.entry, root)
        except FlagError as e:
            return [*found, ("errors", f"{e} (checked against {where})")], None
    found += [("notes", f"flags: accepted by OpenRLHF's own parser and validation ({profile.entry}), on {where}")]
    return found + of("warnings", [f"OpenRLHF: {w}" for w in parsed.warnings]), parsed.args


def run_checks(
    profile: Profile, argv: list[str], env: Mapping[str, str], *, lr_pool: int | None = None,
    pool_if_absent: int | None = None, judge_live: bool = True
) -> tuple[Report, dict]:
    """Every check that does not change anything (but one live judge call with REWARD=judge): the command parsed,
    then each rule of RULES; returns the report and facts for the run record. `env`: the launcher's environment,
    read once by its entry point (RFT_OPENRLHF_DIR, RAY_ADDRESS, RFT_SMOKE, NUM_GPUS, the judge's credentials and
    settings file); `pool_if_absent`: the launch's --pool N, the pool when --prompt_data is not on this machine."""
    rep, facts = Report(), {}
    found, args = parse_command(profile, argv, env, facts)
    rep.add(found)
    if args is None:
        return rep, facts
    check = Check(profile, argv, env, args, facts, lr_pool=lr_pool, pool_if_absent=pool_if_absent, judge_live=judge_live)
    for rule in RULES:
        rep.add(rule(check))
    return rep, facts
