"""One gloo rank of a CPU run of the patched `ActorPPOTrainer.ppo_train` (launched by tests/train/test_training_step.py).

usage: python tests/train/ppo_step_worker.py RANK WORLD_SIZE PORT OUT_JSON   (PYTHONPATH: patched openrlhf, stubs, repo)
Two `ppo_train` calls on a tiny LoRA Llama in a real ZeRO-3 engine: global step 1 with small advantages, global
step 2 with huge ones (grad-norm spike). Spies record, around the real code, each micro-batch's ratio statistics
and prompt ids, each accumulation boundary's `get_global_grad_norm()`, each micro-batch's action-token advantages and
per-token entropy, and a plain-torch reference grad norm of the first accumulation window; everything is
written to OUT_JSON for the test to check.
"""

from __future__ import annotations

import copy
import json
import os
import sys

import torch

from rft.cpu.standins import install as install_cuda_standins
from rft.fixtures.cpu_trainer import TARGETS, build_trainer, init_gloo, tiny_lora_model, trainer_args

PROMPT_LEN, RESPONSE_LEN, VOCAB = 6, 5, 96
MICRO_PER_RANK, GA = 4, 2  # train_batch_size 4 = micro 1 x world 2 x GA 2 -> 2 optimizer steps per call
LOG_RATIO_OFFSETS = (0.02, 0.15, 0.05, 0.1)  # old logprobs = initial - offset: distinct ratio maxima per sample
ROLLOUT_GAPS = (0.3, -0.02, -0.25, 0.05)  # vLLM log-probs = old - gap: trainer/rollout log-ratio per sample


def make_experiences(model, rank: int, call: int, adv_scale: float):
    """MICRO_PER_RANK one-sample experiences with distinct prompts (left-padded) and responses (right-padded)."""
    from openrlhf.models import Actor
    from openrlhf.trainer.ppo_utils.experience_maker import Experience

    gen = torch.Generator().manual_seed(1000 * call + 10 * rank)
    old_actor = Actor(model)
    old_actor.packing_samples, old_actor.temperature = False, 1.0
    out, prompts = [], []
    for i in range(MICRO_PER_RANK):
        left_pad, right_pad = i % 2, (i + 1) % 2
        prompt = torch.randint(3, VOCAB, (PROMPT_LEN - left_pad,), generator=gen)
        response = torch.randint(3, VOCAB, (RESPONSE_LEN - right_pad,), generator=gen)
        seq = torch.cat([torch.zeros(left_pad, dtype=torch.long), prompt, response,
                         torch.zeros(right_pad, dtype=torch.long)]).unsqueeze(0)
        att = (torch.arange(seq.shape[1]) >= left_pad).long()
        att[seq.shape[1] - right_pad:] = 0
        att = att.unsqueeze(0)
        action_mask = att[:, PROMPT_LEN:].bool()
        with torch.no_grad():
            initial = old_actor(seq, action_mask, attention_mask=att)
        sign = 1.0 if (i + rank) % 2 == 0 else -1.0
        adv = torch.full((1, RESPONSE_LEN), sign * adv_scale * (1 + i)) * action_mask
        info = {k: torch.tensor([v]) for k, v in
                {"reward": float(i % 2), "return": float(i % 2), "kl": 0.0,
                 "response_length": float(action_mask.sum()), "total_length": float(att.sum())}.items()}
        old = initial - LOG_RATIO_OFFSETS[i]
        out.append(Experience(sequences=seq, attention_mask=att, action_mask=action_mask, action_log_probs=old,
                              advantages=adv, info=info, rollout_log_probs=old - ROLLOUT_GAPS[i]))
        prompts.append(prompt.tolist())
    return out, prompts


def main() -> None:
    rank, world, port, out_path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    init_gloo(rank, world, port)
    install_cuda_standins()
    # microbatch_mean: the reference gradient below is 0.9.3's per-micro-batch mean (test_loss_aggregation.py
    # covers the window modes)
    args = trainer_args(["--micro_train_batch_size", "1", "--train_batch_size", str(GA * world), "--lora_rank",
                         "4", "--lora_alpha", "8", "--target_modules", *TARGETS, "--entropy_loss_coef", "0",
                         "--loss_aggregation", "microbatch_mean"])
    model, _ = tiny_lora_model(args)
    calls = [make_experiences(model, rank, 1, 1e-3), make_experiences(model, rank, 2, 1e4)]
    reference = copy.deepcopy(model)
    trainer = build_trainer(args, model, lr=1e-3)
    engine = trainer.actor.model

    from openrlhf.models import Actor, PolicyLoss

    from rft.train.hooks.ppo_actor import ppo_train

    ref_actor = Actor(reference)
    ref_actor.packing_samples, ref_actor.temperature = False, 1.0
    ref_loss_fn = PolicyLoss(clip_eps_low=args.eps_clip_low_high[0], clip_eps_high=args.eps_clip_low_high[1])
    log = {"micro": [], "boundaries": [], "statuses": [], "prompts": [c[1] for c in calls]}

    real_training_step = trainer.training_step
    real_forward = trainer.actor.forward
    seen_entropy: list[torch.Tensor] = []

    def forward(*a, **k):  # the per-token entropy the real training step computes (needs --entropy_loss_coef)
        out = real_forward(*a, **k)
        if k.get("return_output") and getattr(out[1], "entropy", None) is not None:
            seen_entropy.append(out[1].entropy.detach().clone())
        return out

    trainer.actor.forward = forward

    def training_step(experience, kl_ctl, step):
        if len(log["micro"]) < GA:  # first accumulation window: same weights as the reference copy
            logp = ref_actor(experience.sequences, experience.action_mask, attention_mask=experience.attention_mask)
            loss = ref_loss_fn(logp, experience.action_log_probs, experience.advantages,
                               action_mask=experience.action_mask)[0]
            (loss / GA).backward()
        seen_entropy.clear()
        status = real_training_step(experience, kl_ctl, step)
        seq, att = experience.sequences[0], experience.attention_mask[0]
        mask = experience.action_mask.bool()
        entropy = seen_entropy[-1][:, -mask.shape[1]:]
        log["micro"].append({"ratio_stats": dict(trainer.actor_loss_fn.ratio_stats),
                             "prompt": seq[:PROMPT_LEN][att[:PROMPT_LEN].bool()].tolist(),
                             "advantages": experience.advantages[mask].tolist(),
                             "entropy": entropy[mask].tolist()})
        return status

    real_step = engine.step

    def step(*a, **k):
        before = engine.global_steps
        real_step(*a, **k)
        if engine.global_steps != before:
            log["boundaries"].append({"micro_steps": len(log["micro"]),
                                      "grad_norm": float(engine.get_global_grad_norm())})

    trainer.training_step, engine.step = training_step, step
    for call, (experiences, _) in enumerate(calls, start=1):
        for exp in experiences:
            trainer.replay_buffer.append(exp)
        log["statuses"].append(ppo_train(trainer, 0.0, call))  # what PolicyModelActor.fit runs
        trainer.replay_buffer.clear()
        if call == 1:
            log["spike_log_after_call_1"] = os.path.exists(os.environ["SPIKE_LOG_PATH"])
            grads = [p.grad for n, p in reference.named_parameters() if ".lora_" in n]
            for g in grads:
                torch.distributed.all_reduce(g)
                g /= world
            log["reference_grad_norm"] = float(torch.linalg.vector_norm(torch.cat([g.reshape(-1) for g in grads])))
    with open(out_path, "w") as f:
        json.dump(log, f)
    torch.distributed.barrier()


if __name__ == "__main__":
    main()
