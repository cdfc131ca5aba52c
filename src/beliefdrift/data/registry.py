"""Benchmarks by name: local files under the data directory, the Hugging Face hub as a fallback."""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar, overload

from beliefdrift.data.hf import HF_PREFIX, load_hf
from beliefdrift.data.lm_eval import is_task_spec, load_lm_eval
from beliefdrift.data.loaders import (
    RECORD_LAYOUTS,
    DataError,
    MathProblem,
    PathLike,
    load_arc,
    load_csqa,
    load_demo,
    load_gpqa_csv,
    load_gsm8k,
    load_jsonl,
    load_mmlu_csv,
    load_parquet,
    load_tinymmlu,
    parquet_layout,
    questions_from_records,
    read_jsonl,
    read_text,
    record_layout,
)
from beliefdrift.data.question import MCQuestion
from beliefdrift.errors import first_line
from beliefdrift.registry import did_you_mean

DATA_ENV = "BELIEFDRIFT_DATA"

_T = TypeVar("_T")
#: A registered dataset's loader: (split or None for its default, the data directory or None, seed) → its items.
Loader = Callable[[str | None, Path | None, int], list[Any]]


@dataclass(frozen=True)
class Dataset:
    """A benchmark by name: `load(split, data_dir, seed)` gives its items, each a `kind` (`KINDS`)."""

    name: str
    load: Loader
    kind: type
    description: str


@dataclass(frozen=True)
class Layout:
    """A hub-backed benchmark's loader: split → (file under the data dir, hub split); the file is read with
    `loader`, else the hub's rows (`hub`: dataset id, config) with `questions_from_records` in layout `records`."""

    name: str
    splits: dict[str, tuple[str, str]]
    default: str
    loader: Callable[[PathLike], list[Any]]
    hub: tuple[str, str | None]
    records: str

    def __call__(self, split: str | None, root: Path | None, seed: int = 0) -> list[Any]:
        return _load_layout(self, split, root)


#: Every registered benchmark, by name: adding one is one entry here (and its test in tests/test_data.py).
DATASETS: dict[str, Dataset] = {dataset.name: dataset for dataset in (
    Dataset("demo", lambda split, root, seed: load_demo(), MCQuestion, "the bundled demo questions (no download)"),
    Dataset("csqa", Layout("csqa", {"train": ("commonsense_qa/train_rand_split.jsonl", "train"),
                                    "dev": ("commonsense_qa/dev_rand_split.jsonl", "validation")},
                           "dev", load_csqa, ("tau/commonsense_qa", None), "arc-hub"),
            MCQuestion, "CommonsenseQA (5 options)"),
    Dataset("arc", Layout("arc", {"train": ("arc_challenge/ARC-Challenge-Train.jsonl", "train"),
                                  "dev": ("arc_challenge/ARC-Challenge-Dev.jsonl", "validation"),
                                  "test": ("arc_challenge/ARC-Challenge-Test.jsonl", "test")},
                          "dev", load_arc, ("allenai/ai2_arc", "ARC-Challenge"), "arc-hub"),
            MCQuestion, "ARC-Challenge"),
    Dataset("tinymmlu", Layout("tinymmlu", {"test": ("tinymmlu/tiny_mmlu.jsonl", "test")}, "test", load_tinymmlu,
                               ("tinyBenchmarks/tinyMMLU", None), "tinymmlu"),
            MCQuestion, "tinyMMLU (100 MMLU questions)"),
    Dataset("mmlu", lambda split, root, seed: [q for path in _mmlu_files(split, root) for q in load_mmlu_csv(path)],
            MCQuestion, "MMLU csvs under <data dir>/mmlu (never fetched)"),
    Dataset("gpqa", lambda split, root, seed: load_gpqa_csv(_gpqa_file(split, root), seed=seed), MCQuestion,
            "GPQA csv under <data dir>/gpqa (gated: never fetched; options shuffled by the seed)"),
    Dataset("gsm8k", Layout("gsm8k", {"test": ("gsm8k/test.jsonl", "test")}, "test", load_gsm8k,
                            ("openai/gsm8k", "main"), "gsm8k"),
            MathProblem, "GSM8K math problems"),
)}
#: The formats a file passed as the dataset can be in, each with its reader (path, seed) → items.
FORMATS: dict[str, Callable[[PathLike, int], list[Any]]] = {
    "csqa": lambda path, seed: load_csqa(path),
    "arc": lambda path, seed: load_arc(path),
    "arc-hub": lambda path, seed: load_jsonl(path, "arc-hub"),
    "tinymmlu": lambda path, seed: load_tinymmlu(path),
    "mmlu": lambda path, seed: load_mmlu_csv(path),
    "gpqa": lambda path, seed: load_gpqa_csv(path, seed=seed),
    "gsm8k": lambda path, seed: load_gsm8k(path),
}

_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
_FILE_LAYOUTS = (f"a .jsonl or .parquet file in {RECORD_LAYOUTS}, or a .csv file (MMLU: question, A, B, C, D, "
                 "answer letter without a header; GPQA: a header with Question, Correct Answer, Incorrect Answer 1-3)")
_MISSING_HINT = f"pass --data-dir or set {DATA_ENV} to the benchmark data directory"


def load_dataset(
    name: str,
    split: str | None = None,
    *,
    data_dir: PathLike | None = None,
    n: int | None = None,
    seed: int = 0,
    fmt: str | None = None,
    fields: str | None = None,
) -> list[MCQuestion] | list[MathProblem]:
    """Load benchmark `name` (one of `DATASETS`, a path to a file, an lm-eval task `lm-eval:TASK` or task file
    `*.yaml`, or a Hugging Face dataset `hf:OWNER/NAME[:CONFIG]`) and keep `n` of its items.

    `data_dir` defaults to the environment variable BELIEFDRIFT_DATA. `fmt` (one of `FORMATS`) only
    applies to a file path; without it the format is told from the extension and the first record.
    `fields` maps a Hugging Face dataset's columns (`data.hf.parse_fields`). `seed` drives both the
    subsample and GPQA's option shuffle. The keywords are the CLI's (`--split`, `--data-dir`, `-n`, `--seed`,
    `--fields`).
    """
    root = _data_root(data_dir)
    if fields is not None and not name.startswith(HF_PREFIX):
        raise DataError(f"--fields applies to a Hugging Face dataset (hf:…), not to {name!r}")
    if name in DATASETS:
        items: list[Any] = DATASETS[name].load(split, root, seed)
    elif name.startswith(HF_PREFIX):
        items = load_hf(name, split, fields)
    elif is_task_spec(name):
        items = load_lm_eval(name, split)
    elif Path(name).expanduser().is_file():  # "~/…" from a YAML file, where no shell expanded it
        items = load_file(os.path.expanduser(name), fmt=fmt, seed=seed)
    elif looks_like_a_path(name):  # a file that is not there: said at once, never looked up anywhere else
        if Path(name).expanduser().is_dir():
            raise DataError(f"dataset {name}: a directory, not a data file (hf:{name} reads a folder written by "
                            "the datasets package's save_to_disk)")
        raise DataError(f"dataset {name}: no such file")
    else:
        known = ", ".join(DATASETS)
        raise DataError(f"unknown dataset {name!r}: expected one of {known}, an existing file, lm-eval:TASK, a task "
                        "file (.yaml) or hf:OWNER/NAME[:CONFIG]" + did_you_mean(name, DATASETS))
    return subsample(items, n, seed)


#: The suffixes of the data files `load_file` reads (besides a task file's .yaml).
DATA_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")


def looks_like_a_path(name: str) -> bool:
    """Whether a dataset name can only mean a local file or folder: it starts with `/`, `.` or `~`, holds a path
    separator, or ends in a data file's suffix (no registered name or hub id does)."""
    return (name.startswith(("/", ".", "~")) or os.sep in name or "/" in name
            or Path(name).suffix.lower() in DATA_SUFFIXES)


#: What each kind of item is, in the errors that say what a command needs.
KINDS: dict[type, str] = {
    MCQuestion: "multiple-choice questions (a stem, two or more options, the correct option's label)",
    MathProblem: "math problems (GSM8K layout: a question and an integer answer, no options)",
}


@overload  # multiple-choice questions only (the default), or either kind
def require_kind(items: Sequence[object], dataset: str, command: str, *, flag: str = ...) -> list[MCQuestion]: ...
@overload
def require_kind(items: Sequence[object], dataset: str, command: str, kinds: tuple[type[MCQuestion], type[MathProblem]],
                 flag: str = ...) -> list[MCQuestion | MathProblem]: ...


def require_kind(items: Sequence[object], dataset: str, command: str, kinds: tuple[type, ...] = (MCQuestion,),
                 flag: str = "--dataset") -> list[Any]:
    """`items` when every one is of `kinds` (what `command` works on), else a DataError naming the dataset, what it
    holds and what the command needs: checked before a command loads its model."""
    wrong = next((item for item in items if not isinstance(item, kinds)), None)
    if wrong is None and items:
        return list(items)
    needs = " or ".join(KINDS[kind] for kind in kinds)
    holds = KINDS.get(type(wrong), type(wrong).__name__) if wrong is not None else "nothing"
    raise DataError(f"{flag} {dataset}: {command} needs {needs}, but it holds {holds}")


def subsample(items: Sequence[_T], n: int | None, seed: int = 0) -> list[_T]:
    """`n` items drawn with `random.Random(seed).sample`, kept in their original order (all if n is
    None, 0 or at least len(items))."""
    if n is not None and n < 0:
        raise DataError(f"-n/--n must be 0 (all questions) or more, got {n}")
    if not n or n >= len(items):
        return list(items)
    keep = sorted(random.Random(seed).sample(range(len(items)), n))
    return [items[i] for i in keep]


def load_file(path: PathLike, fmt: str | None = None, seed: int = 0) -> list[MCQuestion] | list[MathProblem]:
    """Load one file in format `fmt` (one of `FORMATS`; default: `detect_format(path)`). A .parquet file is read
    once: its first row tells its layout."""
    if Path(path).suffix.lower() == ".parquet":
        return load_parquet(path, fmt)
    fmt = fmt or detect_format(path)
    if fmt not in FORMATS:
        raise DataError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}" + did_you_mean(fmt, FORMATS))
    items = FORMATS[fmt](path, seed)
    if not items:
        raise DataError(f"{path}: no questions in the file; expected {_FILE_LAYOUTS}")
    return items


def fingerprint(items: Sequence[MCQuestion | MathProblem]) -> str:
    """sha256 (16 hex digits) of the items' canonical JSON without `source` (where their file lay), so a run
    identity covers what the questions say, not just the dataset's name."""
    payload = [{key: value for key, value in asdict(item).items() if key != "source"} for item in items]
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def detect_format(path: PathLike) -> str:
    """Tell a file's format from its extension and first record ("arc" covers the CSQA layout too, "arc-hub" both
    as on the Hugging Face hub)."""
    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        header = io.StringIO(read_text(path), newline=None).readline()  # as a text file's readline()
        return "gpqa" if "Correct Answer" in header and "Question" in header else "mmlu"
    if suffix == ".jsonl":
        for line, record in read_jsonl(path):
            layout = record_layout(record)
            if layout is None:
                raise DataError(f"{path}:{line}: a record with keys {', '.join(map(repr, record)) or 'none'} matches "
                                f"no known layout; expected {_FILE_LAYOUTS}")
            return layout
        raise DataError(f"{path}: no records in the file; expected {_FILE_LAYOUTS}")
    if suffix == ".parquet":
        return parquet_layout(path)
    raise DataError(f"{path}: unsupported file type {suffix or '(no extension)'}; expected {_FILE_LAYOUTS}")


def _data_root(data_dir: PathLike | None) -> Path | None:
    root = data_dir if data_dir is not None else os.environ.get(DATA_ENV)
    return Path(root).expanduser() if root else None


def _load_layout(layout: Layout, split: str | None, root: Path | None) -> list[Any]:
    name = layout.name
    split = split or layout.default
    if split not in layout.splits:
        raise DataError(f"{name}: unknown split {split!r}; expected one of {', '.join(layout.splits)}")
    relative, hub_split = layout.splits[split]
    if root is not None and (root / relative).is_file():
        return layout.loader(root / relative)
    repo, config = layout.hub
    if any(os.environ.get(var, "").upper() in {"1", "ON", "YES", "TRUE"} for var in _OFFLINE_VARS):
        why = "the Hugging Face hub is off (HF_HUB_OFFLINE)"
    else:
        try:
            import datasets

            rows = datasets.load_dataset(repo, config, split=hub_split)
        except Exception as e:  # any hub failure (no network, gated, renamed) ends in the DataError below
            why = f"the Hugging Face hub fallback failed ({type(e).__name__}: {first_line(e)})"
        else:
            origin = "/".join(part for part in ("hf:" + repo, config, hub_split) if part)
            return questions_from_records(rows, layout.records, origin)
    wanted = root / relative if root is not None else f"<data dir>/{relative}"
    raise DataError(f"{name}: {wanted} not found and {why}; {_MISSING_HINT}")


def _local_root(name: str, root: Path | None) -> Path:
    if root is None:
        raise DataError(f"{name}: no data directory; {_MISSING_HINT}")
    return root


#: A split that names a file or folder under the data directory (MMLU's subjects, GPQA's subsets): one plain name.
SPLIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def _split_name(name: str, split: str) -> str:
    """`split` when it is a plain name (`SPLIT_NAME`), else a DataError: a split names a file in the data directory,
    and `../x` or `/x` would read outside it."""
    if not SPLIT_NAME.fullmatch(split):
        raise DataError(f"{name}: --split {split!r} is not a split name; expected letters, digits, '_' and '-' (a "
                        "file or folder under <data dir>/" + name + ")")
    return split


def _mmlu_files(split: str | None, root: Path | None) -> list[Path]:
    """`mmlu/<split>.csv`, else every csv in `mmlu/<split>/`, else (no split) every csv under `mmlu/`."""
    split = _split_name("mmlu", split) if split is not None else None
    base = _local_root("mmlu", root) / "mmlu"
    if split is None:
        files, wanted = sorted(base.rglob("*.csv")), f"{base}/**/*.csv"
    else:
        single = base / f"{split}.csv"
        files = [single] if single.is_file() else sorted((base / split).glob("*.csv"))
        wanted = f"{single} or {base / split}/*.csv"
    if not files:
        raise DataError(f"mmlu: no {wanted} found (MMLU csvs are not fetched from the hub); {_MISSING_HINT}")
    return files


def _gpqa_file(split: str | None, root: Path | None) -> Path:
    """`gpqa/gpqa_<split>.csv` (default split "diamond"); GPQA is never fetched from the hub."""
    path = _local_root("gpqa", root) / "gpqa" / f"gpqa_{_split_name('gpqa', split or 'diamond')}.csv"
    if not path.is_file():
        raise DataError(
            f"gpqa: {path} not found (GPQA is gated: download it yourself, or pass the csv path as the "
            f"dataset name); {_MISSING_HINT}"
        )
    return path
