"""Hooks of `openrlhf/cli/train_ppo_ray.py`'s `train`: waits with deadlines, the reference from the actor
(--ref_from_actor); rft's flags, registered and checked in rft.plan.flags (the launch's parser reads them there)."""

from rft.plan import flags
from rft.plan.train_options import uses_actor_as_reference
from rft.train.reference import ActorAsReference
from rft.train.waits import NO_DEADLINE, PLACEMENT_TIMEOUT_S, DeadlineRay

__all__ = ["NO_DEADLINE", "PLACEMENT_TIMEOUT_S", "ActorAsReference", "flags", "ray", "uses_actor_as_reference"]

ray = DeadlineRay(roles={"train": "placement groups, model groups and the PPO trainer actor"})
