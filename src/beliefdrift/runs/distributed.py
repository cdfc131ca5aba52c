"""Several processes on one run (torchrun): which questions are this rank's, and the few collective calls a
sharded run needs. The only module that touches `torch.distributed`."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import torch.distributed as dist

if TYPE_CHECKING:
    from accelerate import Accelerator

T = TypeVar("T")


@dataclass(frozen=True)
class Ranks:
    """This process's place in a torchrun launch (RANK / WORLD_SIZE; one process without them)."""

    rank: int = 0
    world_size: int = 1

    @classmethod
    def from_env(cls) -> Ranks:
        return cls(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)))

    def owns(self, position: int) -> bool:
        """Rank r takes the questions at positions i ≡ r (mod world size)."""
        return position % self.world_size == self.rank

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()

    def from_rank0(self, value: T) -> T:
        """`value` as computed on rank 0, on every rank."""
        if self.world_size == 1:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]


@contextmanager
def process_group(ranks: Ranks) -> Iterator[None]:
    """A gloo process group for barriers and broadcasts when several ranks run (CPU-only is enough)."""
    if ranks.world_size == 1 or dist.is_initialized():
        yield
        return
    dist.init_process_group("gloo", rank=ranks.rank, world_size=ranks.world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def leave_run(accelerator: Accelerator, code: int = 0) -> int:
    """End an accelerate run: every process leaves its process group; a process of a multi-process run then exits
    at once (output flushed), with `code`. Letting Python free a DDP model afterwards can deadlock in gloo's teardown:
    the freeing thread holds the GIL while it joins a gloo worker thread that waits for the GIL to release the last
    reference to a finished collective's tensor. Call it once everything is written. One process: returns `code`."""
    processes = accelerator.num_processes
    accelerator.end_training()
    if processes > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
