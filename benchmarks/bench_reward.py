"""Benchmark the exact-match reward against math-verify on generated, realistic rollouts.

Both reward functions are called exactly as OpenRLHF 0.9.3 calls `--remote_rm_url file.py`: one sample
per call, `queries` = prompt + response with special tokens, each call in `asyncio.to_thread`, all of
a batch gathered at once. Prints responses/second and accuracy (agreement with the intended reward)
on a mixed set (integer and symbolic answers, Harmony and plain, complete and truncated) and on an
integer-answer set, with the ratios ours / math-verify.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # rft (and rft.fixtures) from this checkout

QWEN_PROMPT = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n{problem}\n"
    "Please reason step by step, and put your final answer within \\boxed{{}}.<|im_end|>\n<|im_start|>assistant\n"
)
HARMONY_PROMPT = (
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\nCurrent date: 2025-08-01\n\nReasoning: medium\n\n# Valid channels: analysis, "
    "commentary, final. Channel must be included for every message.<|end|><|start|>user<|message|>{problem}\n"
    "Please reason step by step, and put your final answer within \\boxed{{}}.<|end|><|start|>assistant"
)
FILLER = [
    "First, note that ${a} + {b} = {c}$, so the running total is {c}.",
    "Multiplying, we get ${a} \\times {b} = {d}$.",
    "Let $n = {a}$; then $n^2 = {e}$ and $2n = {f}$.",
    "We check the case $k = {b}$: it gives {c} remainders, which is too many.",
    "Consider the equation $x^2 - {c}x + {d} = 0$ and its discriminant.",
    "Hmm, wait. Let me recount: there are {a} rows and {b} columns, so {d} cells.",
    "By symmetry the answer for {a} equals the answer for {b}.",
]

# (canonical label, equivalent written forms, a wrong answer)
SYMBOLIC = [
    ("\\frac{\\sqrt{3}}{2}", ["\\dfrac{\\sqrt{3}}{2}", "\\frac{1}{2}\\sqrt{3}", "\\frac{\\sqrt3}{2}"], "\\frac{\\sqrt{2}}{2}"),
    ("\\frac{3}{4}", ["\\dfrac{3}{4}", "0.75", "3/4"], "\\frac{4}{3}"),
    ("2\\pi", ["2 \\pi", "\\pi \\cdot 2"], "\\pi"),
    ("(1,2)", ["(1, 2)", "\\left(1, 2\\right)"], "(2, 1)"),
    ("[0,\\infty)", ["[0, \\infty)", "x \\in [0, \\infty)"], "(0, \\infty)"),
    ("4\\sqrt{2}", ["\\sqrt{32}", "4 \\sqrt 2"], "2\\sqrt{2}"),
    ("\\frac{1}{2^{10}}", ["\\frac{1}{1024}", "2^{-10}"], "\\frac{1}{2^{9}}"),
    ("x^2+2x+1", ["(x+1)^2", "x^2 + 2x + 1"], "x^2+1"),
    ("\\frac{5\\pi}{6}", ["\\dfrac{5\\pi}{6}", "\\frac{5}{6}\\pi"], "\\frac{\\pi}{6}"),
    ("\\{-2,3\\}", ["\\{3, -2\\}", "-2, 3"], "\\{2,3\\}"),
    ("3+2\\sqrt{2}", ["2\\sqrt{2}+3", "3 + \\sqrt{8}"], "3-2\\sqrt{2}"),
    ("\\sqrt{5}-1", ["-1+\\sqrt{5}"], "\\sqrt{5}+1"),
    ("\\log_{2}3", ["\\log_2 3", "\\frac{\\ln 3}{\\ln 2}"], "\\log_{3}2"),  # needs math-verify
]


@dataclass(frozen=True)
class Sample:
    """One rollout: prompt, full query as OpenRLHF decodes it, label, the intended reward, and its kind."""

    prompt: str
    query: str
    label: str
    expected: float
    kind: str


def _reasoning(rng: random.Random, sentences: int) -> str:
    out = []
    for _ in range(sentences):
        a, b = rng.randint(2, 60), rng.randint(2, 60)
        out.append(rng.choice(FILLER).format(a=a, b=b, c=a + b, d=a * b, e=a * a, f=2 * a))
    return " ".join(out)


def _int_forms(n: int, rng: random.Random) -> str:
    """An integer written the way models write it."""
    forms = [str(n), f"{n:,}", f"\\text{{{n}}}", f"x = {n}", f"{n}.", f"\\mathbf{{{n}}}", f"{n}\\text{{ cm}}"]
    if 0 < n < 100:
        forms.append(f"0{n}")
    return rng.choice(forms)


# the final message of each kind that states its answer plainly ({good}, {wrong}: forms of the right and a wrong
# answer, {label}: the label's form)
FINAL_TEMPLATES = {
    "boxed": "So the answer is $\\boxed{{{good}}}$.",
    "boxed_wrong": "Therefore the answer is $\\boxed{{{wrong}}}$.",
    "phrase": "The final answer is ${good}$.",
    "gsm8k": "#### {label}",
    "last_number": "Subtracting the overlap leaves {label}.",
    "unclosed": "So the answer is $\\boxed{{\\frac{{{label}}}{{",
}


def make_sample(rng: random.Random, symbolic: bool) -> Sample:
    """One realistic rollout with its intended reward (final-channel answer, no credit for truncation)."""
    if symbolic:
        label, forms, wrong = rng.choice(SYMBOLIC)
        good = rng.choice([label, *forms])
    else:
        n = rng.choice([rng.randint(0, 999), rng.randint(1000, 999_999)])
        label, good, wrong = str(n), _int_forms(n, rng), str(n + rng.choice([-10, -1, 1, 2, 100]))
    problem = f"Problem {rng.randint(1, 10**6)}: {_reasoning(rng, 2)} Find the requested value."
    think = _reasoning(rng, rng.randint(6, 30))
    harmony = rng.random() < 0.5
    kind = rng.choices(
        ["boxed", "boxed_wrong", "phrase", "gsm8k", "last_number", "truncated", "unclosed", "decoy"],
        weights=[40, 20, 8, 4, 4, 12, 4, 8],
    )[0]
    if symbolic and kind in ("gsm8k", "last_number"):
        kind = "boxed"
    expected = 1.0 if kind in ("boxed", "phrase", "gsm8k", "last_number") else 0.0
    if kind in FINAL_TEMPLATES:
        final = FINAL_TEMPLATES[kind].format(good=good, wrong=wrong, label=label)
    elif kind == "decoy":  # right answer in the reasoning, wrong one given as the answer
        think += f" Maybe it is \\boxed{{{good}}}? Let me double-check."
        final = f"The final answer is {wrong}." if harmony else f"Actually no. The final answer is $\\boxed{{{wrong}}}$."
    else:  # truncated mid-reasoning, right number last
        final = None
    if harmony:
        prompt = HARMONY_PROMPT.format(problem=problem)
        response = f"<|channel|>analysis<|message|>{think}"
        if kind == "truncated":
            response += f" So far the count is {label}"
        elif kind == "unclosed":
            response += f"<|end|><|start|>assistant<|channel|>final<|message|>{final}"
        else:
            response += f"<|end|><|start|>assistant<|channel|>final<|message|>{final}<|return|>"
    else:
        prompt = QWEN_PROMPT.format(problem=problem)
        if kind == "truncated":
            response = f"{think} So far the count is {label}"
        elif kind == "unclosed":
            response = f"{think}\n\n{final}"
        else:
            response = f"{think}\n\n{final}<|im_end|>"
    return Sample(prompt, prompt + response, label, expected, ("harmony/" if harmony else "plain/") + kind)


def make_set(n: int, symbolic_share: float, seed: int) -> list[Sample]:
    """n samples, a share of them with symbolic answers."""
    rng = random.Random(seed)
    return [make_sample(rng, rng.random() < symbolic_share) for _ in range(n)]


def load_ours(file: str = "reward_func_em.py") -> Callable:
    """reward_func from a reward file, loaded by file path exactly as OpenRLHF does."""
    from rft.fixtures.reward_files import load_reward_module

    return load_reward_module(ROOT / file).reward_func


def noop_reward_func(queries, prompts, labels) -> dict:
    """Does nothing: its throughput is the ceiling the call path itself allows."""
    return {"rewards": [0.0] * len(queries), "scores": [0.0] * len(queries), "extra_logs": {}}


def math_verify_reward_func(queries, prompts, labels) -> dict:
    """math-verify used correctly in a thread: timeouts off, gold as LaTeX, prompt stripped off."""
    from math_verify import parse, verify

    rewards = []
    for q, p, label in zip(queries, prompts, labels, strict=False):
        response = q[len(p) :] if q.startswith(p) else q
        gold = parse(f"${label}$", parsing_timeout=None)
        pred = parse(response, parsing_timeout=None)
        rewards.append(float(bool(gold and pred and verify(gold, pred, timeout_seconds=None))))
    return {"rewards": rewards, "scores": rewards, "extra_logs": {}}


@dataclass
class Result:
    """Throughput through the call path (wall clock), CPU time inside the calls, accuracy, rewards."""

    wall_rps: float
    cpu_rps: float
    accuracy: float
    rewards: list[float]


async def _score_all(
    fn: Callable, samples: list[Sample], desc: str, threads: int | None = None
) -> tuple[list[float], float, float]:
    """Call fn per sample via asyncio.to_thread (as agent.py does), all gathered; `threads` sizes the pool.

    Returns rewards, wall seconds for the batch, and CPU seconds spent inside the calls."""
    if threads:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(threads))
    bar = tqdm(total=len(samples), desc=desc, leave=False)
    cpu = [0.0]

    def timed(q, p, lab) -> dict:
        t0 = time.thread_time()
        out = fn(q, p, lab)
        cpu[0] += time.thread_time() - t0
        return out

    async def one(s: Sample) -> float:
        out = await asyncio.to_thread(timed, [s.query], [s.prompt], [s.label])
        bar.update(1)
        return float(out["rewards"][0])

    start = time.perf_counter()
    rewards = await asyncio.gather(*(one(s) for s in samples))
    elapsed = time.perf_counter() - start
    bar.close()
    return list(rewards), elapsed, cpu[0]


def run(fn: Callable, samples: list[Sample], desc: str, threads: int | None = None) -> Result:
    """Score a set and measure it."""
    rewards, wall, cpu = asyncio.run(_score_all(fn, samples, desc, threads))
    acc = sum((r > 0.5) == (s.expected > 0.5) for r, s in zip(rewards, samples, strict=True)) / len(samples)
    return Result(len(samples) / wall, len(samples) / max(cpu, 1e-9), acc, rewards)


def run_direct(fn: Callable, samples: list[Sample]) -> float:
    """Responses/second calling fn in a plain loop on this thread: the function's own cost, no path."""
    start = time.perf_counter()
    for s in samples:
        fn([s.query], [s.prompt], [s.label])
    return len(samples) / (time.perf_counter() - start)


def bench_judge(samples: list[Sample], latency_s: float, threads: int, console: Console) -> None:
    """The judge reward through the same path against a local generateContent server with `latency_s` per call:
    every response judged (blend), the default correct_only on the same set, and both again as cache hits."""
    from rft.fixtures.judge_server import JudgeServer

    table = Table(title=f"judge reward (n={len(samples)}, {threads} threads, judge latency {latency_s:g} s)")
    for col in ("mode", "cache", "resp/s (path, wall)", "judge calls", "judged share"):
        table.add_column(col, justify="left" if col in ("mode", "cache") else "right")
    with JudgeServer(latency_s=latency_s) as server, tempfile.TemporaryDirectory() as tmp:
        for mode in ("blend", "correct_only"):
            settings = Path(tmp) / f"{mode}.toml"
            settings.write_text(f'[judge]\nmode = "{mode}"\nbase_url = "{server.url}"\ncache = "{tmp}/{mode}.sqlite"\n'
                                f"concurrency = {threads}\nrpm = 0\n")  # fmt: skip
            os.environ.update(GOOGLE_API_KEY="bench", RFT_REWARD_CONFIG=str(settings))
            fn = load_ours("reward_func_judge.py")
            for cache in ("miss", "hit"):
                before = len(server.requests)
                res = run(fn, samples, f"judge {mode} {cache}", threads)
                calls = len(server.requests) - before
                judged = sum(s.expected > 0.5 for s in samples) if mode == "correct_only" else len(samples)
                table.add_row(mode, cache, f"{res.wall_rps:,.1f}", str(calls), f"{judged / len(samples):.0%}")
    console.print(table)
    console.print(f"The server answers every call after {latency_s:g} s; concurrency bound {threads}, no rate limit. "
                  "'hit': the same samples again, every judgement from the sqlite cache.", markup=False,
                  highlight=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1200, help="samples in each set (mixed and integer-only)")
    ap.add_argument("--symbolic-share", type=float, default=0.3, help="share of symbolic answers in the mixed set")
    ap.add_argument("--seed", type=int, default=0, help="random seed for the generated sets")
    ap.add_argument("--show-errors", type=int, default=0, help="print this many misjudged samples per method")
    ap.add_argument("--judge-n", type=int, default=320, help="samples for the judge reward's rows (0: skip them)")
    ap.add_argument("--judge-latency", type=float, default=1.0, help="simulated seconds per judge call")
    ap.add_argument("--judge-threads", type=int, default=64, help="reward threads (and judge concurrency bound)")
    args = ap.parse_args()
    logging.disable(logging.WARNING)  # math-verify warns once per call site about disabled timeouts

    import rft.reward.symbolic

    ours = load_ours()
    sets = {
        "mixed": make_set(args.n, args.symbolic_share, args.seed),
        "integer": make_set(args.n, 0.0, args.seed + 1),
    }
    # Warm up both (imports, math-verify child process, regex caches) on a separate set.
    warm = make_set(40, 0.5, args.seed + 2)
    run(ours, warm, "warm-up ours")
    run(math_verify_reward_func, warm, "warm-up math-verify")
    rft.reward.symbolic._cache.clear()

    table = Table(title=f"reward throughput and accuracy (n={args.n} per set, OpenRLHF call path)")
    cols = ("set", "method", "resp/s (path, wall)", "ratio", "resp/s (in-call CPU)", "ratio",
            "resp/s (direct)", "ratio", "accuracy", "math-verify calls")
    for col in cols:
        table.add_column(col, justify="left" if col in ("set", "method") else "right")
    console = Console(width=160)
    for name, samples in sets.items():
        calls_before = rft.reward.symbolic.stats["calls"]
        ours_res = run(ours, samples, f"{name}: ours")
        sym_calls = rft.reward.symbolic.stats["calls"] - calls_before
        mv_res = run(math_verify_reward_func, samples, f"{name}: math-verify")
        rft.reward.symbolic._cache.clear()
        ours_direct = run_direct(ours, samples)
        mv_direct = run_direct(math_verify_reward_func, samples)
        table.add_row(name, "rft (ours)", f"{ours_res.wall_rps:,.0f}", f"{ours_res.wall_rps / mv_res.wall_rps:.1f}x",
                      f"{ours_res.cpu_rps:,.0f}", f"{ours_res.cpu_rps / mv_res.cpu_rps:.1f}x",
                      f"{ours_direct:,.0f}", f"{ours_direct / mv_direct:.1f}x", f"{ours_res.accuracy:.2%}",
                      str(sym_calls))
        table.add_row(name, "math-verify", f"{mv_res.wall_rps:,.0f}", "1.0x", f"{mv_res.cpu_rps:,.0f}", "1.0x",
                      f"{mv_direct:,.0f}", "1.0x", f"{mv_res.accuracy:.2%}", "all")
        noop = run(noop_reward_func, samples, f"{name}: no-op")
        table.add_row(name, "no-op (path ceiling)", f"{noop.wall_rps:,.0f}", f"{noop.wall_rps / mv_res.wall_rps:.1f}x",
                      "-", "-", "-", "-", "-", "-", end_section=True)
        for label, res in (("ours", ours_res), ("math-verify", mv_res)):
            wrong = [s for s, r in zip(samples, res.rewards, strict=True) if (r > 0.5) != (s.expected > 0.5)]
            for s in wrong[: args.show_errors]:
                console.print(f"{name}/{label} misjudged {s.kind}: label={s.label!r} tail={s.query[-160:]!r}",
                              markup=False, highlight=False)
    console.print(table)
    console.print("resp/s (path, wall): samples / wall seconds, each call in asyncio.to_thread and all gathered, as "
                  "OpenRLHF 0.9.3 does; bounded by the path itself (no-op row) and by other load on the machine.\n"
                  "resp/s (in-call CPU): samples / CPU seconds spent inside the reward calls (time.thread_time).\n"
                  "resp/s (direct): samples / wall seconds calling the function in a loop on one thread (no path).",
                  markup=False, highlight=False)
    if args.judge_n:
        bench_judge(make_set(args.judge_n, args.symbolic_share, args.seed + 3), args.judge_latency,
                    args.judge_threads, console)


if __name__ == "__main__":
    main()
