"""The question × method runs of the diagnostics (`drift`, `emd`) through the one run loop (`runs.loop.run_loop`):
what each stores per unit, computed a batch of units at a time, resumable and sharded over torchrun ranks.

A unit is one (question, method). Its quantities come from generators keyed by run seed, question id and method
name, so they do not depend on which units share a batch or which rank runs them: `--batch-questions` and the
number of ranks change speed, never a number.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from beliefdrift.backend import LanguageModel
from beliefdrift.backend.model import questions_per_batch
from beliefdrift.config.diagnostics import DriftConfig, EMDCommandConfig, EMDConfig
from beliefdrift.data.question import MCQuestion
from beliefdrift.diagnostics.cid import CID_TEST
from beliefdrift.diagnostics.drift_test import DRIFT_TEST
from beliefdrift.diagnostics.emd import emd_generator, question_emd
from beliefdrift.diagnostics.noise_floor import floor_generator, spread_fields
from beliefdrift.diagnostics.trajectory import trajectory_quantities_many, unit_trajectories
from beliefdrift.engine.methods import Method, parse_method
from beliefdrift.engine.resampling import QuestionRunner
from beliefdrift.runs.distributed import Ranks
from beliefdrift.runs.identity import identity_hash
from beliefdrift.runs.loop import Models, prepare, run_loop
from beliefdrift.runs.records import stored_records

#: The tests whose verdicts or increments each command's records hold, pinned in its run identity: a store of
#: another test's records is refused rather than resumed with two tests' records mixed.
STORED_TESTS = {"drift": {"cid_test": CID_TEST}, "emd": {"cid_test": CID_TEST, "drift_test": DRIFT_TEST}}
#: (the runner of the unit's question on the unit's model, the method)
Unit = tuple[QuestionRunner, Method]
#: Quantities of each unit of a batch, in order; every unit of one call runs on the same model.
ComputeUnits = Callable[[Sequence[Unit]], list[dict[str, Any]]]


@dataclass(frozen=True)
class Diagnosed:
    """A diagnostic run's store (`path`), the questions it covers and its methods."""

    path: Path
    questions: list[MCQuestion]
    methods: list[Method]

    def method_records(self) -> dict[str, list[dict[str, Any]]]:
        """{method: each question's stored quantities}, read once every rank has written; writes records.csv."""
        stored = stored_records(self.path.parent, [q.id for q in self.questions], [m.name for m in self.methods])
        return {m.name: [stored[q.id, m.name] for q in self.questions] for m in self.methods}


def compute_batch(
    models: Models, questions: Sequence[MCQuestion], methods: Sequence[Method], compute: ComputeUnits, template: str,
    template_ending: str,
) -> dict[str, dict[str, dict[str, Any]]]:
    """{question id: {method: quantities}} of `methods` on `questions`: one `compute` call per model (base, then
    tuned) for all their units, each question's prompts prefilled once per model."""
    results: dict[str, dict[str, dict[str, Any]]] = {q.id: {} for q in questions}
    for lm, group in models.groups(methods):
        runners = [QuestionRunner(lm, question, template, template_ending) for question in questions]
        units = [(runner, method) for runner in runners for method in group]
        for (runner, method), quantities in zip(units, compute(units), strict=True):
            results[runner.question.id][method.name] = quantities
    return results


def diagnose(command: str, config: DriftConfig | EMDCommandConfig, compute: ComputeUnits, answers: int, *,
             questions: Sequence[MCQuestion] | None = None, lm: LanguageModel | None = None,
             progress: bool = True) -> Diagnosed:
    """Store `compute(units)` for every question × method of `config` not stored yet in `config.out`'s run store,
    `questions_per_batch` questions per call. `answers` is the most answers a path holds after its seeds (for the
    check against the context); `questions`: the questions, when given as objects; `lm`: the model `config` names,
    already loaded."""
    ranks = Ranks.from_env()
    run = prepare(command, config, config.method_list, answers, questions=questions, lm=lm, ranks=ranks)
    identity = {**run.identity, **STORED_TESTS[command]}
    identity["sha256"] = identity_hash(identity)

    def batch_records(batch: Sequence[tuple[int, MCQuestion]], names: tuple[str, ...]) -> dict[str, Any]:
        return compute_batch(run.models, [q for _, q in batch], [parse_method(name) for name in names], compute,
                             config.template, config.template_ending)

    path = run_loop(config.out, identity, run.questions, [m.name for m in run.methods], batch_records,
                    batch=questions_per_batch(config.batch_questions, run.models.base), ranks=ranks,
                    progress=progress, desc=command)
    return Diagnosed(path, run.questions, run.methods)


def run_drift(config: DriftConfig, *, questions: Sequence[MCQuestion] | None = None,
              lm: LanguageModel | None = None, progress: bool = True) -> Diagnosed:
    """`beliefdrift drift`'s units: the marginal drift and c.i.d. check of J × N PPR paths per question × method."""
    return diagnose("drift", config,
                    lambda units: trajectory_quantities_many(units, config.paths, config.steps, config.seed),
                    config.steps, questions=questions, lm=lm, progress=progress)


def run_emd(config: EMDCommandConfig, *, questions: Sequence[MCQuestion] | None = None,
            lm: LanguageModel | None = None, progress: bool = True) -> Diagnosed:
    """`beliefdrift emd`'s units (`emd_quantities`) under its EMD settings (`EMDCommandConfig.emd`)."""
    emd = config.emd
    answers = max(config.steps, max(emd.prefix_lengths, default=0) + emd.horizon, emd.burn_in + emd.k)
    return diagnose("emd", config,
                    lambda units: emd_quantities(units, emd, config.paths, config.steps, config.seed), answers,
                    questions=questions, lm=lm, progress=progress)


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
