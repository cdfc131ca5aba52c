"""Hugging Face datasets as benchmarks (`--dataset hf:…`, `beliefdrift.data.hf`), offline: `save_to_disk` folders
and local data files, in a known layout or mapped with `--fields`."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from beliefdrift.config.evaluate import EvalConfig
from beliefdrift.data import DataError, load_dataset
from beliefdrift.data.hf import parse_fields
from beliefdrift.runs.identity import run_identity

ROWS = [{"uid": f"q{i}", "prompt": f"question {i}?", "opts": ["red", "green", "blue"], "gold": i % 3,
         "key": "AB"[i % 2], "A": "one", "B": "two"} for i in range(4)]
# A core dependency, but a bare torch image (the GPU machines) may lack it: skip rather than fail collection.
datasets = pytest.importorskip("datasets")

MAPPED = "question=prompt,choices=opts,answer=gold,id=uid"


def saved(tmp_path: Path, **splits: list[dict]) -> str:
    folder = tmp_path / "saved"
    datasets.DatasetDict({name: datasets.Dataset.from_list(rows) for name, rows in splits.items()}).save_to_disk(
        str(folder))
    return f"hf:{folder}"


def test_save_to_disk_folder_with_a_field_mapping_and_splits(tmp_path: Path) -> None:
    spec = saved(tmp_path, train=ROWS, test=ROWS[:2])
    questions = load_dataset(spec, fields=MAPPED)  # default split: test
    assert [(q.id, q.stem, q.choices, q.answer) for q in questions] == [
        ("q0", "question 0?", ("red", "green", "blue"), "A"), ("q1", "question 1?", ("red", "green", "blue"), "B")]
    assert questions[0].source == f"{spec}/test:1"
    assert len(load_dataset(spec, split="train", fields=MAPPED, n=3)) == 3
    relative = os.path.relpath(spec.removeprefix("hf:"))
    identity = run_identity("evaluate", EvalConfig(dataset=f"hf:{relative}", fields=MAPPED), questions)
    assert identity["dataset"] == spec and identity["fields"] == MAPPED  # the same run from any directory
    with pytest.raises(DataError, match=re.escape(f"{spec}: unknown split 'dev'; expected --split train or test")):
        load_dataset(spec, split="dev", fields=MAPPED)


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_data_files_with_columns_joined_and_a_letter_answer(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"rows{suffix}"
    table = datasets.Dataset.from_list([{k: v for k, v in row.items() if k != "opts"} for row in ROWS])
    {".parquet": table.to_parquet, ".csv": table.to_csv, ".jsonl": table.to_json}[suffix](str(path))
    questions = load_dataset(f"hf:{path}", fields="question=prompt,choices=A+B,answer=key")
    assert [(q.id, q.choices, q.answer) for q in questions][:2] == [("row-1", ("one", "two"), "A"),
                                                                    ("row-2", ("one", "two"), "B")]


def test_a_yaml_mapping_labels_and_a_known_layout_need_no_flags(tmp_path: Path) -> None:
    hub_arc = [{"id": "a1", "question": "Which?", "choices": {"text": ["x", "y"], "label": ["1", "2"]},
                "answerKey": "2"}]
    spec = saved(tmp_path, validation=hub_arc)
    (question,) = load_dataset(spec)  # the ARC layout as on the hub: no mapping needed
    assert (question.id, question.choices, question.answer) == ("a1", ("x", "y"), "B")
    mapping = tmp_path / "fields.yaml"
    mapping.write_text("question: question\nchoices: choices.text\nlabels: choices.label\nanswer: answerKey\n")
    (mapped,) = load_dataset(spec, fields=str(mapping))
    assert (mapped.id, mapped.choices, mapped.answer) == ("row-1", ("x", "y"), "B")


BAD = {
    "no mapping for other columns": (None, "columns 'uid', 'prompt', 'opts', 'gold', 'key', 'A', 'B' match no known "
                                           "layout"),
    "missing key": ("question=prompt,choices=opts", "--fields question=prompt,choices=opts: missing answer"),
    "unknown key": ("question=prompt,choices=opts,answer=gold,stem=x", "unknown key(s) stem"),
    "not key=value": ("question", "expected key=column pairs"),
    "missing column": ("question=prompt,choices=opts,answer=nope", "/test:1: missing key 'nope'"),
    "answer out of range": ("question=prompt,choices=A+B,answer=gold", "/test:3: answer index 2 out of range"),
    "unknown answer": ("question=prompt,choices=opts,answer=uid", "answer 'uid' = 'q0' is neither an option index"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_mappings_are_one_line_naming_dataset_row_and_field(case: str, tmp_path: Path) -> None:
    fields, message = BAD[case]
    with pytest.raises(DataError, match=re.escape(message)):
        load_dataset(saved(tmp_path, test=ROWS), fields=fields)


def test_fields_only_apply_to_hf_datasets_and_the_hub_offline_is_one_line() -> None:
    with pytest.raises(DataError, match="--fields applies to a Hugging Face dataset"):
        load_dataset("demo", fields=MAPPED)
    with pytest.raises(DataError, match=r"^hf:nobody/nothing: could not load the dataset \("):
        load_dataset("hf:nobody/nothing")
    assert parse_fields(" question = q , choices = c , answer = a ") == {"question": "q", "choices": "c",
                                                                         "answer": "a"}
