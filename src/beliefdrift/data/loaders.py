"""Benchmark loaders: each reads one file into a list of questions, or raises `DataError`.

Every error message starts with "file:line: " (1-based; in a .parquet file the row). Blank lines are skipped; every
other line either parses or raises. Surrounding whitespace is stripped from stems and option texts. A .jsonl line and
a .parquet row are records, parsed by the same functions once `record_layout` has told their layout.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Protocol, TypeVar

from beliefdrift.data.question import LETTERS, MCQuestion
from beliefdrift.errors import first_line, not_utf8, too_many_digits

PathLike = str | os.PathLike[str]
Record = dict[str, Any]


class DataError(ValueError):
    """A benchmark file (or hub record) that does not have the promised layout."""


@dataclass(frozen=True)
class MathProblem:
    """A free-form math word problem (GSM8K): `solution` is the full reference text, `answer` its result."""

    id: str
    question: str
    solution: str
    answer: int
    source: str = ""


class _HasId(Protocol):
    @property
    def id(self) -> str: ...


_T = TypeVar("_T", bound=_HasId)


#: A JSON escape of a surrogate code point (\uD800-\uDFFF), one half of a pair.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def read_jsonl(path: PathLike) -> Iterator[tuple[int, Record]]:
    """Yield (line number, object) for each non-blank line; bad JSON, a non-object or a string that is not Unicode
    raises `DataError`."""
    with open(path, "rb") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line.strip())
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{line_no}: bad JSON: {e.msg} (column {e.colno})") from None
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{line_no}: bad JSON: not UTF-8 ({e.reason})") from None
            except RecursionError:
                raise DataError(f"{path}:{line_no}: bad JSON: nested too deeply") from None
            except ValueError:  # an integer longer than Python converts
                raise DataError(f"{path}:{line_no}: bad JSON: {too_many_digits()}") from None
            if not isinstance(record, dict):
                raise DataError(f"{path}:{line_no}: expected a JSON object, got {type(record).__name__}")
            if _SURROGATE_ESCAPE.search(line):  # "\ud83d" without its pair is valid JSON but no Unicode character
                try:
                    json.dumps(record, ensure_ascii=False).encode("utf-8")
                except UnicodeEncodeError as e:
                    raise DataError(f"{path}:{line_no}: bad JSON: a string holds {e.object[e.start:e.end]!r}, half "
                                    "of a surrogate pair (not a Unicode character)") from None
            yield line_no, record


def read_text(path: PathLike) -> str:
    """The text of a UTF-8 file (a leading byte-order mark dropped); other bytes raise `DataError` naming the line."""
    try:
        return Path(path).read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DataError(not_utf8(str(path), e)) from None


def _read_csv(path: PathLike) -> Iterator[tuple[int, list[str]]]:
    """Yield (first line number, cells) for each non-blank CSV row (quoted cells may span lines)."""
    reader = csv.reader(io.StringIO(read_text(path), newline=""), strict=True)
    start = 1
    try:
        for row in reader:
            if row and (len(row) > 1 or row[0].strip()):
                yield start, row
            start = reader.line_num + 1
    except csv.Error as e:
        raise DataError(f"{path}:{start}: bad CSV: {e}") from None


def require(record: Record, key: str, where: str, kind: type, *, prefix: str = "") -> Any:
    """`record[key]` checked to be a `kind`; a dotted key ("question.stem") walks nested objects."""
    value: Any = record
    walked = prefix
    for part in key.split("."):
        if not isinstance(value, dict):
            raise DataError(f"{where}: key {walked!r} should be an object, got {type(value).__name__}")
        walked = f"{walked}.{part}" if walked else part
        if part not in value:
            raise DataError(f"{where}: missing key {walked!r}")
        value = value[part]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise DataError(f"{where}: key {walked!r} should be {kind.__name__}, got {type(value).__name__}")
    return value


def _question(
    where: str,
    qid: str,
    stem: str,
    texts: Sequence[str],
    answer: str | int,
    labels: Sequence[str] | None = None,
) -> MCQuestion:
    """Validate one question and relabel its options A, B, … in order.

    `answer` is either one of `labels` (default: the letters) or a 0-based option index.
    """
    if not stem.strip():
        raise DataError(f"{where}: blank stem")
    if not texts:
        raise DataError(f"{where}: empty choices list")
    if len(texts) < 2:
        raise DataError(f"{where}: only {len(texts)} choice; need at least 2")
    if len(texts) > len(LETTERS):
        raise DataError(f"{where}: {len(texts)} choices; at most {len(LETTERS)} are supported (labels A-Z)")
    letters = LETTERS[: len(texts)]
    labels = letters if labels is None else tuple(labels)
    if len(set(labels)) != len(labels):
        raise DataError(f"{where}: duplicate choice labels {', '.join(labels)}")
    if isinstance(answer, int):
        if not 0 <= answer < len(texts):
            raise DataError(f"{where}: answer index {answer} out of range for {len(texts)} choices")
        index = answer
    elif answer in labels:
        index = labels.index(answer)
    else:
        raise DataError(f"{where}: unknown answer label {answer!r} (choices are {', '.join(labels)})")
    return MCQuestion(
        id=qid,
        stem=stem.strip(),
        choices=tuple(t.strip() for t in texts),
        labels=letters,
        answer=letters[index],
        source=where,
    )


def _unique(items: Iterable[tuple[int, _T]], origin: str) -> list[_T]:
    """Collect (line, item) pairs; a repeated id raises `DataError` at its second line."""
    first_line: dict[str, int] = {}
    out: list[_T] = []
    for line, item in items:
        if item.id in first_line:
            first = first_line[item.id]
            raise DataError(f"{origin}:{line}: duplicate id {item.id!r} (first on line {first})")
        first_line[item.id] = line
        out.append(item)
    return out


def _string_list(record: Record, key: str, where: str) -> list[str]:
    values = require(record, key, where, list)
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise DataError(f"{where}: {key}[{i}] should be str, got {type(value).__name__}")
    return values


def _one_label_each(labels: Sequence[str], texts: Sequence[str], where: str) -> None:
    """A record's option labels and texts pair up one to one."""
    if len(labels) != len(texts):
        raise DataError(f"{where}: {len(labels)} choice labels but {len(texts)} choice texts")


# ---- one record → one item, shared by the file loaders and the hub fallback -------------------------


def _labelled_record(record: Record, where: str, line: int) -> MCQuestion:
    """CSQA / ARC layout: `id`, `answerKey`, `question{stem, choices[{label, text}]}`."""
    labels: list[str] = []
    texts: list[str] = []
    for i, choice in enumerate(require(record, "question.choices", where, list)):
        prefix = f"question.choices[{i}]"
        if not isinstance(choice, dict):
            raise DataError(f"{where}: {prefix} should be an object, got {type(choice).__name__}")
        labels.append(require(choice, "label", where, str, prefix=prefix))
        texts.append(require(choice, "text", where, str, prefix=prefix))
    return _question(
        where,
        require(record, "id", where, str),
        require(record, "question.stem", where, str),
        texts,
        require(record, "answerKey", where, str),
        labels,
    )


def _hub_labelled_record(record: Record, where: str, line: int) -> MCQuestion:
    """CSQA / ARC as on the Hugging Face hub: `id`, `question` (the stem), `choices{label[], text[]}`, `answerKey`."""
    labels = _string_list(record, "choices.label", where)
    texts = _string_list(record, "choices.text", where)
    _one_label_each(labels, texts, where)
    return _question(
        where,
        require(record, "id", where, str),
        require(record, "question", where, str),
        texts,
        require(record, "answerKey", where, str),
        labels,
    )


def _tinymmlu_record(record: Record, where: str, line: int) -> MCQuestion:
    """tinyMMLU layout: `question`, `choices[...]`, `answer` (0-based index); other keys ignored."""
    return _question(
        where,
        f"tinymmlu-{line}",
        require(record, "question", where, str),
        _string_list(record, "choices", where),
        require(record, "answer", where, int),
    )


_FINAL_ANSWER = re.compile(r"-?\d+(?:,\d+)*")


def _gsm8k_record(record: Record, where: str, line: int) -> MathProblem:
    """GSM8K layout: `question`, `answer` = solution text ending in `#### <integer>`."""
    question = require(record, "question", where, str)
    solution = require(record, "answer", where, str)
    if not question.strip():
        raise DataError(f"{where}: blank question")
    _, marker, tail = solution.rpartition("####")
    if not marker:
        raise DataError(f"{where}: solution has no '#### <answer>' line")
    final = tail.strip()
    if not _FINAL_ANSWER.fullmatch(final):
        raise DataError(f"{where}: final answer {final!r} is not an integer")
    try:
        answer = int(final.replace(",", ""))
    except ValueError:
        raise DataError(f"{where}: final answer: {too_many_digits()}") from None
    return MathProblem(f"gsm8k-{line}", question.strip(), solution, answer, where)


_RECORD_PARSERS: dict[str, Callable[[Record, str, int], Any]] = {
    "csqa": _labelled_record,
    "arc": _labelled_record,
    "arc-hub": _hub_labelled_record,
    "tinymmlu": _tinymmlu_record,
    "gsm8k": _gsm8k_record,
}
#: The record layouts `record_layout` tells apart, as an error message's "expected …".
RECORD_LAYOUTS = ("the CSQA/ARC layout (id, answerKey, question.stem, question.choices[label, text]) or as on the "
                  "Hugging Face hub (id, question, choices.label, choices.text, answerKey), the tinyMMLU/MMLU layout "
                  "(question, choices, answer index) or the GSM8K layout (question, answer ending '#### <n>')")


def record_layout(record: Record) -> str | None:
    """The layout of one record (a .jsonl line, a .parquet row): "arc" (CSQA/ARC), "arc-hub" (CSQA/ARC as on the
    hub), "tinymmlu" (MMLU-style), "gsm8k"; None when it has none of them."""
    if isinstance(record.get("question"), dict):
        return "arc"
    if isinstance(record.get("choices"), dict):
        return "arc-hub"
    if "choices" in record:
        return "tinymmlu"
    if "####" in str(record.get("answer", "")):
        return "gsm8k"
    return None


def questions_from_records(records: Iterable[Record], fmt: str, origin: str) -> list[Any]:
    """Parse in-memory records laid out like the `fmt` jsonl files ("csqa", "arc", "arc-hub", "tinymmlu",
    "gsm8k"); record i (1-based) is reported as "origin:i"."""
    parse = _RECORD_PARSERS[fmt]
    return _unique(((i, parse(r, f"{origin}:{i}", i)) for i, r in enumerate(records, 1)), origin)


def _load_jsonl(path: PathLike, parse: Callable[[Record, str, int], _T]) -> list[_T]:
    return _unique(((line, parse(r, f"{path}:{line}", line)) for line, r in read_jsonl(path)), str(path))


def load_jsonl(path: PathLike, fmt: str) -> list[Any]:
    """A .jsonl file of records in layout `fmt` (a key of `record_layout`'s answers, or "csqa")."""
    return _load_jsonl(path, _RECORD_PARSERS[fmt])


def read_parquet(path: PathLike) -> list[Record]:
    """The rows of a .parquet file as records: nested columns become objects and lists, as in JSON."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: not a readable parquet file ({first_line(e)})") from None


def _parquet_layout(path: PathLike, records: Sequence[Record]) -> str:
    """The layout of a .parquet file's rows, told by the first one."""
    if not records:
        raise DataError(f"{path}: no rows in the file; expected a .parquet file in {RECORD_LAYOUTS}")
    layout = record_layout(records[0])
    if layout is None:
        columns = ", ".join(map(repr, records[0])) or "none"
        raise DataError(f"{path}: columns {columns} match no known layout; expected a .parquet file in "
                        f"{RECORD_LAYOUTS}")
    return layout


def parquet_layout(path: PathLike) -> str:
    """The layout of a .parquet file (see `record_layout`)."""
    return _parquet_layout(path, read_parquet(path))


def load_parquet(path: PathLike, fmt: str | None = None) -> list[Any]:
    """A .parquet file whose rows are records in one layout (`fmt`, default: the first row's); errors name the row as
    "file:row"."""
    records = read_parquet(path)
    fmt = fmt or _parquet_layout(path, records)
    if fmt not in _RECORD_PARSERS:
        raise DataError(f"{path}: format {fmt!r} does not apply to a .parquet file; expected one of "
                        f"{', '.join(_RECORD_PARSERS)}")
    return questions_from_records(records, fmt, str(path))


# ---- file loaders -------------------------------------------------------------------------------------


def load_csqa(path: PathLike) -> list[MCQuestion]:
    """CommonsenseQA jsonl (`id`, `answerKey`, `question{stem, choices[{label, text}]}`)."""
    return _load_jsonl(path, _labelled_record)


def load_arc(path: PathLike) -> list[MCQuestion]:
    """AI2-ARC jsonl (CSQA layout); 3–5 options, digit labels "1"–"4" relabelled A, B, … in order."""
    return _load_jsonl(path, _labelled_record)


def load_tinymmlu(path: PathLike) -> list[MCQuestion]:
    """tinyMMLU jsonl (`question`, `choices`, integer `answer`); ids are `tinymmlu-<line>`."""
    return _load_jsonl(path, _tinymmlu_record)


def load_gsm8k(path: PathLike) -> list[MathProblem]:
    """GSM8K jsonl (`question`, `answer` ending `#### <integer>`); ids are `gsm8k-<line>`."""
    return _load_jsonl(path, _gsm8k_record)


def load_mmlu_csv(path: PathLike) -> list[MCQuestion]:
    """One original MMLU csv (no header: question, A, B, C, D, answer letter); ids `<file stem>-<row>`."""
    stem = Path(path).stem

    def parse(row: list[str], where: str, number: int) -> MCQuestion:
        if len(row) != 6:
            raise DataError(f"{where}: expected 6 columns (question, A, B, C, D, answer), got {len(row)}")
        return _question(where, f"{stem}-{number}", row[0], row[1:5], row[5].strip())

    rows = enumerate(_read_csv(path), 1)
    return _unique(((line, parse(row, f"{path}:{line}", number)) for number, (line, row) in rows), str(path))


GPQA_COLUMNS = (
    "Question",
    "Correct Answer",
    "Incorrect Answer 1",
    "Incorrect Answer 2",
    "Incorrect Answer 3",
)


def load_gpqa_csv(path: PathLike, seed: int = 0) -> list[MCQuestion]:
    """A user-supplied GPQA csv with a header row containing `GPQA_COLUMNS` (and optionally `Record ID`).

    Options are shuffled with `random.Random(f"{seed}:{id}")`, so each question's order depends only
    on the seed and its id (`Record ID`, else `<file stem>-<row>`), not on where it sits in the file.
    """
    rows = _read_csv(path)
    header_line, header = next(rows, (1, []))
    header = [name.strip() for name in header]
    missing = [name for name in GPQA_COLUMNS if name not in header]
    if missing:
        raise DataError(f"{path}:{header_line}: missing column(s) {', '.join(map(repr, missing))}")
    stem = Path(path).stem

    def parse(row: list[str], where: str, number: int) -> MCQuestion:
        if len(row) != len(header):
            raise DataError(f"{where}: {len(row)} fields but the header has {len(header)}")
        cell = dict(zip(header, row, strict=True))
        qid = cell.get("Record ID", "").strip() or f"{stem}-{number}"
        options = [cell[name] for name in GPQA_COLUMNS[1:]]
        order = list(range(len(options)))
        random.Random(f"{seed}:{qid}").shuffle(order)
        return _question(where, qid, cell["Question"], [options[i] for i in order], order.index(0))

    numbered = enumerate(rows, 1)
    return _unique(
        ((line, parse(row, f"{path}:{line}", number)) for number, (line, row) in numbered), str(path)
    )


def load_demo() -> list[MCQuestion]:
    """The bundled demo set: easy general-knowledge questions written for this project."""
    with resources.as_file(resources.files("beliefdrift.data") / "demo.jsonl") as path:
        return load_csqa(path)
