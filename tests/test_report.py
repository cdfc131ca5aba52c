"""Report tables and figures: hand-computed values in Markdown/LaTeX/CSV, paper row order, QC counts, several
runs side by side, an end-to-end `evaluate` + `report` on the demo set with the tiny model, and the marginal-drift
figure data."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from table_checks import table_problems

from beliefdrift.cli.main import main
from beliefdrift.data import MCQuestion
from beliefdrift.data.registry import load_dataset
from beliefdrift.diagnostics.marginal import marginal_drift, marginal_shift
from beliefdrift.engine.methods import parse_method, run_methods
from beliefdrift.engine.resampling import Trajectories
from beliefdrift.files import safe_name
from beliefdrift.metrics.stats import mean_std
from beliefdrift.report.marginal import average_panels, plot_average_drift
from beliefdrift.report.tables import RunScores, csv_table, latex_tables, markdown_tables, metric_table
from beliefdrift.report.text import markdown_table, plus_minus
from beliefdrift.runs.scoring import QualityControl, score_rows
from beliefdrift.runs.store import ResultRow, RunStore

# Four questions scored by hand (2 options each):
#   probs          target  correct  confidence  −log p_true   Brier
#   [0.8, 0.2]     0       yes      0.8         0.2231436     0.08
#   [0.6, 0.4]     1       no       0.6         0.9162907     0.72
#   [0.3, 0.7]     1       yes      0.7         0.3566749     0.18
#   [0.5, 0.5]     0       yes      0.5         0.6931472     0.50
# ACC = 3/4; AUC: correct scores {0.8, 0.7, 0.5} vs wrong {0.6}: 2 of 3 pairs ordered → 2/3;
# ECE: each question alone in its 15-bin → (0.2 + 0.6 + 0.3 + 0.5)/4 = 0.4; NLL = 0.5473141; BS = 0.37.
PROBS = [[0.8, 0.2], [0.6, 0.4], [0.3, 0.7], [0.5, 0.5]]
TARGETS = [0, 1, 1, 0]
EXPECTED = {"ACC": 0.75, "AUC": 2 / 3, "ECE": 0.4, "NLL": 0.5473141, "BS": 0.37}
PPR_METHODS = ("ppr", "ppr-seed5", "am-ppr-seed1")


def synthetic_rows() -> list[ResultRow]:
    """PPR-like methods with the hand-scored probabilities plus one off-format question (q4: it would be
    confidently wrong), and a direct query that is always right and certain."""
    rows = []
    for method in PPR_METHODS:
        for i, (probs, target) in enumerate(zip(PROBS, TARGETS, strict=True)):
            alternatives = {"q_star_rb": np.array([0.4, 0.6])} if method != "am-ppr-seed1" else {}
            rows.append(ResultRow(f"q{i}", method, i, target, 2, np.array(probs), np.full((3, 5), 0.9),
                                  alternatives=alternatives))
        alternatives = {"q_star_rb": np.array([0.0, 1.0])} if method != "am-ppr-seed1" else {}
        valid_mass = np.array([[0.9] * 5, [0.2] * 5, [0.3] * 5])  # 2 of 3 paths off-format
        rows.append(ResultRow("q4", method, 4, 0, 2, np.array([0.0, 1.0]), valid_mass, alternatives=alternatives))
    for i, target in enumerate([*TARGETS, 0]):
        probs = np.eye(2)[target]
        rows.append(ResultRow(f"q{i}", "direct", i, target, 2, probs, np.array([[0.95]])))
    return rows


@pytest.fixture(scope="module")
def scores() -> RunScores:
    return RunScores("CSQA", score_rows(synthetic_rows(), QualityControl(), n_resamples=200), "some/model-8b")


def table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| Method")]


def test_markdown_has_hand_computed_values_in_paper_order(scores: RunScores) -> None:
    text = markdown_tables([scores])
    table1, table2 = text.split("**Table 2.**")
    assert "| Method | CSQA ACC ↑ | CSQA AUC ↑ | CSQA n (excl.) |" in table1
    # Table 2 is 101 columns wide in one piece: split, the row labels repeated
    assert "| Method | CSQA ECE ↓ | CSQA CE2 ↓ | CSQA NLL ↓ | CSQA BS ↓ |" in table2
    assert "| Method | CSQA n (excl.) |" in table2 and max(len(line) for line in text.splitlines()
                                                          if line.startswith("|")) <= 100
    titles = [line.split(" | ")[0][2:] for line in table_lines(table1)]
    assert titles == ["PPR + NoSEED", "PPR + SEED_5", "AM-PPR + SEED_1", "Direct-Query"]
    ppr1 = table_lines(table1)[0]
    assert ppr1.startswith("| PPR + NoSEED | 75.0 [") and "| 66.7 [" in ppr1 and ppr1.endswith("| 4 (1) |")
    ppr2 = table_lines(table2)[0]
    # the paper's ECE without its (invalid) interval; CE2 without one below 20 questions
    assert ppr2.startswith("| PPR + NoSEED | 0.4000 † | ") and "| 0.5473 [" in ppr2 and "| 0.3700 [" in ppr2
    direct1, direct2 = table_lines(table1)[-1], table_lines(table2)[3]
    assert direct1 == "| Direct-Query | 100.0 [100.0, 100.0] | n/a | 5 (0) |"  # AUC undefined: one class
    assert "n/a: undefined here (AUC when every prediction is right" in table1 and "n/a:" not in table2
    assert direct2 == "| Direct-Query | 0.0000 † | 0.0000 † | 0.0000 [0.0000, 0.0000] | 0.0000 [0.0000, 0.0000] |"
    assert table_lines(table2)[-1] == "| Direct-Query | 5 (0) |"
    assert "(RB)" not in text


def test_an_nll_with_clipped_probabilities_says_so() -> None:
    """A true-label probability below ε counts as ε (−log ε ≈ 13.8), so one such question can dominate the NLL: its
    cell says how many were clipped, and the caption says what that means (only where it happens)."""
    rows = [ResultRow(f"q{i}", "ppr", i, target, 2, np.array(probs), np.full((2, 3), 0.9))
            for i, (probs, target) in enumerate(zip([*PROBS, [1.0, 0.0]], [*TARGETS, 1], strict=True))]
    text = markdown_tables([RunScores("CSQA", score_rows(rows, n_resamples=50))])
    (line,) = [line for line in text.split("**Table 2.**")[1].splitlines() if line.startswith("| PPR")][:1]
    assert "] (1 clipped) |" in line and "(k clipped): k true-label probabilities below ε = 1e-06" in text
    assert "clipped" not in markdown_tables([RunScores("CSQA", score_rows(rows[:4], n_resamples=50))])


def test_the_reasoning_table_says_what_its_columns_are() -> None:
    from beliefdrift.runs.reasoning import summary_markdown

    condition = {"title": "PPR", "curve_mean": [0.9, None, 0.8], "majority_accuracy": {"overall": 0.5}, "pairs": 8,
                 "malformed": 1, "valid_answers": 6, "few_parsed": False}
    text = summary_markdown({"conditions": {"ppr": condition}})
    assert table_problems(text) == [] and "c_1 at the first pair, c_last at the last n" in text
    assert "| PPR | 0.900 | 0.800 | 0.50 | 8 | 6/8 | 1 |" in text and "‡" not in text


def test_the_reasoning_counts_say_how_few_answers_parse() -> None:
    """Issue 48 §3: the demo's table read "pairs 48, malformed 1, majority acc. 0.00" where 2 of its 48 answers
    parsed: the parsed answers are counted beside the pairs, and the figures resting on fewer than half of them are
    marked ‡ and said so."""
    from beliefdrift.cot.answers import answer_totals, answer_view, few_parsed
    from beliefdrift.runs.reasoning import summary_markdown

    view = answer_view([["B", None, None, None]] * 12, gold="A")
    totals = answer_totals(view)
    assert totals == {"valid_answers": 12, "unparsed_answers": 36, "correct_answers": 0}
    assert few_parsed(12, 48) and few_parsed(0, 0) and not few_parsed(24, 48)
    condition = {"title": "SEED_2", "curve_mean": [0.9, 0.8], "majority_accuracy": {"overall": 0.0}, "pairs": 48,
                 "malformed": 1, **totals, "few_parsed": True}
    text = summary_markdown({"min_parsed": 0.5, "conditions": {"ppr-seed2": condition}})
    assert "| SEED_2 | 0.900 ‡ | 0.800 ‡ | 0.00 ‡ | 48 | 12/48 | 1 |" in text and table_problems(text) == []
    assert "‡ SEED_2: fewer than 50% of the pairs' answers parse" in text


def test_the_emd_comparison_names_only_its_own_test() -> None:
    """Issue 48 §7: the Δ EMD‾ caption gives the p-value rule of a mean, not the ACC and AUC rules."""
    from beliefdrift.report.paired import emd_comparisons, emd_markdown

    records = {name: [{"emd_bar_l1": v + shift} for v in (0.1, 0.3, 0.2, 0.5)]
               for name, shift in (("ppr", 0.0), ("ppr-seed5", -0.05))}
    caption = emd_markdown(emd_comparisons(records, ["l1"], n_resamples=20)).split("\n")[0]
    assert "a betting test of the mean within the metric's bound" in caption and "ACC" not in caption
    assert "AUC" not in caption


def test_interval_brackets_the_bootstrap(scores: RunScores) -> None:
    ppr = scores.main()["ppr"]
    point, low, high = ppr.summary["ACC"]
    assert point == 0.75 and low <= point <= high and (low, high) != (point, point)
    assert f"75.0 [{100 * low:.1f}, {100 * high:.1f}]" in markdown_tables([scores])


def test_latex_layout(scores: RunScores) -> None:
    text = latex_tables([scores])
    assert text.count(r"\begin{tabular}") == 2 and text.count(r"\toprule") == 2 and text.count(r"\bottomrule") == 2
    assert text.count(r"\midrule") == 6  # before the PPR, AM-PPR and Direct-Query groups, in both tables
    assert r"\multicolumn{3}{c}{\textbf{CSQA}}" in text and r"\cmidrule(lr){2-4}" in text
    assert r"PPR + \texttt{NoSEED} & 75.0 {\scriptsize [" in text
    assert r"PPR + $\texttt{SEED}_{5}$ & 75.0" in text and r"AM-PPR + $\texttt{SEED}_{1}$" in text
    assert r"\texttt{Direct-Query} & 100.0 {\scriptsize [100.0, 100.0]} & n/a & 5 (0) \\" in text
    assert r"0.4000$^\dagger$" in text and "inferred by model-8b" in text and r"(\%)" in text


def test_csv_has_every_number(scores: RunScores) -> None:
    rows = list(csv.DictReader(csv_table([scores]).splitlines()))
    assert [(r["method"], r["estimator"]) for r in rows] == [
        ("ppr", "q_star"), ("ppr", "q_star_rb"), ("ppr-seed5", "q_star"), ("ppr-seed5", "q_star_rb"),
        ("am-ppr-seed1", "theta_1"), ("direct", "direct")]
    ppr = rows[0]
    for metric, value in EXPECTED.items():
        assert float(ppr[metric]) == pytest.approx(value, abs=1e-6)
        if metric != "ECE":  # no valid interval: NaN bounds, as every surface shows it
            assert float(ppr[metric + "_low"]) <= float(ppr[metric + "_high"])
    assert all(math.isnan(float(ppr[f"{metric}_{end}"])) for metric in ("ECE", "CE2") for end in ("low", "high"))
    assert (ppr["n"], ppr["excluded"], ppr["total"], ppr["nll_clipped"]) == ("4", "1", "5", "0")
    # label mass over all five questions (q4's paths: 0.9, 0.2, 0.3); confidence and argmax over the kept four
    assert float(ppr["label_mass"]) == pytest.approx((4 * 0.9 + (0.9 + 0.2 + 0.3) / 3) / 5)
    assert float(ppr["confidence"]) == pytest.approx((0.8 + 0.6 + 0.7 + 0.5) / 4)
    assert ppr["predicted"] == "A:3 B:1"
    rb = rows[1]  # q*_RB predicts option 1 everywhere: right on q1 and q2 only
    assert rb["title"] == "PPR + NoSEED (RB)" and float(rb["ACC"]) == 0.5 and rb["excluded"] == "1"
    assert math.isnan(float(rows[-1]["AUC"])) and rows[-1]["dataset"] == "CSQA"


def write_store(run_dir: Path, dataset: str, rows: list[ResultRow]) -> None:
    with RunStore.open(run_dir / "run.sqlite") as store:
        store.ensure_config({"dataset": dataset, "model": "some/model-8b", "paths": 3, "steps": 5})
        for position in sorted({row.position for row in rows}):
            store.add([row for row in rows if row.position == position])


def test_report_command_counts_qc_exclusions(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_store(tmp_path, "csqa", synthetic_rows())
    assert main(["report", str(tmp_path), "--bootstrap", "50"]) == 0
    printed = capsys.readouterr().out
    markdown = (tmp_path / "tables.md").read_text()
    assert markdown in printed
    assert table_lines(markdown)[0].startswith("| PPR + NoSEED | 75.0 [") and "| 4 (1) |" in markdown
    rows = list(csv.DictReader((tmp_path / "metrics.csv").read_text().splitlines()))
    assert rows[0]["excluded"] == "1" and float(rows[0]["ACC"]) == 0.75
    for method in ("ppr", "ppr-seed5", "am-ppr-seed1", "direct"):
        assert (tmp_path / f"reliability-csqa-{method}.png").stat().st_size > 0
    with RunStore.open(tmp_path / "run.sqlite", create=False) as store:
        assert store.count() == 20  # exclusion happens at report time; the rows stay

    # Thresholds are flags: with no path counted as off-format, q4 is scored (and is wrong).
    args = ["report", str(tmp_path), "--bootstrap", "50", "--qc-path-mass", "0", "--out", str(tmp_path / "all")]
    assert main(args) == 0
    markdown = (tmp_path / "all" / "tables.md").read_text()
    assert table_lines(markdown)[0].startswith("| PPR + NoSEED | 60.0 [") and "| 5 (0) |" in markdown


def test_quality_control_is_one_function_and_says_what_it_dropped(caplog: pytest.LogCaptureFixture) -> None:
    """`excluded_units` is the one answer to "does quality control drop this (question, method)" (the tables, the
    paired tests and the explorer read it); `quality_report` counts it per method and words the warnings: a line per
    method that lost questions, a loud one for a method that lost all of them, and `all_excluded` naming it."""
    from beliefdrift.report.paired import metrics_markdown, paired_scores
    from beliefdrift.runs.scoring import excluded_units, quality_report, warn_quality

    rows = synthetic_rows()
    assert excluded_units(rows) == {("q4", method) for method in PPR_METHODS}
    assert excluded_units(rows, QualityControl(common=True)) == {("q4", m) for m in (*PPR_METHODS, "direct")}
    off = [ResultRow(f"q{i}", "ppr-seed1", i, 0, 2, np.array([0.5, 0.5]), np.full((3, 5), 0.1)) for i in range(5)]
    report = quality_report(rows + off)
    assert [(m.method, m.total, len(m.excluded)) for m in report.methods] == [
        ("ppr", 5, 1), ("ppr-seed1", 5, 5), ("ppr-seed5", 5, 1), ("am-ppr-seed1", 5, 1), ("direct", 5, 0)]
    assert report.all_excluded == ["ppr-seed1"] and report.as_dict()["methods"]["ppr"]["excluded_questions"] == ["q4"]
    with caplog.at_level("WARNING", logger="beliefdrift"):
        warn_quality(rows + off)
    lines = caplog.messages
    assert lines[0] == ("quality control excluded 1 of 5 questions of PPR + NoSEED (more than 0.5 of its paths "
                        "(direct query: its one answer) had mean label mass below 0.5): q4")
    assert lines[1].startswith("QUALITY CONTROL EXCLUDED ALL 5 QUESTIONS OF PPR + SEED_1: its rows in the tables are "
                               "empty (–)") and "its mean label mass is 0.10" in lines[1]
    assert len(lines) == 4  # direct lost none
    # The paired table says why a comparison is empty.
    text = metrics_markdown("CSQA", paired_scores(rows + off, n_resamples=20))
    assert "| PPR + SEED_1 | PPR + NoSEED | 0 | – | – |" in text
    assert "– with n = 0 (PPR + SEED_1 vs PPR + NoSEED): quality control kept no question for both methods" in text
    assert "n = 0" not in metrics_markdown("CSQA", paired_scores(rows, n_resamples=20))


def test_several_runs_side_by_side(tmp_path: Path) -> None:
    rows = synthetic_rows()
    for name, dataset in (("a", "tinymmlu"), ("b", "arc"), ("c", "arc")):
        write_store(tmp_path / name, dataset, rows)
    out = tmp_path / "report"
    assert main(["report", *(str(tmp_path / n) for n in "abc"), "--bootstrap", "20", "--out", str(out)]) == 0
    latex = (out / "tables.tex").read_text()
    for label in ("TinyMMLU", "AI2-ARC (b)", "AI2-ARC (c)"):
        assert rf"\multicolumn{{3}}{{c}}{{\textbf{{{label}}}}}" in latex
    assert r"\cmidrule(lr){2-4}\cmidrule(lr){5-7}\cmidrule(lr){8-10}" in latex
    assert r"\begin{tabular}{l ccc ccc ccc}" in latex
    header = (out / "tables.md").read_text().splitlines()[2]
    assert header.startswith("| Method | TinyMMLU ACC ↑ | TinyMMLU AUC ↑ | TinyMMLU n (excl.) | AI2-ARC (b) ACC ↑")
    assert (out / f"reliability-{safe_name('ai2-arc (c)')}-direct.png").exists()


def test_no_surface_shows_an_interval_the_registry_marks_invalid(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """ECE has no valid interval or paired p (`MetricSpec.interval_from`): `summarize`, `paired_summary`,
    `Run.scores()`, `Run.paired()`, metrics.csv and paired.csv all give NaN there, so every surface (the explorer
    included) shows none; and the registry is the one place that says so, and which way is better."""
    import dataclasses

    from beliefdrift.metrics.functional import REPORT_METRICS, paired_summary, summarize
    from beliefdrift.runs.results import open_run

    assert math.isnan(summarize(PROBS, TARGETS, n_resamples=50)["ECE"].low)
    assert all(math.isnan(v) for v in paired_summary(PROBS, [[0.5, 0.5]] * 4, TARGETS, n_resamples=50)["ECE"][1:])
    write_store(tmp_path, "csqa", synthetic_rows())
    assert main(["report", str(tmp_path), "--bootstrap", "50"]) == 0
    metrics_csv = list(csv.DictReader((tmp_path / "metrics.csv").read_text().splitlines()))
    assert all(math.isnan(float(row["ECE_low"])) and math.isnan(float(row["ECE_high"])) for row in metrics_csv)
    assert all(float(row["NLL_low"]) <= float(row["NLL_high"]) for row in metrics_csv)
    paired_csv = [row for row in csv.DictReader((tmp_path / "paired.csv").read_text().splitlines())
                  if row["metric"] == "ECE"]
    assert paired_csv and all(math.isnan(float(row[key])) for row in paired_csv for key in ("low", "high", "p"))
    run = open_run(tmp_path)
    scores = run.scores(n_resamples=50)
    assert all(math.isnan(score.metrics["ECE"].low) for score in scores if score.metrics)
    assert not math.isnan(scores[0].metrics["ACC"].low)
    assert all(math.isnan(pair.deltas["ECE"].p) and math.isnan(pair.deltas["ECE"].low)
               for pair in run.paired(n_resamples=50))

    # One entry of the registry decides it for every surface: NLL marked invalid, Brier score "higher is better".
    monkeypatch.setitem(REPORT_METRICS, "NLL", dataclasses.replace(REPORT_METRICS["NLL"], interval_from=math.inf))
    monkeypatch.setitem(REPORT_METRICS, "BS", dataclasses.replace(REPORT_METRICS["BS"], higher_is_better=True))
    assert math.isnan(run.scores(n_resamples=50)[0].metrics["NLL"].low)
    text = markdown_tables([RunScores("CSQA", score_rows(synthetic_rows(), n_resamples=50))])
    assert "| CSQA NLL ↓ | CSQA BS ↑ |" in text and "| 0.5473 † |" in text


def test_evaluate_and_report_end_to_end(tiny_model_dir: Path, tmp_path: Path) -> None:
    preset = tmp_path / "preset.yaml"
    preset.write_text("paths: 2\nsteps: 9\nmethods: [direct, ppr, ppr-seed1]\nqc_path_mass: 0.0\n")
    out = tmp_path / "run"
    args = ["evaluate", "--config", str(preset), "--model", str(tiny_model_dir), "--dataset", "demo", "-n", "3",
            "-N", "2", "--bootstrap", "20", "--out", str(out)]
    assert main(args) == 0
    with RunStore.open(out / "run.sqlite", create=False) as store:
        config, rows = store.config(), store.rows()
    assert (config["paths"], config["steps"], config["methods"]) == (2, 2, ["ppr", "ppr-seed1", "direct"])
    assert len(rows) == 9 and {r.thetas.shape for r in rows if r.thetas is not None} == {(2, 3, 5)}
    markdown = (out / "tables.md").read_text()
    titles = [line.split(" | ")[0][2:] for line in table_lines(markdown.split("**Table 2.**")[0])]
    assert titles == ["PPR + NoSEED", "PPR + SEED_1", "Direct-Query"]
    assert "| 3 (0) |" in markdown
    latex = (out / "tables.tex").read_text()
    assert r"\begin{tabular}" in latex and r"\toprule" in latex and r"\multicolumn{3}{c}{\textbf{Demo}}" in latex
    assert len((out / "metrics.csv").read_text().splitlines()) == 1 + 2 * 3 + 1
    for method in ("ppr", "ppr-seed1", "direct"):
        assert (out / f"reliability-demo-{method}.png").exists()
    assert main(["report", str(out), "--bootstrap", "20", "--qc-path-mass", "0"]) == 0
    assert (out / "tables.md").read_text() == markdown  # same numbers when re-reported
    assert main(["report", str(out), "--bootstrap", "20"]) == 0  # default QC: the random model is off-format
    assert "| 0 (3) |" in (out / "tables.md").read_text()


def test_the_quality_control_rule_is_worded_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """One wording of the rule (`QualityControl.describe`), with its settings, in the run's warnings, the explorer's
    data (its captions read `qc.rule`) and the demo's caption."""
    from beliefdrift.cli.demo import summary_table
    from beliefdrift.engine.methods import MethodResult
    from beliefdrift.report.explorer import explorer_data
    from beliefdrift.runs.scoring import warn_quality

    qc = QualityControl(path_mass=0.3, max_fraction=0.25, common=True)
    rule = qc.describe()
    assert "0.25" in rule and "0.3" in rule and "--qc-common" in rule
    assert explorer_data([], tmp_path, qc)["qc"]["rule"] == rule
    rows = synthetic_rows()
    with caplog.at_level("WARNING", logger="beliefdrift"):
        warn_quality(rows, qc)
    assert caplog.messages and all(rule in line for line in caplog.messages)
    questions = [MCQuestion(id=f"q{i}", stem="?", choices=("a", "b"), labels=("A", "B"), answer="A") for i in range(5)]
    results = {"ppr": [MethodResult(parse_method("ppr"), torch.tensor([0.6, 0.4]), 0.9, {}) for _ in questions]}
    assert QualityControl().describe() in summary_table(results, questions, rows)


def test_evaluate_warns_when_quality_control_drops_a_method(tiny_model_dir: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    """At run time: the tiny random model puts ~1% of its mass on the labels, so the default quality control drops
    every question of every method; evaluate says so on stderr, method by method, and summary.json (and
    `Run.quality_control()`) lists them in `all_excluded`."""
    import json

    from beliefdrift.runs.results import open_run

    out = tmp_path / "run"
    assert main(["evaluate", "--model", str(tiny_model_dir), "--dataset", "demo", "-n", "2", "-J", "2", "-N", "2",
                 "--methods", "direct", "ppr", "--bootstrap", "20", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "QUALITY CONTROL EXCLUDED ALL 2 QUESTIONS OF PPR + NoSEED" in err
    assert "QUALITY CONTROL EXCLUDED ALL 2 QUESTIONS OF Direct-Query" in err
    summary = json.loads((out / "summary.json").read_text())["quality_control"]
    assert summary["all_excluded"] == ["ppr", "direct"] and summary["methods"]["ppr"]["excluded"] == 2
    assert open_run(out).quality_control().all_excluded == ["ppr", "direct"]
    assert "summary.json" in err and "run.sqlite" in err  # the last line names everything written


def test_metric_table_for_in_memory_results(tiny_lm) -> None:
    questions = load_dataset("demo", n=3)
    methods = [parse_method(name) for name in ("direct", "ppr-seed1")]
    results: dict[str, list] = {m.name: [] for m in methods}
    for question in questions:
        for result in run_methods(tiny_lm, question, methods, paths=2, steps=2, seed=0, template="ppr-llama"):
            results[result.method.name].append(result)
    text = metric_table(results, questions, qc=QualityControl(path_mass=0.0), n_resamples=20)
    assert "| Method | Demo ACC ↑ | Demo AUC ↑ | Demo n (excl.) |" in text
    lines = table_lines(text.split("**Table 2.**")[0])
    assert [line.split(" | ")[0][2:] for line in lines] == ["PPR + SEED_1", "Direct-Query"]
    assert all(line.endswith("| 3 (0) |") for line in lines)
    # With the default QC the tiny random model (label mass ≈ 1%) is off-format everywhere.
    table1 = metric_table(results, questions, n_resamples=20).split("**Table 2.**")[0]
    assert all(line.endswith("| – | – | 0 (3) |") for line in table_lines(table1))


# ----------------------------------------------------------------------------------------- marginal drift


def test_marginal_drift_hand_computed() -> None:
    # J = 2 paths, N = 1, K = 2: E[θ_n] = column means, std with ddof 1 = |x1 − x2| / √2, shift = L1 from n = 0.
    thetas = torch.tensor([[[0.5, 0.5], [0.9, 0.1]], [[0.5, 0.5], [0.5, 0.5]]])
    traj = Trajectories(torch.tensor([[0], [1]]), thetas, torch.ones(2, 2), torch.empty(2, 0, dtype=torch.long))
    drift = marginal_drift(traj)
    torch.testing.assert_close(drift.mean, torch.tensor([[0.5, 0.5], [0.7, 0.3]], dtype=torch.float64))
    torch.testing.assert_close(drift.std, torch.tensor([[0.0, 0.0], [0.4, 0.4]], dtype=torch.float64) / math.sqrt(2))
    torch.testing.assert_close(marginal_shift(drift), torch.tensor([0.0, 0.4], dtype=torch.float64))


def test_average_drift_figure_hand_computed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # q1 and q3 have 2 options, q2 has 3 and is left out: mean and std are the means of q1's and q3's curves.
    questions = [MCQuestion(f"q{i}", "?", tuple("xyz"[:k]), tuple("ABC"[:k]), "A") for i, k in ((1, 2), (2, 3), (3, 2))]
    records = {"ppr": [
        {"marginal_mean": [[0.5, 0.5], [0.7, 0.3]], "marginal_std": [[0.0, 0.0], [0.1, 0.1]]},
        {"marginal_mean": [[0.2, 0.2, 0.6]] * 2, "marginal_std": [[0.0, 0.0, 0.0]] * 2},
        {"marginal_mean": [[0.4, 0.6], [0.2, 0.8]], "marginal_std": [[0.0, 0.0], [0.3, 0.3]]},
    ]}
    expected_mean, expected_std = np.array([[0.45, 0.55], [0.45, 0.55]]), np.array([[0.0, 0.0], [0.2, 0.2]])
    panels, labels, count, kept = average_panels(questions, [parse_method("ppr")], records)
    assert (labels, count, kept, [title for title, _ in panels]) == (("A", "B"), 2, 2, ["PPR + NoSEED"])
    np.testing.assert_allclose(panels[0][1].mean, expected_mean, atol=1e-7)
    np.testing.assert_allclose(panels[0][1].std, expected_std, atol=1e-7)

    figures = []
    monkeypatch.setattr("beliefdrift.report.plots.save_figure", lambda fig, path: figures.append(fig) or [path])
    path = tmp_path / "drift"
    assert plot_average_drift(questions, [parse_method("ppr")], records, path, "toy") == [path]
    (ax,) = figures[0].axes
    np.testing.assert_allclose([line.get_ydata() for line in ax.lines], expected_mean.T, atol=1e-7)
    assert [line.get_label() for line in ax.lines] == ["A", "B"]
    assert figures[0].get_suptitle() == "toy: mean over 2 questions (2 options, by option position)"
    plt.close(figures[0])


def test_text_helpers() -> None:
    values = [[1.0, 2.0], [3.0, 5.0], [4.0, 4.5]]
    for ddof in (0, 1):
        mean, std = mean_std(values, ddof=ddof)
        np.testing.assert_allclose(mean, np.mean(values, axis=0), rtol=1e-15)
        np.testing.assert_allclose(std, np.std(values, axis=0, ddof=ddof), rtol=1e-15)
    assert mean_std([0.25], ddof=1)[1].item() == 0.0  # one question: no spread rather than NaN
    assert plus_minus(0.12345, 0.0311) == "0.123 ± 0.031"
    assert markdown_table(["a", "b"], [["1", "2"], ["3", "4"]]) == "| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |"


def test_report_writes_pdfs_on_request(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_store(tmp_path, "csqa", synthetic_rows())
    assert main(["report", str(tmp_path), "--bootstrap", "20"]) == 0
    assert [p.name for p in tmp_path.glob("reliability-*")] and not list(tmp_path.glob("*.pdf"))
    assert main(["report", str(tmp_path), "--bootstrap", "20", "--figure-formats", "png", "pdf"]) == 0
    pdfs = {p.name for p in tmp_path.glob("reliability-*.pdf")}
    assert pdfs == {f"reliability-csqa-{m}.pdf" for m in ("am-ppr-seed1", "direct", "ppr", "ppr-seed5")}
    assert main(["report", str(tmp_path), "--figure-formats", "png", "jpg"]) == 2
    error = capsys.readouterr().err
    assert "--figure-formats/--figure_formats: invalid choice: 'jpg' (choose from 'png', 'pdf')" in error


def test_common_question_set_scores_every_method_on_the_same_questions() -> None:
    scores = score_rows(synthetic_rows(), QualityControl(), n_resamples=50)
    per_method = {(s.method.name, s.estimator): (s.n, s.excluded) for s in scores}
    common = score_rows(synthetic_rows(), QualityControl(common=True), n_resamples=50)
    kept = {s.n for s in common}
    assert len(kept) == 1 and kept.pop() == min(n for n, _ in per_method.values())
    assert per_method[("direct", None)] == (5, 0)  # alone it keeps the question PPR's paths fail on
    assert next(s for s in common if s.method.name == "direct").excluded == 1


def test_a_served_run_is_captioned_with_its_served_name() -> None:
    """A run through `--model openai:URL` is named by the model its server serves (the URL's last part is `v1`)."""
    from beliefdrift.report.runs import model_name

    assert model_name({"model": "openai:http://127.0.0.1:8000/v1", "served_model": "org/Llama-70B"}) == "org/Llama-70B"
    assert model_name({"model": "smollm2-135m-instruct"}) == "smollm2-135m-instruct"
