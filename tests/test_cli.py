"""The command line as a newcomer meets it: `--help` without torch, `--version`, help texts, message levels."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from beliefdrift import __version__
from beliefdrift.cli.main import COMMANDS, build_parser, main
from beliefdrift.registry import parse_method

HEAVY = ("torch", "transformers", "peft", "matplotlib")


def test_help_imports_no_torch_transformers_or_peft() -> None:
    """`beliefdrift --help` and every `beliefdrift CMD --help` in a fresh process: none of the heavy libraries
    is imported (they load in seconds, the help must not wait for them)."""
    code = f"""
import contextlib, io, json, sys
from beliefdrift.cli.main import main
for argv in [["--help"], *[[name, "--help"] for name in {list(COMMANDS)!r}]]:
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit:
            pass
print(json.dumps(sorted({{name.split(".")[0] for name in sys.modules}})))
"""
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                       check=True).stdout)
    assert not set(HEAVY) & set(loaded)


def test_paper_list_stages_imports_no_torch_transformers_or_peft(tmp_path: Path) -> None:
    """`beliefdrift paper --list-stages` prints the stages' command lines without loading a model library."""
    code = f"""
import contextlib, io, json, sys
from beliefdrift.cli.main import main
with contextlib.redirect_stdout(io.StringIO()) as printed:
    assert main(["paper", "--list-stages", "--out", {str(tmp_path)!r}]) == 0
assert "beliefdrift evaluate" in printed.getvalue()
print(json.dumps(sorted({{name.split(".")[0] for name in sys.modules}})))
"""
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                       check=True).stdout)
    assert not set(HEAVY) & set(loaded)


def test_version(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip().startswith("beliefdrift ")
    assert __version__ == "0.2.0"  # part of every run identity: a new version refuses to resume old stores


@pytest.mark.parametrize("command", COMMANDS)
def test_help_says_each_default_once_and_no_module_paths(command: str) -> None:
    parser = build_parser()._subparsers._group_actions[0].choices[command]
    formatter = parser._get_formatter()
    for action in parser._actions:
        assert formatter._get_help_string(action).count("(default:") <= 1, action.dest
    text = parser.format_help()
    assert "(default: None)" not in text
    assert "beliefdrift." not in text and ".py" not in text


def test_flags_spelled_with_dashes_or_underscores() -> None:
    parser = build_parser()
    for flag in ("--batch-questions", "--batch_questions"):
        assert parser.parse_args(["evaluate", flag, "3"]).batch_questions == 3
    assert parser.parse_args(["train", "--no-gradient-caching"]).gradient_caching is False
    assert parser.parse_args(["evaluate", "--skip-long-prompts"]).skip_long_prompts is True
    assert parser.parse_args(["evaluate", "--skip-long-prompts", "false"]).skip_long_prompts is False


@pytest.mark.parametrize(("argv", "level"), [([], logging.INFO), (["--quiet"], logging.WARNING),
                                             (["-v"], logging.DEBUG)])
def test_quiet_and_verbose_set_the_message_level(tmp_path, argv: list[str], level: int) -> None:
    """Before the command or after it; `report` on a directory without a store fails, after logging is set up."""
    for where in (argv + ["report", str(tmp_path)], ["report", str(tmp_path), *argv]):
        assert main(where) == 2
        assert logging.getLogger("beliefdrift").level == level


def test_quiet_silences_the_progress_bars_too(tmp_path) -> None:
    """--quiet turns off every progress bar with the messages (`beliefdrift.progress_bar`, which the run loops
    draw with); without it, and with -v, they show."""
    import beliefdrift

    for argv, shown in (([], True), (["--quiet"], False), (["-v"], True), (["-q"], False)):
        assert main([*argv, "report", str(tmp_path)]) == 2
        assert beliefdrift.progress_bar(range(2)).disable is not shown
    assert beliefdrift.progress_bar(range(2), disable=True).disable  # one bar can still be turned off
    beliefdrift.show_progress(True)


def test_quiet_silences_hugging_face_bars_too(tmp_path, monkeypatch) -> None:
    """Hub downloads and `datasets`' split generation draw their own bars: --quiet switches those off as well, for a
    library imported already and (through its environment variable) one imported later."""
    import datasets
    import huggingface_hub.utils

    import beliefdrift

    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    monkeypatch.delenv("HF_DATASETS_DISABLE_PROGRESS_BARS", raising=False)
    try:
        assert main(["--quiet", "report", str(tmp_path)]) == 2
        assert datasets.utils.are_progress_bars_disabled() and huggingface_hub.utils.are_progress_bars_disabled()
        assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] == "1"
    finally:
        beliefdrift.show_progress(True)
    assert not datasets.utils.are_progress_bars_disabled() and not huggingface_hub.utils.are_progress_bars_disabled()
    assert "HF_DATASETS_DISABLE_PROGRESS_BARS" not in os.environ


@pytest.mark.parametrize("quiet", [False, True])
def test_quiet_evaluate_draws_no_progress_bar(tiny_model_dir, tmp_path, capsys, quiet: bool) -> None:
    argv = ["evaluate", "--model", str(tiny_model_dir), "-n", "2", "-J", "2", "-N", "2", "--methods", "direct", "ppr",
            "--bootstrap", "10", "--out", str(tmp_path), *(["-q"] if quiet else [])]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert ("%|" in err) is not quiet and ("J=2 paths" in err) is not quiet  # the bars, and a progress message
    assert ("Loading weights" in err) is not quiet  # transformers' own bar too
    import beliefdrift

    beliefdrift.show_progress(True)


def test_unknown_method_suggests_the_closest() -> None:
    with pytest.raises(ValueError, match="did you mean 'ppr-seed5'"):
        parse_method("ppr-sed5")


def test_help_shows_the_dashed_flags_in_group_order(capsys: pytest.CaptureFixture) -> None:
    usage = build_parser().command_parser("evaluate").format_usage()
    assert "--qc-path-mass" in usage and "--qc_path_mass" not in usage
    assert usage.index("--model") < usage.index("--dataset") < usage.index("--paths") < usage.index("--methods")
    assert main([]) == 2 and "COMMAND" in capsys.readouterr().out  # a bare `beliefdrift` prints what it can do


@pytest.mark.parametrize(("argv", "error"), [
    (["evaluat"], "unknown command 'evaluat'; expected one of demo, drift, emd, evaluate, report, export, "
                  "reasoning, train, paper; did you mean 'evaluate'?"),
    (["-q", "drfit"], "did you mean 'drift'?"),
    (["evaluate", "--pathz", "3"], "evaluate: error: unrecognized arguments: --pathz 3; did you mean --paths? "
                                   "(see beliefdrift evaluate --help)"),
    (["emd", "--prefix-length=3"], "did you mean --prefix-lengths?"),
    (["report", "run", "--bogus"], "unrecognized arguments: --bogus (see beliefdrift report --help)"),
])
def test_a_misspelt_command_or_flag_suggests_the_closest(argv: list[str], error: str,
                                                        capsys: pytest.CaptureFixture) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert error in err and len(err.strip().splitlines()) == 1


def test_unknown_dataset_suggests_the_closest() -> None:
    from beliefdrift.data.registry import load_dataset

    with pytest.raises(ValueError, match="did you mean 'tinymmlu'"):
        load_dataset("tinymmlux")


def test_each_metric_is_one_entry_of_the_registry() -> None:
    """The report's tables, the bootstrap summary and the paired tests all read `metrics.REPORT_METRICS`; `METRICS`
    is its part with a percentile bootstrap and a paired test (CE2's interval is bias-centred, and it has none)."""
    from beliefdrift.metrics.functional import METRICS, REPORT_METRICS, paired_summary, summarize
    from beliefdrift.report.tables import TABLES

    assert [name for _, names, _, _ in TABLES for name in names] == list(REPORT_METRICS)
    assert list(METRICS) == [name for name in REPORT_METRICS if name != "CE2"]
    probs, targets = [[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]], [0, 1, 1]
    assert all(name in summarize(probs, targets, n_resamples=10) for name in REPORT_METRICS)
    assert list(paired_summary(probs, probs, targets, n_resamples=10)) == list(METRICS)
    assert [spec.higher_is_better for spec in REPORT_METRICS.values()] == [True, True, False, False, False, False]
