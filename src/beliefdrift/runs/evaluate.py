"""Evaluation runs: the paper's methods on a benchmark, stored question by question in a run store.

A unit of work is one (question, method); it draws its randomness from `make_generator(seed, question id,
method name)`, so a run gives the same numbers whether it runs in one go, resumes after a kill, or is
sharded over ranks. The loop (resume, sharding, storing) is `runs.loop.run_loop`; settings live in
`config.evaluate`, scoring in `runs.scoring`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from time import perf_counter

from beliefdrift.backend import LanguageModel
from beliefdrift.backend.model import questions_per_batch
from beliefdrift.config.evaluate import EvalConfig
from beliefdrift.data.question import MCQuestion
from beliefdrift.engine.methods import Method, parse_method, run_methods_many
from beliefdrift.runs.distributed import Ranks
from beliefdrift.runs.loop import Models, prepare, run_loop
from beliefdrift.runs.scoring import result_row, warn_quality
from beliefdrift.runs.store import ResultRow, RunStore


def question_rows(
    batch: Sequence[tuple[int, MCQuestion]], methods: Sequence[Method], config: EvalConfig, models: Models
) -> list[ResultRow]:
    """Run `methods` on a batch of (position, question): the base-model methods in one `run_methods_many` call
    (one prefill per prompt, the PPR variants of every question advancing together), the AM-PPR methods in
    another on the adapter. Each method draws from `make_generator(seed, question id, method name)`, so the
    results do not depend on the batch; each row records its share of the wall time of the call."""
    questions = [question for _, question in batch]
    rows = []
    for model, group in models.groups(methods):
        start = perf_counter()
        results = run_methods_many(model, questions, group, paths=config.paths, steps=config.steps,
                                   seed=config.seed, template=config.template, template_ending=config.template_ending)
        seconds = (perf_counter() - start) / len(batch)
        rows += [
            result_row(position, question, result, seconds)
            for (position, question), question_results in zip(batch, results, strict=True)
            for result in question_results
        ]
    return rows


def run_evaluation(config: EvalConfig, *, questions: Sequence[MCQuestion] | None = None,
                   lm: LanguageModel | None = None, progress: bool = True, ranks: Ranks | None = None) -> Path:
    """Run every (question, method) of `config` not yet stored in `<config.out>/run.sqlite`; return the store path.
    `questions`: the questions, when given as objects (else `config` names them); `lm`: the model `config` names,
    already loaded (else it is loaded here).

    Resumable: a question's methods are committed together, so a killed run leaves whole questions and the
    re-run computes the others exactly as an uninterrupted run would. Shardable: under torchrun each rank
    takes its share of the questions; all ranks have finished when this returns. Results are bit-for-bit
    reproducible at a fixed number of CPU threads per process (torchrun workers use one). At the end, a warning
    names each method whose questions quality control excludes, and how many (`scoring.warn_quality`).
    """
    ranks = ranks or Ranks.from_env()
    run = prepare("evaluate", config, config.method_list, config.steps, questions=questions, lm=lm, ranks=ranks)

    def compute(batch: Sequence[tuple[int, MCQuestion]], names: tuple[str, ...]) -> dict[str, list[ResultRow]]:
        rows: dict[str, list[ResultRow]] = {question.id: [] for _, question in batch}
        for row in question_rows(batch, [parse_method(name) for name in names], config, run.models):
            rows[row.question_id].append(row)
        return rows

    path = run_loop(config.out, run.identity, run.questions, [m.name for m in run.methods], compute, table="results",
                    batch=questions_per_batch(config.batch_questions, run.models.base), ranks=ranks,
                    progress=progress, desc=config.dataset)
    if ranks.rank == 0:  # what quality control will drop from the tables, said now (`scoring.warn_quality`)
        with RunStore.open(path, read_only=True) as store:
            warn_quality(store.rows(trajectories=False), config.quality_control)
    return path
