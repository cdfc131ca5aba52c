"""EMD noise floor: the Pólya-urn null is the martingale stub, exact enumeration gives it EMD = 0, its Monte Carlo
floor is positive, shrinks like 1/√J and matches what the estimator measures on a real urn, a self-reinforcing
process lies above it, and the `emd` command prints and stores it without changing the measured numbers."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import pytest
import torch
from process_stubs import HistoryProcess, count_drift, polya

from beliefdrift.cli.main import main
from beliefdrift.diagnostics.emd import EMDConfig, aggregate_emd, kstep_drift
from beliefdrift.diagnostics.kstep import kstep_exact, kstep_monte_carlo
from beliefdrift.diagnostics.noise_floor import (
    StepProcess,
    _band,
    fit_weight,
    missing_fields,
    question_floor,
    replicate_summaries,
    spread_fields,
    urn_weights,
    with_floor,
)
from beliefdrift.engine.resampling import make_generator, sample_answers

UNIFORM = torch.full((1, 3), 1 / 3, dtype=torch.float64)
QUESTIONS = 20

pytest_plugins = ["process_stubs"]  # short_template


def urn_record(theta: torch.Tensor, weight: float, horizon: int, steps: int = 8) -> dict:
    """A stored record of one prefix (n = 0) at θ whose paths move exactly as the urn with weight w_0 does on
    average: room_t = 1 − E‖θ_t‖² shrinks by (1 − w_t²) a step, E‖θ_{t+1} − θ_t‖² = w_t² room_t."""
    weights = urn_weights(weight, steps)
    room = (1 - theta.square().sum()) * torch.cat([torch.ones(1), (1 - weights[:-1].square()).cumprod(0)])
    return {"prefix_lengths": [0], "prefixes": [[]], "seeds": [[]], "prefixes_exact": True,
            "kstep": theta[None, None].expand(1, horizon, -1).tolist(), "burn_in_first": theta[None, None].tolist(),
            "theta_step_sq": (weights.square() * room).tolist(), "theta_room": room.tolist()}


def sampled_record(theta: Callable[[tuple[int, ...]], Sequence[float]], horizon: int, generator: torch.Generator,
                   paths: int = 8, steps: int = 10) -> dict:
    """The record the `emd` command stores for the stub process at the empty prefix (J × N paths for the spread)."""
    _, thetas, _ = sample_answers(HistoryProcess(theta, [()] * paths), steps, generator)  # type: ignore[arg-type]
    return {**urn_record(torch.tensor(theta(()), dtype=torch.float64), 0.0, horizon), **spread_fields(thetas)}


def measured_row(theta: Callable[[tuple[int, ...]], Sequence[float]], config: EMDConfig, seed: int):
    """EMD‾ (L1) of the stub process at the empty prefix over `QUESTIONS` independent Monte Carlo measurements."""
    estimate = kstep_monte_carlo(HistoryProcess(theta, [()] * QUESTIONS), config.horizon, config.num_rollouts,
                                 make_generator(seed))
    summaries = [{"emd_bar_l1": float(b), "emd_k_b_l1": [0.0]} for b in kstep_drift(estimate.probs, "l1").mean(-1)]
    return aggregate_emd("m", summaries, "l1"), summaries


def floor_of(records: list[dict], config: EMDConfig, replicates: int = 200):
    generators = [make_generator(0, i, "floor") for i in range(len(records))]
    return replicate_summaries(records, generators, config, replicates, ["l1"])


def test_urn_is_the_polya_stub_and_a_martingale():
    urn, stub = StepProcess(UNIFORM.clone(), torch.tensor([0.25], dtype=torch.float64)), HistoryProcess(polya)
    for answers in ([[2]], [[2, 0, 2]]):
        urn.advance(torch.tensor(answers))
        stub.advance(torch.tensor(answers))
        torch.testing.assert_close(urn.dist.probs, stub.dist.probs)
    theta = torch.tensor([[0.7, 0.2, 0.1], [0.05, 0.05, 0.9]], dtype=torch.float64)
    for weight in (0.0, 0.3, 1.0):
        probs = kstep_exact(StepProcess(theta, torch.full((2,), weight, dtype=torch.float64)), horizon=5).probs
        for distance in ("l1", "kl"):
            assert kstep_drift(probs, distance).abs().max() < 1e-12


def test_fit_weight_recovers_the_urn():
    theta = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
    for weight in (0.05, 0.25, 0.7):
        record = urn_record(theta, weight, horizon=3)
        assert fit_weight(record["theta_step_sq"], record["theta_room"]) == pytest.approx(weight, abs=1e-6)
    # From sampled paths of the urn stub (w_0 = 1/4): the method of moments lands near it.
    records = [sampled_record(polya, 3, make_generator(9, i), paths=64) for i in range(4)]
    fits = [fit_weight(r["theta_step_sq"], r["theta_room"]) for r in records]
    assert all(0.2 < w < 0.3 for w in fits)
    assert fit_weight([0.0] * 4, [0.5] * 4) == 0.0  # θ never moves: w = 0, the urn stays put
    assert fit_weight([0.6] * 4, [0.5] * 4) == 1.0  # more movement than any urn: the largest step
    with pytest.raises(ValueError, match="-N"):
        fit_weight([], [])


def test_exact_estimator_gives_an_exact_martingale_zero_floor():
    config = EMDConfig(horizon=4, prefix_lengths=(0,), k=4)  # 3^3 continuations: enumerated
    replicates = question_floor(urn_record(UNIFORM[0], 0.4, horizon=4), config, 3, make_generator(0))
    assert all(r.exact for r in replicates)
    assert max(r.emd_bar(d) for r in replicates for d in ("l1", "kl", "tv")) < 1e-12
    assert max(float(r.burn_in("l1").max()) for r in replicates) < 1e-12


def test_monte_carlo_floor_is_positive_and_shrinks_like_one_over_sqrt_j():
    record = urn_record(torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64), 0.25, horizon=4)
    floors = []
    for paths in (4, 64):
        config = EMDConfig(horizon=4, prefix_lengths=(0,), num_rollouts=paths, k=4, exact_budget=0)
        replicates = question_floor(record, config, 400, make_generator(1))
        assert not replicates[0].exact
        floors.append(sum(r.emd_bar("l1") for r in replicates) / len(replicates))
    assert floors[1] > 0.01 and 3.2 < floors[0] / floors[1] < 4.8  # √(64 / 4) = 4


def test_floor_matches_the_estimator_on_a_real_urn():
    # The stub urn has EMD = 0 exactly; what the estimator reports on it is the floor, and the floor matched to
    # its sampled paths predicts it: same mean within sampling error, and the measurement is not flagged.
    config = EMDConfig(horizon=4, prefix_lengths=(0,), num_rollouts=8, k=4, exact_budget=0)
    records = [sampled_record(polya, 4, make_generator(2, i)) for i in range(QUESTIONS)]
    row = with_floor(*measured_row(polya, config, seed=3), floor_of(records, config))
    assert row.floor_low < row.emd_bar < row.floor_high and not row.above_floor and row.floor_p > 0.05
    assert row.floor == pytest.approx(row.emd_bar, rel=0.2) and row.floor_replicates == 200
    assert row.questions_above_floor <= 3  # each question's own test: about 2.5% flagged
    assert row.burn_in_floor[0] > 0 and len(row.burn_in_floor_high) == 1  # EMD_k(0) at the same prefix


def test_self_reinforcing_process_is_above_its_floor():
    config = EMDConfig(horizon=4, prefix_lengths=(0,), num_rollouts=32, k=4, exact_budget=0)
    records = [sampled_record(count_drift, 4, make_generator(4, i)) for i in range(QUESTIONS)]
    row = with_floor(*measured_row(count_drift, config, seed=5), floor_of(records, config))
    assert row.above_floor and row.floor_p < 0.01 and row.emd_bar > 2 * row.floor_high
    assert row.questions_above_floor >= QUESTIONS // 2


def test_above_floor_is_the_monte_carlo_test_at_2_5_percent():
    # 2 of R = 100 replicates reach the measured value: p = 3/101 > 2.5%, not flagged, though it exceeds the
    # interpolated 97.5% quantile; at R = 20 even the largest value has p = 1/21 and nothing is flagged.
    _, _, high, above, p = _band(torch.arange(100, dtype=torch.float64), torch.tensor(97.5, dtype=torch.float64))
    assert high < 97.5 and p.item() == 3 / 101 and not above  # p in float64, exactly (1 + 2) / (100 + 1)
    assert _band(torch.arange(100, dtype=torch.float64), torch.tensor(98.5, dtype=torch.float64))[3]
    assert not _band(torch.arange(20, dtype=torch.float64), torch.tensor(99.0, dtype=torch.float64))[3]
    # under the null (measured exchangeable with the replicates) the flag rate is at most 2.5%
    draws = torch.rand(101, 20000, generator=make_generator(6), dtype=torch.float64)
    _, _, _, above, p = _band(draws[:100], draws[100])
    assert torch.equal(above, p <= 0.025) and above.double().mean() <= 0.025


def test_old_records_are_refused_clearly():
    record = urn_record(UNIFORM[0], 0.2, horizon=3)
    del record["theta_room"]
    assert missing_fields([urn_record(UNIFORM[0], 0.2, horizon=3), record]) == ["theta_room"]
    with pytest.raises(ValueError, match="theta_room.*new --out"):
        question_floor(record, EMDConfig(horizon=3, prefix_lengths=(0,), k=3), 2, make_generator(0))


def test_emd_command_prints_and_stores_the_floor(tiny_model_dir, short_template, tmp_path, capsys):
    args = ["emd", "--model", str(tiny_model_dir), "--template", short_template, "--dataset", "demo", "--n", "1",
            "-J", "4", "-N", "4", "--methods", "ppr", "ppr-seed1", "--horizon", "3", "--prefix-lengths", "0", "1",
            "--burn-in", "1", "--lookahead", "3", "--distance", "l1", "kl", "--exact-budget", "0",
            "--out", str(tmp_path)]
    summary = tmp_path / "summary.json"
    assert main([*args, "--noise-floor-replicates", "0"]) == 0
    off, before = capsys.readouterr().out, json.loads(summary.read_text())
    assert main([*args, "--noise-floor-replicates", "20"]) == 0  # from the stored records: nothing recomputed
    printed = capsys.readouterr()
    on, after = printed.out, json.loads(summary.read_text())
    assert "urn floor" not in off and "(2 of 2 stored already: resuming)" in printed.err
    assert on.count("| urn floor [95%] |") == 6 and on.count("| > urn floor (p) |") == 2  # 3 per distance
    assert off.count("drift Û") == 4  # 3 columns and the caption
    for method in ("ppr", "ppr-seed1"):
        for distance in ("l1", "kl"):
            old, new = before[method][distance], after[method][distance]
            assert old["floor"] is None and new["floor_replicates"] == 20
            assert new["emd_bar"] == old["emd_bar"] and new["burn_in"] == old["burn_in"]  # measured: unchanged
            assert 0 <= new["floor_low"] <= new["floor"] <= new["floor_high"]
            assert new["above_floor"] == (new["floor_p"] <= 0.025) and len(new["burn_in_floor"]) == 2
    assert after["ppr"]["l1"]["floor"] > 0
    drift = after["ppr"]["l1"]["drift"]  # one question: no s.e., but the betting test needs no more
    assert drift == before["ppr"]["kl"]["drift"] and drift["se"] is None and drift["questions"] == 1
    assert 0 < drift["p"] <= 1
    assert main([*args, "--noise-floor-replicates", "20"]) == 0
    assert json.loads(summary.read_text()) == after  # the floor's own generator: reproducible
