"""SC fine-tuning (AM-PPR): LoRA adapters trained on the SC + PG loss, one query group per optimizer update.

Each update takes one group (Q, a_{1:n}), draws (k1, k2), runs the prompt + prefix once and the group's rollouts
in chunks of `micro_batch` paths (`micro_batch × grad_accum` paths per update), back-propagates
L = L_SC + β·L_pg (+ λ·L_anc + γ·L_fmt) one chunk at a time (gradient caching, amortize/backward.py) and takes one
AdamW step (gradient norm clipped at `max_grad_norm`, cosine schedule with warm-up). Every tensor of an update lives
on the model's device. Every update draws its randomness (horizons, rollout subset,
dropout masks, on-policy rollouts) from `make_generator(seed, epoch, group, u)`, so a run resumed from a
checkpoint ends with the same adapter as an uninterrupted one.

Under `accelerate launch` (DDP) the groups of each epoch are sharded over the processes: an update averages the
gradients of one group per process.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import math
import os
import pickle
import random
import re
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING, Any

import torch
import yaml

from beliefdrift.amortize.backward import backward_sc_loss
from beliefdrift.amortize.forward import Conditionals, enable_gradient_checkpointing
from beliefdrift.amortize.loss import SCLossOutput, SelfConsistencyLoss, draw_horizons
from beliefdrift.amortize.rollouts import (
    RolloutGroup,
    generate_groups,
    group_title,
    load_rollouts,
    rollouts_temporary,
    sample_rollouts,
    save_rollouts,
)
from beliefdrift.backend import AnswerTokens, LanguageModel, TransformersModel, load_model
from beliefdrift.backend.shared_prefix import enable_shared_prefix
from beliefdrift.config.options import as_mapping
from beliefdrift.config.train import MAX_UPDATES, ROLLOUT_SETTINGS, TrainConfig
from beliefdrift.data.question import MCQuestion
from beliefdrift.data.registry import load_dataset, require_kind
from beliefdrift.diagnostics.emd import EMDConfig, question_emd
from beliefdrift.engine.resampling import QuestionRunner, make_generator, ppr_tokens
from beliefdrift.errors import UserError, first_line
from beliefdrift.files import DirectoryLock, lock_directory, write_atomic
from beliefdrift.prompts import load_template
from beliefdrift.registry import parse_method
from beliefdrift.runs import store
from beliefdrift.runs.identity import pin_identity, run_identity
from beliefdrift.runs.inputs import Model, Questions, run_inputs
from beliefdrift.runs.loop import prompt_positions
from beliefdrift.runs.store import StoreError

if TYPE_CHECKING:  # (accelerate is imported where a trainer is made)
    from accelerate import Accelerator

logger = logging.getLogger(__name__)

# ------------------------------------------------------------------------------------------------ checkpoints

CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
#: A checkpoint's manifest: the sha256 of each of its other files, checked before it is restored.
CHECKSUMS_FILE = "checksums.json"
LOG_FIELDS = ("step", "epoch", "group", "k1", "k2", "loss", "sc", "pg", "anchor", "format", "grad_norm", "lr",
              "seconds", "val_emd_l1", "val_confidence")
VALIDATION_FIELDS = ("val_emd_l1", "val_confidence")


def file_digests(directory: Path) -> dict[str, str]:
    """{path relative to `directory`: sha256} of every file under it but the manifest (`CHECKSUMS_FILE`)."""
    return {path.relative_to(directory).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(directory.rglob("*")) if path.is_file() and path.name != CHECKSUMS_FILE}


def verify_checkpoint(directory: Path) -> None:
    """A ValueError naming what changed when the checkpoint's files differ from its manifest (one written before the
    manifest is read unchecked) or its state.json names another step than its directory."""
    manifest = directory / CHECKSUMS_FILE
    if manifest.is_file():
        expected, found = json.loads(manifest.read_text(encoding="utf-8")), file_digests(directory)
        changed = sorted(name for name in expected.keys() | found.keys() if expected.get(name) != found.get(name))
        if changed:
            raise ValueError(f"{', '.join(changed)} changed since it was written (missing, added or damaged)")
    step = json.loads((directory / "state.json").read_text(encoding="utf-8"))["step"]
    named = CHECKPOINT.match(directory.name)
    if named and step != int(named[1]):
        raise ValueError(f"state.json says step {step!r}, the checkpoint's name {int(named[1])}")


def save_plain(value: Any, path: Path) -> None:
    """`value` (tensors and plain values) as a torch file at `path`, serialized in memory and written by Python, so
    that a disk that refuses the bytes raises its OSError (torch's own writer says "unexpected pos")."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    path.write_bytes(buffer.getvalue())


def disk_refusal(err: BaseException) -> str | None:
    """What the system said when `err`, or an error it arose from, is a file operation it refused (a full disk, a
    quota, a file too large): an OSError's text, or the I/O error inside safetensors' message; else None."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno is not None:
            return current.strerror or os.strerror(current.errno)
        found = re.search(r"I/O error: (.+?)(?: \(os error \d+\))?$", str(current))
        if found:
            return found[1]
        current = current.__cause__ or current.__context__
    return None


@contextmanager
def writing_directory(temporary: Path, final: Path, checkpoints: Path, main_process: bool) -> Iterator[None]:
    """Around the writing of the directory `temporary` that is renamed onto `final`: when the block fails,
    `temporary` is removed at once (by the main process), and a write the system refused (`disk_refusal`) is one
    UserError naming `final`, what the system said and the checkpoint (in `checkpoints`) a resume starts from."""
    try:
        yield
    except BaseException as err:
        if main_process:
            shutil.rmtree(temporary, ignore_errors=True)
        reason = disk_refusal(err)
        if reason is None:
            raise
        last = latest_checkpoint(checkpoints)
        raise UserError(f"{final}: cannot write it ({reason}); nothing of it is kept; free some space and run the "
                        f"same command again to resume from {last or 'the start'}") from err


def latest_checkpoint(directory: Path) -> Path | None:
    """The complete checkpoint with the highest step in `directory` (incomplete ones are hidden `.tmp` dirs)."""
    found = [(int(m[1]), p) for p in directory.glob("checkpoint-*") if (m := CHECKPOINT.match(p.name))]
    return max(found)[1] if found else None


@dataclass(frozen=True)
class Update:
    """One planned optimizer update on this process: global step (1-based), epoch, group index, u < U."""

    step: int
    epoch: int
    group: int
    u: int


def plan_updates(num_groups: int, config: TrainConfig, rank: int = 0, world: int = 1) -> list[Update]:
    """The updates of process `rank`: every epoch shuffles the groups (seeded), process r takes positions
    r, r + P, … (wrapping around so all processes take the same number), each group U times in a row; the first
    `max_steps` of them (the epochs past them are never planned). More than `MAX_UPDATES` is a UserError."""
    per_process = math.ceil(num_groups / world)
    total = config.epochs * per_process * config.steps_per_group
    if config.max_steps:
        total = min(total, config.max_steps)
    elif total > MAX_UPDATES:
        raise UserError(f"--epochs {config.epochs} × {per_process} groups per process × --steps-per-group "
                        f"{config.steps_per_group} = {total} updates, more than {MAX_UPDATES}; lower them or set "
                        "--max-steps")
    updates: list[Update] = []
    for epoch in range(config.epochs):
        order = torch.randperm(num_groups, generator=make_generator(config.seed, "order", epoch)).tolist()
        for i in range(per_process):
            group = order[(i * world + rank) % num_groups]
            for u in range(config.steps_per_group):
                if len(updates) == total:
                    return updates
                updates.append(Update(len(updates) + 1, epoch, group, u))
    return updates


def lora_config(config: TrainConfig) -> Any:
    """The peft `LoraConfig` of `config`'s LoRA settings (rank, alpha, dropout, target modules) for a causal LM."""
    from peft import LoraConfig

    target = "all-linear" if config.target_modules == ["all-linear"] else list(config.target_modules)
    return LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                      target_modules=target, task_type="CAUSAL_LM")


class SCTrainer:
    """Self-consistency LoRA fine-tuning of a model (`lm`) on training `questions`; writes checkpoints, logs and the
    adapter to the settings' `out`.

    As TRL's trainers take a model, a dataset and one config dataclass, this takes `questions=` (a list of
    `MCQuestion`s, a dataset name or a file), `lm=` (a loaded model or what `--model` takes), `config=` (a
    `TrainConfig`, or a YAML file or preset as `--config` takes) and settings by the names of `beliefdrift train`'s
    flags (`out=`, `lora_r=`, …), which override `config` (`runs.inputs`); `accelerator`: an `accelerate.Accelerator`
    (default: one for the settings' device and `mixed_precision`). Questions given as objects are all trained on:
    the validation questions then come from `eval_dataset=` (or `eval_n=0`).

    `out/adapter` (final) and every `out/checkpoints/checkpoint-<step>/adapter` load with
    `peft.PeftModel.from_pretrained` (and `--adapter` in evaluate, drift and emd).
    """

    def __init__(self, *, questions: Questions | None = None, lm: Model | None = None,
                 config: TrainConfig | str | Path | None = None, accelerator: Accelerator | None = None,
                 **settings: Any):
        from accelerate import Accelerator

        inputs = run_inputs(TrainConfig, config, questions, lm, settings, "SCTrainer")
        config = self.config = inputs.settings
        self._given = inputs.questions
        if self._given is not None and config.eval_n and not config.eval_dataset:
            raise UserError("SCTrainer(questions=[…]): every question given is trained on; name the validation "
                            "questions with eval_dataset= (or set eval_n=0)")
        self.out = Path(config.out)
        if self.out.exists() and not store.writable(self.out):
            raise UserError(f"{self.out}: the run directory is read-only (an archived run?); make it writable to "
                            "resume the run, or choose another --out directory")
        self.accelerator = accelerator or Accelerator(
            cpu=config.device == "cpu", mixed_precision=config.mixed_precision, step_scheduler_with_optimizer=False
        )
        self.is_main = self.accelerator.is_main_process
        self._training: list[MCQuestion] | None = None
        self._check_data()  # before anything is written or loaded
        self._lock = self._hold_directory()
        try:
            self._build(inputs.lm)
        except BaseException:  # the directory is free again, its lock file removed
            self.release()
            raise

    def _build(self, lm: LanguageModel | None) -> None:
        """The model (`lm` or `config.model`), its rollout groups, the planned updates, LoRA, optimizer and loss."""
        from peft import get_peft_model
        from transformers import get_cosine_schedule_with_warmup

        config = self.config
        base = lm or load_model(config.model, device=str(self.accelerator.device), dtype=config.dtype,
                                attn_implementation=config.attn_implementation, **config.pretrained_kwargs())
        if not isinstance(base, TransformersModel):  # a model behind an inference server: no weights to adapt
            raise UserError(f"SCTrainer(lm={base.name!r}): train needs the model's gradients, which a model behind an "
                            "inference server does not give; load the same weights locally (bd.load_model of a hub "
                            "id, directory or .gguf)")
        self.groups = self._rollout_groups(base)
        self.updates = plan_updates(len(self.groups), config, self.accelerator.process_index,
                                    self.accelerator.num_processes)
        self.check_context(base, self.validation_questions(), validation=True)
        enable_shared_prefix(base.model)
        if config.gradient_checkpointing:
            enable_gradient_checkpointing(base.model)
        torch.manual_seed(config.seed)  # LoRA initialisation
        peft_model = get_peft_model(base.model, lora_config(config))
        self.tokenizer = base.tokenizer
        self.name = base.name
        params = [p for p in peft_model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
        scheduler = get_cosine_schedule_with_warmup(optimizer, config.warmup_steps, len(self.updates))
        self.model, self.optimizer, self.scheduler = self.accelerator.prepare(peft_model, optimizer, scheduler)
        predictive_paths = config.micro_batch if config.predictive_scope == "micro_batch" else None
        self.loss = SelfConsistencyLoss(config.beta, config.clip, config.anchor, config.format_weight, predictive_paths)
        self._tokens: dict[str, AnswerTokens] = {}

    def _hold_directory(self) -> DirectoryLock | None:
        """Lock `out` (the main process, for the whole run): a second run on the same directory would race on its
        rollouts, checkpoints and log, so it is refused at once, naming the process that holds it."""
        lock, error = None, None
        if self.is_main:
            try:
                lock = lock_directory(self.out, "train")
            except UserError as err:
                error = str(err)
        if self.accelerator.num_processes > 1:  # every process stops, not only the main one
            from accelerate.utils import broadcast_object_list

            error = broadcast_object_list([error])[0]
        if error:
            raise UserError(error)
        return lock

    def release(self) -> None:
        """Free the output directory (the lock and its file); `train` does so when it ends."""
        if self._lock is not None:
            self._lock.release()

    # -------------------------------------------------------------------------------------------- data

    def _rollout_groups(self, lm: LanguageModel) -> list[RolloutGroup]:
        """The stored groups (`config.rollout_dir`), else those in `out/rollouts`, generated there first if missing."""
        config = self.config
        directory = Path(config.rollout_dir) if config.rollout_dir else self.out / "rollouts"
        if not config.rollout_dir:
            # Only the main process looks whether the rollouts exist: another process that looked after the main one
            # had saved them would skip the barrier below, and the processes' collectives would then fall out of step.
            if self.is_main and not directory.exists():
                questions = self.training_questions()
                self.check_context(lm, questions)
                logger.info("sampling rollouts: %d questions × %d prefixes, J=%d, depth %d", len(questions),
                         len(config.prefix_lengths), config.paths, config.horizon - 1)
                groups = generate_groups(lm, questions, config.prefix_lengths, config.paths,
                                           config.horizon - 1, config.seed, config.template, config.prefix_mode,
                                           config.template_ending)
                with writing_directory(rollouts_temporary(directory), directory, self.out / "checkpoints", True):
                    save_rollouts(groups, directory, self.rollout_settings())
            self.accelerator.wait_for_everyone()
        try:
            groups, _ = load_rollouts(directory)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as err:  # damaged or hand-edited files
            again = "move it away (the run samples it again)" if not config.rollout_dir else "generate it again"
            raise UserError(f"{directory}: not a readable rollout dataset ({type(err).__name__}: {first_line(err)}); "
                            f"{again}, or choose another --out directory") from err
        if not groups:
            raise UserError(f"{directory}: the rollout dataset holds no rollouts")
        self.check_context(lm, list({g.question.id: g.question for g in groups}.values()))
        depth = min(g.rollouts.shape[1] for g in groups)
        paths = min(g.rollouts.shape[0] for g in groups)
        if depth < config.horizon - 1 or paths < config.paths_per_update:
            raise ValueError(f"{directory}: rollouts of depth {depth} × {paths} paths cannot serve horizon "
                             f"{config.horizon} with {config.paths_per_update} paths per update")
        if config.anchor and any(g.forecast is None for g in groups):
            raise ValueError(f"{directory}: the anchor term needs the base model's final θ of every rollout, which "
                             "this dataset does not keep; generate a new one (leave --rollout-dir unset)")
        if config.anchor and depth != config.horizon - 1:
            raise ValueError(f"{directory}: the anchor's forecast is over {depth + 1} steps, the loss's horizon is "
                             f"{config.horizon}; generate rollouts of depth {config.horizon - 1}")
        return groups

    def check_context(self, lm: LanguageModel, questions: Sequence[MCQuestion], validation: bool = False) -> None:
        """Every question's prompt and the answers an update (the longest prefix, then K − 1 rollout answers) or
        the validation EMD‾ (the longest prefix, then K answers) puts after it fit the model's context, else a
        UserError naming the question; a model whose context is not known (`LanguageModel.context_length`) fits
        everything."""
        limit = lm.context_length
        if limit is None:
            return
        c = self.config
        if validation:
            answers = max(c.eval_prefix_lengths, default=0) + c.eval_horizon
            flags = "--eval-prefix-lengths or --eval-horizon"
        else:
            answers, flags = max(c.prefix_lengths) + c.horizon - 1, "--prefix-lengths or -K/--horizon"
        for question in questions:
            needed = prompt_positions(lm, question, [parse_method("ppr")], answers, c.template, c.template_ending)
            if needed > limit:
                raise UserError(f"question {question.id} ({question.source or 'no source'}) needs {needed} positions "
                                f"(prompt and {answers} answers) but {lm.name} has {limit} (max_position_embeddings); "
                                f"shorten it, or lower {flags}")

    def _check_data(self) -> None:
        """Before the model loads: the datasets this run will read hold multiple-choice questions (the training
        questions unless the rollouts exist, the validation questions when `eval_n` is set)."""
        c = self.config
        if not c.rollout_dir and not (self.out / "rollouts").exists():
            self.training_questions()
        if c.eval_n:
            self._validation_pool(c.eval_n)

    def rollout_settings(self) -> dict[str, Any]:
        """The identity of a generated rollout dataset (stored in its meta.json)."""
        c = self.config
        return run_identity("rollouts", c, self.training_questions(), template=load_template(c.template,
                                                                                            c.template_ending),
                            only=ROLLOUT_SETTINGS)

    def training_questions(self) -> list[MCQuestion]:
        """The questions given, else the `n` training questions of the dataset (read once); other items (math
        problems) are a DataError."""
        if self._training is None:
            c = self.config
            self._training = require_kind(self._given, c.dataset, "train", flag="questions=") if (
                self._given is not None) else require_kind(load_dataset(c.dataset, c.split, data_dir=c.data_dir,
                                                                        n=c.n, seed=c.seed, fields=c.fields),
                                                           c.dataset, "train")
        return self._training

    def _validation_pool(self, n: int) -> list[MCQuestion]:
        c = self.config
        dataset = c.eval_dataset or c.dataset
        return require_kind(load_dataset(dataset, c.eval_split or c.split, data_dir=c.data_dir, n=n, seed=c.seed + 1,
                                         fields=c.fields), dataset,
                            "train's validation", flag="--eval-dataset" if c.eval_dataset else "--dataset")

    def validation_questions(self) -> list[MCQuestion]:
        """`eval_n` questions not trained on (default: from the training dataset and split, another seed)."""
        c = self.config
        if not c.eval_n:
            return []
        trained = {g.question.id for g in self.groups}
        return [q for q in self._validation_pool(c.eval_n + len(trained)) if q.id not in trained][: c.eval_n]

    @property
    def peft_model(self) -> Any:
        return self.accelerator.unwrap_model(self.model)

    def current_lm(self) -> TransformersModel:
        """The model being trained, as a `LanguageModel` for the resampling engine."""
        return TransformersModel(self.peft_model, self.tokenizer, f"{self.name}+sc")

    def tokens(self, question: MCQuestion) -> AnswerTokens:
        if question.id not in self._tokens:
            self._tokens[question.id] = ppr_tokens(self.current_lm(), question, self.config.template,
                                                   ending=self.config.template_ending)
        return self._tokens[question.id]

    # -------------------------------------------------------------------------------------------- updates

    def update_rollouts(self, group: RolloutGroup, generator: torch.Generator, depth: int) -> torch.Tensor:
        """The update's paths [micro_batch × grad_accum, depth]: a random subset of the stored rollouts, or fresh
        ones from the current model (on-policy)."""
        paths = self.config.paths_per_update
        if self.config.mode == "on-policy":
            self.peft_model.eval()
            c = self.config
            runner = QuestionRunner(self.current_lm(), group.question, c.template, c.template_ending)
            rollouts, _ = sample_rollouts(runner, group.prefix, paths, depth, generator)
            self.peft_model.train()
            return rollouts
        stored = group.rollouts[:, :depth]
        if stored.shape[0] == paths:
            return stored
        return stored[torch.randperm(stored.shape[0], generator=generator)[:paths]]

    def update(self, update: Update) -> dict[str, Any]:
        """One optimizer update on `update.group`; returns its log row (loss terms averaged over processes)."""
        start = perf_counter()
        group = self.groups[update.group]
        generator = make_generator(self.config.seed, "update", update.epoch, group.id, update.u)
        k1, k2 = draw_horizons(generator, self.config.horizon)
        torch.manual_seed(int(torch.randint(2**62, (1,), generator=generator)))  # LoRA dropout masks
        device = self.accelerator.device
        rollouts = self.update_rollouts(group, generator, k2 - 1).to(device)
        # the anchor's target, only if used (every group has one then: `_rollout_groups`)
        forecast = group.forecast.to(device) if self.config.anchor and group.forecast is not None else None

        def loss_fn(conditionals: Conditionals) -> SCLossOutput:
            return self.loss(conditionals.log_theta, rollouts, k1, k2, forecast, conditionals.log_mass)

        self.model.train()
        # accelerator.backward(loss) is loss.backward() here, after the fp16 loss scaling
        scaler = self.accelerator.scaler
        out = backward_sc_loss(self.model, self.tokens(group.question), group.prefix, rollouts, loss_fn,
                               self.config.micro_batch, self.config.gradient_caching, scaler.scale if scaler else None)
        lr = self.scheduler.get_last_lr()[0]
        grad_norm = self.optimizer_step()
        terms = self.accelerator.reduce(torch.stack(list(out)).detach().float(), "mean")
        self.check_finite(update.step, terms)
        anchor = float(terms[3]) if forecast is not None else float("nan")
        return {"step": update.step, "epoch": update.epoch, "group": group.id, "k1": k1, "k2": k2,
                "loss": float(terms[0]), "sc": float(terms[1]), "pg": float(terms[2]), "anchor": anchor,
                "format": float(terms[4]), "grad_norm": grad_norm, "lr": lr, "seconds": perf_counter() - start}

    def check_finite(self, step: int, terms: torch.Tensor) -> None:
        """A UserError (on every process) when the update's loss `terms` or the adapter's weights after it are not
        finite: training has diverged, and nothing of this step is logged or saved."""
        weights = [p for p in self.model.parameters() if p.requires_grad]
        broken = torch.stack([(~torch.isfinite(p)).any() for p in weights]).any().float().reshape(1)
        broken = float(self.accelerator.reduce(broken, "sum"))
        if not broken and bool(torch.isfinite(terms).all()):
            return
        c = self.config
        finite_loss = bool(torch.isfinite(terms).all())
        what = "the adapter's weights are not finite" if finite_loss else f"the loss is {float(terms[0])}"
        raise UserError(f"step {step}: {what}: training diverged; lower --learning-rate ({c.learning_rate:g}) or the "
                        f"loss weights --beta ({c.beta:g}), --anchor ({c.anchor:g}), --format-weight "
                        f"({c.format_weight:g}), --clip ({c.clip:g}), or set --max-grad-norm; the checkpoints before "
                        "this step are kept")

    def optimizer_step(self) -> float:
        """Clip the gradient to norm `max_grad_norm` (0 or None: no clipping), step AdamW and the schedule, clear the
        gradients; returns the gradient norm before clipping."""
        max_norm = self.config.max_grad_norm or math.inf  # an infinite bound scales by exactly 1
        grad_norm = float(self.accelerator.clip_grad_norm_(self.model.parameters(), max_norm))
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm

    @torch.no_grad()
    def validate(self, questions: list[MCQuestion]) -> dict[str, float]:
        """EMD‾ (L1) of the current model over `questions` (sharded over processes), PPR without seeds, and the
        mean confidence max_a p^(1)(a) at the evaluated prefixes: a low EMD‾ with confidence → 1 is the SC loss's
        degenerate minimum (θ collapsed onto one label), not coherence."""
        c = self.config
        emd = EMDConfig(horizon=c.eval_horizon, prefix_lengths=tuple(c.eval_prefix_lengths), num_rollouts=c.eval_paths,
                        burn_in=0, k=2)
        self.peft_model.eval()
        lm = self.current_lm()
        total = torch.zeros(3, dtype=torch.float64, device=self.accelerator.device)
        for question in questions[self.accelerator.process_index :: self.accelerator.num_processes]:
            result = question_emd(QuestionRunner(lm, question, c.template, c.template_ending), 0, emd,
                                  make_generator(c.seed, question.id, "validation"))
            confidence = float(result.kstep[:, 0].max(-1).values.mean())
            total += torch.tensor([result.emd_bar("l1"), confidence, 1.0], dtype=torch.float64, device=total.device)
        self.peft_model.train()
        total = self.accelerator.reduce(total, "sum")
        return {name: float(total[i] / total[-1]) if total[-1] else float("nan")
                for i, name in enumerate(VALIDATION_FIELDS)}

    # -------------------------------------------------------------------------------------------- state

    def save_adapter(self, directory: Path) -> None:
        """The LoRA adapter (PEFT format) in `directory` (main process writes; every process must call)."""
        state = self.accelerator.get_state_dict(self.model)
        self.peft_model.save_pretrained(directory, state_dict=state, is_main_process=self.is_main)

    def save_checkpoint(self, step: int) -> Path:
        """Adapter, optimizer (per process), scheduler, RNG states and step, with the sha256 of each (`CHECKSUMS_FILE`),
        written to a hidden temporary directory that is renamed into place, so a killed run never leaves a partial
        checkpoint, and one that fails (a full disk) removes it at once (`writing_directory`)."""
        root = self.out / "checkpoints"
        final, temporary = root / f"checkpoint-{step:06d}", root / f".checkpoint-{step:06d}.tmp"
        with writing_directory(temporary, final, root, self.is_main):
            if self.is_main:
                shutil.rmtree(temporary, ignore_errors=True)
                temporary.mkdir(parents=True)
            self.accelerator.wait_for_everyone()
            rank = self.accelerator.process_index
            self.save_adapter(temporary / "adapter")
            save_plain(self.optimizer.state_dict(), temporary / f"optimizer.rank{rank}.pt")
            save_plain({"torch": torch.get_rng_state(), "python": random.getstate()}, temporary / f"rng.rank{rank}.pt")
            if self.is_main:
                save_plain(self.scheduler.state_dict(), temporary / "scheduler.pt")
                (temporary / "state.json").write_text(json.dumps({"step": step, "total_steps": len(self.updates)}))
            self.accelerator.wait_for_everyone()
            if self.is_main:  # every process's files are written: their manifest, then the checkpoint in place
                (temporary / CHECKSUMS_FILE).write_text(json.dumps(file_digests(temporary), indent=1) + "\n")
                shutil.rmtree(final, ignore_errors=True)
                os.replace(temporary, final)
        if self.is_main:
            kept = sorted((p for p in root.glob("checkpoint-*") if CHECKPOINT.match(p.name)), reverse=True)
            for old in kept[self.config.save_total_limit :]:
                shutil.rmtree(old)
        self.accelerator.wait_for_everyone()
        return final

    def load_checkpoint(self, directory: Path) -> int:
        """Restore a checkpoint written by `save_checkpoint`; returns its step. A checkpoint that cannot be read
        (damaged, tampered with, a file that differs from its manifest, from another number of processes) is one
        UserError naming it."""
        try:
            return self._restore(directory)
        except torch.OutOfMemoryError:
            raise
        except Exception as err:  # the readers fail on damaged bytes in many ways (IndexError, EOFError, …)
            raise UserError(f"{directory}: not a readable checkpoint ({type(err).__name__}: {first_line(err)}); move "
                            "it away to resume from the one before it, or choose another --out directory") from err

    def _restore(self, directory: Path) -> int:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        verify_checkpoint(directory)
        rank = self.accelerator.process_index
        set_peft_model_state_dict(self.peft_model, load_file(directory / "adapter" / "adapter_model.safetensors"))
        self.optimizer.load_state_dict(load_plain(directory / f"optimizer.rank{rank}.pt"))
        self.scheduler.load_state_dict(load_plain(directory / "scheduler.pt"))
        rng = load_plain(directory / f"rng.rank{rank}.pt")
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
        return json.loads((directory / "state.json").read_text())["step"]

    def _check_config(self) -> None:
        """Pin the run identity in `out/identity.json` (the questions are the trained groups'); refuse to resume a
        run made with other settings. `out/config.yaml` records every setting of the latest start."""
        c = self.config
        questions = list({g.question.id: g.question for g in self.groups}.values())
        identity = run_identity("train", c, questions, template=load_template(c.template, c.template_ending))
        try:
            pin_identity(self.out / "identity.json", identity, write=self.is_main)
        except StoreError:
            raise
        except (ValueError, AttributeError) as err:  # not JSON, or JSON but not a mapping
            raise UserError(f"{self.out / 'identity.json'}: not a readable run identity ({first_line(err)}); restore "
                            "it, or choose another --out directory") from err
        if self.is_main:
            write_atomic(self.out / "config.yaml", yaml.safe_dump(dict(as_mapping(c)), sort_keys=False))

    # -------------------------------------------------------------------------------------------- loop

    def train(self) -> Path:
        """Run (or resume) every planned update; returns the directory of the final adapter. The output directory is
        released when it ends, whether it finished or not."""
        try:
            return self._train()
        finally:
            self.release()

    def _train(self) -> Path:
        self.out.mkdir(parents=True, exist_ok=True)
        self._check_config()
        checkpoint = latest_checkpoint(self.out / "checkpoints")
        done = self.load_checkpoint(checkpoint) if checkpoint else 0
        if checkpoint and self.is_main:
            logger.info("resuming from %s (step %d)", checkpoint, done)
        log = TrainLog(self.out, done, self.is_main)
        validation = self.validation_questions()
        try:
            if not done and validation:
                log.write({"step": 0, **self.validate(validation)})
            for update in self.updates[done:]:
                row = self.update(update)
                last = update.step == len(self.updates)
                if validation and (last or (self.config.eval_steps and update.step % self.config.eval_steps == 0)):
                    row |= self.validate(validation)
                log.write(row)
                if update.step % self.config.save_steps == 0 or last:
                    self.save_checkpoint(update.step)
        finally:
            log.close()
        final = self.out / "adapter"
        temporary = self.out / ".adapter.tmp"
        with writing_directory(temporary, final, self.out / "checkpoints", self.is_main):
            if self.is_main:
                shutil.rmtree(temporary, ignore_errors=True)
            self.accelerator.wait_for_everyone()
            self.save_adapter(temporary)
            self.accelerator.wait_for_everyone()
            if self.is_main:
                shutil.rmtree(final, ignore_errors=True)
                os.replace(temporary, final)
        self.accelerator.wait_for_everyone()
        return final


def load_plain(path: Path) -> Any:
    """A torch file of tensors and plain values (numbers, strings, lists, dicts, tuples), read without running
    pickled code: anything else is refused."""
    try:
        return torch.load(path, weights_only=True)
    except pickle.UnpicklingError as err:
        found = next((line.strip() for line in str(err).splitlines() if "unsupported" in line.lower()), "")
        raise ValueError(f"{path}: refused to load: a checkpoint holds only tensors and plain values, this file "
                         f"names other Python objects (tampered with, or not written by beliefdrift). {found}") from err


class TrainLog:
    """`out/log.csv` and TensorBoard scalars (`out/tensorboard`), written by the main process. On resume from
    step s, rows and events after s (from the killed run) are dropped."""

    def __init__(self, out: Path, resumed_step: int, active: bool):
        self.active = active
        if not active:
            return
        from torch.utils.tensorboard import SummaryWriter

        path = out / "log.csv"
        rows = []
        if path.is_file() and resumed_step:
            try:
                with open(path, newline="", encoding="utf-8") as old:
                    rows = [r for r in csv.DictReader(old) if int(r["step"]) <= resumed_step]
            except (UnicodeDecodeError, csv.Error, KeyError, TypeError, ValueError) as err:
                raise UserError(f"{path}: not a readable training log ({type(err).__name__}: {first_line(err)}); "
                                "restore it, or move it away to start a new one") from err
        kept = io.StringIO()
        writer = csv.DictWriter(kept, LOG_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
        write_atomic(path, kept.getvalue())  # the rows up to the checkpoint, never half of them
        self.path = path
        self.file = open(path, "a", newline="", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self.csv = csv.DictWriter(self.file, LOG_FIELDS)
        self.board = SummaryWriter(str(out / "tensorboard"), purge_step=resumed_step + 1 if resumed_step else None)

    def write(self, row: dict[str, Any]) -> None:
        if not self.active:
            return
        try:
            self.csv.writerow(row)
            self.file.flush()
        except OSError as err:  # a full disk: named by the file
            raise OSError(err.errno, err.strerror, str(self.path)) from err
        for key in ("loss", "sc", "pg", "anchor", "format", "grad_norm", "lr", *VALIDATION_FIELDS):
            if key in row and not math.isnan(row[key]):
                name = f"val/{key.removeprefix('val_')}" if key in VALIDATION_FIELDS else f"train/{key}"
                self.board.add_scalar(name, row[key], row["step"])
        validation = (f"val EMD‾ {row['val_emd_l1']:.4f}, confidence {row['val_confidence']:.3f}"
                      if "val_emd_l1" in row else "")
        if "loss" in row:
            logger.info(f"step {row['step']}: {group_title(row['group'])}, k=({row['k1']},{row['k2']}) "
                     f"loss {row['loss']:.4f} (sc {row['sc']:.4f}, pg {row['pg']:+.4f}, anchor KL {row['anchor']:.4f}, "
                     f"format {row['format']:.4f}) {row['seconds']:.1f}s" + (f"; {validation}" if validation else ""))
        else:
            logger.info("step %s: %s", row["step"], validation)

    def close(self) -> None:
        if self.active:
            self.file.close()
            self.board.close()
