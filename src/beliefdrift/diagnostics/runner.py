"""The question × method loop of the diagnostics (`drift`, `emd`): their shared settings, the base and tuned models,
and a resumable loop that computes the quantities of a batch of units at a time and stores each question's in the
run store.

A unit is one (question, method). Its quantities come from generators keyed by run seed, question id and method
name, so they do not depend on which units share a batch: `--batch-questions` changes speed, never a number.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from beliefdrift import progress_bar as tqdm  # the bars follow --quiet (beliefdrift.show_progress)
from beliefdrift.adapters import base_model, check_adapter, load_adapter
from beliefdrift.backend import LanguageModel
from beliefdrift.backend.loading import model_from
from beliefdrift.backend.path_cache import prepared, questions_per_batch
from beliefdrift.data.question import MCQuestion
from beliefdrift.diagnostics.emd import EMDConfig, emd_generator, question_emd
from beliefdrift.diagnostics.noise_floor import floor_generator, spread_fields
from beliefdrift.diagnostics.settings import DiagnosticsConfig
from beliefdrift.diagnostics.trajectory import trajectory_quantities_many, unit_trajectories
from beliefdrift.evaluation import split_long_prompts
from beliefdrift.identity import run_identity
from beliefdrift.methods import Method
from beliefdrift.prompts import load_template
from beliefdrift.records import RecordWriter
from beliefdrift.resampling import QuestionRunner

log = logging.getLogger(__name__)

#: (the runner of the unit's question on the unit's model, the method)
Unit = tuple[QuestionRunner, Method]
#: Quantities of each unit of a batch, in order; every unit of one call runs on the same model.
Compute = Callable[[Sequence[Unit]], list[dict[str, Any]]]


class Models:
    """The base model and, with an adapter, the tuned one; `use(tuned)` gives the model in the state a method of
    that kind runs on."""

    def __init__(self, config: DiagnosticsConfig):
        if config.adapter:
            check_adapter(config.adapter)  # before the model loads
        log.info("loading %s ...", config.model)
        self.base = prepared(model_from(config), config.compile, config.cuda_graphs)
        self.tuned = load_adapter(self.base, config.adapter) if config.adapter else None

    @contextmanager
    def use(self, tuned: bool) -> Iterator[LanguageModel]:
        if tuned:
            yield self.tuned
        elif self.tuned is None:
            yield self.base
        else:  # loading the adapter patched the base modules: switch it off for the base methods
            with base_model(self.tuned):
                yield self.tuned


def compute_batch(
    models: Models, questions: Sequence[MCQuestion], methods: Sequence[Method], compute: Compute, template: str,
    ending: str,
) -> dict[str, dict[str, dict[str, Any]]]:
    """{question id: {method: quantities}} of `methods` on `questions`: one `compute` call per model (base, then
    tuned) for all their units, each question's prompts prefilled once per model."""
    results: dict[str, dict[str, dict[str, Any]]] = {q.id: {} for q in questions}
    for tuned in (False, True):
        group = [m for m in methods if m.needs_adapter == tuned]
        if not group:
            continue
        with models.use(tuned) as lm:
            runners = [QuestionRunner(lm, question, template, ending) for question in questions]
            units = [(runner, method) for runner in runners for method in group]
            for (runner, method), quantities in zip(units, compute(units), strict=True):
                results[runner.question.id][method.name] = quantities
    return results


def for_each_unit(
    command: str, config: DiagnosticsConfig, compute: Compute, answers: int
) -> tuple[RecordWriter, list[MCQuestion], list[Method]]:
    """Store `compute(units)` for every question × method not stored yet, `questions_per_batch` questions per
    call, in the run store of `config.out` pinned to the run identity (opened once model and questions have
    loaded). `answers` is the most answers a path holds after its seeds (for the check against the context)."""
    questions, methods = config.questions(command), config.method_list
    models = Models(config)
    questions, skipped = split_long_prompts(models.base, questions, methods, answers, config.template,
                                            config.template_ending, config.skip_long_prompts)
    if config.skip_long_prompts:
        log.warning("skipped %d questions longer than the model's context", len(skipped))
    template = load_template(config.template, config.template_ending)
    writer = RecordWriter(config.out, run_identity(command, config, questions, skipped, template))
    stored = {(q.id, m.name) for q in questions for m in methods if writer.done(q.id, m.name)}
    todo = [q for q in questions if any((q.id, m.name) not in stored for m in methods)]
    log.info("%d questions × %d methods (%d done)", len(questions), len(methods), len(stored))
    size = questions_per_batch(config.batch_questions, models.base.device)
    with tqdm(total=len(questions) * len(methods), initial=len(stored), desc=command, unit="question×method") as bar:
        for start in range(0, len(todo), size):
            chunk = todo[start : start + size]
            # Units another process on this directory stored meanwhile are skipped; units of one set of missing
            # methods share a call.
            pending: dict[tuple[Method, ...], list[MCQuestion]] = {}
            for question in chunk:
                missing = tuple(m for m in methods if not writer.done(question.id, m.name))
                if missing:
                    pending.setdefault(missing, []).append(question)
            for missing, batch in pending.items():
                results = compute_batch(models, batch, missing, compute, config.template, config.template_ending)
                for question in batch:
                    writer.write(question.id, results[question.id])
                    bar.update(len(missing))
    return writer, questions, methods


def emd_quantities(units: Sequence[Unit], config: EMDConfig, paths: int, steps: int, seed: int) -> list[dict[str, Any]]:
    """What `emd` stores per unit: its `QuestionEMD.record` (each unit's k-step estimates already batch up to
    `config.batch_budget` paths per forward pass), then the marginal drift and c.i.d. check of J × N PPR paths and
    the step spread of θ along J × N more (the noise floor's own), both sampled for all `units` together."""
    measured = trajectory_quantities_many(units, paths, steps, seed)
    floor_paths = unit_trajectories(units, paths, steps, [floor_generator(seed, runner.question, method, "paths")
                                                          for runner, method in units])
    return [
        {**question_emd(runner, method.num_seeds, config, emd_generator(seed, runner.question, method)).record(),
         **quantities, **spread_fields(trajectories.thetas)}
        for (runner, method), quantities, trajectories in zip(units, measured, floor_paths, strict=True)
    ]
