"""Evaluation runs: the paper's methods on a benchmark, stored unit by unit, then scored with quality control.

A unit of work is one (question, method); it draws its randomness from `make_generator(seed, question id,
method name)`, so a run gives the same numbers whether it runs in one go, resumes after a kill, or is
sharded over ranks (rank r takes the questions at positions i ≡ r mod world size). Scoring drops, per
method, the questions that fail quality control (DESIGN §2) and counts them.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, fields
from pathlib import Path
from time import perf_counter
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import yaml
from tqdm import tqdm

from beliefdrift import __version__
from beliefdrift.backend import DEFAULT_MODEL, REGISTRY, LanguageModel, load_model
from beliefdrift.backend.loading import resolve_device, resolve_dtype
from beliefdrift.data.question import MCQuestion
from beliefdrift.data.registry import DATASETS, load_dataset
from beliefdrift.methods import Method, MethodResult, parse_method, run_methods
from beliefdrift.metrics import MetricWarning, summarize
from beliefdrift.prompts import DEFAULT_PPR_TEMPLATE, DEFAULT_TEMPLATE_ENDING, load_template
from beliefdrift.store import STORE_FILE, ResultRow, RunStore, StoreError

# ------------------------------------------------------------------------------------------ configuration


@dataclass(frozen=True)
class EvalConfig:
    """Everything an evaluation run needs. `identity()` is the part that determines the results."""

    model: str = DEFAULT_MODEL
    dataset: str = "demo"
    split: str | None = None
    n: int | None = None
    seed: int = 0
    methods: tuple[str, ...] = ("ppr", "ppr-seed1", "ppr-seed5", "direct")
    paths: int = 8  # J
    steps: int = 20  # N
    template: str = DEFAULT_PPR_TEMPLATE
    template_ending: str = DEFAULT_TEMPLATE_ENDING  # prompts.TEMPLATE_ENDINGS
    adapter: str | None = None
    dtype: str = "auto"
    device: str = "cpu"
    data_dir: str | None = None
    qc_path_mass: float = 0.5
    qc_max_fraction: float = 0.5

    @property
    def method_list(self) -> list[Method]:
        return [parse_method(name) for name in self.methods]

    @property
    def quality_control(self) -> QualityControl:
        return QualityControl(self.qc_path_mass, self.qc_max_fraction)

    def identity(self) -> dict[str, Any]:
        """The settings stored with a run; resuming with any of them changed is refused."""
        template = load_template(self.template, self.template_ending)  # an unknown ending fails here
        return {
            "model": self.model if self.model in REGISTRY else _local_path_or_name(self.model),
            "dataset": self.dataset if self.dataset in DATASETS else _local_path_or_name(self.dataset),
            "split": self.split,
            "n": self.n,
            "seed": self.seed,
            "methods": list(self.methods),
            "paths": self.paths,
            "steps": self.steps,
            "template": self.template,
            "template_sha256": hashlib.sha256(template.encode()).hexdigest()[:16],
            # absent for the default ending, so that runs stored before the option existed still resume
            **({"template_ending": self.template_ending} if self.template_ending != DEFAULT_TEMPLATE_ENDING else {}),
            "adapter": _local_path_or_name(self.adapter) if self.adapter else None,
            "dtype": str(resolve_dtype(self.dtype, resolve_device(self.device))).removeprefix("torch."),
            "version": __version__,
        }


CONFIG_KEYS = tuple(f.name for f in fields(EvalConfig))


def _local_path_or_name(spec: str) -> str:
    """An existing local path as an absolute path (the same run from another directory matches), else as is."""
    path = Path(spec).expanduser()
    return str(path.resolve()) if path.exists() else spec


def table_order(method: Method) -> tuple[int, int]:
    """The paper's row order: PPR (NoSEED, SEED_1, …), then AM-PPR, then Direct-Query."""
    return ({"ppr": 0, "am-ppr": 1, "direct": 2}[method.kind], method.num_seeds)


def canonical_methods(names: str | Sequence[str]) -> tuple[str, ...]:
    """Method names parsed, de-duplicated and put in table order ("ppr,direct" and "direct ppr" agree)."""
    if isinstance(names, str):
        names = [names]
    methods = {m.name: m for m in (parse_method(part) for name in names for part in name.split(",") if part.strip())}
    if not methods:
        raise ValueError("no methods given")
    return tuple(name for name, method in sorted(methods.items(), key=lambda item: table_order(item[1])))


def load_preset(path: str | Path) -> dict[str, Any]:
    """A YAML preset: a mapping of `EvalConfig` field names to values (unknown keys are an error)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--config {path}: no such file")
    try:
        values = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ValueError(f"--config {path}: not valid YAML ({err})") from err
    if not isinstance(values, dict):
        raise ValueError(f"--config {path}: expected a mapping of settings, got {type(values).__name__}")
    unknown = sorted(set(values) - set(CONFIG_KEYS))
    if unknown:
        raise ValueError(f"--config {path}: unknown settings {unknown}; known: {', '.join(CONFIG_KEYS)}")
    return values


def resolve_config(preset: Mapping[str, Any], given: Mapping[str, Any]) -> EvalConfig:
    """Built-in defaults, overridden by the preset, overridden by explicitly given (command-line) values.

    AM-PPR methods need an adapter: if they come from the preset and no adapter is set they are dropped
    with a note on stderr; asked for explicitly without one, they are an error.
    """
    values = {**preset, **given}
    methods = canonical_methods(values.get("methods", EvalConfig.methods))
    tuned = [name for name in methods if parse_method(name).needs_adapter]
    if tuned and not values.get("adapter"):
        if "methods" in given:
            raise ValueError(f"methods {', '.join(tuned)} need --adapter (a LoRA adapter directory)")
        methods = tuple(name for name in methods if name not in tuned)
        print(f"note: skipping {', '.join(tuned)}: no --adapter given", file=sys.stderr)
        if not methods:
            raise ValueError("no methods left to run without --adapter")
    config = EvalConfig(**{**values, "methods": methods})
    for name in ("paths", "steps"):
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be at least 1, got {getattr(config, name)}")
    return config


# ------------------------------------------------------------------------------------------ adapters


def load_adapter(lm: LanguageModel, path: str | Path) -> LanguageModel:
    """The SC-tuned model: `lm` with the LoRA adapter at `path` (a second LanguageModel, same tokenizer).

    PEFT injects the LoRA layers into `lm.model` in place, so from now on run the base model inside
    `base_model(adapter_lm)`.
    """
    from peft import PeftModel

    path = Path(path)
    if not (path / "adapter_config.json").is_file():
        raise FileNotFoundError(f"--adapter {path}: not a PEFT adapter directory (no adapter_config.json)")
    tuned = PeftModel.from_pretrained(lm.model, str(path))
    tuned.eval()
    return LanguageModel(model=tuned, tokenizer=lm.tokenizer, name=f"{lm.name}+{path.name}")


def base_model(adapter_lm: LanguageModel | None) -> Any:
    """Context in which the base model runs without the adapter layers `load_adapter` injected."""
    return adapter_lm.model.disable_adapter() if adapter_lm is not None else nullcontext()


# ------------------------------------------------------------------------------------------ quality control


@dataclass(frozen=True)
class QualityControl:
    """Exclude a question from a method's metrics when more than `max_fraction` of its paths have mean
    valid_mass below `path_mass` (the paper's ">50% of paths off-format" rule; direct query = one path)."""

    path_mass: float = 0.5
    max_fraction: float = 0.5

    def excludes(self, row: ResultRow) -> bool:
        return float(np.mean(row.path_valid_mass < self.path_mass)) > self.max_fraction


# ------------------------------------------------------------------------------------------ running


@dataclass(frozen=True)
class Ranks:
    """This process's place in a torchrun launch (RANK / WORLD_SIZE; one process without them)."""

    rank: int = 0
    world_size: int = 1

    @classmethod
    def from_env(cls) -> Ranks:
        return cls(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)))

    def owns(self, position: int) -> bool:
        return position % self.world_size == self.rank

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()

    def from_rank0(self, value: Any) -> Any:
        """`value` as computed on rank 0, on every rank."""
        if self.world_size == 1:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]


@contextmanager
def process_group(ranks: Ranks) -> Iterator[None]:
    """A gloo process group for barriers and broadcasts when several ranks run (CPU-only is enough)."""
    if ranks.world_size == 1 or dist.is_initialized():
        yield
        return
    dist.init_process_group("gloo", rank=ranks.rank, world_size=ranks.world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def result_row(position: int, question: MCQuestion, result: MethodResult, seconds: float) -> ResultRow:
    """A method's result on a question in storable form (direct query: valid_mass as a [1, 1] array)."""
    traj = result.trajectories

    def array(tensor: torch.Tensor | None) -> np.ndarray | None:
        return None if tensor is None else tensor.detach().cpu().numpy()

    return ResultRow(
        question_id=question.id,
        method=result.method.name,
        position=position,
        target=question.answer_index,
        num_labels=question.num_choices,
        probs=array(result.probs.double()),
        valid_mass=array(traj.valid_mass) if traj is not None else np.array([[result.valid_mass]]),
        answers=array(traj.answers) if traj is not None else None,
        seeds=array(traj.seeds) if traj is not None else None,
        thetas=array(traj.thetas) if traj is not None else None,
        seconds=seconds,
        alternatives={name: array(probs.double()) for name, probs in result.alternatives.items()},
    )


def question_rows(
    position: int,
    question: MCQuestion,
    methods: Sequence[Method],
    config: EvalConfig,
    lm: LanguageModel,
    adapter_lm: LanguageModel | None = None,
) -> list[ResultRow]:
    """Run `methods` on one question: the base-model methods in one `run_methods` call (one prefill per
    prompt, all PPR variants advancing together), the AM-PPR methods in another on the adapter. Each method
    draws from `make_generator(seed, question id, method name)`; each row records the wall time of the call
    it was part of."""
    tuned = [m for m in methods if m.needs_adapter]
    if tuned and adapter_lm is None:
        raise ValueError(f"{', '.join(m.name for m in tuned)} need an adapter")
    rows = []
    for model, group, context in (
        (lm, [m for m in methods if not m.needs_adapter], base_model(adapter_lm)),
        (adapter_lm, tuned, nullcontext()),
    ):
        if not group:
            continue
        with context:
            start = perf_counter()
            results = run_methods(model, question, group, config.paths, config.steps, config.seed, config.template,
                                  config.template_ending)
            seconds = perf_counter() - start
        rows += [result_row(position, question, result, seconds) for result in results]
    return rows


def load_questions(config: EvalConfig) -> list[MCQuestion]:
    questions = load_dataset(config.dataset, split=config.split, data_dir=config.data_dir, n=config.n,
                             seed=config.seed)
    if not questions or not isinstance(questions[0], MCQuestion):
        raise ValueError(f"dataset {config.dataset!r} has no multiple-choice questions to evaluate")
    return questions  # type: ignore[return-value]


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


def evaluate(config: EvalConfig, out: str | Path, progress: bool = True, ranks: Ranks | None = None) -> Path:
    """Run every (question, method) of `config` not yet stored in `<out>/run.sqlite`; return the store path.

    Resumable: a question's methods are committed together, so a killed run leaves whole questions and the
    re-run computes the others exactly as an uninterrupted run would. Shardable: under torchrun each rank
    takes its share of the questions; all ranks have finished when this returns. Results are bit-for-bit
    reproducible at a fixed number of CPU threads per process (torchrun workers use one).
    """
    ranks = ranks or Ranks.from_env()
    path = Path(out) / STORE_FILE
    questions = load_questions(config)
    methods = config.method_list
    identity = config.identity()
    with process_group(ranks), open_run_store(path, identity, ranks) as store:
        done = store.done()
        mine = [(i, q) for i, q in enumerate(questions) if ranks.owns(i)]
        todo = [(i, q, [m for m in methods if (q.id, m.name) not in done]) for i, q in mine]
        todo = [(i, q, missing) for i, q, missing in todo if missing]
        if todo:
            lm = load_model(config.model, device=config.device, dtype=config.dtype)
            adapter_lm = load_adapter(lm, config.adapter) if config.adapter else None
            with tqdm(total=len(mine), initial=len(mine) - len(todo), unit="question", desc=config.dataset,
                      disable=not progress or ranks.rank != 0, dynamic_ncols=True) as bar:
                for position, question, missing in todo:
                    store.add(question_rows(position, question, missing, config, lm, adapter_lm))
                    bar.update()
        ranks.barrier()
    return path


# ------------------------------------------------------------------------------------------ scoring

ESTIMATOR_TITLES = {"q_star_rb": "RB", "theta_1": "θ̂_1"}
#: The estimator behind each method's own estimate (DESIGN §5).
METHOD_ESTIMATOR = {"ppr": "q_star", "am-ppr": "theta_1", "direct": "direct"}


@dataclass(frozen=True)
class MethodScore:
    """Metrics of one method (or one of its alternative estimators) over the questions passing QC.

    `summary` is `metrics.summarize` on the kept questions (None when QC excluded all of them); `label_mass` is
    the mean `valid_mass` over all of the method's questions, excluded ones included.
    """

    method: Method
    estimator: str | None  # None: the method's own estimate; else an alternative's name (e.g. "q_star_rb")
    summary: dict[str, Any] | None
    total: int
    excluded: int
    probs: list[np.ndarray] = field(repr=False, default_factory=list)
    targets: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=np.int64))
    label_mass: float = math.nan

    @property
    def title(self) -> str:
        return self.method.title + (f" ({ESTIMATOR_TITLES.get(self.estimator, self.estimator)})"
                                    if self.estimator else "")

    @property
    def estimator_name(self) -> str:
        return self.estimator or METHOD_ESTIMATOR[self.method.kind]

    @property
    def n(self) -> int:
        return self.total - self.excluded

    @property
    def confidence(self) -> float:
        """Mean max_a q(a) over the kept questions (NaN when there are none)."""
        return float(np.mean([p.max() for p in self.probs])) if self.probs else math.nan

    @property
    def predicted(self) -> str:
        """How often each option is the argmax over the kept questions, e.g. `C:2 E:98` (options A, B, …)."""
        counts = np.bincount([int(np.argmax(p)) for p in self.probs], minlength=1)
        return " ".join(f"{chr(ord('A') + i)}:{c}" for i, c in enumerate(counts) if c)


def score_rows(
    rows: Sequence[ResultRow], qc: QualityControl | None = None, n_resamples: int = 1000, seed: int = 0
) -> list[MethodScore]:
    """Per method in table order: its estimate, then its alternatives, scored on the questions that pass
    `qc` with bootstrap intervals over questions. Undefined metrics (AUC with one class) are NaN."""
    qc = qc or QualityControl()
    by_method: dict[str, list[ResultRow]] = {}
    for row in rows:
        by_method.setdefault(row.method, []).append(row)
    scores = []
    for name in canonical_methods(list(by_method)) if by_method else ():
        group = by_method[name]
        kept = [row for row in group if not qc.excludes(row)]
        label_mass = float(np.mean([row.valid_mass_mean for row in group]))
        estimators = sorted({alt for row in group for alt in row.alternatives})
        for estimator in [None, *estimators]:
            probs = [row.probs if estimator is None else row.alternatives[estimator] for row in kept]
            targets = np.array([row.target for row in kept], dtype=np.int64)
            summary = None
            if kept:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", MetricWarning)
                    summary = summarize(probs, targets, n_resamples=n_resamples, seed=seed)
            scores.append(MethodScore(parse_method(name), estimator, summary, len(group), len(group) - len(kept),
                                      probs, targets, label_mass))
    return scores


def score_results(
    results: Mapping[str, Sequence[MethodResult]],
    questions: Sequence[MCQuestion],
    qc: QualityControl | None = None,
    n_resamples: int = 1000,
) -> list[MethodScore]:
    """`score_rows` for in-memory results: {method name: one MethodResult per question, in order}."""
    rows = [result_row(i, q, r, math.nan) for per_question in results.values()
            for i, (q, r) in enumerate(zip(questions, per_question, strict=True))]
    return score_rows(rows, qc, n_resamples)

