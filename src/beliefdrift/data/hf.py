"""Hugging Face datasets as benchmarks: `hf:OWNER/NAME[:CONFIG]` (the hub), `hf:DIR` (a `save_to_disk` folder) or
`hf:FILE` (a .json/.jsonl/.csv/.parquet data file), read by the `datasets` package.

Records in a layout the file loaders know (ARC/CSQA as on the hub, tinyMMLU) need no mapping; any other layout is
mapped with `--fields question=COL,choices=COL,answer=COL[,labels=COL][,id=COL]` (or a YAML file of that mapping):
a dotted column walks nested records (`choices.text`), `choices` may join several columns with `+` (`A+B+C+D`), and
the answer is an option index, a label of `labels` (default: A, B, …) or an option's text.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from beliefdrift.data.loaders import (
    RECORD_LAYOUTS,
    DataError,
    Record,
    _one_label_each,
    _question,
    _string_list,
    _unique,
    questions_from_records,
    record_layout,
    require,
)
from beliefdrift.data.question import LETTERS, MCQuestion
from beliefdrift.errors import first_line
from beliefdrift.yaml_files import read_yaml

HF_PREFIX = "hf:"
FIELDS = ("question", "choices", "answer", "labels", "id")
REQUIRED_FIELDS = ("question", "choices", "answer")
_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
_DEFAULT_SPLITS = ("test", "validation", "train")


def parse_fields(spec: str) -> dict[str, str]:
    """`--fields question=…,choices=…,answer=…` (or the path of a YAML mapping of the same keys) as a mapping."""
    where = f"--fields {spec}"
    if Path(spec).suffix.lower() in (".yaml", ".yml"):
        mapping = read_yaml(Path(spec), where)
        if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                    for k, v in mapping.items()):
            raise DataError(f"{where}: expected a mapping of {', '.join(FIELDS)} to column names")
    else:
        pairs = [item.partition("=") for item in spec.split(",") if item.strip()]
        if any(not sep or not value.strip() for _, sep, value in pairs):
            raise DataError(f"{where}: expected key=column pairs separated by commas")
        mapping = {key.strip(): value.strip() for key, _, value in pairs}
    unknown = sorted(set(mapping) - set(FIELDS))
    missing = [key for key in REQUIRED_FIELDS if key not in mapping]
    if unknown or missing:
        problem = f"unknown key(s) {', '.join(unknown)}" if unknown else f"missing {', '.join(missing)}"
        raise DataError(f"{where}: {problem}; expected {', '.join(FIELDS)} (the first three required)")
    return mapping


def load_hf(spec: str, split: str | None = None, fields: str | None = None) -> list[MCQuestion]:
    """The questions of the Hugging Face dataset `spec` (`hf:…`, see the module docstring), split `split` (default:
    test, else validation, else train, else its only split)."""
    rows, origin = _rows(spec.removeprefix(HF_PREFIX), split)
    try:  # the datasets package decodes a data file's text as rows are read
        return _questions(rows, origin, fields)
    except UnicodeDecodeError as err:
        raise DataError(f"{origin}: a text is not UTF-8 ({err.reason}); expected a UTF-8 data file") from None


def _questions(rows: Any, origin: str, fields: str | None) -> list[MCQuestion]:
    """The questions of a dataset's `rows` (laid out as a known layout, or mapped by `fields`)."""
    if fields is None:
        layout = record_layout(rows[0]) if len(rows) else None
        if layout not in ("arc-hub", "tinymmlu"):
            columns = ", ".join(map(repr, rows[0])) if len(rows) else "none"
            raise DataError(f"{origin}: columns {columns} match no known layout ({RECORD_LAYOUTS}); map them with "
                            "--fields question=COL,choices=COL,answer=COL")
        return questions_from_records(rows, layout, origin)
    mapping = parse_fields(fields)
    return _unique(((i, _mapped(row, mapping, f"{origin}:{i}", f"row-{i}")) for i, row in enumerate(rows, 1)), origin)


def _rows(source: str, split: str | None) -> tuple[Any, str]:
    """(the rows of `split`, "hf:<source>/<split>") of a local folder or data file, or a hub dataset."""
    import datasets

    path = Path(source).expanduser()
    if source.startswith(("/", ".", "~")) and not path.exists():  # a local path, never a hub id: said at once
        raise DataError(f"hf:{source}: no such file or directory")
    try:
        if path.is_dir():
            loaded = datasets.load_from_disk(str(path))
        elif path.suffix.lower() in _BUILDERS:
            if not path.is_file():
                raise DataError(f"hf:{source}: no such file")
            loaded = datasets.load_dataset(_BUILDERS[path.suffix.lower()], data_files=str(path))
        else:
            name, _, config = source.partition(":")
            loaded = datasets.load_dataset(name, config or None)
    except DataError:
        raise
    except Exception as err:  # not found, offline, gated, unreadable: one line naming the dataset
        raise DataError(f"hf:{source}: could not load the dataset ({type(err).__name__}: {first_line(err)})") from None
    if isinstance(loaded, datasets.Dataset):
        return loaded, f"{HF_PREFIX}{source}"
    available = list(loaded)
    if split is None:
        split = next((s for s in _DEFAULT_SPLITS if s in available), available[0] if len(available) == 1 else None)
    if split not in available:
        raise DataError(f"hf:{source}: {'no split given' if split is None else f'unknown split {split!r}'}; "
                        f"expected --split {' or '.join(available)}")
    return loaded[split], f"{HF_PREFIX}{source}/{split}"


def _mapped(row: Record, mapping: dict[str, str], where: str, default_id: str) -> MCQuestion:
    """One row read through the `--fields` mapping."""
    texts = _choices(row, mapping["choices"], where)
    labels = _string_list(row, mapping["labels"], where) if "labels" in mapping else list(LETTERS[: len(texts)])
    _one_label_each(labels, texts, where)
    answer = _answer_index(require(row, mapping["answer"], where, object), texts, labels, where, mapping["answer"])
    qid = str(require(row, mapping["id"], where, object)) if "id" in mapping else default_id
    return _question(where, qid, require(row, mapping["question"], where, str), texts, answer)


def _choices(row: Record, spec: str, where: str) -> list[str]:
    if "+" not in spec:
        return _string_list(row, spec, where)
    return [str(require(row, column, where, object)) for column in spec.split("+")]


def _answer_index(answer: Any, texts: Sequence[str], labels: Sequence[str], where: str, column: str) -> int:
    """An index (int), else a label, else an option's text."""
    if isinstance(answer, int) and not isinstance(answer, bool):
        return answer
    for candidates in (labels, texts):
        if answer in candidates:
            return list(candidates).index(answer)
    raise DataError(f"{where}: answer {column!r} = {answer!r} is neither an option index, a label "
                    f"({', '.join(labels)}) nor an option's text")
