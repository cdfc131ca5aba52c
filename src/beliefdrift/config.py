"""One config system for every command: a frozen dataclass of settings per command, assembled from shared option
groups, read from a `--config file.yaml` and then from flags (flags win) by transformers' `HfArgumentParser`.

Every setting is a dataclass field made with `option(default, help, *aliases)`; its flag is `--name` (also
`--name-with-dashes`), its YAML key `name`. One spelling per concept across commands: `--paths/-J`, `--steps/-N`,
`--horizon/-K`, `--lookahead/-k`, `-n`, lists as separate words (`--methods ppr ppr-seed5`) on the command line and
YAML lists in a file. A field marked `operational=True` does not change a number (output directory, batching,
device placement): it is left out of the run identity (`identity.run_identity`).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import sys
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import torch
import yaml
from transformers import HfArgumentParser

from beliefdrift.backend import DEFAULT_MODEL, LanguageModel, load_model
from beliefdrift.backend.loading import ATTN_IMPLEMENTATIONS
from beliefdrift.backend.path_cache import compile_forward
from beliefdrift.errors import UserError, check_device, check_model
from beliefdrift.prompts import DEFAULT_PPR_TEMPLATE, DEFAULT_TEMPLATE_ENDING, TEMPLATE_ENDINGS
from beliefdrift.scoring import QualityControl

Config = TypeVar("Config")
#: YAML presets shipped with the package (`configs/` in a source checkout links here).
PRESET_DIR = Path(__file__).resolve().parent / "presets"
#: Field metadata that is ours, not an `add_argument` keyword.
OWN_METADATA = ("operational", "range")
#: The largest seed: every seeded generator (torch, numpy, random) takes 0 … 2^63 − 1.
MAX_SEED = 2**63 - 1


@dataclasses.dataclass(frozen=True)
class Range:
    """The numbers a numeric setting allows: `low` … `high` (None: unbounded), each end closed unless `*_open`.
    Every number must be finite as well (no nan or inf)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: float) -> bool:
        if isinstance(value, float) and not math.isfinite(value):  # (an int is finite, and may exceed any float)
            return False
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below

    def __str__(self) -> str:
        """"at least 1", "greater than 0", "in [0, 1]", "in (0, 1]", "in [0, 1)", …"""
        low, high = _number(self.low), _number(self.high)
        if self.high is None:
            return f"{'greater than' if self.low_open else 'at least'} {low}"
        if self.low is None:
            return f"{'less than' if self.high_open else 'at most'} {high}"
        return f"in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"


def _number(value: float | None) -> str:
    return str(value) if isinstance(value, int) or value is None else f"{value:g}"


def option(default: Any, help: str, *aliases: str, operational: bool = False, choices: Sequence[Any] | None = None,
           minimum: float | None = None, maximum: float | None = None, above: float | None = None,
           below: float | None = None, metavar: str | None = None) -> Any:
    """A setting: its default, help line, short flags, allowed values (`choices`; for a number its range: at least
    `minimum` or greater than `above`, at most `maximum` or less than `below`), and whether results depend on it.
    The range is declared here only: the parser's help shows it and `Settings` checks it (flags, YAML and code)."""
    bounds = Range(above if above is not None else minimum, below if below is not None else maximum,
                   above is not None, below is not None)
    metadata: dict[str, Any] = {"help": help, "operational": operational,
                                "range": bounds if bounds != Range() else None}
    if aliases:
        metadata["aliases"] = list(aliases)
    if choices is not None:
        metadata["choices"] = tuple(choices)
    if metavar is not None:
        metadata["metavar"] = metavar
    if isinstance(default, (list, tuple)):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def retuned(group: type, name: str, default: Any, help: str | None = None) -> Any:
    """Option `name` of `group` with a command's own default (and help line), the same flags otherwise."""
    meta = dict(group.__dataclass_fields__[name].metadata)
    bounds = meta.pop("range") or Range()
    low, high = ("above" if bounds.low_open else "minimum"), ("below" if bounds.high_open else "maximum")
    return option(default, help or meta.pop("help"), *meta.pop("aliases", ()), **{low: bounds.low, high: bounds.high},
                  **{k: v for k, v in meta.items() if k != "help"})


def is_operational(field: dataclasses.Field) -> bool:
    return bool(field.metadata.get("operational"))


# ---------------------------------------------------------------------------------------------- option groups


@dataclasses.dataclass(frozen=True)
class Settings:
    """The base of every settings dataclass: a value outside its option's `choices` or `Range` (or a number that is
    nan or infinite) is an error naming the flag."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value, meta = getattr(self, field.name), field.metadata
            values = value if isinstance(value, list) else [value]
            if meta.get("choices") is not None and any(v not in meta["choices"] for v in values):
                raise UserError(f"{flag_name(field)}: expected {' or '.join(map(str, meta['choices']))}, got "
                                f"{value!r}")
            numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
            bounds = meta.get("range") or Range()
            if any(v not in bounds for v in numbers):
                raise UserError(f"{flag_name(field)} must be {bounds if bounds != Range() else 'a finite number'}, "
                                f"got {value}")


@dataclasses.dataclass(frozen=True)
class ModelOptions(Settings):
    _argument_group_name = "model"

    model: str = option(DEFAULT_MODEL, "registry name, hub id, local directory or .gguf file")
    device: str = option("cpu", "cpu, cuda, cuda:N or auto")
    dtype: str = option("auto", "auto = bf16 where bf16 matmuls are fast (AMX/AVX512-BF16 CPUs, CUDA), else float32",
                        choices=("auto", "float32", "bfloat16"))
    attn_implementation: str = option("auto", "attention of the forward passes the engine does not own (auto: "
                                              "transformers' choice)", choices=ATTN_IMPLEMENTATIONS)
    device_map: str | None = option(None, "'auto' spreads a model too large for one GPU over all visible devices "
                                          "(accelerate)", operational=True)
    template: str = option(DEFAULT_PPR_TEMPLATE, "PPR prompt: ppr-llama, ppr-olmo, or a .txt template path")
    template_ending: str = option(DEFAULT_TEMPLATE_ENDING, "fence: the question's code fence is closed after it; "
                                                           "paper: the prompt ends with the question (Appendix C)",
                                  choices=TEMPLATE_ENDINGS)

    def load_model(self) -> LanguageModel:
        """The model these options name (device, dtype, attention and device map as set), after checking that the
        device exists and the model can be found, so that either is a one-line error."""
        check_device(self.device)
        check_model(self.model)
        return load_model(self.model, device=self.device, dtype=self.dtype,
                          attn_implementation=self.attn_implementation, device_map=self.device_map)


@dataclasses.dataclass(frozen=True)
class DataOptions(Settings):
    _argument_group_name = "data"

    dataset: str = option("demo", "a registered dataset (demo, csqa, arc, tinymmlu, mmlu, gpqa, gsm8k) or a file")
    split: str | None = option(None, "dataset split (unset: the dataset's evaluation split)")
    n: int | None = option(None, "number of questions, 0 or unset for all (a deterministic subsample by --seed)",
                           "-n", minimum=0)
    data_dir: str | None = option(None, "benchmark data directory (unset: $BELIEFDRIFT_DATA)", operational=True)


@dataclasses.dataclass(frozen=True)
class SamplingOptions(Settings):
    _argument_group_name = "sampling"

    paths: int = option(8, "paths per question (J)", "-J", minimum=1)
    steps: int = option(20, "answers generated per path (N)", "-N", minimum=1)
    seed: int = option(0, "run seed (each question × method derives its own random stream)", minimum=0,
                       maximum=MAX_SEED)


@dataclasses.dataclass(frozen=True)
class BatchingOptions(Settings):
    _argument_group_name = "batching"

    batch_questions: int = option(0, "questions whose paths advance together in one engine batch (0: 16 on a GPU, 1 "
                                     "on the CPU); the results do not depend on it", operational=True, minimum=0)
    compile: bool = option(False, "run the model's forward passes through torch.compile: faster steps after compiling "
                                  "once (minutes on a small CPU); the results equal eager ones up to rounding",
                           operational=True)
    cuda_graphs: bool = option(False, "compile the decoding steps and replay each one's kernels as one CUDA graph "
                                      "(static caches; prefills stay eager; needs a CUDA device): for a GPU, where a "
                                      "step is bound by launching kernels", operational=True)

    def questions_per_batch(self, device: torch.device) -> int:
        """`batch_questions`, or when 0: 16 on a GPU (many paths per forward pass keep it busy), 1 on the CPU
        (where one question's paths already fill the cores)."""
        return self.batch_questions or (16 if device.type == "cuda" else 1)

    def prepared(self, lm: LanguageModel) -> LanguageModel:
        """`lm` with its forward pass compiled when `compile` or `cuda_graphs` is set (`compile_forward`)."""
        if self.cuda_graphs and lm.device.type != "cuda":
            raise UserError(f"--cuda-graphs: the model is on {lm.device}; CUDA graphs need --device cuda")
        if self.compile or self.cuda_graphs:
            compile_forward(lm.model, cuda_graphs=self.cuda_graphs)
        return lm


@dataclasses.dataclass(frozen=True)
class ReportOptions(Settings):
    _argument_group_name = "report"

    qc_path_mass: float = option(QualityControl.path_mass, "a path is off-format when its mean valid_mass is below "
                                                           "this", operational=True, minimum=0, maximum=1)
    qc_max_fraction: float = option(QualityControl.max_fraction, "exclude a question when more than this fraction of "
                                                                 "its paths is off-format", operational=True,
                                    minimum=0, maximum=1)
    bootstrap: int = option(1000, "bootstrap resamples for the 95%% intervals", operational=True, minimum=1)

    @property
    def quality_control(self) -> QualityControl:
        return QualityControl(self.qc_path_mass, self.qc_max_fraction)


def out_option(default: str) -> Any:
    return option(Path(default), "output directory", operational=True)


# ---------------------------------------------------------------------------------------------- parsing


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The description as written, and every option's default after its help."""


class CommandParser(HfArgumentParser):
    """A command's parser: the fields of its settings dataclasses as flags (grouped by option group), plus
    `--config FILE` whose YAML mapping becomes the defaults the flags override. Errors are one line."""

    def __init__(self, dataclass_types: Iterable[type] | None = None, **kwargs: Any):
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(dataclass_types, **kwargs)
        if self.dataclass_types:
            self.add_argument("--config", metavar="FILE.yaml",
                              help="YAML mapping of settings (the flags' names with underscores), or the name of a "
                                   f"bundled preset ({', '.join(bundled_presets())}); flags override it")

    def _add_dataclass_arguments(self, dtype: type) -> None:
        hints = typing.get_type_hints(dtype)
        groups: dict[str, argparse._ArgumentGroup] = {}
        for cls in [*dtype.__mro__[1:], dtype]:  # the shared groups first (model, data, …), the command's last
            name = cls.__dict__.get("_argument_group_name")
            if name and name not in groups:
                groups[name] = self.add_argument_group(name)
        for field in dataclasses.fields(dtype):
            owner = next(cls for cls in reversed(dtype.__mro__) if field.name in getattr(cls, "__dataclass_fields__",
                                                                                        {}))
            group = groups[owner._argument_group_name]
            spec = copy.copy(field)
            spec.type = hints[field.name]
            metadata = {k: v for k, v in field.metadata.items() if k not in OWN_METADATA}
            if field.metadata.get("range"):  # the allowed numbers, before argparse's "(default: …)"
                metadata["help"] = f"{metadata['help']} ({field.metadata['range']})"
            spec.metadata = types.MappingProxyType(metadata)
            self._parse_dataclass_field(group, spec)

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message} (see {self.prog} --help)")

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        args = list(sys.argv[1:] if args is None else args)
        path = _config_path(args)
        if path is not None and self.dataclass_types:
            self.set_defaults(**read_settings(path, self.dataclass_types))
        parsed, rest = super().parse_known_args(args, namespace)
        parsed.given = getattr(parsed, "given", set()) | self.given(args)
        return parsed, rest

    def given(self, args: Sequence[str]) -> set[str]:
        """The settings named by a flag in `args` (rather than by the YAML file or a default)."""
        actions = self._option_string_actions
        return {actions[token.split("=")[0]].dest for token in args if token.split("=")[0] in actions}


def _config_path(args: Sequence[str]) -> Path | None:
    for i, token in enumerate(args):
        if token == "--config" and i + 1 < len(args):
            return preset_file(args[i + 1])
        if token.startswith("--config="):
            return preset_file(token.partition("=")[2])
    return None


def preset_file(spec: str | Path) -> Path:
    """`spec` as a path when it names a file, else the bundled preset of that name (`cpu-default`,
    `train-cpu.yaml`, …; they ship with the package, `configs/` in a source checkout), else `spec` as given."""
    path = Path(spec)
    if path.is_file():
        return path
    bundled = PRESET_DIR / (path.name if path.suffix == ".yaml" else f"{path.name}.yaml")
    return bundled if len(path.parts) == 1 and bundled.is_file() else path


def bundled_presets() -> list[str]:
    """The names of the presets that ship with the package."""
    return sorted(path.stem for path in PRESET_DIR.glob("*.yaml"))


def add_command(subparsers: argparse._SubParsersAction, name: str, settings: type | Sequence[type], help: str,
                description: str | None) -> CommandParser:
    """A `beliefdrift <name>` parser whose flags are the fields of `settings` (one dataclass or several)."""
    return subparsers.add_parser(name, dataclass_types=settings, help=help, description=description)


def settings_from(args: argparse.Namespace, cls: type[Config]) -> Config:
    """The `cls` dataclass from parsed arguments (flags over `--config` over the built-in defaults)."""
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if f.init})  # type: ignore


def flag_name(field: dataclasses.Field) -> str:
    """How the setting is written: `-J/--paths` (and in YAML `paths`)."""
    return "/".join([*field.metadata.get("aliases", ()), f"--{field.name.replace('_', '-')}"])


# ---------------------------------------------------------------------------------------------- YAML


def read_settings(path: Path, classes: Iterable[type]) -> dict[str, Any]:
    """A YAML mapping of settings checked against the fields of `classes`: an unknown key or a value of the wrong
    type is one error naming the file and the key."""
    if not path.is_file():
        raise FileNotFoundError(f"--config {path}: no such file or bundled preset ({', '.join(bundled_presets())})")
    try:
        values = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise UserError(f"--config {path}: not valid YAML ({' '.join(str(err).split())})") from err
    values = values or {}
    if not isinstance(values, dict):
        raise UserError(f"--config {path}: expected a mapping of settings, got {type(values).__name__}")
    return checked_settings(values, classes, f"--config {path}: ")


def checked_settings(values: Mapping[str, Any], classes: Iterable[type], where: str = "") -> dict[str, Any]:
    """`values` read as the fields of `classes` (see `coerce`); an unknown key or a wrong type is a UserError
    starting with `where`."""
    classes = list(classes)
    fields = {f.name: f for cls in classes for f in dataclasses.fields(cls) if f.init}
    hints = {name: hint for cls in classes for name, hint in typing.get_type_hints(cls).items()}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise UserError(f"{where}unknown settings {unknown}; known: {', '.join(fields)}")
    checked = {}
    for key, value in values.items():
        try:
            checked[key] = coerce(hints[key], value, fields[key].metadata.get("choices"))
        except ValueError as err:
            raise UserError(f"{where}setting {key}: {err}") from None
    return checked


def coerce(hint: Any, value: Any, choices: Sequence[Any] | None = None) -> Any:
    """`value` (as YAML reads it) as the type `hint`: int, float, str, bool, Path, list[...] and `X | None`;
    numbers written as strings ("1e-4") are read; anything else is a ValueError saying what was expected."""
    if value is None:
        if type(None) in typing.get_args(hint):
            return None
        raise ValueError(f"expected {_describe(hint)}, got null")
    options = [a for a in typing.get_args(hint) if a is not type(None)] if _is_union(hint) else [hint]
    for option_type in options:
        kind = typing.get_origin(option_type) or option_type
        if kind is list and isinstance(value, list):
            item = typing.get_args(option_type)[0]
            return [coerce(item, v, choices) for v in value]
        converted = _scalar(kind, value)
        if converted is not None:
            if choices is not None and converted not in choices:
                raise ValueError(f"expected one of {', '.join(map(str, choices))}, got {value!r}")
            return converted
    raise ValueError(f"expected {_describe(hint)}, got {value!r}")


def _scalar(kind: Any, value: Any) -> Any:
    """`value` as `kind` when YAML's reading of it is one, else None."""
    if kind is bool:
        return value if isinstance(value, bool) else None
    if kind in (int, float) and not isinstance(value, (bool, list, dict)):
        try:
            number = float(value)
        except (TypeError, ValueError):
            return None
        return number if kind is float else int(number) if number.is_integer() else None
    if kind in (str, Path) and isinstance(value, str):
        return kind(value)
    return None


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _describe(hint: Any) -> str:
    if _is_union(hint):
        return " or ".join(_describe(a) for a in typing.get_args(hint))
    if typing.get_origin(hint) is list:
        items = {int: "integers", float: "numbers", str: "strings", Path: "paths"}
        return f"a list of {items.get(typing.get_args(hint)[0], 'values')}"
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false", Path: "a path",
             type(None): "null"}
    return names.get(hint, str(hint))


def load_settings(cls: type[Config], path: str | Path | None = None,
                  overrides: Mapping[str, Any] | None = None) -> Config:
    """The `cls` settings of a YAML file and `overrides` (both checked like `--config`; overrides win), as in a
    script or notebook: `load_settings(TrainConfig, "configs/train-cpu.yaml", {"n": 4})`."""
    values = read_settings(preset_file(path), [cls]) if path is not None else {}
    return cls(**{**values, **checked_settings(overrides or {}, [cls])})


def as_mapping(settings: Any) -> Mapping[str, Any]:
    """A settings dataclass as a plain mapping (paths as strings, lists as lists), for YAML and JSON."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(settings).items()}
