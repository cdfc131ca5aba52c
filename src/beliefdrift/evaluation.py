"""Evaluation runs: the paper's methods on a benchmark, stored question by question in a run store.

A unit of work is one (question, method); it draws its randomness from `make_generator(seed, question id,
method name)`, so a run gives the same numbers whether it runs in one go, resumes after a kill, or is
sharded over ranks (`distributed.Ranks`). Settings live in `evaluation_config`, scoring in `scoring`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path
from time import perf_counter
from typing import Any

from beliefdrift import progress_bar as tqdm  # the bars follow --quiet (beliefdrift.show_progress)
from beliefdrift.adapters import base_model, check_adapter, load_adapter
from beliefdrift.backend import LanguageModel
from beliefdrift.backend.loading import model_from
from beliefdrift.backend.path_cache import prepared, questions_per_batch
from beliefdrift.data.question import MCQuestion
from beliefdrift.data.registry import load_dataset, require_kind
from beliefdrift.distributed import Ranks, process_group
from beliefdrift.errors import UserError
from beliefdrift.evaluation_config import EvalConfig
from beliefdrift.identity import run_identity
from beliefdrift.methods import Method, parse_method, run_methods_many
from beliefdrift.prompts import load_template
from beliefdrift.resampling import direct_tokens, ppr_tokens
from beliefdrift.scoring import result_row
from beliefdrift.store import STORE_FILE, ResultRow, RunStore, StoreError

log = logging.getLogger(__name__)


def question_rows(
    batch: Sequence[tuple[int, MCQuestion]],
    methods: Sequence[Method],
    config: EvalConfig,
    lm: LanguageModel,
    adapter_lm: LanguageModel | None = None,
) -> list[ResultRow]:
    """Run `methods` on a batch of (position, question): the base-model methods in one `run_methods_many` call
    (one prefill per prompt, the PPR variants of every question advancing together), the AM-PPR methods in
    another on the adapter. Each method draws from `make_generator(seed, question id, method name)`, so the
    results do not depend on the batch; each row records its share of the wall time of the call."""
    tuned = [m for m in methods if m.needs_adapter]
    if tuned and adapter_lm is None:
        raise ValueError(f"{', '.join(m.name for m in tuned)} need an adapter")
    questions = [question for _, question in batch]
    rows = []
    for model, group, context in (
        (lm, [m for m in methods if not m.needs_adapter], base_model(adapter_lm)),
        (adapter_lm, tuned, nullcontext()),
    ):
        if not group:
            continue
        with context:
            start = perf_counter()
            results = run_methods_many(model, questions, group, paths=config.paths, steps=config.steps,
                                       seed=config.seed, template=config.template,
                                       template_ending=config.template_ending)
            seconds = (perf_counter() - start) / len(batch)
        rows += [
            result_row(position, question, result, seconds)
            for (position, question), question_results in zip(batch, results, strict=True)
            for result in question_results
        ]
    return rows


def load_questions(config: EvalConfig) -> list[MCQuestion]:
    """The run's multiple-choice questions (`dataset`, `split`, `n`, `seed`); a dataset of other tasks is an error."""
    questions = load_dataset(config.dataset, split=config.split, data_dir=config.data_dir, n=config.n,
                             seed=config.seed, fields=config.fields)
    return require_kind(questions, config.dataset, "evaluate")


def prompt_positions(lm: LanguageModel, question: MCQuestion, methods: Sequence[Method], steps: int, template: str,
                     ending: str) -> int:
    """Positions the longest of `methods` fills on `question`: its prompt, then (PPR) m seeds and N answers."""
    needed = [len(direct_tokens(lm, question, ending).prompt_ids)] if not all(m.resamples for m in methods) else []
    resampling = [m for m in methods if m.resamples]
    if resampling:
        tokens = ppr_tokens(lm, question, template, ending=ending)
        answers = max(m.num_seeds for m in resampling) + steps
        needed.append(len(tokens.prompt_ids) + answers * tokens.step_length)
    return max(needed)


def split_long_prompts(
    lm: LanguageModel,
    questions: Sequence[MCQuestion],
    methods: Sequence[Method],
    steps: int,
    template: str,
    ending: str,
    skip: bool,
) -> tuple[list[MCQuestion], list[MCQuestion]]:
    """(questions that fit the model's context, questions that do not); with `skip` false a question that does not
    fit is a UserError naming it. Models without `max_position_embeddings` fit everything."""
    limit = getattr(lm.model.config, "max_position_embeddings", None)
    if limit is None:
        return list(questions), []
    kept, skipped = [], []
    for question in questions:
        needed = prompt_positions(lm, question, methods, steps, template, ending)
        if needed <= limit:
            kept.append(question)
        elif skip:
            skipped.append(question)
        else:
            raise UserError(f"question {question.id} ({question.source or 'no source'}) needs {needed} positions "
                            f"(prompt, seeds and -N {steps} answers) but {lm.name} has {limit} "
                            "(max_position_embeddings); shorten it, lower -N/--steps, or pass --skip-long-prompts")
    return kept, skipped


def open_run_store(path: Path, identity: Mapping[str, Any], ranks: Ranks) -> RunStore:
    """Rank 0 creates the store and writes (or checks) the run's identity; the others open it afterwards.
    Every rank raises the same StoreError if rank 0's check failed."""
    error = None
    if ranks.rank == 0:
        try:
            with RunStore.open(path) as store:
                store.ensure_config(identity)
        except StoreError as err:
            error = str(err)
    error = ranks.from_rank0(error)
    if error:
        raise StoreError(error)
    return RunStore.open(path, create=False)


def evaluate(config: EvalConfig, out: str | Path, progress: bool = True, ranks: Ranks | None = None,
             lm: LanguageModel | None = None) -> Path:
    """Run every (question, method) of `config` not yet stored in `<out>/run.sqlite`; return the store path. `lm`:
    the model `config` names, already loaded (else it is loaded here).

    Resumable: a question's methods are committed together, so a killed run leaves whole questions and the
    re-run computes the others exactly as an uninterrupted run would. Shardable: under torchrun each rank
    takes its share of the questions; all ranks have finished when this returns. Results are bit-for-bit
    reproducible at a fixed number of CPU threads per process (torchrun workers use one).
    """
    ranks = ranks or Ranks.from_env()
    path = Path(out) / STORE_FILE
    questions = load_questions(config)
    methods = config.method_list
    if config.adapter:
        check_adapter(config.adapter)  # before the model loads
    # The store is written only once model and data have loaded, so a failed start leaves no run behind.
    lm = prepared(lm or model_from(config), config.compile, config.cuda_graphs)
    adapter_lm = load_adapter(lm, config.adapter) if config.adapter else None
    questions, skipped = split_long_prompts(lm, questions, methods, config.steps, config.template,
                                            config.template_ending, config.skip_long_prompts)
    if skipped and ranks.rank == 0:
        log.warning("skipping %d of %d questions whose prompt is longer than the model's context: %s", len(skipped),
                    len(questions) + len(skipped), ", ".join(q.id for q in skipped))
    # the settings that determine the results, the questions run and skipped: resuming with any changed is refused
    identity = run_identity("evaluate", config, questions, skipped, load_template(config.template,
                                                                                  config.template_ending))
    with process_group(ranks), open_run_store(path, identity, ranks) as store:
        done = store.done()
        mine = [(i, q) for i, q in enumerate(questions) if ranks.owns(i)]
        todo = [(i, q) for i, q in mine if any((q.id, m.name) not in done for m in methods)]
        with tqdm(total=len(mine), initial=len(mine) - len(todo), unit="question", desc=config.dataset,
                  disable=not progress or ranks.rank != 0, dynamic_ncols=True) as bar:
            size = questions_per_batch(config.batch_questions, lm.device)
            for chunk in (todo[i : i + size] for i in range(0, len(todo), size)):
                done = store.done()  # another process on this directory may have stored some meanwhile
                pending: dict[tuple[str, ...], list[tuple[int, MCQuestion]]] = {}
                for position, question in chunk:
                    missing = tuple(m.name for m in methods if (question.id, m.name) not in done)
                    if missing:
                        pending.setdefault(missing, []).append((position, question))
                for names, batch in pending.items():
                    store.add(question_rows(batch, [parse_method(n) for n in names], config, lm, adapter_lm))
                bar.update(len(chunk))
        ranks.barrier()
    return path
