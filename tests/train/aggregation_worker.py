"""One gloo rank of the loss-aggregation property run (launched by tests/train/test_loss_aggregation.py).

usage: python tests/train/aggregation_worker.py RANK WORLD_SIZE PORT OUT_JSON MODE [MODE ...]
       (PYTHONPATH: the openrlhf copy under test, the stubs, the repo; MODE `pristine`: no --loss_aggregation flag)
For each MODE and each micro-batch size (1, and every sample of the rank at once) it runs one real `ppo_train` call
of `ActorPPOTrainer` on a real ZeRO-3 engine (tiny LoRA Llama, SGD lr 1, no clipping): exactly one optimizer step
over the same SAMPLES samples of different response lengths, split over the ranks. Rank 0 writes each run's LoRA
update (= the step's gradient) and, on one rank, the plain-torch token-mean gradient of all samples at once.
"""

from __future__ import annotations

import json
import sys

import torch

from rft.cpu.standins import install as install_cuda_standins
from rft.fixtures.cpu_trainer import TARGETS, build_trainer, init_gloo, tiny_lora_model, trainer_args

PROMPT_LEN, MAX_RESPONSE, VOCAB, SAMPLES = 4, 8, 96, 4
RESPONSE_LENGTHS = (1, 8, 2, 5)  # different lengths: where 0.9.3's per-micro-batch mean departs from the token mean
ADVANTAGES = (1.0, -0.5, -1.0, 0.75)


def samples(actor) -> list[dict]:
    """SAMPLES one-sample batches (the same on every rank and in every run), old log-probs = the initial policy's."""
    gen = torch.Generator().manual_seed(7)
    out = []
    for length, adv in zip(RESPONSE_LENGTHS, ADVANTAGES, strict=True):
        seq = torch.randint(3, VOCAB, (1, PROMPT_LEN + MAX_RESPONSE), generator=gen)
        att = torch.ones_like(seq)
        att[:, PROMPT_LEN + length:] = 0
        action_mask = att[:, PROMPT_LEN:].bool()
        with torch.no_grad():
            old = actor(seq, action_mask, attention_mask=att)
        out.append({"seq": seq, "att": att, "mask": action_mask, "old": old,
                    "adv": torch.full((1, MAX_RESPONSE), adv) * action_mask})
    return out


def experience(s: dict):
    """The OpenRLHF Experience of one sample."""
    from openrlhf.trainer.ppo_utils.experience_maker import Experience

    info = {k: torch.tensor([v]) for k, v in {"reward": 0.0, "return": 0.0, "kl": 0.0,
                                               "response_length": float(s["mask"].sum()),
                                               "total_length": float(s["att"].sum())}.items()}
    return Experience(sequences=s["seq"], attention_mask=s["att"], action_mask=s["mask"], action_log_probs=s["old"],
                      advantages=s["adv"], info=info)


def lora_model(args):
    """The tiny LoRA Llama with every lora_B set to small seeded values (PEFT's zeros would leave A without grad)."""
    model, _ = tiny_lora_model(args)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return model


def lora_values(model) -> dict[str, list[float]]:
    """Every LoRA parameter, gathered from ZeRO-3 (collective: every rank calls it)."""
    import deepspeed

    named = [(n, p) for n, p in model.named_parameters() if ".lora_" in n]
    with deepspeed.zero.GatheredParameters([p for _, p in named]):
        return {n: p.detach().reshape(-1).tolist() for n, p in named}


def reference_gradient(args) -> dict[str, list[float]]:
    """Plain torch: the gradient of the token mean over every action token of all samples, in one batch."""
    from openrlhf.models import Actor, PolicyLoss

    model = lora_model(args)
    actor = Actor(model)
    actor.packing_samples, actor.temperature = False, 1.0
    all_samples = samples(actor)
    cat = {k: torch.cat([s[k] for s in all_samples]) for k in ("seq", "att", "mask", "old", "adv")}
    logp = actor(cat["seq"], cat["mask"], attention_mask=cat["att"])
    loss = PolicyLoss()(logp, cat["old"], cat["adv"], action_mask=cat["mask"])[0]
    loss.backward()
    return {n: p.grad.reshape(-1).tolist() for n, p in model.named_parameters() if ".lora_" in n}


def one_step(mode: str, micro: int, rank: int, world: int) -> dict[str, list[float]]:
    """The LoRA update of one ppo_train call (one optimizer step) with `micro` samples per micro-batch."""
    from openrlhf.models import Actor

    flags = ["--micro_train_batch_size", str(micro), "--train_batch_size", str(SAMPLES), "--max_norm", "1e9",
             "--generate_max_len", str(MAX_RESPONSE), "--lora_rank", "4", "--lora_alpha", "8",
             "--target_modules", *TARGETS]
    if mode != "pristine":
        flags += ["--loss_aggregation", mode]
    args = trainer_args(flags)
    model = lora_model(args)
    plain = Actor(model)
    plain.packing_samples, plain.temperature = False, 1.0
    mine = samples(plain)[rank * SAMPLES // world:(rank + 1) * SAMPLES // world]
    before = {n: p.detach().reshape(-1).tolist() for n, p in model.named_parameters() if ".lora_" in n}
    trainer = build_trainer(args, model, optimizer=lambda params: torch.optim.SGD(params, lr=1.0))
    for s in mine:
        trainer.replay_buffer.append(experience(s))
    engine = trainer.actor.model
    steps = engine.global_steps
    if mode == "pristine":
        trainer.ppo_train(0.0)
    else:
        from rft.train.hooks.ppo_actor import ppo_train

        ppo_train(trainer, 0.0, 1)  # what the patched PolicyModelActor.fit runs
    assert engine.global_steps == steps + 1, f"{mode} micro {micro}: {engine.global_steps - steps} optimizer steps"
    after = lora_values(engine.module)
    return {n: [b - a for b, a in zip(before[n], after[n], strict=True)] for n in before}


def main() -> None:
    rank, world, port, out_path, modes = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5:]
    init_gloo(rank, world, port)
    install_cuda_standins()
    torch.use_deterministic_algorithms(False)
    result: dict = {"world": world, "runs": {}}
    for mode in modes:
        for micro in sorted({1, SAMPLES // world}):
            result["runs"][f"{mode}/micro{micro}"] = one_step(mode, micro, rank, world)
    if rank == 0:
        result["reference"] = reference_gradient(trainer_args(["--lora_rank", "4", "--lora_alpha", "8",
                                                               "--target_modules", *TARGETS]))
        result["tokens"] = sum(RESPONSE_LENGTHS)
        with open(out_path, "w") as f:
            json.dump(result, f)
    torch.distributed.barrier()


if __name__ == "__main__":
    main()
