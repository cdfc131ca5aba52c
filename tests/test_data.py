"""Benchmark loaders, the dataset registry and the bundled demo set."""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beliefdrift.data import (
    DATASETS,
    LETTERS,
    DataError,
    MathProblem,
    MCQuestion,
    detect_format,
    load_arc,
    load_csqa,
    load_dataset,
    load_demo,
    load_gpqa_csv,
    load_gsm8k,
    load_mmlu_csv,
    load_tinymmlu,
    subsample,
)
from beliefdrift.prompts import load_template

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "data"
DATA = Path(
    os.environ.get("BELIEFDRIFT_DATA") or Path(__file__).resolve().parents[1].parent / "shared" / "data"
)
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"benchmark data not found at {DATA}")


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Never wait on the hub in tests."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _check_well_formed(questions: list[MCQuestion]) -> None:
    assert len({q.id for q in questions}) == len(questions)
    for q in questions:
        assert q.labels == LETTERS[: len(q.choices)]
        assert q.answer in q.labels
        assert q.stem and all(q.choices)


# ---- the real benchmark files -------------------------------------------------------------------


@needs_data
@pytest.mark.parametrize(("split", "count"), [("train", 9741), ("dev", 1221)])
def test_csqa_real(split: str, count: int) -> None:
    questions = load_dataset("csqa", split, data_dir=DATA)
    assert len(questions) == count
    _check_well_formed(questions)
    assert {q.labels for q in questions} == {tuple("ABCDE")}
    first = questions[0]
    assert first.source.endswith(f"{split}_rand_split.jsonl:1")


@needs_data
@pytest.mark.parametrize(("split", "count"), [("train", 1119), ("dev", 299)])
def test_arc_real(split: str, count: int) -> None:
    path = DATA / "arc_challenge" / f"ARC-Challenge-{split.title()}.jsonl"
    questions = load_arc(path)
    assert len(questions) == count
    _check_well_formed(questions)
    assert {3, 4, 5} <= {q.num_choices for q in questions}


@needs_data
def test_arc_digit_labels_point_at_same_text() -> None:
    path = DATA / "arc_challenge" / "ARC-Challenge-Dev.jsonl"
    raw = {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}
    digit_ids = [i for i, r in raw.items() if r["question"]["choices"][0]["label"] == "1"]
    assert digit_ids  # the quirk is present in the file
    by_id = {q.id: q for q in load_arc(path)}
    for qid in digit_ids:
        record, q = raw[qid], by_id[qid]
        choices = record["question"]["choices"]
        answer_text = next(c["text"] for c in choices if c["label"] == record["answerKey"])
        assert q.choices[q.answer_index] == answer_text
        assert q.labels == LETTERS[: len(choices)]


@needs_data
def test_tinymmlu_real() -> None:
    questions = load_dataset("tinymmlu", data_dir=DATA)
    assert len(questions) == 100
    _check_well_formed(questions)
    assert all(q.num_choices == 4 for q in questions)
    assert questions[0].id == "tinymmlu-1"
    assert questions[0].answer == "D"  # the first record has answer 3
    assert len({q.answer for q in questions}) == 4


@needs_data
def test_gsm8k_real() -> None:
    problems = load_dataset("gsm8k", data_dir=DATA)
    assert len(problems) == 1319
    assert all(isinstance(p, MathProblem) for p in problems)
    assert problems[0].answer == 18
    for p in problems:
        final = p.solution.rpartition("####")[2].strip()
        assert p.answer == int(final.replace(",", ""))
    assert any("," in p.solution.rpartition("####")[2] for p in problems)
    assert any(p.answer >= 1_000_000 for p in problems)
    assert any(p.answer < 0 for p in problems)


@needs_data
def test_default_data_dir_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BELIEFDRIFT_DATA", str(DATA))
    assert len(load_dataset("arc")) == 299


@needs_data
def test_path_as_name_detects_format() -> None:
    assert detect_format(DATA / "tinymmlu" / "tiny_mmlu.jsonl") == "tinymmlu"
    assert detect_format(DATA / "gsm8k" / "test.jsonl") == "gsm8k"
    assert len(load_dataset(str(DATA / "commonsense_qa" / "dev_rand_split.jsonl"))) == 1221


# ---- small fixtures: parsing and errors -----------------------------------------------------------


def test_arc_fixture_relabels_mixed_labels() -> None:
    questions = load_arc(FIXTURES / "arc_mixed.jsonl")
    assert [(q.labels, q.answer, q.choices[q.answer_index]) for q in questions] == [
        (tuple("ABCD"), "C", "oxygen"),
        (tuple("ABC"), "B", "whale"),
        (tuple("ABCDE"), "E", "balance"),
    ]
    assert [q.source.rsplit(":", 1)[1] for q in questions] == ["1", "3", "4"]  # blank line 2 skipped


def test_gsm8k_fixture_integers() -> None:
    problems = load_gsm8k(FIXTURES / "gsm8k_ok.jsonl")
    assert [(p.id, p.answer) for p in problems] == [("gsm8k-1", 1000), ("gsm8k-2", -3), ("gsm8k-4", 42)]


def test_mmlu_csv() -> None:
    questions = load_mmlu_csv(FIXTURES / "mmlu" / "toy_science_test.csv")
    assert [q.id for q in questions] == [f"toy_science_test-{i}" for i in (1, 2, 3)]
    assert questions[1].stem == "What is H2O, commonly?"
    assert questions[1].choices[questions[1].answer_index] == "water"
    assert len(load_dataset("mmlu", data_dir=FIXTURES)) == 5
    math = load_dataset("mmlu", "toy_math_test", data_dir=FIXTURES)
    assert [q.source.rsplit(":", 1)[1] for q in math] == ["1", "3"]


@pytest.mark.parametrize(
    ("loader", "name", "line", "problem"),
    [
        (load_csqa, "bad_json.jsonl", 4, "bad JSON"),
        (load_csqa, "missing_answer_key.jsonl", 2, "missing key 'answerKey'"),
        (load_arc, "unknown_label.jsonl", 3, "unknown answer label 'F'"),
        (load_csqa, "empty_choices.jsonl", 2, "empty choices list"),
        (load_csqa, "one_choice.jsonl", 1, "need at least 2"),
        (load_csqa, "duplicate_ids.jsonl", 3, "duplicate id 'q1' (first on line 1)"),
        (load_csqa, "blank_stem.jsonl", 2, "blank stem"),
        (load_tinymmlu, "tinymmlu_out_of_range.jsonl", 2, "answer index 4 out of range"),
        (load_gsm8k, "gsm8k_no_marker.jsonl", 3, "no '#### <answer>'"),
        (load_gsm8k, "gsm8k_not_integer.jsonl", 1, "not an integer"),
        (load_gpqa_csv, "gpqa_missing_column.csv", 1, "missing column(s) 'Incorrect Answer 3'"),
        (load_mmlu_csv, "mmlu_bad_answer.csv", 2, "unknown answer label 'Z'"),
    ],
)
def test_malformed_files(loader, name: str, line: int, problem: str) -> None:
    with pytest.raises(DataError, match=rf"{re.escape(name)}:{line}: .*{re.escape(problem)}"):
        loader(FIXTURES / name)


def test_json_nested_too_deeply_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text('{"question": "x?", "choices": ["a", "b"], "answer": 1}\n' + "[" * 100_000 + "\n")
    with pytest.raises(DataError, match=r"deep\.jsonl:2: bad JSON: nested too deeply"):
        load_dataset(str(path))


def test_json_half_a_surrogate_pair_names_file_and_line(tmp_path: Path) -> None:
    """An escape of half a surrogate pair (a truncated emoji) is valid JSON but no text: before, the tokenizer raised a
    TypeError traceback, or the store an encoding error naming nothing."""
    path = tmp_path / "half.jsonl"
    path.write_text('{"question": "x?", "choices": ["a", "b"], "answer": 1}\n'
                    '{"question": "why \\ud83d?", "choices": ["a", "b"], "answer": 1}\n')
    with pytest.raises(DataError, match=r"half\.jsonl:2: bad JSON: a string holds '\\ud83d', half of a surrogate"):
        load_dataset(str(path))


def without_source(items: list) -> list:
    return [dataclasses.replace(item, source="") for item in items]


def write_parquet(path: Path, records: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(records), path)
    return path


def hub_layout(record: dict) -> dict:
    """A CSQA/ARC jsonl record as the hub's parquet files hold it (flat stem, choices{label[], text[]})."""
    choices = record["question"]["choices"]
    return {"id": record["id"], "question": record["question"]["stem"], "question_concept": "x",
            "choices": {"label": [c["label"] for c in choices], "text": [c["text"] for c in choices]},
            "answerKey": record["answerKey"]}


def arc_records() -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / "arc_mixed.jsonl").read_text().splitlines() if line.strip()]


def test_parquet_rows_load_as_the_same_records_in_jsonl(tmp_path: Path) -> None:
    records = arc_records()
    jsonl = load_dataset(str(FIXTURES / "arc_mixed.jsonl"))
    nested = write_parquet(tmp_path / "csqa.parquet", records)  # the jsonl layout, nested columns
    flat = write_parquet(tmp_path / "hub.parquet", [hub_layout(r) for r in records])
    assert (detect_format(nested), detect_format(flat)) == ("arc", "arc-hub")
    for path in (nested, flat):
        questions = load_dataset(str(path))
        assert len(questions) == len(jsonl) >= 2
        assert without_source(questions) == without_source(jsonl)
        assert [q.source for q in questions] == [f"{path}:{i}" for i in range(1, len(jsonl) + 1)]
    tinymmlu = [{"question": "2 + 2?", "choices": ["3", "4"], "answer": 1, "subject": "math"}]
    assert [(q.stem, q.answer) for q in load_dataset(str(write_parquet(tmp_path / "m.parquet", tinymmlu)))] == [
        ("2 + 2?", "B")]


def test_parquet_errors_name_the_file_and_row(tmp_path: Path) -> None:
    records = [hub_layout(record) for record in arc_records()]
    records[1]["answerKey"] = "Q"
    with pytest.raises(DataError, match=r"bad\.parquet:2: unknown answer label 'Q'"):
        load_dataset(str(write_parquet(tmp_path / "bad.parquet", records)))
    with pytest.raises(DataError, match=r"other\.parquet: columns 'text', 'label' match no known layout; expected a "
                                        r"\.parquet file in the CSQA/ARC layout"):
        load_dataset(str(write_parquet(tmp_path / "other.parquet", [{"text": "hi", "label": 1}])))
    (tmp_path / "garbage.parquet").write_bytes(b"PAR1" + bytes(64))
    with pytest.raises(DataError, match=r"garbage\.parquet: not a readable parquet file \("):
        load_dataset(str(tmp_path / "garbage.parquet"))


def test_gpqa_shuffle_reproducible_and_correct(tmp_path: Path) -> None:
    path = FIXTURES / "gpqa" / "gpqa_diamond.csv"
    correct = {"rec-001": "Na", "rec-002": "kinetic energy", "rec-003": "mitochondrion", "rec-004": "6"}
    questions = load_gpqa_csv(path)
    assert [q.id for q in questions] == list(correct)
    assert questions[1].stem.endswith("besides momentum?")
    for q in questions:
        assert q.choices[q.answer_index] == correct[q.id]
        assert q.num_choices == 4
    assert load_gpqa_csv(path) == questions
    assert load_dataset("gpqa", data_dir=FIXTURES) == questions
    # independent of file order: reverse the data rows
    header, *rows = path.read_text().split("\nrec-")
    reversed_csv = tmp_path / "reversed.csv"
    reversed_csv.write_text("\nrec-".join([header, *reversed([r.rstrip("\n") for r in rows])]) + "\n")
    by_id = {q.id: q.choices for q in load_gpqa_csv(reversed_csv)}
    assert by_id == {q.id: q.choices for q in questions}
    # a different seed reorders some options
    assert [q.choices for q in load_gpqa_csv(path, seed=1)] != [q.choices for q in questions]


def test_gpqa_without_record_ids() -> None:
    questions = load_gpqa_csv(FIXTURES / "gpqa_no_ids.csv")
    assert [q.id for q in questions] == ["gpqa_no_ids-1", "gpqa_no_ids-2"]
    assert questions[0].choices[questions[0].answer_index] == "6"


# ---- registry -----------------------------------------------------------------------------------


_LABELLED = ('{"id": "q1", "answerKey": "B", "question": {"stem": "Which is a colour?", "choices": '
             '[{"label": "A", "text": "seven"}, {"label": "B", "text": "blue"}, {"label": "C", "text": "loud"}]}}\n')
#: Each benchmark's default file in a data directory, as docs/data-formats.md lays it out, and its content
#: (a file of its format); (stem, correct choice) of its first question. A new dataset must be added here.
LAYOUTS = {
    "csqa": ("commonsense_qa/dev_rand_split.jsonl", _LABELLED, ("Which is a colour?", "blue")),
    "arc": ("arc_challenge/ARC-Challenge-Dev.jsonl", _LABELLED, ("Which is a colour?", "blue")),
    "tinymmlu": ("tinymmlu/tiny_mmlu.jsonl", '{"question": "2 + 2?", "choices": ["3", "4", "5", "6"], "answer": 1}\n',
                 ("2 + 2?", "4")),
    "mmlu": ("mmlu/toy_test.csv", "What is 7 * 6?,42,36,48,56,A\n", ("What is 7 * 6?", "42")),
    "gpqa": ("gpqa/gpqa_diamond.csv", (FIXTURES / "gpqa" / "gpqa_diamond.csv").read_text(),
             ("What is the chemical symbol for table salt's metal?", "Na")),
    "gsm8k": ("gsm8k/test.jsonl", (FIXTURES / "gsm8k_ok.jsonl").read_text(), None),
}


@pytest.mark.parametrize("name", DATASETS)
def test_every_registered_dataset_loads_from_its_layout(name: str, tmp_path: Path) -> None:
    """Each name in the registry reads its documented file under the data directory, and names it when missing."""
    if name == "demo":
        assert len(load_dataset("demo", data_dir=tmp_path)) == 52
        return
    relative, content, first = LAYOUTS[name]
    with pytest.raises(DataError, match=re.escape(str(tmp_path / relative.split("/")[0]))):
        load_dataset(name, data_dir=tmp_path)
    (tmp_path / relative).parent.mkdir(parents=True)
    (tmp_path / relative).write_text(content)
    items = load_dataset(name, data_dir=tmp_path)
    if first is None:
        assert [p.answer for p in items] == [1000, -3, 42]
    else:
        assert (items[0].stem, items[0].choices[items[0].answer_index]) == first
    assert all(item.source.startswith(str(tmp_path / relative)) for item in items)


def test_the_registry_is_one_entry_per_dataset(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each name maps to a loader and the kind of item it gives; a new entry is all `load_dataset` needs, and an
    unknown name suggests the closest registered one."""
    from beliefdrift.data.registry import KINDS, Dataset

    assert list(DATASETS) == ["demo", "csqa", "arc", "tinymmlu", "mmlu", "gpqa", "gsm8k"]  # the order errors list
    for name, dataset in DATASETS.items():
        assert isinstance(dataset, Dataset) and dataset.name == name and dataset.kind in KINDS and dataset.description
        assert name == "demo" or name in LAYOUTS  # every dataset has its test layout below
    question = MCQuestion(id="t1", stem="2 + 2?", choices=("4", "5"), labels=("A", "B"), answer="A")
    monkeypatch.setitem(DATASETS, "toy", Dataset("toy", lambda split, root, seed: [question] * 3, MCQuestion, "toy"))
    assert load_dataset("toy", n=2) == [question, question]
    with pytest.raises(DataError, match="did you mean 'toy'"):
        load_dataset("tyo")


def test_a_home_relative_path_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`~/…` as a data file or data directory (from a YAML file, where no shell expands it) is under the home
    directory (a --template file too): before, it was looked for in a directory named `~`, and the error named a
    path that exists."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "tinymmlu").mkdir()
    (tmp_path / "tinymmlu" / "tiny_mmlu.jsonl").write_text(LAYOUTS["tinymmlu"][1])
    assert len(load_dataset("~/tinymmlu/tiny_mmlu.jsonl")) == len(load_dataset("tinymmlu", data_dir="~")) == 1
    (tmp_path / "t.txt").write_text("{question}\n")
    assert load_template("~/t.txt") == "{question}\n"


def test_missing_file_names_path_and_hint(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"commonsense_qa/dev_rand_split\.jsonl.*BELIEFDRIFT_DATA"):
        load_dataset("csqa", data_dir=tmp_path)
    with pytest.raises(DataError, match=r"gpqa_diamond\.csv.*--data-dir"):
        load_dataset("gpqa", data_dir=tmp_path)
    with pytest.raises(DataError, match="unknown split 'test'"):
        load_dataset("csqa", "test", data_dir=tmp_path)
    with pytest.raises(DataError, match="unknown dataset"):
        load_dataset("nope", data_dir=tmp_path)


def test_hub_fallback_converts_records(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    rows = [
        {
            "id": "h1",
            "question": "Which is wet?",
            "question_concept": "x",
            "choices": {"label": ["1", "2"], "text": ["sand", "water"]},
            "answerKey": "2",
        }
    ]
    calls = []

    def fake_load_dataset(repo: str, config: str | None, split: str) -> list[dict]:
        calls.append((repo, config, split))
        return rows

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    [q] = load_dataset("arc", data_dir=tmp_path)
    assert calls == [("allenai/ai2_arc", "ARC-Challenge", "validation")]
    assert (q.id, q.labels, q.answer) == ("h1", ("A", "B"), "B")
    assert q.source == "hf:allenai/ai2_arc/ARC-Challenge/validation:1"

    def failing_load_dataset(*args: object, **kwargs: object) -> None:
        raise ConnectionError("no network\nretrying...")

    monkeypatch.setattr(datasets, "load_dataset", failing_load_dataset)
    with pytest.raises(DataError, match=r"hub fallback failed \(ConnectionError: no network\)"):
        load_dataset("gsm8k", data_dir=tmp_path)


def test_subsample_deterministic_and_ordered() -> None:
    items = list(range(200))
    a = subsample(items, 10, seed=0)
    assert a == subsample(items, 10, seed=0)
    assert a == sorted(a)
    assert a != subsample(items, 10, seed=1)
    assert subsample(items, 500, seed=0) == items
    demo = load_dataset("demo", n=8, seed=3)
    order = [q.id for q in load_demo()]
    assert [q.id for q in demo] == sorted((q.id for q in demo), key=order.index)
    assert [q.id for q in load_dataset("demo", n=8, seed=3)] == [q.id for q in demo]


# ---- demo set -----------------------------------------------------------------------------------


def test_demo_set() -> None:
    questions = load_demo()
    assert len(questions) >= 40
    _check_well_formed(questions)
    assert all(4 <= q.num_choices <= 5 for q in questions)
    positions = collections.Counter(q.answer for q in questions)
    assert set(positions) == set("ABCDE")
    assert max(positions.values()) - min(positions.values()) <= 3
    assert all(len(set(q.choices)) == q.num_choices for q in questions)


def test_a_bad_fields_file_is_one_error_naming_it(tmp_path: Path) -> None:
    """A `--fields` YAML file: not UTF-8, or keys that are not field names, is one error naming it."""
    from beliefdrift.data.hf import parse_fields

    path = tmp_path / "fields.yaml"
    path.write_bytes(b"question: q\nchoices: c\nanswer: a  # caf\xe9\n")
    with pytest.raises(ValueError, match=rf"^--fields {re.escape(str(path))}:3: not UTF-8 \(invalid continuation"):
        parse_fields(str(path))
    path.write_text("question: q\nchoices: c\nanswer: a\n1: x\n")
    with pytest.raises(DataError, match=rf"^--fields {re.escape(str(path))}: expected a mapping of question, "):
        parse_fields(str(path))


def test_a_hf_data_file_that_is_not_utf8_names_it(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"q": "caf\xe9?", "c": ["x", "y"], "a": 1}\n')
    with pytest.raises(DataError, match=rf"^hf:{re.escape(str(path))}/train: a text is not UTF-8 \(invalid "):
        load_dataset(f"hf:{path}", fields="question=q,choices=c,answer=a")


def test_hf_labels_column_of_another_length_is_refused(tmp_path: Path) -> None:
    """A --fields labels column must give each option one label (before, a shorter one was ignored)."""
    pytest.importorskip("datasets")
    path = tmp_path / "d.jsonl"
    path.write_text('{"q": "Which?", "c": ["x", "y", "z"], "l": ["A", "B"], "a": "A"}\n')
    with pytest.raises(DataError, match=r"/train:1: 2 choice labels but 3 choice texts"):
        load_dataset(f"hf:{path}", fields="question=q,choices=c,labels=l,answer=a")


def test_a_missing_lm_eval_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the lm-eval extra an lm-eval dataset is one error naming it (installed or not, this runs)."""
    monkeypatch.setitem(sys.modules, "lm_eval.tasks", None)
    with pytest.raises(DataError, match=re.escape("lm-eval tasks need the lm_eval package; pip install "
                                                  "'beliefdrift[lm-eval]'")):
        load_dataset("lm-eval:arc_challenge")
