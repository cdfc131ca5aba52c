"""One config system for every command: a frozen dataclass of settings per command, assembled from shared option
groups, read from a `--config file.yaml` and then from flags (flags win). Plain data: importing it loads no torch.

Every setting is a dataclass field made with `option(default, help, *aliases)`; its flag is `--name` (also
`--name-with-dashes`), its YAML key `name`. One spelling per concept across commands: `--paths/-J`, `--steps/-N`,
`--horizon/-K`, `--lookahead/-k`, `-n`, lists as separate words (`--methods ppr ppr-seed5`) on the command line and
YAML lists in a file. A field marked `operational=True` does not change a number (output directory, batching,
device placement): it is left out of the run identity (`identity.run_identity`).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import os
import sys
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, NoReturn, TypeVar, overload

from beliefdrift.credentials import redacted
from beliefdrift.data.registry import DATASETS
from beliefdrift.errors import UserError
from beliefdrift.files import check_inputs_outside, check_output
from beliefdrift.prompts.render import DEFAULT_PPR_TEMPLATE, DEFAULT_TEMPLATE_ENDING, TEMPLATE_ENDINGS
from beliefdrift.registry import ATTN_IMPLEMENTATIONS, DEFAULT_MODEL, did_you_mean, parse_method
from beliefdrift.yaml_files import load_yaml, read_yaml

#: A command's settings dataclass.
Config = TypeVar("Config", bound="Settings")
#: What argparse fills when a caller gives its own namespace object.
NamespaceT = TypeVar("NamespaceT")
#: YAML presets shipped with the package (`configs/` in a source checkout links here).
PRESET_DIR = Path(__file__).resolve().parents[1] / "presets"
#: `beliefdrift paper --preset` names and their bundled files.
PAPER_PRESETS = {"cpu": "paper-cpu.yaml", "paper": "paper-full.yaml"}
#: Formats a figure can be written in.
FIGURE_FORMATS = ("png", "pdf")
#: Field metadata that is ours, not an `add_argument` keyword.
OWN_METADATA = ("operational", "range", "when_set", "output", "input")
#: from_pretrained keywords that have their own flag, so --model-args may not set them.
OWN_FLAGS = {"dtype": "--dtype", "torch_dtype": "--dtype", "device_map": "--device-map",
             "attn_implementation": "--attn-implementation", "revision": "--revision",
             "trust_remote_code": "--trust-remote-code"}
#: The largest seed: every seeded generator (torch, numpy, random) takes 0 … 2^63 − 1.
MAX_SEED = 2**63 - 1
#: Upper bounds of the sizes, generous for a GPU (a 7–8B model, J and N in the hundreds) and far below what would
#: overflow an index or a tensor's size: paths, steps and other counts per question; questions; a batch of questions.
MAX_COUNT = 2**16
MAX_QUESTIONS = 10**8
MAX_BATCH = 4096
#: The most bytes one number of a θ array takes (float64) and the most labels a question has (A–Z): the memory
#: estimates below multiply the sizes with these.
BYTES_PER_VALUE = 8
MAX_LABELS = 26


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
           below: float | None = None, metavar: str | None = None, when_set: bool = False,
           output: str | None = None, input: bool = False) -> Any:
    """A setting: its default, help line, short flags, allowed values (`choices`; for a number its range: at least
    `minimum` or greater than `above`, at most `maximum` or less than `below`), and whether results depend on it.
    The range is declared here only: the parser's help shows it and `Settings` checks it (flags, YAML and code).
    A `when_set` setting enters the run identity only when it differs from its default (settings added after runs
    were stored: those runs' identities stay as they were, so they still resume). An `output` setting names an
    output "directory" or "file" (`files.check_output`); an `input` setting may name a file the command reads,
    which may not be one of the files the command writes (`Settings.outputs`, `files.check_inputs_outside`)."""
    bounds = Range(above if above is not None else minimum, below if below is not None else maximum,
                   above is not None, below is not None)
    metadata: dict[str, Any] = {"help": help, "operational": operational,
                                "range": bounds if bounds != Range() else None, "when_set": when_set,
                                "output": output, "input": input}
    if aliases:
        metadata["aliases"] = list(aliases)
    if choices is not None:
        metadata["choices"] = tuple(choices)
    if metavar is not None:
        metadata["metavar"] = metavar
    if isinstance(default, (list, tuple)):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def retuned(group: type[Settings], name: str, default: Any, help: str | None = None) -> Any:
    """Option `name` of `group` with a command's own default (and help line), the same flags otherwise."""
    meta = dict(group.__dataclass_fields__[name].metadata)
    own_help, bounds = meta.pop("help"), meta.pop("range") or Range()
    meta["above" if bounds.low_open else "minimum"] = bounds.low
    meta["below" if bounds.high_open else "maximum"] = bounds.high
    return option(default, help or own_help, *meta.pop("aliases", ()), **meta)


def is_operational(field: dataclasses.Field) -> bool:
    return bool(field.metadata.get("operational"))


# ---------------------------------------------------------------------------------------------- option groups


@dataclasses.dataclass(frozen=True)
class Settings:
    """The base of every settings dataclass: a value outside its option's `choices` or `Range` (or a number that is
    nan or infinite), or an output path that cannot be written (`files.check_output`), is an error naming the
    flag; an output path starting with `~` is the home directory's, as in a shell."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value, meta = getattr(self, field.name), field.metadata
            values = value if isinstance(value, list) else [value]
            if meta.get("choices") is not None and value is not None and any(v not in meta["choices"] for v in values):
                raise UserError(f"{flag_name(field)}: expected {' or '.join(map(str, meta['choices']))}, got "
                                f"{value!r}")
            numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
            bounds = meta.get("range") or Range()
            if any(v not in bounds for v in numbers):
                raise UserError(f"{flag_name(field)} must be {bounds if bounds != Range() else 'a finite number'}, "
                                f"got {value}")
            if meta.get("output") and value is not None:
                if str(value).startswith("~"):  # from a YAML file or --out=~/…, where no shell expanded it
                    value = Path(value).expanduser()
                    object.__setattr__(self, field.name, value)
                check_output(Path(value), flag_name(field), meta["output"])
        self.check_inputs()
        self.check_memory()

    #: What the command writes into its output directory (glob patterns of paths relative to it): an input file
    #: there that one of them names is refused (`check_inputs`); the commands' tests check every file they write
    #: against it.
    outputs: ClassVar[tuple[str, ...]] = ()
    #: The `--help` section of the option group (or command) that declares a field.
    _argument_group_name: ClassVar[str]

    def output_directories(self) -> dict[str, Path]:
        """{flag: directory} of the output directories set."""
        return {flag_name(f): Path(getattr(self, f.name)) for f in dataclasses.fields(self)
                if f.metadata.get("output") == "directory" and getattr(self, f.name) is not None}

    def check_inputs(self, extra: Mapping[str, str | Path | None] | None = None) -> None:
        """No input file (the `input` settings, and `extra`: {flag: path}) is one of the command's `outputs` in its
        output directory, which the command would replace (`files.check_inputs_outside`)."""
        inputs = {flag_name(f): _file_part(getattr(self, f.name)) for f in dataclasses.fields(self)
                  if f.metadata.get("input")}
        for flag, directory in self.output_directories().items():
            check_inputs_outside(directory, flag, {**inputs, **(extra or {})}, self.outputs)

    def check_memory(self, questions: int | None = None) -> None:
        """A command whose sizes multiply into the memory it needs checks their product here (`memory_needed`),
        before anything loads (`questions`: how many a run has, where known before its settings); the base has
        none."""


def check_distinct_methods(names: Sequence[str]) -> None:
    """Each method named once (a name may list several, `ppr,direct`): two spellings of one method (`ppr ppr`,
    `ppr-seed5 ppr-seed05`, `ppr ppr-seed0`; `registry.parse_method` gives one name per method) are a UserError
    naming both, where they would silently run as one."""
    first: dict[str, str] = {}
    for name in (part.strip() for given in names for part in given.split(",") if part.strip()):
        method = parse_method(name).name
        if method in first:
            twice = (f"{name} given twice" if name == first[method]
                     else f"{first[method]} and {name} name the same method ({method})")
            raise UserError(f"--methods: {twice}; give each method once")
        first[method] = name


def _file_part(value: Any) -> Any:
    """The local path a setting's value may name (an `hf:` prefix aside)."""
    return str(value).removeprefix("hf:") if isinstance(value, (str, Path)) else None


def machine_memory() -> int | None:
    """This machine's physical memory in bytes (None where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def memory_needed(what: str, needed: int, lower: str) -> None:
    """A UserError when `needed` bytes (`what`: the product of sizes it counts) exceed this machine's memory, naming
    the settings to `lower`: one line before anything is allocated, where the allocator would fail or the machine
    swap without end."""
    total = machine_memory()
    if total is not None and needed > total:
        raise UserError(f"{what} need about {needed / 2**30:,.1f} GiB, more than this machine's {total / 2**30:,.1f} "
                        f"GiB of memory; lower {lower}")


def parse_model_args(spec: str | None) -> dict[str, Any]:
    """`key=value,…` as from_pretrained keywords, each value read as YAML reads a scalar (`True`, `8`, `0.5`, text),
    as lm-eval reads its --model_args; a key with its own flag, or a pair without `=`, is a ValueError."""
    if not spec:
        return {}
    values: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not key:
            raise ValueError(f"--model-args {spec}: {item!r} is not key=value")
        if key in OWN_FLAGS:
            raise ValueError(f"--model-args {spec}: set {key} with {OWN_FLAGS[key]}")
        parsed = load_yaml(value, f"--model-args {spec}") if value else ""
        values[key] = parsed if isinstance(parsed, (str, int, float, bool)) or parsed is None else value
    return values


@dataclasses.dataclass(frozen=True)
class ModelOptions(Settings):
    _argument_group_name = "model"

    model: str = option(DEFAULT_MODEL, "registry name, hub id, local directory, .gguf file, or openai:BASE_URL for a "
                                       "model behind an inference server (docs/serving.md)", input=True)
    device: str = option("cpu", "cpu, cuda, cuda:N or auto")
    dtype: str = option("auto", "auto = bf16 where bf16 matmuls are fast (AMX/AVX512-BF16 CPUs, CUDA), else float32",
                        choices=("auto", "float32", "bfloat16"))
    attn_implementation: str = option("auto", "attention of the forward passes the engine does not own (auto: "
                                              "transformers' choice)", choices=ATTN_IMPLEMENTATIONS)
    device_map: str | None = option(None, "'auto' spreads a model too large for one GPU over all visible devices "
                                          "(accelerate)", operational=True)
    template: str = option(DEFAULT_PPR_TEMPLATE, "PPR prompt: ppr-llama, ppr-olmo, or a .txt template path",
                           input=True)
    template_ending: str = option(DEFAULT_TEMPLATE_ENDING, "fence: the question's code fence is closed after it; "
                                                           "paper: the prompt ends with the question (Appendix D.4)",
                                  choices=TEMPLATE_ENDINGS)
    revision: str | None = option(None, "the hub model's branch, tag or commit (from_pretrained's revision)",
                                  when_set=True)
    trust_remote_code: bool = option(False, "run the model repository's own Python code (from_pretrained's "
                                            "trust_remote_code)", when_set=True)
    model_args: str | None = option(None, "more from_pretrained keywords as key=value,… (like lm-eval's "
                                          "--model_args), e.g. low_cpu_mem_usage=True,subfolder=main; for openai:… "
                                          "the client's settings (served_model, tokenizer, api, timeout, … and "
                                          "lm-eval's names: docs/serving.md)",
                                    metavar="KEY=VALUE,…", when_set=True)

    def pretrained_kwargs(self) -> dict[str, Any]:
        """`revision`, `trust_remote_code` and `model_args` as `load_model`'s keywords."""
        return {"revision": self.revision, "trust_remote_code": self.trust_remote_code,
                "model_args": parse_model_args(self.model_args)}


@dataclasses.dataclass(frozen=True)
class DataOptions(Settings):
    _argument_group_name = "data"

    dataset: str = option("demo", f"a registered dataset ({', '.join(DATASETS)}), a file, lm-eval:TASK, an lm-eval "
                                  "task file (.yaml) or hf:OWNER/NAME[:CONFIG]", input=True)
    split: str | None = option(None, "dataset split (unset: the dataset's evaluation split)")
    fields: str | None = option(None, "a hf: dataset's columns as question=COL,choices=COL,answer=COL[,labels=COL]"
                                      "[,id=COL], or a YAML file of that mapping", when_set=True, input=True)
    n: int | None = option(None, "number of questions, 0 or unset for all (a deterministic subsample by --seed)",
                           "-n", minimum=0, maximum=MAX_QUESTIONS)
    data_dir: str | None = option(None, "benchmark data directory (unset: $BELIEFDRIFT_DATA)", operational=True)


@dataclasses.dataclass(frozen=True)
class SamplingOptions(Settings):
    _argument_group_name = "sampling"

    paths: int = option(8, "paths per question (J)", "-J", minimum=1, maximum=MAX_COUNT)
    steps: int = option(20, "answers generated per path (N)", "-N", minimum=1, maximum=MAX_COUNT)
    seed: int = option(0, "run seed (each question × method derives its own random stream)", minimum=0,
                       maximum=MAX_SEED)

    def check_memory(self, questions: int | None = None) -> None:
        """θ of the paths of one engine batch: questions × J × (N + 1) × labels float32s (`runs.store.ResultRow.thetas`,
        at most `MAX_LABELS` labels), before the model's own caches, which grow with the same sizes."""
        batch = max(getattr(self, "batch_questions", 0), 1)
        memory_needed(f"the θ_n of a batch's paths ({batch} questions × -J {self.paths} × N + 1 = {self.steps + 1} × "
                      f"{MAX_LABELS} labels × 4 bytes)", batch * self.paths * (self.steps + 1) * MAX_LABELS * 4,
                      "-J/--paths, -N/--steps or --batch-questions" if batch > 1 else "-J/--paths or -N/--steps")
        super().check_memory(questions)


@dataclasses.dataclass(frozen=True)
class BatchingOptions(Settings):
    _argument_group_name = "batching"

    batch_questions: int = option(0, "questions whose paths advance together in one engine batch (0: 16 on a GPU or "
                                     "a server, 1 on the CPU); the results do not depend on it", operational=True,
                                 minimum=0, maximum=MAX_BATCH)
    compile: bool = option(False, "run the model's forward passes through torch.compile: faster steps after compiling "
                                  "once (minutes on a small CPU); the results equal eager ones up to rounding",
                           operational=True)
    cuda_graphs: bool | None = option(None, "run the answer steps as static steps and replay one recorded step of "
                                             "each batch as a CUDA graph (no compiler; prefills stay eager): on a GPU "
                                             "a step is bound by launching kernels. Default: on where the model is "
                                             "on one CUDA device (--no-cuda-graphs: off)", operational=True)


@dataclasses.dataclass(frozen=True)
class QualityControl:
    """Exclude a question from a method's metrics when more than `max_fraction` of its paths have mean
    valid_mass below `path_mass` (the paper's ">50% of paths off-format" rule; direct query = one path); with
    `common`, from every method's when any method's rule excludes it (one question set for a whole table)."""

    path_mass: float = 0.5
    max_fraction: float = 0.5
    common: bool = False

    def excludes(self, row: Any) -> bool:
        """Whether the stored result `row` (a `store.ResultRow`) fails the rule."""
        return float((row.path_valid_mass < self.path_mass).mean()) > self.max_fraction

    def describe(self) -> str:
        """The rule in words, with its settings: what a question a method loses had (the run's warnings, the
        explorer and the demo's caption say it so)."""
        return (f"more than {self.max_fraction:g} of its paths (direct query: its one answer) had mean label mass "
                f"below {self.path_mass:g}" + (", for any method (--qc-common)" if self.common else ""))


@dataclasses.dataclass(frozen=True)
class ReportOptions(Settings):
    _argument_group_name = "report"

    qc_path_mass: float = option(QualityControl.path_mass, "a path is off-format when its mean valid_mass is below "
                                                           "this", operational=True, minimum=0, maximum=1)
    qc_max_fraction: float = option(QualityControl.max_fraction, "exclude a question when more than this fraction of "
                                                                 "its paths is off-format", operational=True,
                                    minimum=0, maximum=1)
    qc_common: bool = option(False, "score every method on the questions that all methods keep (default: each "
                                    "method on its own kept questions)", operational=True)
    bootstrap: int = option(1000, "bootstrap resamples for the 95%% intervals", operational=True, minimum=1,
                            maximum=10**6)

    @property
    def quality_control(self) -> QualityControl:
        return QualityControl(self.qc_path_mass, self.qc_max_fraction, self.qc_common)

    def check_memory(self, questions: int | None = None) -> None:
        """The bootstrap's index matrix: resamples × questions int64s (`metrics.functional.resample_indices`), where
        the number of questions is known (`questions`, or a run's -n)."""
        count = questions or getattr(self, "n", None)
        if count:
            memory_needed(f"the bootstrap's resamples (--bootstrap {self.bootstrap} × {count} questions × "
                          f"{BYTES_PER_VALUE} bytes)", self.bootstrap * count * BYTES_PER_VALUE, "--bootstrap")
        super().check_memory(questions)


#: What every run-store command writes into its output directory (see `Settings.outputs`): the store and its
#: SQLite sidecars, records.csv and figures.
RUN_OUTPUTS = ("run.sqlite", "run.sqlite-*", "questions.jsonl", "records.csv", "*.png", "*.pdf")


def out_option(default: str) -> Any:
    return option(Path(default), "output directory", operational=True, output="directory")


# ---------------------------------------------------------------------------------------------- parsing


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The description as written, and an option's default after its help unless the help already says what
    unset means (a default of None, or the word "default" in the help)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default is None or action.default is False or action.default == argparse.SUPPRESS or (
                "default" in text or not action.option_strings or action.nargs == 0):  # a flag takes no value
            return text
        return f"{text} (default: %(default)s)"


def parse_bool(value: str | bool) -> bool:
    """yes/no, true/false, t/f, y/n, 1/0 (any case) as a bool."""
    if isinstance(value, bool):
        return value
    if value.lower() in ("yes", "true", "t", "y", "1"):
        return True
    if value.lower() in ("no", "false", "f", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false (yes/no, 1/0), got {value!r}")


class CommandParser(argparse.ArgumentParser):
    """A command's parser: the fields of its settings dataclasses as flags (grouped by option group), plus
    `--config FILE` whose YAML mapping becomes the defaults the flags override. Errors are one line."""

    def __init__(self, dataclass_types: type[Settings] | Iterable[type[Settings]] | None = None, **kwargs: Any):
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(**kwargs)
        if isinstance(dataclass_types, type):
            dataclass_types = [dataclass_types]
        self.dataclass_types = list(dataclass_types or [])
        for dtype in self.dataclass_types:
            self._add_dataclass_arguments(dtype)
        if self.dataclass_types:
            self.add_argument("--config", metavar="FILE.yaml",
                              help="YAML mapping of settings (the flags' names with underscores), or the name of a "
                                   f"bundled preset ({', '.join(bundled_presets())}); flags override it")

    def _add_dataclass_arguments(self, dtype: type[Settings]) -> None:
        hints = typing.get_type_hints(dtype)
        groups: dict[str, argparse._ArgumentGroup] = {}
        for cls in [*dtype.__mro__[1:], dtype]:  # the shared groups first (model, data, …), the command's last
            name = cls.__dict__.get("_argument_group_name")
            if name and name not in groups:
                groups[name] = self.add_argument_group(name)
        def group(field: dataclasses.Field) -> str:
            owner = next(cls for cls in reversed(dtype.__mro__)
                         if issubclass(cls, Settings) and field.name in cls.__dataclass_fields__)
            return owner._argument_group_name

        order = list(groups)  # the usage line lists the flags group by group, as --help does
        for field in sorted(dataclasses.fields(dtype), key=lambda field: order.index(group(field))):
            add_field_argument(groups[group(field)], field, hints[field.name])

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message} (see {self.prog} --help)")

    @overload  # argparse's three signatures
    def parse_args(self, args: Iterable[str] | None = None, namespace: None = None) -> argparse.Namespace: ...
    @overload
    def parse_args(self, args: Iterable[str] | None, namespace: NamespaceT) -> NamespaceT: ...
    @overload
    def parse_args(self, *, namespace: NamespaceT) -> NamespaceT: ...

    def parse_args(self, args: Iterable[str] | None = None, namespace: Any = None) -> Any:
        """As argparse's, but an unknown flag is refused by the command's parser with the closest flag it knows."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = self.command_parser(getattr(parsed, "command", None))
            flag = next((word.split("=")[0] for word in extras if word.startswith("--")), "")
            flags = {name[2:]: name for name in parser._option_string_actions if name.startswith("--")}
            close = difflib.get_close_matches(flag[2:], flags, n=1) if flag else []  # compared without the dashes
            parser.error(f"unrecognized arguments: {' '.join(extras)}"
                         f"{f'; did you mean {flags[close[0]]}?' if close else ''}")
        return parsed

    def command_parser(self, command: str | None) -> CommandParser:
        """The parser of subcommand `command` (this one when it has none of that name)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and command in action.choices:
                return action.choices[command]
        return self

    @overload
    def parse_known_args(self, args: Iterable[str] | None = None,
                         namespace: None = None) -> tuple[argparse.Namespace, list[str]]: ...
    @overload
    def parse_known_args(self, args: Iterable[str] | None, namespace: NamespaceT) -> tuple[NamespaceT, list[str]]: ...
    @overload
    def parse_known_args(self, *, namespace: NamespaceT) -> tuple[NamespaceT, list[str]]: ...

    def parse_known_args(self, args: Iterable[str] | None = None, namespace: Any = None) -> tuple[Any, list[str]]:
        """As argparse's, with the `--config` file's settings as the defaults and `given` set on the result."""
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


def path_argument(text: str) -> Path:
    """A path given on the command line; an empty one (`--out ''`, which would mean the current directory) is
    refused."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a path, got an empty string")
    return Path(text)


def add_field_argument(group: argparse._ArgumentGroup, field: dataclasses.Field, hint: Any) -> None:
    """The flags of one setting: `--name-with-dashes` (as `--help` shows it), `--name_with_underscores` and its
    short aliases; lists take several words, a bool flag alone means true (`--no-name` too when it defaults to
    true), `X | None` reads an X."""
    names = [f"--{field.name.replace('_', '-')}", *([f"--{field.name}"] if "_" in field.name else [])]
    kwargs = {k: v for k, v in field.metadata.items() if k not in (*OWN_METADATA, "aliases")}
    if field.metadata.get("range"):  # the allowed numbers, declared once in `option`
        kwargs["help"] = f"{kwargs['help']} ({field.metadata['range']})"
    aliases = list(field.metadata.get("aliases", ()))
    if _is_union(hint):
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
    if hint is bool:
        kwargs.update(type=parse_bool, nargs="?", const=True)
    elif hint is Path:
        kwargs["type"] = path_argument
    elif typing.get_origin(hint) is list:
        kwargs.update(type=typing.get_args(hint)[0], nargs="+")
    else:
        kwargs["type"] = hint
    group.add_argument(*names, *aliases, dest=field.name, default=default, **kwargs)
    if hint is bool and default is not False:  # on by default, or chosen by the device (None)
        flag = field.name.replace("_", "-")
        group.add_argument(f"--no-{flag}", f"--no_{field.name}", action="store_false", dest=field.name,
                           default=default, help=f"turn --{flag} off")


def _config_path(args: Sequence[str]) -> Path | None:
    """The file of the one `--config` in `args` (None without one); several are a UserError."""
    given = [args[i + 1] for i, token in enumerate(args[:-1]) if token == "--config"]
    given += [token.partition("=")[2] for token in args if token.startswith("--config=")]
    if len(given) > 1:
        raise UserError(f"--config given {len(given)} times ({', '.join(given)}); expected one YAML file (flags "
                        "override its settings)")
    return preset_file(given[0]) if given else None


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


def add_command(subparsers: argparse._SubParsersAction, name: str, settings: type[Settings] | Sequence[type[Settings]],
                help: str, description: str | None) -> CommandParser:
    """A `beliefdrift <name>` parser whose flags are the fields of `settings` (one dataclass or several)."""
    return subparsers.add_parser(name, dataclass_types=settings, help=help, description=description)


def settings_from(args: argparse.Namespace, cls: type[Config]) -> Config:
    """The `cls` dataclass from parsed arguments (flags over `--config` over the built-in defaults); the `--config`
    file is an input like the others (it may not lie in an output directory, where it could be replaced)."""
    settings = cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if f.init})
    if getattr(args, "config", None):
        settings.check_inputs({"--config": preset_file(args.config)})
    return settings


def flag_name(field: dataclasses.Field) -> str:
    """How the setting is written: `-J/--paths` (and in YAML `paths`)."""
    return "/".join([*field.metadata.get("aliases", ()), f"--{field.name.replace('_', '-')}"])


# ---------------------------------------------------------------------------------------------- YAML


def read_settings(path: Path, classes: Iterable[type[Settings]]) -> dict[str, Any]:
    """A YAML mapping of settings checked against the fields of `classes`: an unknown key or a value of the wrong
    type is one error naming the file and the key."""
    if not path.is_file():
        raise FileNotFoundError(f"--config {path}: no such file or bundled preset ({', '.join(bundled_presets())})"
                                + did_you_mean(path.stem, bundled_presets()))
    values = read_yaml(path, f"--config {path}") or {}
    if not isinstance(values, dict):
        raise UserError(f"--config {path}: expected a mapping of settings, got {type(values).__name__}")
    return checked_settings(values, classes, f"--config {path}: ")


def checked_settings(values: Mapping[str, Any], classes: Iterable[type[Settings]], where: str = "") -> dict[str, Any]:
    """`values` read as the fields of `classes` (see `coerce`); an unknown key or a wrong type is a UserError
    starting with `where`."""
    classes = list(classes)
    fields = {f.name: f for cls in classes for f in dataclasses.fields(cls) if f.init}
    hints = {name: hint for cls in classes for name, hint in typing.get_type_hints(cls).items()}
    unknown = sorted(set(values) - set(fields), key=str)  # YAML keys may be numbers, null, …
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
    """`value` as `kind` when YAML's reading of it is one, else None: an integer is written as one (`8` or "8"; a
    float such as `8.0` or `1.0e+308` is not one), a path is not empty."""
    if kind is bool:
        return value if isinstance(value, bool) else None
    if isinstance(value, (bool, list, dict)):
        return None
    if kind is int:
        try:
            return value if isinstance(value, int) else int(value, 10) if isinstance(value, str) else None
        except ValueError:
            return None
    if kind is float:
        try:
            return float(value)
        except (TypeError, ValueError, OverflowError):
            return None
    if kind in (str, Path) and isinstance(value, str):
        return kind(value) if kind is str or value.strip() else None
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


def as_mapping(settings: Settings) -> Mapping[str, Any]:
    """A settings dataclass as a plain mapping (paths as strings, lists as lists, credentials replaced by `***`:
    `credentials.redacted`), for YAML and JSON."""
    return redacted({k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(settings).items()})
