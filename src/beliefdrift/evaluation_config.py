"""Settings of an evaluation run: `EvalConfig`, YAML presets, and how defaults, preset and flags combine.

`EvalConfig.identity` is what a run store pins: the settings that change a number, the questions' content and
the resolved dtype and device, so a run directory is never resumed with other settings.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from beliefdrift import __version__
from beliefdrift.backend import DEFAULT_MODEL, REGISTRY
from beliefdrift.backend.loading import resolve_device, resolve_dtype
from beliefdrift.data.question import MCQuestion
from beliefdrift.data.registry import DATASETS, fingerprint
from beliefdrift.errors import UserError
from beliefdrift.methods import Method, parse_method
from beliefdrift.prompts import DEFAULT_PPR_TEMPLATE, DEFAULT_TEMPLATE_ENDING, load_template
from beliefdrift.scoring import QualityControl, canonical_methods


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
    attn_implementation: str = "auto"  # for the forward passes the engine does not own
    device_map: str | None = None  # accelerate's, for a model larger than one device; results do not depend on it
    batch_questions: int = 0  # questions per engine batch (0: 16 on a GPU, 1 on the CPU); results do not depend on it
    data_dir: str | None = None
    qc_path_mass: float = 0.5
    qc_max_fraction: float = 0.5
    skip_long_prompts: bool = False

    @property
    def method_list(self) -> list[Method]:
        return [parse_method(name) for name in self.methods]

    @property
    def quality_control(self) -> QualityControl:
        return QualityControl(self.qc_path_mass, self.qc_max_fraction)

    def identity(self, questions: Sequence[MCQuestion], skipped: Sequence[MCQuestion] = ()) -> dict[str, Any]:
        """The settings stored with a run, with the content of its `questions` and the ones `skipped` (prompt
        longer than the model's context); resuming with any of them changed is refused."""
        template = load_template(self.template, self.template_ending)  # an unknown ending fails here
        return {
            "model": self.model if self.model in REGISTRY else _local_path_or_name(self.model),
            "dataset": self.dataset if self.dataset in DATASETS else _local_path_or_name(self.dataset),
            "split": self.split,
            "n": self.n or None,  # 0 and None both mean all questions
            "questions": len(questions),
            "questions_sha256": fingerprint(questions),
            **({"skipped_long_prompts": [q.id for q in skipped]} if self.skip_long_prompts else {}),
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
            "device": resolve_device(self.device).type,
            # absent when transformers chooses, so that runs stored before the option existed still resume
            **({"attn_implementation": self.attn_implementation} if self.attn_implementation != "auto" else {}),
            "version": __version__,
        }


CONFIG_KEYS = tuple(f.name for f in fields(EvalConfig))
#: The YAML types a setting's annotation accepts, and how to name them (methods: a string or a list of strings).
_PRESET_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "str": ((str,), "a string"),
    "str | None": ((str, type(None)), "a string or null"),
    "int": ((int,), "an integer"),
    "int | None": ((int, type(None)), "an integer or null"),
    "float": ((int, float), "a number"),
    "bool": ((bool,), "true or false"),
    "tuple[str, ...]": ((str, list), "a method name or a list of them"),
}


def _local_path_or_name(spec: str) -> str:
    """An existing local path as an absolute path (the same run from another directory matches), else as is."""
    path = Path(spec).expanduser()
    return str(path.resolve()) if path.exists() else spec


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
        raise UserError(f"--config {path}: unknown settings {unknown}; known: {', '.join(CONFIG_KEYS)}")
    types = {f.name: str(f.type) for f in fields(EvalConfig)}
    for key, value in values.items():
        allowed, expected = _PRESET_TYPES[types[key]]
        if (not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed)
                or (isinstance(value, list) and not all(isinstance(v, str) for v in value))):
            raise UserError(f"--config {path}: setting {key}: expected {expected}, got {value!r}")
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
    for name, flag in (("paths", "-J/--paths"), ("steps", "-N/--steps")):
        if getattr(config, name) < 1:
            raise UserError(f"{flag} (setting {name}) must be at least 1, got {getattr(config, name)}")
    if config.n is not None and config.n < 0:
        raise UserError(f"-n/--n (setting n) must be 0 (all questions) or more, got {config.n}")
    return config
