"""`--ref_from_actor`: the reference policy's log-probs from the LoRA actor with its adapter disabled, instead of a
second copy of the frozen base in its own Ray group (called by train_ppo_ray.patch and ppo_actor.patch).

Under LoRA the reference policy is the actor's frozen base: PEFT's `disable_adapter()` runs every LoRA layer as its
base layer, so the log-probs are the base model's, computed on weights the actor already holds (no second load,
no second ZeRO-3 partition, no second gather per forward).
"""

from __future__ import annotations

import contextlib
from typing import Any

FORWARD = "forward"
REFERENCE_FORWARD = "forward_reference"  # the actor's method that runs `forward` with the adapter disabled


def peft_model(model: Any) -> Any:
    """The PEFT model inside `model` (an OpenRLHF Actor, a DeepSpeed engine or the PeftModel itself); ValueError
    when there is none (no LoRA: no adapter to disable, the reference needs its own model)."""
    seen = model
    for _ in range(4):
        if hasattr(seen, "disable_adapter") and hasattr(seen, "peft_config"):
            return seen
        seen = getattr(seen, "model", None) if hasattr(seen, "model") else getattr(seen, "module", None)
        if seen is None:
            break
    raise ValueError("--ref_from_actor needs a LoRA actor (--lora_rank > 0): without an adapter the actor is no "
                     "reference")


@contextlib.contextmanager
def adapter_disabled(model: Any):
    """The actor's forwards inside run its frozen base alone (PEFT's disable_adapter)."""
    with peft_model(model).disable_adapter():
        yield


class ActorAsReference:
    """Stands where OpenRLHF's reference RayActorGroup stands: the experience maker's `forward` calls go to the
    actor group's `forward_reference`; any other method (empty_cache) goes to the actor group as is."""

    def __init__(self, actor_group: Any) -> None:
        self.actor_group = actor_group

    def async_run_method_batch(self, method_name: str, **kwargs: Any) -> list:
        """The actor group's batch call, `forward` redirected to the adapter-disabled forward."""
        name = REFERENCE_FORWARD if method_name == FORWARD else method_name
        return self.actor_group.async_run_method_batch(method_name=name, **kwargs)

    def async_run_method(self, method_name: str, *args: Any, **kwargs: Any) -> list:
        """The actor group's call, `forward` redirected to the adapter-disabled forward."""
        name = REFERENCE_FORWARD if method_name == FORWARD else method_name
        return self.actor_group.async_run_method(name, *args, **kwargs)
