"""--offload and the LoRA sync flag through the real argparse block of the patched cli/train_ppo_ray.py."""

from __future__ import annotations

import ast
import sys
from types import SimpleNamespace

import pytest

BASE = ["--pretrain", "m", "--prompt_data", "d", "--actor_num_gpus_per_node", "1", "--micro_rollout_batch_size", "1",
        "--advantage_estimator", "group_norm", "--n_samples_per_prompt", "2", "--remote_rm_url", "rft/reward/exact_match.py",
        "--rollout_batch_size", "1"]


@pytest.fixture(scope="module")
def parse(patched_openrlhf):
    """Run the CLI's `if __name__ == "__main__":` block on an argv; returns the args `train()` would get."""
    import openrlhf.cli.train_ppo_ray as cli

    tree = ast.parse(open(cli.__file__).read())
    main = next(n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test))
    code = compile(ast.Module(body=main.body, type_ignores=[]), cli.__file__, "exec")

    def run(argv: list[str]):
        captured = {}
        namespace = {**vars(cli), "train": lambda args: captured.setdefault("args", args)}
        old = sys.argv
        sys.argv = ["train_ppo_ray", *BASE, *argv]
        try:
            exec(code, namespace)
        finally:
            sys.argv = old
        return captured["args"]

    return run


def test_offload_flag_reaches_deepspeed_offload_param(parse):
    from openrlhf.utils.deepspeed import DeepspeedStrategy

    args = parse(["--zero_stage", "3", "--offload"])
    assert args.offload is True
    strategy = DeepspeedStrategy(seed=1, max_norm=1.0, micro_train_batch_size=1, train_batch_size=8,
                                 zero_stage=3, args=args)
    strategy.world_size = 1
    assert strategy.get_ds_train_config(is_actor=True)["zero_optimization"]["offload_param"]["device"] == "cpu"
    off = parse(["--zero_stage", "3"])
    assert off.offload is False
    strategy.args = off
    assert strategy.get_ds_train_config(is_actor=True)["zero_optimization"]["offload_param"]["device"] == "none"


def test_offload_requires_zero3(parse, capsys):
    with pytest.raises(SystemExit) as exc:
        parse(["--zero_stage", "2", "--offload"])
    assert exc.value.code == 2
    assert "--offload requires --zero_stage 3" in capsys.readouterr().err


def test_lora_with_vllm_requires_object_store_sync(parse, capsys):
    lora = ["--lora_rank", "8", "--vllm_num_engines", "1"]
    with pytest.raises(SystemExit):
        parse(lora)
    assert "--vllm_sync_lora_via_object_store" in capsys.readouterr().err
    args = parse([*lora, "--vllm_sync_lora_via_object_store"])
    assert args.vllm_sync_lora_via_object_store is True and args.vllm_sync_with_ray is False
    with pytest.raises(SystemExit):
        parse(["--vllm_sync_lora_via_object_store"])  # no LoRA
    assert "requires --lora_rank > 0" in capsys.readouterr().err
    assert SimpleNamespace(**vars(parse([]))).lora_rank == 0  # no LoRA, no vLLM: unchanged upstream path
