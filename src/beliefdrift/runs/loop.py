"""The one run loop of `evaluate`, `drift`, `emd` and `reasoning`: resumable, stored unit by unit, sharded over
torchrun ranks.

A unit is one (question, method) (for `reasoning`, one (question, condition)). `run_loop` opens the run store
pinned to the run identity, skips the units already stored (also those another process on the same directory
stored meanwhile), computes a batch of questions at a time and stores each question's units in one transaction.
Under torchrun rank r takes the questions at positions ≡ r (mod world size) and every rank writes its own units
into the same SQLite store (WAL mode); all ranks have finished when `run_loop` returns. Each unit draws its
randomness from generators keyed by run seed, question id and unit name, so the numbers depend neither on the
batch, the order, a resume nor the rank.

For the multiple-choice commands `prepare` loads the questions once, the model and adapter once (`Models`, whose
`groups` switches the adapter once per batch), checks the prompt lengths once and builds the run identity.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeAlias, TypeVar

from beliefdrift.backend import LanguageModel, TransformersModel
from beliefdrift.backend.adapters import base_model, check_adapter, load_adapter
from beliefdrift.backend.loading import model_from
from beliefdrift.config.diagnostics import DiagnosticsConfig
from beliefdrift.config.evaluate import EvalConfig
from beliefdrift.data.question import MCQuestion, write_questions
from beliefdrift.data.registry import load_dataset, require_kind
from beliefdrift.engine.methods import Method
from beliefdrift.engine.resampling import direct_tokens, ppr_tokens
from beliefdrift.errors import UserError
from beliefdrift.progress import progress_bar as tqdm  # the bars follow --quiet (beliefdrift.show_progress)
from beliefdrift.prompts import load_template
from beliefdrift.runs.distributed import Ranks, process_group
from beliefdrift.runs.identity import run_identity
from beliefdrift.runs.store import STORE_FILE, RunStore, StoreError

log = logging.getLogger(__name__)


class Question(Protocol):
    """What the loop needs of a question: its id."""

    @property
    def id(self) -> str: ...


Q = TypeVar("Q", bound=Question)
#: The settings of a multiple-choice command (`evaluate`, `drift`, `emd`).
MCConfig: TypeAlias = "EvalConfig | DiagnosticsConfig"
#: (position in the run's question list, question)
Positioned = tuple[int, Q]
#: The units of a batch of questions, all missing the same unit names: {question id: what to store for it}
#: (evaluate: its `ResultRow`s; the others: {unit name: {quantity: value}}).
Compute = Callable[[Sequence[Positioned], tuple[str, ...]], Mapping[str, Any]]

#: Per store table: the (question id, unit name) pairs it holds, and how one question's units are stored (one
#: transaction; a unit already there keeps its first value).
TABLES: dict[str, tuple[Callable[[RunStore], set[tuple[str, str]]], Callable[[RunStore, str, Any], Any]]] = {
    "results": (RunStore.done, lambda store, question_id, rows: store.add(rows)),
    "records": (lambda store: set(store.record_units()), RunStore.add_records),
}


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


def run_loop(
    out: str | Path,
    identity: Mapping[str, Any],
    questions: Sequence[Q],
    names: Sequence[str],
    compute: Compute,
    *,
    table: str = "records",
    batch: int = 1,
    ranks: Ranks | None = None,
    progress: bool = True,
    desc: str | None = None,
    kind: str = "method",
) -> Path:
    """Store `compute`'s units for every question × name of `names` (each a `kind`: a method, for reasoning a
    condition) not stored yet in `<out>/run.sqlite` (table `table`), `batch` questions per call (this rank's share
    under torchrun); return the store's path. Multiple-choice questions are also kept beside the store
    (`data.question.QUESTIONS_FILE`)."""
    ranks = ranks or Ranks.from_env()
    path = Path(out) / STORE_FILE
    stored_units, save = TABLES[table]
    with process_group(ranks):
        with open_run_store(path, identity, ranks) as store:
            multiple_choice = [q for q in questions if isinstance(q, MCQuestion)]
            if ranks.rank == 0 and questions and len(multiple_choice) == len(questions):
                write_questions(path.parent, multiple_choice)  # their texts, for the explorer whatever the dataset
            mine = [(i, q) for i, q in enumerate(questions) if ranks.owns(i)]
            stored = stored_units(store)
            done = sum((q.id, name) in stored for _, q in mine for name in names)
            todo = [(i, q) for i, q in mine if any((q.id, name) not in stored for name in names)]
            rank = f"rank {ranks.rank}: " if ranks.world_size > 1 else ""
            units = len(mine) * len(names)
            log.info("%s%d questions × %d %ss = %d units to compute%s", rank, len(mine), len(names), kind,
                     units - done, f" ({done} of {units} stored already: resuming)" if done else "")
            with tqdm(total=len(mine) * len(names), initial=done, desc=desc, unit=f"question×{kind}",
                      dynamic_ncols=True, disable=not progress or ranks.rank != 0) as bar:
                for start in range(0, len(todo), batch):
                    stored = stored_units(store)  # another process on this directory may have stored some since
                    pending: dict[tuple[str, ...], list[Positioned]] = {}
                    for i, question in todo[start : start + batch]:
                        missing = tuple(name for name in names if (question.id, name) not in stored)
                        if missing:  # the questions missing the same units share a call
                            pending.setdefault(missing, []).append((i, question))
                    for missing, group in pending.items():
                        for question_id, units in compute(group, missing).items():
                            save(store, question_id, units)
                            bar.update(len(missing))
        # every rank has closed the store (the last to close leaves it one file) before rank 0 reads it
        ranks.barrier()
    return path


# ------------------------------------------------------------------------------ the multiple-choice commands


@dataclass(frozen=True)
class Models:
    """The base model and, with an adapter, the tuned one (loading the adapter patches the base model's modules)."""

    base: LanguageModel
    tuned: TransformersModel | None = None

    @classmethod
    def load(cls, config: MCConfig, lm: LanguageModel | None = None) -> Models:
        """The model `config` names (`lm` when it is loaded already), prepared for its `compile`/`cuda_graphs`,
        and its `adapter` when set (checked before the model loads)."""
        if config.adapter:
            check_adapter(config.adapter)
        if lm is None:
            log.info("loading %s ...", config.model)
        base = (lm or model_from(config)).prepared(config.compile, config.cuda_graphs)
        return cls(base, load_adapter(base, config.adapter) if config.adapter else None)

    def groups(self, methods: Sequence[Method]) -> Iterator[tuple[LanguageModel, list[Method]]]:
        """(model, its methods): the base methods on the base model with the adapter switched off, then the
        AM-PPR methods on the tuned model; one switch for the whole group."""
        tuned = [m for m in methods if m.needs_adapter]
        if tuned and self.tuned is None:
            raise ValueError(f"{', '.join(m.name for m in tuned)} need an adapter")
        base = [m for m in methods if not m.needs_adapter]
        if base:
            with base_model(self.tuned):
                yield self.base, base
        if tuned and self.tuned is not None:
            yield self.tuned, tuned


def load_questions(config: MCConfig, command: str, given: Sequence[Any] | None = None) -> list[MCQuestion]:
    """The run's multiple-choice questions: `given` (the Python API's `questions=`), else those of `config`
    (`dataset`, `split`, `n`, `seed`, `fields`); other items (math problems) are an error."""
    if given is not None:
        return require_kind(given, config.dataset, command, flag="questions=")
    questions = load_dataset(config.dataset, split=config.split, data_dir=config.data_dir, n=config.n,
                             seed=config.seed, fields=config.fields)
    return require_kind(questions, config.dataset, command)


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
    fit is a UserError naming it. Models whose context is not known (`LanguageModel.context_length`) fit everything."""
    limit = lm.context_length
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


@dataclass(frozen=True)
class Prepared:
    """A multiple-choice run ready for `run_loop`: its models, the questions that fit, methods and run identity."""

    models: Models
    questions: list[MCQuestion]
    methods: list[Method]
    identity: dict[str, Any]


def prepare(command: str, config: MCConfig, methods: Sequence[Method], answers: int, *,
            questions: Sequence[MCQuestion] | None = None, lm: LanguageModel | None = None,
            ranks: Ranks | None = None) -> Prepared:
    """Load `config`'s questions (or take those given) and models (or take `lm`, the model `config` names) once,
    keep the questions whose prompt and `answers` answers after the seeds fit the model's context (or refuse, see
    `split_long_prompts`), and pin the run identity to them. Nothing is written: a failed start leaves no run
    behind."""
    questions = load_questions(config, command, questions)
    models = Models.load(config, lm)
    questions, skipped = split_long_prompts(models.base, questions, methods, answers, config.template,
                                            config.template_ending, config.skip_long_prompts)
    if not questions:
        raise UserError(f"all {len(skipped)} questions need more positions than {models.base.name}'s context "
                        f"(prompt, seeds and {answers} answers); nothing to run: lower the answers a path holds "
                        "(-N/--steps; emd: also -K, -k, --burn-in, --prefix-lengths) or use a model with a longer "
                        "context")
    if skipped and (ranks or Ranks.from_env()).rank == 0:
        log.warning("skipping %d of %d questions whose prompt is longer than the model's context: %s", len(skipped),
                    len(questions) + len(skipped), ", ".join(q.id for q in skipped))
    # the settings that determine the results, the questions run and skipped: resuming with any changed is refused
    identity = run_identity(command, config, questions, skipped, load_template(config.template,
                                                                               config.template_ending), lm=models.base)
    return Prepared(models, questions, list(methods), identity)
