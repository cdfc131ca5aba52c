"""lm-evaluation-harness tasks as datasets (`beliefdrift.data.lm_eval`), offline: task files of our own reading
local json/csv/parquet files, and lm-eval's real task files (ARC-Challenge, an MMLU subject, HellaSwag, Winogrande)
copied from the installed package with their dataset redirected to a local fixture in the task's own schema."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beliefdrift.cli.main import main
from beliefdrift.data import DataError, load_dataset
from beliefdrift.data.lm_eval import MULTIPLE_INPUT_STEM, load_task_questions
from beliefdrift.errors import UserError
from beliefdrift.report.runs import load_runs
from beliefdrift.runs.scoring import QualityControl

lm_eval_tasks = pytest.importorskip("lm_eval.tasks", reason="lm_eval is not installed: pip install "
                                                            "'beliefdrift[lm-eval]' (make setup installs it)")
TASKS = Path(lm_eval_tasks.__file__).parent
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def real_task(tmp_path: Path, folder: str, files: list[str], rows: list[dict]) -> Path:
    """lm-eval's own task files of `folder` copied into `tmp_path`, their dataset redirected to `rows` (a local json
    file as each split a task may name); returns the last of `files` (the task to load)."""
    data = write_jsonl(tmp_path / "data.jsonl", rows)
    local = "dataset_path: json\ndataset_kwargs:\n  data_files:" + "".join(
        f"\n    {split}: {data}" for split in ("train", "validation", "test", "dev"))
    for name in files:
        text = (TASKS / folder / name).read_text()
        if name.endswith(("yaml", "_yaml")):
            text = re.sub(r'^"?dataset_path"?:.*$', local, text, flags=re.MULTILINE)
            text = re.sub(r'^"?dataset_name"?:.*$', "dataset_name: null", text, flags=re.MULTILINE)
        (tmp_path / name).write_text(text)
    return tmp_path / files[-1]


def task_file(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"task: {name}\noutput_type: multiple_choice\ntest_split: test\n{body}")
    return path


def hub_arc(record: dict) -> dict:
    """An ARC record of our data directory (CSQA layout) in the hub's schema, which lm-eval's task reads."""
    choices = record["question"]["choices"]
    return {"id": record["id"], "question": record["question"]["stem"], "answerKey": record["answerKey"],
            "choices": {"text": [c["text"] for c in choices], "label": [c["label"] for c in choices]}}


@pytest.mark.skipif(not (DATA / "arc_challenge").is_dir(), reason=f"ARC data not found at {DATA}")
def test_arc_through_lm_eval_equals_our_loader(tmp_path: Path) -> None:
    """The same ARC-Challenge questions through our loader and through lm-eval's arc_challenge task: the same
    stems, options, order and answers (digit labels included)."""
    ours = load_dataset("arc", split="dev", data_dir=DATA)
    records = [json.loads(line) for line in (DATA / "arc_challenge" / "ARC-Challenge-Dev.jsonl").open()]
    task = real_task(tmp_path, "arc", ["arc_easy.yaml", "arc_challenge.yaml"], [hub_arc(r) for r in records])
    theirs = load_dataset(str(task))
    assert any(c["label"] == "1" for r in records for c in r["question"]["choices"])
    assert [(q.stem, q.choices, q.labels, q.answer) for q in theirs] == [
        (q.stem, q.choices, q.labels, q.answer) for q in ours]
    assert theirs[0].id == "arc_challenge/0" and "lm-eval task arc_challenge" in theirs[0].source


def test_mmlu_subject_reads_option_texts_off_the_prompt(tmp_path: Path) -> None:
    """MMLU's choices are the labels A-D and its prompt lists the options: the options are read off the prompt;
    the mmlu_stem group expands to its subjects."""
    rows = [{"question": " What is the largest organ? ", "subject": "anatomy", "answer": 2,
             "choices": ["Heart", "Liver", "Skin", "Lung"]},
            {"question": "Which bone is in the arm?\nPick one.", "subject": "anatomy", "answer": 0,
             "choices": ["Humerus", "Femur", "Tibia", "Fibula"]}]
    group = real_task(tmp_path, "mmlu/default", ["_default_template_yaml", "mmlu_anatomy.yaml", "mmlu_astronomy.yaml",
                                                 "_mmlu_stem.yaml"], rows)
    first, second = load_dataset(str(tmp_path / "mmlu_anatomy.yaml"))
    assert (first.stem, first.choices, first.labels, first.answer) == (
        "What is the largest organ?", ("Heart", "Liver", "Skin", "Lung"), ("A", "B", "C", "D"), "C")
    assert (second.stem, second.answer) == ("Which bone is in the arm?\nPick one.", "A")
    # lm-eval's own group file (its subjects by tag) expands to the subjects copied here
    assert [q.id for q in load_dataset(str(group))] == ["mmlu_anatomy/0", "mmlu_anatomy/1", "mmlu_astronomy/0",
                                                         "mmlu_astronomy/1"]


def test_hellaswag_context_and_endings_through_its_process_docs_hook(tmp_path: Path) -> None:
    row = {"ind": 4, "activity_label": "Removing ice from car", "ctx_a": "Then, the man writes over the snow.",
           "ctx_b": "then", "ctx": "", "endings": [", the man adds wax.", " he leaves [title] the car.",
                                                   ", the man continues.", ", the man stops."],
           "source_id": "x", "split": "val", "split_type": "indomain", "label": "3"}
    task = real_task(tmp_path, "hellaswag", ["utils.py", "hellaswag.yaml"], [row])
    (question,) = load_dataset(str(task))
    assert question.stem == "Removing ice from car: Then, the man writes over the snow. Then"
    assert question.choices == (", the man adds wax.", "he leaves. the car.", ", the man continues.",
                                ", the man stops.")
    assert question.answer == "D" and question.id == "hellaswag/0"


def test_winogrande_option_in_the_stem(tmp_path: Path) -> None:
    row = {"sentence": "The trophy does not fit into the suitcase because _ is too large.", "option1": "the trophy",
           "option2": "the suitcase", "answer": "1"}
    task = real_task(tmp_path, "winogrande", ["preprocess_winogrande.py", "default.yaml"], [row])
    (question,) = load_dataset(str(task))
    assert question.stem == MULTIPLE_INPUT_STEM
    assert question.choices == ("The trophy does not fit into the suitcase because the trophy is too large.",
                                "The trophy does not fit into the suitcase because the suitcase is too large.")
    assert question.answer == "A"


def test_own_task_files_read_csv_and_parquet_with_jinja_and_function_hooks(tmp_path: Path) -> None:
    """A csv task with a Jinja filter, a `!function` hook and its own labels listed in the prompt; a parquet task
    whose target is a choice's text; `--split` picks another split of the task's dataset."""
    (tmp_path / "q.csv").write_text("q,a,b,c,gold\nwhat is red?,apple,sky,grass,1\nwhat is blue?,apple,sky,grass,2\n")
    (tmp_path / "hooks.py").write_text("def choices(doc):\n    return ['1', '2', '3']\n")
    csv_task = task_file(tmp_path, "colours", f"dataset_path: csv\ndataset_kwargs:\n  data_files:\n    test: "
                         f"{tmp_path / 'q.csv'}\n"
                         "doc_to_text: \"Q: {{q | upper}}\\n1. {{a}}\\n2. {{b}}\\n3. {{c}}\\nAnswer:\"\n"
                         "doc_to_choice: !function hooks.choices\ndoc_to_target: \"{{gold - 1}}\"\n")
    questions = load_dataset(str(csv_task))
    assert [(q.stem, q.choices, q.labels, q.answer) for q in questions] == [
        ("WHAT IS RED?", ("apple", "sky", "grass"), ("1", "2", "3"), "1"),
        ("WHAT IS BLUE?", ("apple", "sky", "grass"), ("1", "2", "3"), "2")]
    rows = [{"text": f"pick {i}", "options": ["x", "y"], "right": "y"} for i in range(3)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    pq.write_table(pa.Table.from_pylist(rows[:1]), tmp_path / "test.parquet")
    parquet_task = task_file(tmp_path, "pq", "dataset_path: parquet\ndataset_kwargs:\n  data_files:\n    test: "
                             f"{tmp_path / 'test.parquet'}\n    train: {tmp_path / 'train.parquet'}\n"
                             "doc_to_text: text\ndoc_to_choice: options\ndoc_to_target: right\n")
    assert [(q.stem, q.answer) for q in load_dataset(str(parquet_task))] == [("pick 0", "B")]
    assert len(load_dataset(str(parquet_task), split="train", n=2)) == 2
    with pytest.raises(DataError, match=r"lm-eval task pq: unknown split 'dev'; expected one of test, train"):
        load_dataset(str(parquet_task), split="dev")


def test_group_expands_to_subtasks_each_its_own_column(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [{"q": "x?", "o": ["a", "b"], "t": 0}])
    for name in ("alpha", "beta"):
        task_file(tmp_path, name, f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
                  "doc_to_text: q\ndoc_to_choice: o\ndoc_to_target: t\n")
    group = tmp_path / "both.yaml"
    group.write_text("group: both\ntask:\n  - alpha\n  - beta\n")
    by_task = load_task_questions(str(group))
    assert list(by_task) == ["alpha", "beta"]
    assert [q.id for q in load_dataset(str(group))] == ["alpha/0", "beta/0"]


REFUSED = {  # (task settings, the second document's options, the error)
    "generate_until": ("output_type: generate_until\ndoc_to_text: q\ndoc_to_target: t\n", ["a", "b"],
                       "lm-eval task refused: output_type generate_until"),
    "27 choices": ("doc_to_text: q\ndoc_to_choice: o\ndoc_to_target: t\n", [f"o{i}" for i in range(27)],
                   "lm-eval task refused, test document 1: 27 choices; at most 26 are supported"),
    "no choices": ("doc_to_text: q\ndoc_to_choice: o\ndoc_to_target: t\n", [],
                   "lm-eval task refused, test document 1: empty choices list"),
    "missing field": ("doc_to_text: \"{{ nothing.here }}\"\ndoc_to_choice: o\ndoc_to_target: t\n", ["a", "b"],
                      "--dataset {task}: lm-eval could not build the task (UndefinedError"),
    "several answers": ("doc_to_text: q\ndoc_to_choice: o\ndoc_to_target: \"{{ [0, 1] }}\"\n", ["a", "b"],
                        "lm-eval task refused, test document 0: doc_to_target gave several answers [0, 1]"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_tasks_ppr_cannot_label_are_refused_naming_task_and_reason(case: str, tmp_path: Path) -> None:
    body, options, message = REFUSED[case]
    data = write_jsonl(tmp_path / "d.jsonl", [{"q": "x?", "o": ["a", "b"], "t": 0}, {"q": "y?", "o": options, "t": 0}])
    task = task_file(tmp_path, "refused", f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
                     + body)
    with pytest.raises(DataError, match=re.escape(message.format(task=task))):
        load_dataset(str(task))


def test_a_task_on_the_hub_offline_says_how_to_read_local_files(tmp_path: Path) -> None:
    task = task_file(tmp_path, "remote", "dataset_path: nobody/nothing\ndoc_to_text: q\ndoc_to_choice: o\n"
                     "doc_to_target: t\n")
    with pytest.raises(DataError, match=r"lm-eval could not build the task \(ConnectionError: .*; offline, point a "
                                        r"task file's dataset_path/dataset_kwargs at local files"):
        load_dataset(str(task))


def test_evaluate_on_a_task_file_reports_each_subtask(tiny_model_dir: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    """`evaluate --dataset group.yaml` end to end: the run identity fingerprints the questions and the tables have
    one column group per subtask."""
    data = write_jsonl(tmp_path / "d.jsonl", [{"q": f"question {i}?", "o": ["yes", "no"], "t": i % 2}
                                              for i in range(2)])
    for name in ("alpha", "beta"):
        task_file(tmp_path, name, f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
                  "doc_to_text: q\ndoc_to_choice: o\ndoc_to_target: t\n")
    (tmp_path / "both.yaml").write_text("group: both\ntask: [alpha, beta]\n")
    out = tmp_path / "run"
    assert main(["evaluate", "--model", str(tiny_model_dir), "--dataset", str(tmp_path / "both.yaml"), "-J", "2",
                 "-N", "2", "--methods", "direct", "--bootstrap", "10", "--out", str(out)]) == 0
    assert "alpha ACC" in capsys.readouterr().out
    title, columns, _ = load_runs(out, QualityControl(), 10)
    assert title == "both" and [run.label for run in columns] == ["alpha", "beta"]


def test_a_first_document_without_options_is_explained(tmp_path: Path) -> None:
    """lm-eval builds a task by trying its first document, and fails there with a bare IndexError."""
    data = write_jsonl(tmp_path / "d.jsonl", [{"q": "x?", "o": [], "t": 0}, {"q": "y?", "o": ["a", "b"], "t": 0}])
    task = task_file(tmp_path, "empty", f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
                     "doc_to_text: q\ndoc_to_choice: o\ndoc_to_target: t\n")
    with pytest.raises(DataError, match=r"could not build the task \(IndexError: list index out of range\); lm-eval "
                                        "checks the first document when it builds a task: does doc_to_choice give "
                                        "an empty list"):
        load_dataset(str(task))


def test_a_task_file_of_an_alias_bomb_is_refused_before_lm_eval_reads_it(tmp_path: Path) -> None:
    levels = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{b}: &{b} [{', '.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True))
    data = write_jsonl(tmp_path / "d.jsonl", [{"q": "x?", "o": ["a", "b"], "t": 0}])
    task = task_file(tmp_path, "bomb", f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
                     "doc_to_text: q\ndoc_to_choice: o\ndoc_to_target: t\nmetadata:\n  "
                     + levels.replace("\n", "\n  "))
    with pytest.raises(UserError, match=r"bomb\.yaml: its aliases expand to more than 100000 values"):
        load_dataset(str(task))
    (tmp_path / "base.yaml").write_text(f"metadata:\n  {levels.replace(chr(10), chr(10) + '  ')}")
    task = task_file(tmp_path, "including", "include: base.yaml\ndoc_to_text: q\ndoc_to_choice: o\ndoc_to_target: t\n")
    with pytest.raises(UserError, match=r"base\.yaml: its aliases expand to more than 100000 values"):
        load_dataset(str(task))  # lm-eval reads the files a task file includes too


def test_report_html_never_runs_the_code_of_a_task_file_a_run_names(tiny_model_dir: Path, tmp_path: Path) -> None:
    """A run directory someone shares names a task file in its stored settings; its `!function` hook is Python that
    lm-eval imports and runs. Viewing the run (report --html) runs none of it: the page shows the questions the run
    stored beside its store (questions.jsonl), not the task's loader's."""
    marker = tmp_path / "hook-ran"
    (tmp_path / "hooks.py").write_text(f"from pathlib import Path\nPath({str(marker)!r}).touch()\n"
                                       "def choices(doc):\n    return doc['o']\n")
    data = write_jsonl(tmp_path / "d.jsonl", [{"q": f"question {i}?", "o": ["yes", "no"], "t": i % 2}
                                              for i in range(2)])
    task = task_file(tmp_path, "hooked", f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
                     "doc_to_text: q\ndoc_to_choice: !function hooks.choices\ndoc_to_target: t\n")
    out = tmp_path / "run"
    assert main(["drift", "--model", str(tiny_model_dir), "--dataset", str(task), "-J", "2", "-N", "2",
                 "--methods", "ppr", "--plot-questions", "0", "--out", str(out)]) == 0
    assert marker.exists()  # running it ran the hook, as in lm-eval
    marker.unlink()
    sys.modules.pop("hooks", None)  # as in another process: the hook module not imported yet
    assert main(["report", str(out), "--html", "--out", str(tmp_path / "page")]) == 0
    assert not marker.exists()
    page = (tmp_path / "page" / "explorer.html").read_text()
    assert "hooked/0" in page and "question 0?" in page  # from questions.jsonl: the task file was not loaded
