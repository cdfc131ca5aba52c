"""`beliefdrift train`: SC fine-tuning (AM-PPR) of a LoRA adapter; the result loads with `--adapter`.

Settings: built-in defaults, then a `--config` YAML preset (configs/train-*.yaml), then flags, e.g.
`beliefdrift train --config configs/train-cpu.yaml --out runs/sc -n 4 --epochs 1 --learning-rate 3e-4`.
The run writes <out>/rollouts (the base model's rollout groups, unless --rollout-dir DIR is given), checkpoints,
log.csv, tensorboard/ and the final adapter in <out>/adapter. Running the same command again resumes from the
last checkpoint. Several processes (each trains its own group per update, gradients all-reduced): on GPUs
`accelerate launch [--config_file configs/accelerate-fsdp.yaml] -m beliefdrift train …`; on the CPU
`python -m torch.distributed.run --nproc_per_node 2 -m beliefdrift train …` (accelerate's own launcher runs a
single process on the CPU unless MPI is configured).
"""

from __future__ import annotations

import argparse
import logging

from beliefdrift.config.options import add_command, settings_from
from beliefdrift.config.train import TrainConfig

log = logging.getLogger(__name__)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "train", TrainConfig,
                         "SC fine-tuning (AM-PPR): train a LoRA adapter on the self-consistency loss", __doc__)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from beliefdrift.amortize.trainer import SCTrainer
    from beliefdrift.backend.loading import check_trainable
    from beliefdrift.runs.distributed import leave_run

    config = settings_from(args, TrainConfig)
    check_trainable(config)
    trainer = SCTrainer(config=config)
    if trainer.is_main:
        log.info("training %s: %d groups, %d updates per process, %d paths per update (%d per forward pass), %s "
                 "rollouts", config.model, len(trainer.groups), len(trainer.updates), config.paths_per_update,
                 config.micro_batch, config.mode)
    adapter = trainer.train()
    if trainer.is_main:
        log.info("adapter in %s; log in %s", adapter, config.out / "log.csv")
    return leave_run(trainer.accelerator)
