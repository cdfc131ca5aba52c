"""EMD: distances, hand-computed drift, zero drift for history-blind models, the c.i.d. statistic, the record
files and the `drift` / `emd` commands end to end on the tiny model."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace

import pytest
import torch
from process_stubs import HistoryProcess, count_drift, history_blind, polya, runner_for
from table_checks import table_problems

from beliefdrift.cli.main import main
from beliefdrift.diagnostics.cid import cid_check, half_differences, last_answer_test
from beliefdrift.diagnostics.emd import (
    EMDConfig,
    aggregate_emd,
    emd_per_question,
    emd_rows,
    emd_summary,
    kl_divergence,
    kstep_drift,
    l1_distance,
    question_emd,
)
from beliefdrift.diagnostics.kstep import kstep_exact, kstep_monte_carlo
from beliefdrift.diagnostics.noise_floor import StepProcess
from beliefdrift.engine.methods import parse_method
from beliefdrift.engine.resampling import make_generator, sample_answers
from beliefdrift.runs.records import stored_records
from beliefdrift.runs.store import CHECKSUM_INSERT, STORE_FILE, RunStore, checksum_row, config_parts

SMALL = EMDConfig(horizon=3, prefix_lengths=(0, 2), top_k=3, num_rollouts=6, burn_in=2, k=3)

pytest_plugins = ["process_stubs"]  # drifting_lm, short_template


def test_distances_by_hand():
    p, q = torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.25, 0.25, 0.5])
    assert float(l1_distance(p, q)) == pytest.approx(1.0)
    assert float(kl_divergence(p, q)) == pytest.approx(math.log(2))  # 0·log 0 counts 0
    assert float(kl_divergence(q, q)) == 0.0


def test_emd_of_a_known_drift():
    # θ(A) = 0.3 + 0.2·#A: p^(1)(A) = .3, p^(2)(A) = .36, p^(3)(A) = .432 (test_kstep).
    drift = kstep_drift(kstep_exact(HistoryProcess(count_drift), horizon=3).probs, "l1")[0]
    torch.testing.assert_close(drift, torch.tensor([0.12, 0.264], dtype=torch.float64))
    kl = kstep_drift(kstep_exact(HistoryProcess(count_drift), horizon=2).probs, "kl")[0, 0]
    assert float(kl) == pytest.approx(0.36 * math.log(0.36 / 0.3) + 0.64 * math.log(0.64 / 0.7))


@pytest.mark.parametrize("theta", [lambda h: [0.2, 0.5, 0.3], polya], ids=["constant", "polya"])
def test_emd_is_zero_for_martingales(theta):
    process = HistoryProcess(theta, [(), (1, 2)])
    assert kstep_drift(kstep_exact(process, horizon=4).probs, "l1").abs().max() < 1e-12
    if theta is not polya:  # every Monte Carlo continuation sees the same θ
        mc = kstep_monte_carlo(process, 4, num_rollouts=5, generator=make_generator(0))
        assert kstep_drift(mc.probs, "kl").abs().max() < 1e-12


@pytest.mark.parametrize("num_seeds", [0, 2])
def test_emd_is_zero_for_a_history_blind_model(tiny_model_dir, short_template, num_seeds):
    runner = runner_for(history_blind(tiny_model_dir), short_template)
    config = replace(SMALL, exact_budget=0) if num_seeds else SMALL  # the seeded case goes through Monte Carlo
    result = question_emd(runner, num_seeds, config, make_generator(0))
    assert result.exact is not bool(num_seeds)
    assert result.kstep.shape == (2, 3, 4) and [len(p) for p in result.prefixes] == [0, 2]
    assert [len(s) for s in result.seeds] == [num_seeds, num_seeds]
    for distance in ("l1", "kl"):
        assert result.emd_bar(distance) < 1e-6
        assert result.burn_in(distance).abs().max() < 1e-6


def test_emd_of_a_drifting_model_is_positive_and_reproducible(drifting_lm, short_template):
    runner = runner_for(drifting_lm, short_template)
    first = question_emd(runner, 1, SMALL, make_generator(5))
    again = question_emd(runner, 1, SMALL, make_generator(5))
    assert first.exact and first.prefixes_exact  # 4^2 continuations: enumerated
    assert first.emd_bar("l1") > 0.05
    assert first.prefixes == again.prefixes and first.seeds == again.seeds
    torch.testing.assert_close(first.burn_in_kth, again.burn_in_kth)
    summary = first.summary()
    assert summary["emd_bar_kl"] == pytest.approx(first.emd_bar("kl")) and len(summary["emd_k_b_l1"]) == 3


def test_aggregate_and_emd_summary(drifting_lm, short_template):
    row = aggregate_emd("m", [{"emd_bar_l1": 0.1, "emd_k_b_l1": [1.0, 0.0]},
                              {"emd_bar_l1": 0.3, "emd_k_b_l1": [3.0, 0.0]}], "l1")
    assert row.emd_bar == pytest.approx(0.2) and row.emd_bar_std == pytest.approx(math.sqrt(0.02))
    assert row.burn_in == pytest.approx([2.0, 0.0]) and row.questions == 2
    question = runner_for(drifting_lm, short_template).question
    methods = [parse_method("ppr"), parse_method("ppr-seed1")]
    rows = emd_summary(drifting_lm, [question], methods, config=SMALL, template=short_template)
    assert [r.method for r in rows] == ["PPR + NoSEED", "PPR + SEED_1"] and all(r.emd_bar > 0 for r in rows)
    # The per-question results are the summary's ingredients: aggregated, they give the same rows
    per_question = emd_per_question(drifting_lm, [question], methods, config=SMALL, template=short_template)
    again = emd_rows(per_question)
    assert [(r.method, r.emd_bar, r.burn_in) for r in again] == [(r.method, r.emd_bar, r.burn_in) for r in rows]
    assert [r.emd_bar for r in rows] == [results[0].emd_bar("l1") for results in per_question.values()]
    with pytest.raises(ValueError, match="resampling"):
        emd_summary(drifting_lm, [question], [parse_method("direct")], config=SMALL)
    with pytest.raises(TypeError, match="positional"):  # the settings are keyword-only
        emd_summary(drifting_lm, [question], methods, SMALL, template=short_template)


def test_cid_statistic_by_hand():
    answers = torch.tensor([[0, 0, 1, 1], [0, 1, 0, 1], [1, 1, 0, 0]])
    # halves: (1,0)−(0,1) = (1,−1); (.5,.5)−(.5,.5) = 0; (0,1)−(1,0) = (−1,1)
    torch.testing.assert_close(half_differences(answers, 2),
                               torch.tensor([[1.0, -1.0], [0.0, 0.0], [-1.0, 1.0]], dtype=torch.float64))
    check = cid_check(answers, 2, make_generator(0), start=torch.full((3, 2), 0.5))
    torch.testing.assert_close(check.difference, torch.zeros(2, dtype=torch.float64))
    assert check.l1 == 0.0 and check.consistent and (check.low <= 0).all() and (check.high >= 0).all()
    # Odd N drops the middle answer; paths that start at θ_0 = (0.9, 0.1) and all end on B are flagged: under c.i.d.
    # six last answers B have probability 10⁻⁶.
    drifting = torch.tensor([[0, 0, 1, 1, 1]] * 6)
    torch.testing.assert_close(half_differences(drifting, 2)[0], torch.tensor([1.0, -1.0], dtype=torch.float64))
    flagged = cid_check(drifting, 2, make_generator(0), start=torch.tensor([[0.9, 0.1]] * 6))
    assert flagged.l1 == pytest.approx(2.0) and not flagged.consistent and flagged.p == 1 / 1001


def exact_tail(value: float, start: torch.Tensor) -> float:
    """P(T* ≥ value) for the last answers A*_j ~ start[j], over every outcome."""
    paths, labels = start.shape
    total = 0.0
    for outcome in itertools.product(range(labels), repeat=paths):
        t = (torch.nn.functional.one_hot(torch.tensor(outcome), labels).double() - start).mean(0).abs().sum()
        if t >= value - 1e-12:
            total += float(torch.prod(start[torch.arange(paths), torch.tensor(outcome)]))
    return total


def test_cid_p_is_the_monte_carlo_tail_of_the_last_answers_against_their_first_predictives():
    start = torch.tensor([[0.5, 0.3, 0.2], [0.6, 0.2, 0.2], [0.1, 0.1, 0.8], [0.3, 0.3, 0.4]], dtype=torch.float64)
    last = torch.tensor([1, 1, 0, 1])
    observed = float((torch.nn.functional.one_hot(last, 3).double() - start).mean(0).abs().sum())
    p, smallest = last_answer_test(last, start, make_generator(0), resamples=20000)
    assert p == pytest.approx(exact_tail(observed, start), abs=0.01)
    # the largest T: every last answer on the option with the least total mass (option 1: 0.9 of 4)
    assert smallest == pytest.approx(exact_tail(2 * (1 - 0.9 / 4), start), abs=0.002)
    answers = torch.cat([torch.zeros(4, 5, dtype=torch.long), last[:, None]], 1)
    check = cid_check(answers, 3, make_generator(0), resamples=20000, start=start)
    assert check.p == pytest.approx(p, abs=0.01) and check.smallest_p == pytest.approx(smallest, abs=0.002)


def freezing_paths(theta: list[float], paths: int, questions: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Answers [Q, J, 20] of a c.i.d. process that is not exchangeable: θ_{t+1} = (1 − w_t) θ_t + w_t e_A with
    w_t = min(1, 0.01 · 1.5^t), so the late answers of a path repeat one option."""
    generator = make_generator(seed, "freezing")
    start = torch.tensor(theta, dtype=torch.float64).repeat(questions * paths, 1)
    process = StepProcess(start, torch.full((len(start),), 0.01, dtype=torch.float64),
                          lambda weight: (1.5 * weight).clamp(max=1.0))
    answers = sample_answers(process, 20, generator)[0]
    return answers.view(questions, paths, 20), start.view(questions, paths, -1)


def test_cid_check_holds_its_level_on_a_c_i_d_process_whose_late_answers_freeze():
    """The sign-flip test of ‖D̄‖₁ rejected 16% of such questions (θ_0 = (0.9, 0.1), J = 16); the test of the last
    answers against θ_0 is valid for every c.i.d. process: at most 5% + 2 s.e. of 300 questions."""
    answers, start = freezing_paths([0.9, 0.1], 16, 300, seed=0)
    rejected = sum(not cid_check(a, 2, make_generator(i), resamples=200, start=s).consistent
                   for i, (a, s) in enumerate(zip(answers, start, strict=True)))
    assert rejected / 300 <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 300), rejected


def test_cid_check_rejects_exchangeable_answers_at_its_level_over_all_options():
    """i.i.d. answers are c.i.d.: 5% of questions at most may reject at level 95%. One band per option would reject
    several times as many (its size grows with the options), and a band-based verdict fails this test."""
    generator = torch.Generator().manual_seed(0)
    exponential = -torch.rand(400, 5, generator=generator, dtype=torch.float64).log()
    probs = exponential / exponential.sum(1, keepdim=True)  # each question's answer distribution, Dirichlet(1)
    checks = [cid_check(torch.multinomial(p, 8 * 10, replacement=True, generator=generator).view(8, 10), 5,
                        make_generator(i), resamples=200, start=p.repeat(8, 1)) for i, p in enumerate(probs)]
    rejected = sum(not check.consistent for check in checks) / len(checks)
    banded = sum(not ((c.low <= 0) & (c.high >= 0)).all() for c in checks) / len(checks)
    assert rejected <= 0.07 and banded > 0.15, (rejected, banded)


def test_cid_band_is_the_percentile_bootstrap_over_paths():
    # The shared resampler draws the paths as torch.randint did, so stored bands (and "c.i.d. rejected") stay.
    answers = torch.randint(3, (9, 6), generator=torch.Generator().manual_seed(1))
    check = cid_check(answers, 3, make_generator(0, "q"), resamples=400, level=0.9, start=torch.full((9, 3), 1 / 3))
    index = torch.randint(9, (400, 9), generator=make_generator(0, "q"))
    means = half_differences(answers, 3)[index].mean(1)
    tail = (1 - 0.9) / 2
    low, high = torch.quantile(means, torch.tensor([tail, 1 - tail], dtype=torch.float64), dim=0)
    assert torch.equal(check.low, low) and torch.equal(check.high, high)
    assert (check.low < check.difference).all() and (check.difference < check.high).all()


def test_records_resume_and_their_csv(tmp_path):
    with RunStore.open(tmp_path / STORE_FILE) as store:
        store.ensure_config({"K": 10, "lengths": (0, 2)})
        assert not store.has_records("q/1", "ppr")
        store.add_records("q/1", {"ppr": {"emd_bar_l1": 0.5, "curve": [1.0, 2.0], "ok": True}})
    with RunStore.open(tmp_path / STORE_FILE) as resumed:
        resumed.ensure_config({"K": 10, "lengths": (0, 2)})  # tuples compare equal after a JSON round trip
        assert resumed.has_records("q/1", "ppr") and resumed.records("q/1", "ppr")["curve"] == [1.0, 2.0]
        resumed.add_records("q/1", {"ppr": {"emd_bar_l1": 0.7}})  # e.g. another process got there first
        with pytest.raises(ValueError, match="K"):
            resumed.ensure_config({"K": 5, "lengths": (0, 2)})
    records = stored_records(tmp_path, ["q/1"], ["ppr"])
    assert records["q/1", "ppr"]["emd_bar_l1"] == 0.5  # the first stays
    csv_text = (tmp_path / "records.csv").read_text().splitlines()
    assert csv_text == ["question_id,method,quantity,value", "q/1,ppr,emd_bar_l1,0.5", "q/1,ppr,ok,True"]


def test_emd_and_drift_commands_end_to_end(tiny_model_dir, short_template, tmp_path, capsys):
    common = ["--model", str(tiny_model_dir), "--template", short_template, "--dataset", "demo", "--n", "1",
              "-J", "4", "-N", "4", "--methods", "ppr", "ppr-seed2"]
    emd_args = ["emd", *common, "--horizon", "3", "--prefix-lengths", "0", "1", "--burn-in", "2", "--lookahead", "3",
                "--distance", "kl", "--out", str(tmp_path / "emd")]
    assert main(emd_args) == 0
    out = tmp_path / "emd"
    # The store is closed when the command returns: every record is in run.sqlite, none only in its write-ahead log.
    assert not (out / f"{STORE_FILE}-wal").exists() or (out / f"{STORE_FILE}-wal").stat().st_size == 0
    for name in ("summary.md", "summary.json", "records.csv", "emd_bar_kl.png", "emd_bar_kl.pdf", "emd_k_b_kl.png"):
        assert (out / name).exists(), name
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {"ppr", "ppr-seed2"} and summary["ppr"]["kl"]["questions"] == 1
    printed = capsys.readouterr()
    # Every table titled and ≤ 100 columns; each abbreviation said once; the last line names every file written.
    assert table_problems(printed.out) == [] and printed.out.count("EMD_3(b):") == 1
    assert "**EMD, KL distance.**" in printed.out and "**Drift test.**" in printed.out
    assert "run.sqlite" in printed.err.splitlines()[-1] and "records.csv" in printed.err.splitlines()[-1]
    with RunStore.open(out / STORE_FILE, create=False) as store:
        before = [store.records(q, m) for q, m in store.record_units()]
    assert len(before) == 2 and all("emd_bar_kl" in r for r in before)
    capsys.readouterr()
    assert main(emd_args) == 0  # resumes: nothing recomputed
    with RunStore.open(out / STORE_FILE, create=False) as store:
        assert [store.records(q, m) for q, m in store.record_units()] == before
    assert "(2 of 2 stored already: resuming)" in capsys.readouterr().err
    assert main([*emd_args, "--horizon", "4"]) == 2  # different settings in the same directory
    # a store of the former drift test (its increments Y_j / |L_j|) is refused, naming the test, not resumed
    with RunStore.open(out / STORE_FILE) as store:
        store._db.execute("UPDATE config SET value = ? WHERE key = 'drift_test'", (json.dumps(
            "betting e-value over rollouts of the sequential U-statistic, simplex bounds"),))
        texts = store._db.execute("SELECT key, value FROM config").fetchall()
        store._db.execute(CHECKSUM_INSERT, ("config", "", "", *checksum_row(config_parts(texts))))
    capsys.readouterr()
    assert main(emd_args) == 2 and "drift_test: stored 'betting e-value" in capsys.readouterr().err

    capsys.readouterr()
    assert main(["drift", *common, "--plot-questions", "0", "--out", str(tmp_path / "drift")]) == 0
    printed = capsys.readouterr()
    assert table_problems(printed.out) == [] and "**Marginal drift and c.i.d. check" in printed.out
    assert "run.sqlite" in printed.err.splitlines()[-1]
    drift_out = tmp_path / "drift"
    assert not (drift_out / f"{STORE_FILE}-wal").exists() or (drift_out / f"{STORE_FILE}-wal").stat().st_size == 0
    assert (drift_out / "marginal_drift.png").exists() and (drift_out / "marginal_shift.pdf").exists()
    with RunStore.open(drift_out / STORE_FILE, create=False) as store:
        quantities = store.records(store.record_units()[0][0], "ppr")
    assert len(quantities["marginal_mean"]) == 5 and quantities["marginal_shift"][0] == 0.0


def test_adapter_runs_am_ppr_and_leaves_base_methods_untouched(tiny_model_dir, short_template, tmp_path):
    from peft import LoraConfig, get_peft_model

    from beliefdrift.backend import load_model
    from beliefdrift.config.diagnostics import DiagnosticsConfig
    from beliefdrift.runs.loop import Models

    lora = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)  # random: changes θ
    get_peft_model(load_model(str(tiny_model_dir), dtype="float32").model, lora).save_pretrained(tmp_path / "adapter")
    models = Models.load(DiagnosticsConfig(model=str(tiny_model_dir), dtype="float32",
                                           adapter=str(tmp_path / "adapter")))
    base = runner_for(load_model(str(tiny_model_dir), dtype="float32"), short_template).paths(1).dist.probs
    for name, tuned in [("ppr-seed1", False), ("am-ppr", True), ("ppr", False)]:
        for lm, _ in models.groups([parse_method(name)]):
            theta = runner_for(lm, short_template).paths(1).dist.probs
        assert torch.allclose(theta, base, atol=1e-6) is not tuned, name


def test_the_smallest_cid_p_comes_from_the_paths_drawn():
    """At θ_0 = (½, ½) the largest T (every last answer the same) has probability 2/2^J: 5 paths cannot reject
    (0.0625), 6 can; a near-certain question can be rejected with 2 paths (its paths could both end on the rare
    option), where the sign-flip test's smallest p, 2/2^J, was ½ whatever the paths."""
    ending = torch.tensor([[0, 0, 1, 1, 1]])
    for paths in (5, 6):
        check = cid_check(ending.repeat(paths, 1), 2, make_generator(0), resamples=4000,
                          start=torch.full((paths, 2), 0.5))
        assert check.smallest_p == pytest.approx(2 / 2**paths, abs=0.01) and (check.smallest_p <= 0.05) == (paths == 6)
    certain = cid_check(torch.tensor([[0, 0, 0, 1]] * 2), 2, make_generator(0),
                        start=torch.tensor([[0.99, 0.01]] * 2))
    assert certain.smallest_p == certain.p < 0.01 and not certain.consistent
