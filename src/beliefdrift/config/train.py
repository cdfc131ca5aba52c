"""Settings of SC fine-tuning (AM-PPR) as plain data (no torch)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from beliefdrift.config.options import (
    MAX_COUNT,
    MAX_QUESTIONS,
    DataOptions,
    ModelOptions,
    SamplingOptions,
    option,
    out_option,
    retuned,
)
from beliefdrift.errors import UserError

#: How the prefixes of the training groups are chosen (`amortize.rollouts.sample_prefix`).
PREFIX_MODES = ("sample", "top", "direct")
MODES = ("offline", "on-policy")
#: The settings that determine a generated rollout dataset.
ROLLOUT_SETTINGS = ("model", "dtype", "device", "template", "template_ending", "dataset", "split", "n", "seed",
                    "prefix_lengths", "prefix_mode", "paths", "horizon")
PREDICTIVE_SCOPES = ("update", "micro_batch")
#: The most updates a run plans (epochs × groups × U, or --max-steps) and the largest loss weight or clamp: beyond
#: them a run would not end, or its loss would not be a finite number.
MAX_UPDATES = 10**7
MAX_WEIGHT = 1e4


@dataclass(frozen=True)
class TrainConfig(ModelOptions, DataOptions):
    """Every setting of an SC fine-tuning run (YAML presets in configs/train-*.yaml; paper values in DESIGN §10).
    The operational ones (checkpoints, validation, output) may change when a run resumes."""

    _argument_group_name = "training"
    outputs: ClassVar[tuple[str, ...]] = ("config.yaml", "identity.json", "log.csv", ".beliefdrift.lock", "adapter/*",
                                          ".adapter.tmp/*", "checkpoints/*", "rollouts/*", "rollouts.tmp/*",
                                          "tensorboard/*")

    # training queries and their rollout groups
    dataset: str = retuned(DataOptions, "dataset", "csqa")
    split: str | None = retuned(DataOptions, "split", "train")
    n: int | None = retuned(DataOptions, "n", 20, "training questions; groups = questions × prefix lengths")
    seed: int = retuned(SamplingOptions, "seed", 0, "run seed (rollouts, update order, LoRA initialisation)")
    prefix_lengths: list[int] = option([0, 2, 4, 6, 8], "prefix lengths 𝒩 of the training groups", minimum=0,
                                       maximum=MAX_COUNT)
    prefix_mode: str = option("sample", "prefixes a_{1:n} sampled from the base model's PPR process (default), one "
                                        "of its top ones, or i.i.d. from the direct-query prompt (direct: the paper's "
                                        "seeding prompt, App. D.4)", choices=PREFIX_MODES)
    paths: int = retuned(SamplingOptions, "paths", 32, "rollouts stored per group (J)")
    horizon: int = option(6, "K: k1 < k2 ≤ K, rollouts of depth K − 1", "-K", minimum=2, maximum=MAX_COUNT)
    mode: str = option("offline", "offline: stored base-model rollouts (the paper's); on-policy: fresh rollouts "
                                  "every update", choices=MODES)
    rollout_dir: str | None = option(None, "an existing rollout dataset (unset: generated into OUT/rollouts)")
    # loss
    beta: float = option(0.01, "weight β of the policy-gradient correction", minimum=0, maximum=MAX_WEIGHT)
    clip: float = option(5.0, "advantage clamp", above=0, maximum=MAX_WEIGHT)
    anchor: float = option(0.0, "λ of KL(base K-step forecast ‖ θ_0), a term beyond the paper's loss (0: the "
                                "paper's loss)", minimum=0, maximum=MAX_WEIGHT)
    format_weight: float = option(0.0, "γ of −log label mass, a term beyond the paper's loss (0: the paper's loss)",
                                  minimum=0, maximum=MAX_WEIGHT)
    predictive_scope: str = option("update", "p̂^(k) averages the paths of the update (on this process) or of each "
                                             "micro-batch", choices=PREDICTIVE_SCOPES)
    # LoRA
    lora_r: int = option(16, "LoRA rank", minimum=1, maximum=2**13)
    lora_alpha: int = option(8, "LoRA alpha", minimum=1, maximum=2**16)
    lora_dropout: float = option(0.05, "LoRA dropout", minimum=0, below=1)
    target_modules: list[str] = option(["all-linear"], "modules given LoRA adapters (peft's names)")
    # optimization
    learning_rate: float = option(1e-4, "AdamW learning rate", above=0, maximum=1)
    weight_decay: float = option(0.01, "AdamW weight decay (each update scales the weights by 1 − lr × this)",
                                 minimum=0, maximum=1)
    warmup_steps: int = option(5, "linear warm-up updates of the cosine schedule", minimum=0, maximum=MAX_UPDATES)
    max_grad_norm: float | None = option(1.0, "clip each update's gradient norm to this (0 or null: no clipping)",
                                         minimum=0, maximum=MAX_WEIGHT)
    micro_batch: int = option(8, "paths per forward pass", minimum=1, maximum=MAX_COUNT)
    grad_accum: int = option(4, "forward chunks per update: micro_batch × grad_accum paths per update (per "
                                "process)", minimum=1, maximum=MAX_COUNT)
    gradient_caching: bool = option(True, "back-propagate chunk by chunk (the memory of one chunk, the same "
                                          "gradient)")
    gradient_checkpointing: bool = option(False, "recompute each decoder layer's activations in the backward pass")
    epochs: int = option(2, "passes over the groups", minimum=1, maximum=MAX_UPDATES)
    steps_per_group: int = option(1, "updates per group in a row (U)", minimum=1, maximum=MAX_UPDATES)
    max_steps: int | None = option(None, "stop after this many updates (the schedule then spans them)", minimum=1,
                                   maximum=MAX_UPDATES)
    mixed_precision: str = option("no", "accelerate autocast", choices=("no", "bf16", "fp16"))
    # checkpoints, validation: may change when a run resumes
    save_steps: int = option(10, "checkpoint every this many updates", operational=True, minimum=1,
                             maximum=MAX_UPDATES)
    save_total_limit: int = option(2, "checkpoints kept", operational=True, minimum=1, maximum=MAX_UPDATES)
    eval_steps: int = option(0, "validation EMD‾ every this many updates (0: before training and at the end only)",
                             operational=True, minimum=0, maximum=MAX_UPDATES)
    eval_dataset: str | None = option(None, "validation dataset (default: the training dataset and split, questions "
                                            "not trained on)", operational=True, input=True)
    eval_split: str | None = option(None, "validation split", operational=True)
    eval_n: int = option(4, "validation questions", operational=True, minimum=0, maximum=MAX_QUESTIONS)
    eval_horizon: int = option(4, "K of the validation EMD‾", operational=True, minimum=2, maximum=MAX_COUNT)
    eval_prefix_lengths: list[int] = option([0, 2], "prefix lengths of the validation EMD‾", operational=True,
                                            minimum=0, maximum=MAX_COUNT)
    eval_paths: int = option(16, "Monte Carlo paths of the validation EMD‾", operational=True, minimum=1,
                             maximum=MAX_COUNT)
    out: Path = out_option("beliefdrift-out/train")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.paths_per_update > self.paths:
            raise UserError(f"micro_batch × grad_accum = {self.paths_per_update} exceeds paths = {self.paths}")
        if not self.prefix_lengths:
            raise UserError("--prefix-lengths must name at least one prefix length")

    @property
    def paths_per_update(self) -> int:
        return self.micro_batch * self.grad_accum
