"""False-positive rate and power of the EMD drift test (`diagnostics.drift_test`) on simulated processes.

Each run draws Q questions, θ_0 ~ Dirichlet(1) over |𝒜| options, and measures them as `question_emd` does: p^(k)
by J Monte Carlo rollouts (`kstep_monte_carlo`, forced even where enumeration would be affordable) at the prefix of
each length n ∈ {0, 2, 4, 6, 8} of one sampled path (EMD‾, k = 2 … 10) and at each b = 0 … 10 of another
(EMD_10(b)). A run is flagged where the one-sided t-test over questions of the unbiased ‖p^(k) − p^(1)‖₂² has
p < 2.5%. Processes θ_{t+1} = (1 − w_t) θ_t + w_t e_{A_{t+1}} (exact martingales) with step schedules:

- urn-α1 / urn-α20: Pólya urns with prior mass α = 1 / 20 (w_t = 1/(α + t + 1));
- constant: w_t = 0.3;
- growing: w_t = min(0.05 (t + 1), 0.9);
- pull-λ (power): the constant-step process, then θ ← (1 − λ) θ + λ e_0 (drawn towards option 0: not a martingale).

Prints, per process × |𝒜| × J, the flag rate (%) of EMD‾ and of every EMD_10(b) over R runs, and the mean plug-in
EMD‾ (L1) that the urn floor was built to explain (its null bias differs by process). Monte Carlo s.e. of a 2.5% rate
over R runs: √(0.025 · 0.975 / R).

    python bench/drift_floor.py [--runs 300] [--questions 30] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from beliefdrift.diagnostics.drift_test import DRIFT_LEVEL, drift_test
from beliefdrift.diagnostics.kstep import kstep_monte_carlo
from beliefdrift.diagnostics.noise_floor import StepProcess, urn_step
from beliefdrift.engine.resampling import make_generator, sample_answers

PREFIX_LENGTHS = (0, 2, 4, 6, 8)
HORIZON = 10  # K of EMD‾ and k of EMD_k(b)
BURN_IN = 10


class PulledProcess(StepProcess):
    """A `StepProcess` whose θ is then pulled towards option 0 by `pull` each step: E[θ_{t+1} | θ_t] ≠ θ_t."""

    pull = 0.0

    def step(self, probs: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
        moved = super().step(probs, answer)
        return (1 - self.pull) * moved + self.pull * torch.nn.functional.one_hot(
            torch.zeros_like(answer), probs.shape[1]).to(probs.dtype)


def pulled(pull: float) -> type[PulledProcess]:
    """A `PulledProcess` class with the given pull."""
    return type(f"Pulled{pull}", (PulledProcess,), {"pull": pull})


@dataclass(frozen=True)
class Setting:
    """A simulated process: its first weight, weight update and class."""

    name: str
    first: float
    next_weight: Callable[[torch.Tensor], torch.Tensor]
    process: type[StepProcess] = StepProcess


def constant(weight: torch.Tensor) -> torch.Tensor:
    """w_{t+1} = w_t."""
    return weight


def growing(weight: torch.Tensor) -> torch.Tensor:
    """w_{t+1} = min(w_t + 0.05, 0.9)."""
    return (weight + 0.05).clamp(max=0.9)


NULLS = (Setting("urn-α1", 1 / 2, urn_step), Setting("urn-α20", 1 / 21, urn_step),
         Setting("constant", 0.3, constant), Setting("growing", 0.05, growing))
DRIFTS = (Setting("pull-0.01", 0.3, constant, pulled(0.01)), Setting("pull-0.02", 0.3, constant, pulled(0.02)))


def simulate(setting: Setting, options: int, rollouts: int, questions: int, runs: int, seed: int,
             budget: int = 1 << 17) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per run and question: the unbiased drift of EMD‾ [R, Q], of EMD_10(b) [R, Q, B+1], and plug-in EMD‾ (L1)."""
    generator = make_generator(seed, setting.name, str(options), str(rollouts))
    size = runs * questions
    theta = torch.distributions.Dirichlet(torch.ones(options, dtype=torch.float64)).sample((size,))
    root = setting.process(theta, torch.full((size,), setting.first, dtype=torch.float64), setting.next_weight)
    paths = [sample_answers(root.select(torch.arange(size)), steps, generator)[0]  # type: ignore[arg-type]
             for steps in (max(PREFIX_LENGTHS), BURN_IN)]
    drifts, plug_in = [], []
    for path, lengths in zip(paths, (PREFIX_LENGTHS, range(BURN_IN + 1)), strict=True):
        for n in lengths:
            state = root.select(torch.arange(size))
            state.advance(path[:, :n])
            kstep = kstep_monte_carlo(state, HORIZON, rollouts, generator, budget)  # type: ignore[arg-type]
            drifts.append(kstep.sq_drift())
            plug_in.append((kstep.probs[:, 1:] - kstep.probs[:, :1]).abs().sum(-1).mean(-1))
    bar = torch.stack(drifts[: len(PREFIX_LENGTHS)], 1).mean((1, 2)).reshape(runs, questions)
    curve = torch.stack([d[:, -1] for d in drifts[len(PREFIX_LENGTHS):]], 1).reshape(runs, questions, -1)
    plug = torch.stack(plug_in[: len(PREFIX_LENGTHS)], 1).mean(1).reshape(runs, questions)
    return bar, curve, plug


def flag_rates(bar: torch.Tensor, curve: torch.Tensor) -> tuple[float, list[float]]:
    """The share of runs `drift_test` flags, for EMD‾ and at every b."""
    def rate(values: torch.Tensor) -> float:
        return sum(bool(drift_test(run.tolist(), exact=False).drifts) for run in values) / len(values)
    return rate(bar), [rate(curve[:, :, b]) for b in range(curve.shape[-1])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    se = 100 * math.sqrt(DRIFT_LEVEL * (1 - DRIFT_LEVEL) / args.runs)
    print(f"R = {args.runs} runs of Q = {args.questions} questions; flag at p < {DRIFT_LEVEL}: nominal "
          f"{100 * DRIFT_LEVEL:.1f}% (Monte Carlo s.e. {se:.1f} points)\n")
    header = ["process", "options", "J", "EMD‾ flag %", *(f"b={b}" for b in range(BURN_IN + 1)), "plug-in EMD‾ L1"]
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    start = time.perf_counter()
    for setting in (*NULLS, *DRIFTS):
        for options in (2, 5):
            for rollouts in (8, 32):
                bar, curve, plug = simulate(setting, options, rollouts, args.questions, args.runs, args.seed)
                emd, per_b = flag_rates(bar, curve)
                cells = [setting.name, str(options), str(rollouts), f"{100 * emd:.1f}",
                         *(f"{100 * r:.1f}" for r in per_b), f"{plug.mean():.4f}"]
                print("| " + " | ".join(cells) + " |", flush=True)
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
