"""deepspeed.patch: with LoRA, OpenRLHF's no-decay group is empty; ZeRO-3 drops it and torch's LR
scheduler then fails at the first step. Run on the real DeepSpeed ZeRO-3 engine (gloo, CPU), pristine vs patched."""

from __future__ import annotations

import shutil
import subprocess
import sys

from rft.fixtures.patched_openrlhf import run_apply, stub_env

# One optimizer step of a LoRA model through OpenRLHF's own grouping, a ZeRO-3 engine and transformers'
# scheduler, as DeepspeedStrategy.create_optimizer + prepare do (torch AdamW: FusedAdam needs CUDA).
STEP = r"""
import os
import deepspeed, torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen2Config, Qwen2ForCausalLM, get_scheduler
from openrlhf.utils.deepspeed.deepspeed_utils import get_optimizer_grouped_parameters
from rft.cpu.local_ray import free_port

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
deepspeed.init_distributed(dist_backend="gloo")
torch.manual_seed(0)
cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=32)
model = get_peft_model(Qwen2ForCausalLM(cfg), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
groups = get_optimizer_grouped_parameters(model, 0.0)
print("groups", [len(g["params"]) for g in groups])
optim = torch.optim.AdamW(groups, lr=1e-3)
sched = get_scheduler("cosine_with_min_lr", optim, num_warmup_steps=1, num_training_steps=4,
                      scheduler_specific_kwargs={"min_lr": 1e-4})
ds = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "zero_allow_untested_optimizer": True,
      "zero_optimization": {"stage": 3}}
engine, optim, _, sched = deepspeed.initialize(model=model, optimizer=optim, lr_scheduler=sched, config=ds)
loss = engine(input_ids=torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]])).loss
engine.backward(loss)
engine.step()
print("stepped, lr", sched.get_last_lr())
"""


def run_step(site) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", STEP], capture_output=True, text=True, timeout=600,
                          env=stub_env(site))


def test_lora_optimizer_steps_only_with_the_patch(pristine_openrlhf_root, tmp_path):
    pristine = run_step(pristine_openrlhf_root)
    assert pristine.returncode != 0 and "groups [4, 0]" in pristine.stdout
    assert "zip() argument 2 is longer than argument 1" in pristine.stderr, pristine.stderr[-2000:]

    site = tmp_path / "site"
    shutil.copytree(pristine_openrlhf_root, site)
    res = run_apply(target=site)
    assert res.returncode == 0, res.stderr
    patched = run_step(site)
    assert patched.returncode == 0, patched.stderr[-2000:]
    assert "groups [4]" in patched.stdout and "stepped" in patched.stdout
