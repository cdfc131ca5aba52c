"""Options shared by several commands: model, data, sampling and output."""

from __future__ import annotations

import argparse
from pathlib import Path

from beliefdrift.backend import DEFAULT_MODEL, LanguageModel, load_model
from beliefdrift.backend.loading import ATTN_IMPLEMENTATIONS
from beliefdrift.data.registry import DATASETS
from beliefdrift.errors import check_device, check_model
from beliefdrift.prompts import DEFAULT_PPR_TEMPLATE, DEFAULT_TEMPLATE_ENDING, TEMPLATE_ENDINGS


def add_model_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    group.add_argument("--model", default=DEFAULT_MODEL, help="registry name, hub id, local directory or .gguf file")
    group.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
    group.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                       help="auto = bf16 where bf16 matmuls are fast (AMX/AVX512-BF16 CPUs, CUDA), else float32")
    group.add_argument("--attn-implementation", default="auto", choices=ATTN_IMPLEMENTATIONS,
                       help="attention for every forward pass the engine does not own (auto: transformers' choice)")
    group.add_argument("--device-map", default=None,
                       help="'auto' spreads a model too large for one GPU over all visible devices (accelerate)")
    group.add_argument("--template", default=DEFAULT_PPR_TEMPLATE,
                       help="PPR prompt: ppr-llama, ppr-olmo, or a .txt template path")


def add_template_ending_arg(parser: argparse.ArgumentParser) -> None:
    """--template-ending, for the commands that render the direct-query and PPR prompts."""
    parser.add_argument("--template-ending", default=DEFAULT_TEMPLATE_ENDING, choices=TEMPLATE_ENDINGS,
                        help="fence: the question's code fence is closed after it (default); paper: the prompt "
                             "ends with the question, as the paper's Appendix C figures show")


def add_sampling_args(parser: argparse.ArgumentParser, paths: int, steps: int) -> None:
    group = parser.add_argument_group("sampling")
    group.add_argument("--paths", "-J", type=int, default=paths, help="PPR paths per question (J)")
    group.add_argument("--steps", "-N", type=int, default=steps, help="answers generated per path (N)")
    group.add_argument("--seed", type=int, default=0, help="run seed (each question × method derives its own)")


def add_data_args(parser: argparse.ArgumentParser, dataset: str | None = None, n: int | None = None) -> None:
    """--dataset, --split, --n/-n and --data-dir (a `None` default leaves the choice to the command)."""
    group = parser.add_argument_group("data")
    group.add_argument("--dataset", default=dataset, help=f"one of {', '.join(DATASETS)} or a file path")
    group.add_argument("--split", default=None, help="dataset split (default: the dataset's evaluation split)")
    group.add_argument("--n", "-n", type=int, default=n,
                       help="number of questions, 0 for all (deterministic subsample by --seed; default: " +
                            ("all" if n is None else str(n)) + ")")
    group.add_argument("--data-dir", default=None, help="benchmark data directory ($BELIEFDRIFT_DATA)")


def add_output_args(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument("--out", type=Path, default=Path(default), help="output directory")


def model_from_args(args: argparse.Namespace) -> LanguageModel:
    check_device(args.device)
    check_model(args.model)
    return load_model(args.model, device=args.device, dtype=args.dtype,
                      attn_implementation=args.attn_implementation, device_map=args.device_map)
