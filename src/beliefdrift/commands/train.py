"""`beliefdrift train`: SC fine-tuning (AM-PPR) of a LoRA adapter; the result loads with `--adapter`.

Settings: built-in defaults, then a `--config` YAML preset (configs/train-*.yaml), then `key=value` overrides, e.g.
`beliefdrift train --config configs/train-cpu.yaml --out runs/sc n=4 epochs=1 learning_rate=3e-4`.
The run writes <out>/rollouts (the base model's rollout groups, unless `rollouts=DIR` is given), checkpoints,
log.csv, tensorboard/ and the final adapter in <out>/adapter. Running the same command again resumes from the
last checkpoint. Several processes (each trains its own group per update, gradients all-reduced): on GPUs
`accelerate launch [--config_file configs/accelerate-fsdp.yaml] -m beliefdrift train …`; on the CPU
`python -m torch.distributed.run --nproc_per_node 2 -m beliefdrift train …` (accelerate's own launcher runs a
single process on the CPU unless MPI is configured).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from beliefdrift.amortize.trainer import SCTrainer, TrainConfig, load_train_config
from beliefdrift.errors import check_device, check_model


def _override(text: str) -> tuple[str, object]:
    """`key=value`, the value read as YAML (so `prefix_lengths=[0,2]` is a list)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip().replace("-", "_"), yaml.safe_load(value)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train", help="SC fine-tuning (AM-PPR): train a LoRA adapter on the self-consistency loss",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="settings: " + ", ".join(f"{f}={getattr(TrainConfig(), f)}" for f in TrainConfig.__dataclass_fields__),
    )
    parser.add_argument("--config", help="YAML preset (configs/train-cpu.yaml, configs/train-paper-llama.yaml, …)")
    parser.add_argument("--out", type=Path, default=Path("beliefdrift-out/train"), help="run directory")
    parser.add_argument("overrides", nargs="*", type=_override, metavar="key=value",
                        help="settings overriding the preset")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = load_train_config(args.config, dict(args.overrides))
    check_device(config.device)
    check_model(config.model)
    trainer = SCTrainer(config, args.out)
    if trainer.is_main:
        print(f"training {config.model}: {len(trainer.groups)} groups, {len(trainer.updates)} updates per process, "
              f"{config.paths_per_update} paths per update ({config.micro_batch} per forward pass), "
              f"{config.mode} rollouts", file=sys.stderr, flush=True)
    adapter = trainer.train()
    # Every process leaves its process group before exiting (gloo's threads otherwise abort some exits).
    trainer.accelerator.end_training()
    if trainer.is_main:
        print(f"adapter in {adapter}; log in {args.out / 'log.csv'}")
    return 0
