"""LoRA sync wiring end to end on CPU: patched ActorPPOTrainer -> Ray object store -> patched LLMRayActor ->
(vLLM's msgpack rpc hop) -> patched WorkerWrap -> a vLLM-layout model, against the trainer's real PEFT model.

Real: OpenRLHF 0.9.3 + our patches, its argparse, a DeepSpeed ZeRO-3 engine (gloo, world size 1) around a PEFT
LoRA Llama, a local Ray with the engines as Ray actors (the real `LLMRayActor.apply_lora_update` code), the real
`WorkerWrap.apply_lora_update`. Stand-ins for hardware only: `AsyncLLM.collective_rpc` (RpcBoundaryLLM: msgpack
round trip of args and results, as vLLM's client -> EngineCore hop, then a call per TP worker), the vLLM model
(rft/fixtures/vllm_layout.py, one per TP rank) and two no-op CUDA calls.
"""

from __future__ import annotations

from types import SimpleNamespace

import msgpack
import pytest
import torch

from rft.cpu.standins import install as install_cuda_standins
from rft.fixtures.cpu_trainer import (
    TARGETS,
    build_trainer,
    tiny_llama_config,
    tiny_lora_model,
    trainer_args,
)
from rft.fixtures.vllm_layout import VllmLayoutLlama, tp_logits
from rft.train import lora_payload
from rft.train.lora_payload import LoraSyncError
from tests.support.ray_local import patched_ray

FP32_TOL = 1e-5  # max |logit difference| worker vs PEFT, fp32 (logits std ~0.5 here)
IDS = torch.tensor([[1, 5, 9, 33, 2, 70, 11], [4, 4, 90, 17, 60, 3, 8]])
TP_SIZES = (2, 1)  # two engines: tensor-parallel 2 and 1


# ----------------------------------------------------------------------------------------------------------
# vLLM stand-ins (hardware we lack)


def _vllm_enc_hook(obj):
    """vLLM's MsgpackEncoder sends a tensor as (dtype, shape, data); untyped rpc args decode to that plain list."""
    if isinstance(obj, torch.Tensor):
        return [str(obj.dtype).removeprefix("torch."), list(obj.shape), obj.detach().cpu().numpy().tobytes()]
    raise TypeError(f"{type(obj).__name__} is not msgpack-serializable")


def _wire(obj):
    return msgpack.unpackb(msgpack.packb(obj, use_bin_type=True, default=_vllm_enc_hook), raw=False)


class RpcBoundaryLLM:
    """`AsyncLLM.collective_rpc` stand-in: args and results cross a msgpack hop, then every TP worker is called."""

    def __init__(self, workers):
        self.workers = workers
        self.prefix_resets = 0

    async def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        method, args, kwargs = _wire([method, list(args), kwargs or {}])
        return _wire([getattr(w, method)(*args, **kwargs) for w in self.workers])

    async def reset_prefix_cache(self):
        self.prefix_resets += 1


def _engine_actor_class():
    """A Ray actor class = the real (patched) LLMRayActor with __init__ replaced by one that builds stand-ins."""
    import ray
    from openrlhf.trainer.ray.vllm_engine import LLMRayActor

    class EngineUnderTest(LLMRayActor.__ray_metadata__.modified_class):
        def __init__(self, base_state, tp_size, worker_kind="patched"):
            from openrlhf.trainer.ray.vllm_worker_wrap import WorkerWrap

            class NoReportWorker(WorkerWrap):
                """A worker extension that applies but reports nothing (e.g. an older rft patch)."""

                def apply_lora_update(self, payload):
                    super().apply_lora_update(payload)

            cfg = tiny_llama_config()
            workers = []
            for rank in range(tp_size):
                shard = VllmLayoutLlama(cfg, rank, tp_size, torch.float32)
                shard.load_weights(base_state.items())
                worker = (WorkerWrap if worker_kind == "patched" else NoReportWorker)()
                worker.model_runner = SimpleNamespace(model=shard)
                worker.parallel_config = SimpleNamespace(tensor_parallel_size=tp_size)
                workers.append(worker)
            self.llm = RpcBoundaryLLM(workers)

        def logits(self, ids):
            return tp_logits([w.model_runner.model for w in self.llm.workers], ids)

        def prefix_resets(self):
            return self.llm.prefix_resets

    return ray.remote(num_cpus=0)(EngineUnderTest)


# ----------------------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def ray_local(patched_openrlhf):
    """A local Ray whose workers import the patched openrlhf, the stubs and the repository (rft, this module)."""
    yield from patched_ray(patched_openrlhf)


def _setup(ray_local, monkeypatch, *, engines=TP_SIZES, worker_kind="patched", extra=()):
    install_cuda_standins(setattr_=monkeypatch.setattr)
    args = trainer_args(["--micro_train_batch_size", "1", "--train_batch_size", "1", "--lora_rank", "4",
                         "--lora_alpha", "8", "--target_modules", *TARGETS, "--vllm_num_engines", str(len(engines)),
                         "--vllm_tensor_parallel_size", str(max(engines)), "--vllm_sync_lora_via_object_store",
                         "--enable_prefix_caching", *extra])
    model, base = tiny_lora_model(args)
    cls = _engine_actor_class()
    handles = [cls.remote(base, tp, worker_kind) for tp in engines]
    trainer = build_trainer(args, model, lr=5e-2, vllm_engines=handles)
    return trainer, handles


def _train(trainer, steps=2, seed=0):
    """A few optimizer steps of the ZeRO-3 engine on a language-model loss (moves every lora_A/lora_B)."""
    engine = trainer.actor.model
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        ids = torch.randint(0, 96, (2, 10), generator=gen)
        engine.backward(engine(input_ids=ids, labels=ids).loss)
        engine.step()


def _peft_logits(trainer):
    engine = trainer.actor.model
    engine.eval()
    with torch.no_grad():
        out = engine(input_ids=IDS).logits
    engine.train()
    return out


@pytest.fixture
def openrlhf_dir(patched_openrlhf, monkeypatch):
    monkeypatch.setenv("RFT_OPENRLHF_DIR", str(patched_openrlhf))


# ----------------------------------------------------------------------------------------------------------
# tests


@pytest.mark.slow
def test_successive_syncs_make_every_engine_generate_from_the_trainer_policy(ray_local, dist_world, openrlhf_dir,
                                                                             monkeypatch):
    trainer, engines = _setup(ray_local, monkeypatch)
    assert trainer.lora_via_object_store and not trainer.use_cuda_ipc
    assert not hasattr(trainer, "_model_update_group")  # no NCCL / Ray-collective group with the engines
    checks = []
    real_check = lora_payload.check_apply_results
    monkeypatch.setattr(lora_payload, "check_apply_results", lambda r, p: checks.append(r) or real_check(r, p))

    base_logits = _peft_logits(trainer)
    for engine in engines:
        assert (ray_local.get(engine.logits.remote(IDS)) - base_logits).abs().max() < FP32_TOL
    n_lora = sum(p.ds_numel for n, p in trainer.actor.model.module.named_parameters() if ".lora_" in n)
    prev = base_logits
    for step in range(3):
        _train(trainer, seed=step)
        stats = trainer.broadcast_to_vllm()
        want = _peft_logits(trainer)
        assert (want - prev).abs().max() > 1e-3, "training did not move the policy"
        for engine in engines:
            got = ray_local.get(engine.logits.remote(IDS))
            assert (got - want).abs().max() < FP32_TOL, f"sync {step}: {(got - want).abs().max()}"
        prev = want
        assert stats["lora_sync_bytes"] == 4 * n_lora  # adapter only, fp32
        # the trainer checked one report per worker: 2 layers x 7 targets merged in every TP rank
        reports = [rep for per_engine in checks[-1] for rep in per_engine]
        assert len(reports) == sum(TP_SIZES)
        assert {(r["modules"], r["version"]) for r in reports} == {(2 * len(TARGETS), step + 1)}
    assert len(checks) == 3
    assert [ray_local.get(e.prefix_resets.remote()) for e in engines] == [3, 3]  # --enable_prefix_caching


@pytest.mark.slow
def test_wrong_names_and_count_mismatch_raise_through_the_whole_path(ray_local, dist_world, openrlhf_dir, monkeypatch):
    trainer, engines = _setup(ray_local, monkeypatch, engines=(2,))
    _train(trainer)
    before = ray_local.get(engines[0].logits.remote(IDS))
    # 0.9.3's bug: PEFT names (prefix kept) reach vLLM, whose loader skips them silently -> must be an error
    with monkeypatch.context() as m:
        m.setattr(lora_payload, "hf_base_name", lambda module: module + ".weight")
        with pytest.raises(LoraSyncError, match="did not load"):
            trainer.broadcast_to_vllm()
    assert torch.equal(ray_local.get(engines[0].logits.remote(IDS)), before)  # nothing half-written

    trainer.broadcast_to_vllm()  # a good sync fixes the set of targets
    synced = ray_local.get(engines[0].logits.remote(IDS))
    real_params = lora_payload.lora_parameters
    with monkeypatch.context() as m:  # the trainer suddenly sends one module fewer
        m.setattr(lora_payload, "lora_parameters", lambda model: real_params(model)[2:])
        with pytest.raises(LoraSyncError, match="missing"):
            trainer.broadcast_to_vllm()
    assert torch.equal(ray_local.get(engines[0].logits.remote(IDS)), synced)

    # a tensor in collective_rpc args arrives as a plain list: the worker refuses it instead of loading garbage
    real_build = lora_payload.build_payload

    def raw_tensor_payload(*a, **k):
        payload = real_build(*a, **k)
        payload["modules"][0]["A"] = lora_payload.decode_tensor(payload["modules"][0]["A"])
        return payload

    with monkeypatch.context() as m:
        m.setattr(lora_payload, "build_payload", raw_tensor_payload)
        m.setattr(lora_payload, "payload_nbytes", lambda p: 0)
        with pytest.raises(LoraSyncError, match="malformed|bytes"):
            trainer.broadcast_to_vllm()


@pytest.mark.slow
def test_trainer_refuses_workers_that_do_not_report(ray_local, dist_world, openrlhf_dir, monkeypatch):
    trainer, _ = _setup(ray_local, monkeypatch, engines=(1,), worker_kind="silent")
    _train(trainer, steps=1)
    with pytest.raises(LoraSyncError, match="unexpected apply result None"):
        trainer.broadcast_to_vllm()


def test_cuda_synchronize_precedes_weight_sync_group_init(patched_openrlhf, dist_world, monkeypatch):
    """Full-weight (NCCL) sync path of the real patched ActorPPOTrainer.__init__: rank 0 synchronizes CUDA
    before the engines join and before its own process group is created (only the group calls are stand-ins)."""
    import openrlhf.trainer.ray.ppo_actor as ppo_actor
    import ray

    events = []
    install_cuda_standins(setattr_=monkeypatch.setattr)
    args = trainer_args(["--micro_train_batch_size", "1", "--train_batch_size", "1", "--vllm_num_engines", "1"])
    model, _ = tiny_lora_model(SimpleNamespace(**{**vars(args), "lora_rank": 4, "lora_alpha": 8,
                                                  "target_modules": TARGETS}))
    model = model.merge_and_unload().requires_grad_(True)  # a full fine-tune: the upstream full-weight sync path
    engine = SimpleNamespace(init_process_group=SimpleNamespace(remote=lambda *a, **k: events.append("engine_join")))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: events.append("cuda_sync"))
    monkeypatch.setattr(ppo_actor, "stateless_init_process_group", lambda *a, **k: events.append("group_init"))
    monkeypatch.setattr(ray._private.services, "get_node_ip_address", lambda: "127.0.0.1")
    monkeypatch.setattr(ray, "get", lambda refs: refs)
    monkeypatch.setattr("rft.train.waits.get", lambda refs, role, *a, **k: refs)  # stand-in engine: plain values
    monkeypatch.setattr(ppo_actor, "torch_dist_barrier_and_cuda_sync", lambda: events.append("barrier"))
    buffer_cls = ppo_actor.NaiveReplayBuffer  # built by __init__ right before the weight-sync group set-up
    monkeypatch.setattr(ppo_actor, "NaiveReplayBuffer", lambda *a, **k: events.append("init") or buffer_cls(*a, **k))
    build_trainer(args, model, vllm_engines=[engine])
    start, first = events.index("init"), events.index("engine_join")
    assert "cuda_sync" in events[start:first], events  # 0.9.3: no synchronize before the group
    assert events.index("cuda_sync") < events.index("group_init") and "barrier" in events[first:]
