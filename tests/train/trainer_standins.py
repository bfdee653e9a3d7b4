"""Stand-ins for the GPU side of a patched 0.9.3 trainer (actor group, tokenizer) and rollouts through the real
patched SamplesGenerator: the trainer loop tests of test_metrics and test_prompt_filter."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from rft.train.step_timer import RolloutLog


class Tok:
    pad_token_id = 0

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(f"t{i}" for i in ids)

    def batch_decode(self, rows, skip_special_tokens=False):
        return [self.decode(r.tolist(), skip_special_tokens) for r in rows]


class ActorGroup:
    """Stand-in for the actor RayActorGroup (GPU ranks): records calls, `fit` returns a rank-0-like status."""

    def __init__(self):
        self.calls = []

    def async_run_method_batch(self, method_name, **kwargs):
        self.calls.append(method_name)
        return []

    def async_run_method(self, method_name, **kwargs):
        self.calls.append(method_name)
        if method_name == "fit":
            return [{"policy_loss": 0.1 * kwargs["global_step"], "grad_norm": 2.5, "logratio_max": 0.3}]
        if method_name == "broadcast_to_vllm":
            return [{"lora_sync_seconds": 0.5, "lora_sync_params": 96.0}]
        return []


def rollout(step: int):
    """Two prompts x 2 samples, through the real patched SamplesGenerator response processing."""
    from openrlhf.trainer.ppo_utils import experience_maker as em

    gen = object.__new__(em.SamplesGenerator)
    gen.args = SimpleNamespace(remote_rm_url=["rft/reward/exact_match.py"], agent_func_path=None)
    gen.rollout_log = RolloutLog()
    out = []
    for i, (reward, correct) in enumerate([(1.0, 1), (0.0, 0), (0.9, 0), ("bad", 1)]):
        resp = {"prompt": f"q{i // 2}", "label": str(i // 2), "observation_tokens": [5, 6, 7 + step, 8, 9],
                "action_ranges": [(2, 5)], "rollout_log_probs": None, "truncated": False, "reward": reward,
                "scores": reward, "extra_logs": {"correctness": correct}}
        out.append(gen._process_response_into_experience(resp, prompt_max_len=8, max_new_tokens=8))
    return out


def loop_trainer(cls, tmp_path):
    """`cls` (a patched 0.9.3 trainer class) built by the real BasePPOTrainer.__init__, no GPUs behind it."""
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer

    args = SimpleNamespace(
        kl_target=None, init_kl_coef=0.0, advantage_estimator="group_norm", use_wandb=False, use_tensorboard=False,
        use_dynamic_batch=False, micro_rollout_batch_size=2, n_samples_per_prompt=2, rollout_batch_size=2,
        gamma=1.0, reward_clip_range=(-10.0, 10.0), no_advantage_std_norm=False, overlong_buffer_len=None,
        stop_properly_penalty_coef=None, freezing_actor_steps=-1, deepspeed_enable_sleep=False,
        vllm_enable_sleep=False, dynamic_filtering=False, logging_steps=1, num_episodes=1,
        save_steps=float("inf"), eval_steps=float("inf"),  # what both trainers turn -1 into
        ckpt_path=str(tmp_path / "ckpt"), load_checkpoint=False,
    )
    tr = object.__new__(getattr(cls, "__ray_actor_class__", cls))
    group = ActorGroup()
    BasePPOTrainer.__init__(tr, SimpleNamespace(args=args), group, None, None, None, ["engine"], Tok())
    # the part that needs the actor/reference models on GPUs: log-probs and KL (zero here)
    tr.experience_maker.make_experience = lambda samples: [
        setattr(s, "kl", torch.zeros(s.action_mask.shape)) or s for s in samples
    ]
    return tr, group
