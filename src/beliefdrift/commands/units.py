"""The question × method loop shared by `drift` and `emd`: their settings, questions and methods, the base and
tuned models, and a resumable loop writing each unit's quantities into the run store."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from beliefdrift.adapters import base_model, load_adapter
from beliefdrift.backend import LanguageModel
from beliefdrift.commands.common import load_language_model
from beliefdrift.config import DataOptions, ModelOptions, SamplingOptions, option
from beliefdrift.data.question import MCQuestion
from beliefdrift.data.registry import load_dataset
from beliefdrift.errors import UserError
from beliefdrift.evaluation import split_long_prompts
from beliefdrift.identity import run_identity
from beliefdrift.methods import Method, parse_method
from beliefdrift.prompts import load_template
from beliefdrift.records import RecordWriter
from beliefdrift.resampling import QuestionRunner

BASE_METHODS = ("ppr", "ppr-seed5")
ADAPTER_METHODS = ("am-ppr", "am-ppr-seed5")


@dataclass(frozen=True)
class DiagnosticsConfig(ModelOptions, DataOptions, SamplingOptions):
    """Model, questions, methods and sampling of `drift` and `emd` (each adds its own settings)."""

    _argument_group_name = "methods"

    methods: list[str] | None = option(None, f"PPR-type methods (default {' '.join(BASE_METHODS)}, plus "
                                             f"{' '.join(ADAPTER_METHODS)} with --adapter)")
    adapter: str | None = option(None, "peft LoRA directory of the SC-tuned model (AM-PPR)")
    skip_long_prompts: bool = option(False, "skip (and count) questions whose prompt and answers exceed the model's "
                                            "context")

    @property
    def method_list(self) -> list[Method]:
        names = self.methods or [*BASE_METHODS, *(ADAPTER_METHODS if self.adapter else ())]
        methods = [parse_method(name) for name in names]
        for method in methods:
            if not method.resamples:
                raise UserError(f"{method.name}: drift diagnostics need a resampling method (ppr…, am-ppr…)")
            if method.needs_adapter and self.adapter is None:
                raise UserError(f"{method.name} needs --adapter (a LoRA directory of the SC-tuned model)")
        return methods

    def questions(self) -> list[MCQuestion]:
        questions = load_dataset(self.dataset, split=self.split, data_dir=self.data_dir, n=self.n, seed=self.seed)
        if not questions or not isinstance(questions[0], MCQuestion):
            raise UserError(f"{self.dataset}: drift diagnostics need multiple-choice questions")
        return questions


class Models:
    """The base model and, with an adapter, the tuned one; `use(method)` gives the model a method runs on."""

    def __init__(self, config: DiagnosticsConfig):
        print(f"loading {config.model} ...", flush=True)
        self.base = load_language_model(config)
        self.tuned = load_adapter(self.base, config.adapter) if config.adapter else None

    @contextmanager
    def use(self, method: Method) -> Iterator[LanguageModel]:
        if method.needs_adapter:
            yield self.tuned
        elif self.tuned is None:
            yield self.base
        else:  # loading the adapter patched the base modules: switch it off for the base methods
            with base_model(self.tuned):
                yield self.tuned


def for_each_unit(
    command: str,
    config: DiagnosticsConfig,
    compute: Callable[[QuestionRunner, Method], dict[str, Any]],
    answers: int,
) -> tuple[RecordWriter, list[MCQuestion], list[Method]]:
    """Write `compute(runner, method)` (a dict of quantities) for every question × method not written yet, into
    the run store of `config.out` pinned to the run identity, opened once model and questions have loaded.
    `answers` is the most answers a path holds after its seeds (for the check against the model's context)."""
    questions, methods = config.questions(), config.method_list
    models = Models(config)
    questions, skipped = split_long_prompts(models.base, questions, methods, answers, config.template,
                                            config.template_ending, config.skip_long_prompts)
    if config.skip_long_prompts:
        print(f"skipped {len(skipped)} questions longer than the model's context", flush=True)
    template = load_template(config.template, config.template_ending)
    writer = RecordWriter(config.out, run_identity(command, config, questions, skipped, template))
    todo = [(q, m) for q in questions for m in methods if not writer.done(q.id, m.name)]
    print(f"{len(questions)} questions × {len(methods)} methods ({len(questions) * len(methods) - len(todo)} done)",
          flush=True)
    current, runners = None, {}
    for question, method in tqdm(todo, desc=command, unit="question×method"):
        if writer.done(question.id, method.name):  # another process on this directory stored it meanwhile
            continue
        if question is not current:  # one question's prefills at a time (base and tuned model)
            current, runners = question, {}
        with models.use(method) as lm:
            runner = runners.setdefault(method.needs_adapter, QuestionRunner(lm, question, config.template,
                                                                                config.template_ending))
            writer.write(question.id, {method.name: compute(runner, method)})
    return writer, questions, methods


def to_json(value: Any) -> str:
    return json.dumps(value, indent=2) + "\n"
