"""The question × method loop shared by `drift` and `emd`: their options, questions and methods, the base and
tuned models, and a resumable loop writing each unit's quantities into the run store."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tqdm import tqdm

from beliefdrift.adapters import base_model, load_adapter
from beliefdrift.backend import LanguageModel
from beliefdrift.commands.common import (
    add_data_args,
    add_model_args,
    add_output_args,
    add_sampling_args,
    add_template_ending_arg,
    model_from_args,
)
from beliefdrift.data.question import MCQuestion
from beliefdrift.data.registry import fingerprint, load_dataset
from beliefdrift.evaluation import split_long_prompts
from beliefdrift.methods import Method, parse_method
from beliefdrift.prompts import DEFAULT_TEMPLATE_ENDING
from beliefdrift.records import RecordWriter
from beliefdrift.resampling import QuestionRunner

BASE_METHODS = ("ppr", "ppr-seed5")
ADAPTER_METHODS = ("am-ppr", "am-ppr-seed5")


def add_run_args(parser: argparse.ArgumentParser, paths: int, steps: int, out: str) -> None:
    """Model, questions, methods, sampling and output options shared by `drift` and `emd`."""
    add_model_args(parser)
    add_template_ending_arg(parser)
    add_sampling_args(parser, paths=paths, steps=steps)
    add_output_args(parser, out)
    add_data_args(parser, dataset="demo")
    group = parser.add_argument_group("methods")
    group.add_argument("--methods", default=None,
                       help=f"comma list of PPR-type methods (default {','.join(BASE_METHODS)}, "
                            f"plus {','.join(ADAPTER_METHODS)} with --adapter)")
    group.add_argument("--adapter", type=Path, default=None, help="peft LoRA directory of the SC-tuned model (AM-PPR)")
    parser.add_argument("--skip-long-prompts", action="store_true",
                        help="skip (and count) questions whose prompt and answers exceed the model's context")


def methods_from_args(args: argparse.Namespace) -> list[Method]:
    names = args.methods.split(",") if args.methods else [*BASE_METHODS, *(ADAPTER_METHODS if args.adapter else ())]
    methods = [parse_method(name) for name in names]
    for method in methods:
        if not method.resamples:
            raise ValueError(f"{method.name}: drift diagnostics need a resampling method (ppr…, am-ppr…)")
        if method.needs_adapter and args.adapter is None:
            raise ValueError(f"{method.name} needs --adapter (a LoRA directory of the SC-tuned model)")
    return methods


def questions_from_args(args: argparse.Namespace) -> list[MCQuestion]:
    questions = load_dataset(args.dataset, split=args.split, data_dir=args.data_dir, n=args.n, seed=args.seed)
    if not questions or not isinstance(questions[0], MCQuestion):
        raise ValueError(f"{args.dataset}: drift diagnostics need multiple-choice questions")
    return questions


class Models:
    """The base model and, with an adapter, the tuned one; `use(method)` gives the model a method runs on."""

    def __init__(self, args: argparse.Namespace):
        print(f"loading {args.model} ...", flush=True)
        self.base = model_from_args(args)
        self.tuned = load_adapter(self.base, args.adapter) if args.adapter else None

    @contextmanager
    def use(self, method: Method) -> Iterator[LanguageModel]:
        if method.needs_adapter:
            yield self.tuned
        elif self.tuned is None:
            yield self.base
        else:  # loading the adapter patched the base modules: switch it off for the base methods
            with base_model(self.tuned):
                yield self.tuned


def run_config(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The settings that determine a question × method record (what a resumed run must share)."""
    keys = ("command", "model", "dtype", "template", "dataset", "split", "seed", "adapter", "paths", "steps", *names)
    if args.template_ending != DEFAULT_TEMPLATE_ENDING:  # absent for the default: earlier runs still resume
        keys += ("template_ending",)
    return {key: str(getattr(args, key)) if isinstance(getattr(args, key), Path) else getattr(args, key)
            for key in keys}


def for_each_unit(
    args: argparse.Namespace,
    config: dict[str, Any],
    compute: Callable[[QuestionRunner, Method], dict[str, Any]],
    desc: str,
    answers: int,
) -> tuple[RecordWriter, list[MCQuestion], list[Method]]:
    """Write `compute(runner, method)` (a dict of quantities) for every question × method not written yet, into
    the run store of `config` and the questions' fingerprint, opened once model and questions have loaded.
    `answers` is the most answers a path holds after its seeds (for the check against the model's context)."""
    questions, methods = questions_from_args(args), methods_from_args(args)
    models = Models(args)
    questions, skipped = split_long_prompts(models.base, questions, methods, answers, args.template,
                                            args.template_ending, args.skip_long_prompts)
    if args.skip_long_prompts:
        config = {**config, "skipped_long_prompts": [q.id for q in skipped]}
        print(f"skipped {len(skipped)} questions longer than the model's context", flush=True)
    writer = RecordWriter(args.out, {**config, "questions_sha256": fingerprint(questions)})
    todo = [(q, m) for q in questions for m in methods if not writer.done(q.id, m.name)]
    print(f"{len(questions)} questions × {len(methods)} methods ({len(questions) * len(methods) - len(todo)} done)",
          flush=True)
    current, runners = None, {}
    for question, method in tqdm(todo, desc=desc, unit="question×method"):
        if writer.done(question.id, method.name):  # another process on this directory stored it meanwhile
            continue
        if question is not current:  # one question's prefills at a time (base and tuned model)
            current, runners = question, {}
        with models.use(method) as lm:
            runner = runners.setdefault(method.needs_adapter, QuestionRunner(lm, question, args.template,
                                                                                args.template_ending))
            writer.write(question.id, {method.name: compute(runner, method)})
    return writer, questions, methods


def to_json(value: Any) -> str:
    return json.dumps(value, indent=2) + "\n"
