"""Hooks of `openrlhf/trainer/ray/launcher.py`: its `ray.get`s wait with a deadline (placement and rank 0's
address: PLACEMENT_TIMEOUT_S)."""

from rft.train.waits import PLACEMENT_TIMEOUT_S, DeadlineRay

ray = DeadlineRay({"RayActorGroup._initiate_actors": PLACEMENT_TIMEOUT_S},
                  roles={"RayActorGroup._initiate_actors": "model group: placement, rank 0 address"})
