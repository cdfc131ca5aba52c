"""Expected martingale drift (paper §5.1): how far the k-step predictive moves from the 1-step one.

    EMD‾     = mean over k ∈ {2..K}, prefixes a_{1:n} (one of the top-5 for each n ∈ 𝒩) and questions of
               d(p^(k)_n, p^(1)_n);
    EMD_k(b) = mean over questions of d(p^(k)_b, p^(1)_b) at a prefix a_{1:b} sampled from the process (burn-in b),

with d ∈ {L1 = Σ|p − q|, KL(p^(k) ‖ p^(1)), TV = ½ Σ|p − q|}. A martingale has p^(k) = p^(1) for every k, so all
are 0. The paper's d is the "L1 distance" (Figure 3; "L1 distance norm", Appendix E) or KL: `l1` reads it as
Σ|p − q|, `tv` is the total variation, half of it. Whether a figure is more than Monte Carlo noise is tested on
the unbiased ‖p^(k) − p^(1)‖₂² of the same rollouts and its betting terms (`drift_test`), stored beside it as
drift_sq_bar / drift_sq_b and drift_terms_bar / drift_terms_b (one (Y, L, U) / s row per rollout after the first).

Seeded methods (SEED_m): every prefix evaluation draws its own seed set S_{1:m} from the direct-query θ with the
run's generator, and the context is prompt + S_{1:m} + a_{1:n} (the prefix follows the seeds; the top-K prefixes
are searched under that seed set). Burn-in prefixes likewise start after a fresh seed set per sampled path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from beliefdrift.backend import AnswerPaths, LanguageModel
from beliefdrift.config.diagnostics import EMDConfig
from beliefdrift.data.question import MCQuestion
from beliefdrift.diagnostics.drift_test import DriftTest, drift_test
from beliefdrift.diagnostics.kstep import AnswerProcess, KStep, kstep_predictives
from beliefdrift.diagnostics.prefixes import burn_in_prefixes, pick_prefix, top_prefixes
from beliefdrift.engine.methods import Method, parse_method
from beliefdrift.engine.resampling import QuestionRunner, draw_seeds, make_generator
from beliefdrift.metrics.stats import mean_std
from beliefdrift.prompts import DEFAULT_PPR_TEMPLATE, DEFAULT_TEMPLATE_ENDING

KL_FLOOR = 1e-12  # p^(1) is clipped below at this value inside KL (θ can underflow to 0 in float32)
#: The largest value of each distance, and so of EMD‾ (a mean of them): L1 ≤ 2 and TV ≤ 1 between distributions, and
#: KL(p ‖ q) ≤ max_a log(p(a) / q(a)) ≤ −log `KL_FLOOR` ≈ 27.6 through the floor on q. The paired test of Δ EMD‾
#: (`metrics.bounded_mean_p`) needs it: valid for all three, with no power for KL at the usual number of questions.
DISTANCE_BOUNDS = {"l1": 2.0, "kl": -math.log(KL_FLOOR), "tv": 1.0}


def l1_distance(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Σ_a |p(a) − q(a)| over the last dimension."""
    return (p - q).abs().sum(-1)


def kl_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KL(p ‖ q) = Σ_a p(a) log(p(a) / q(a)) over the last dimension (0 log 0 = 0; q clipped at `KL_FLOOR`)."""
    p, q = p.double(), q.double().clamp_min(KL_FLOOR)
    return torch.where(p > 0, p * (p.clamp_min(KL_FLOOR) / q).log(), torch.zeros_like(p)).sum(-1)


def total_variation(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """TV(p, q) = ½ Σ_a |p(a) − q(a)| = max over events E of |p(E) − q(E)|, over the last dimension."""
    return 0.5 * l1_distance(p, q)


DISTANCES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "l1": l1_distance,
    "kl": kl_divergence,
    "tv": total_variation,
}


def kstep_drift(probs: torch.Tensor, distance: str) -> torch.Tensor:
    """d(p^(k), p^(1)) for k = 2 … K from predictives probs [..., K, |𝒜|] (p^(k) at index k − 1): [..., K − 1]."""
    return DISTANCES[distance](probs[..., 1:, :], probs[..., :1, :])


@dataclass(frozen=True)
class QuestionEMD:
    """Everything one question × method contributes to the EMD diagnostics.

    kstep[i] = p^(k)_n (k = 1 … K) at the chosen prefix of length prefix_lengths[i]; burn_in_first[b] / burn_in_kth[b]
    = p^(1)_b / p^(k)_b at each sampled burn-in prefix of length b ([B+1, P, |𝒜|]).
    """

    prefix_lengths: tuple[int, ...]
    prefixes: list[tuple[int, ...]]
    seeds: list[list[int]]  # the seed set of each prefix evaluation (empty without seeding)
    kstep: torch.Tensor  # [|𝒩|, K, |𝒜|]
    exact: bool  # every p^(k) above enumerated exactly (not Monte Carlo)
    prefixes_exact: bool  # every chosen prefix came from a proven top-K list
    burn_in_first: torch.Tensor  # [B+1, P, |𝒜|]
    burn_in_kth: torch.Tensor  # [B+1, P, |𝒜|]
    sq_drift: torch.Tensor | None = None  # unbiased ‖p^(k) − p^(1)‖₂² per prefix length, k = 2 … K: [|𝒩|, K − 1]
    burn_in_sq_drift: torch.Tensor | None = None  # the same of p^(k)_b: [B+1, P]
    burn_in_exact: bool = False  # every burn-in p^(k) enumerated exactly
    bets: list[list[list[float]]] | None = None  # the drift test's terms of each Monte Carlo prefix (`KStep.bets`)
    burn_in_bets: list[list[list[float]]] | None = None  # those of p^(k)_b per b (its P paths' in a row; [] if exact)

    def drift(self, distance: str) -> torch.Tensor:
        """d(p^(k)_n, p^(1)_n) per prefix length and k = 2 … K: [|𝒩|, K − 1]."""
        return kstep_drift(self.kstep, distance)

    def emd_bar(self, distance: str) -> float:
        """This question's EMD‾: the mean of `drift` over prefixes and k."""
        return float(self.drift(distance).mean())

    def burn_in(self, distance: str) -> torch.Tensor:
        """This question's EMD_k(b), b = 0 … B (mean over its burn-in paths): [B+1]."""
        return DISTANCES[distance](self.burn_in_kth, self.burn_in_first).mean(1)

    def summary(self, distances: Sequence[str] = tuple(DISTANCES)) -> dict[str, Any]:
        """Per-question quantities aggregated over questions: emd_bar_<d> and emd_k_b_<d> (a curve over b)."""
        out: dict[str, Any] = {}
        for distance in distances:
            out[f"emd_bar_{distance}"] = self.emd_bar(distance)
            out[f"emd_k_b_{distance}"] = self.burn_in(distance).tolist()
        if self.sq_drift is not None and self.burn_in_sq_drift is not None:
            out |= {"drift_sq_bar": float(self.sq_drift.mean()), "drift_sq_b": self.burn_in_sq_drift.mean(1).tolist(),
                    "drift_exact": self.exact, "burn_in_exact": self.burn_in_exact}
        if self.bets is not None and self.burn_in_bets is not None:
            out |= {"drift_terms_bar": [row for prefix in self.bets for row in prefix],
                    "drift_terms_b": self.burn_in_bets}
        return out

    def record(self) -> dict[str, Any]:
        """The `summary` and its ingredients as JSON-ready values: what the `emd` command stores per question ×
        method (the noise floor is computed from these)."""
        return {
            **self.summary(),
            "prefix_lengths": list(self.prefix_lengths),
            "prefixes": [list(p) for p in self.prefixes],
            "seeds": self.seeds,
            "kstep": self.kstep.tolist(),
            "kstep_exact": self.exact,
            "prefixes_exact": self.prefixes_exact,
            "burn_in_first": self.burn_in_first.tolist(),
            "burn_in_kth": self.burn_in_kth.tolist(),
        }


def _root(
    runner: QuestionRunner, num_seeds: int, paths: int, generator: torch.Generator
) -> tuple[AnswerPaths, list[list[int]]]:
    """`paths` fresh PPR paths, each after its own seed set drawn from the direct-query θ (if seeding)."""
    if not num_seeds:
        return runner.paths(paths), [[] for _ in range(paths)]
    seeds = draw_seeds(runner.direct.probs, paths, num_seeds, generator)
    return runner.paths(paths, seeds), seeds.tolist()


def question_emd(
    runner: QuestionRunner, num_seeds: int, config: EMDConfig, generator: torch.Generator
) -> QuestionEMD:
    """EMD‾ and EMD_k(b) ingredients for the runner's question under PPR (+SEED_`num_seeds`).

    For each n ∈ 𝒩: draw a seed set, find the top-K prefixes of length n, pick one with `generator`, estimate
    p^(k)_n for k ≤ K. Then sample `burn_in_paths` paths and estimate p^(1)_b, p^(k)_b at every b ≤ B.
    """
    prefixes, seed_sets, ksteps, proven = [], [], [], []
    for length in config.prefix_lengths:
        root, seeds = _root(runner, num_seeds, 1, generator)
        top = top_prefixes(root, length, config.top_k, max_expansions=config.max_expansions,
                           budget=config.batch_budget)
        prefix = pick_prefix(top, generator)
        batch = root.select([0])
        if length:
            batch.advance(torch.tensor([prefix.answers]))
        ksteps.append(predictives(batch, config.horizon, config, generator))
        prefixes.append(prefix.answers)
        seed_sets += seeds
        proven.append(top.exact)

    root, _ = _root(runner, num_seeds, config.burn_in_paths, generator)
    first, kth, burn_in_sq, burn_in_exact, burn_in_bets = [], [], [], [], []
    for _, extended, _ in burn_in_prefixes(root, config.burn_in, generator):
        predictive = predictives(extended, config.k, config, generator)
        first.append(predictive.p(1))
        kth.append(predictive.p(config.k))
        burn_in_sq.append(predictive.sq_drift()[:, -1])
        burn_in_exact.append(predictive.exact)
        burn_in_bets.append([] if predictive.exact else predictive.bets(config.k).reshape(-1, 3).tolist())
    return QuestionEMD(
        prefix_lengths=tuple(config.prefix_lengths),
        prefixes=prefixes,
        seeds=seed_sets,
        kstep=torch.cat([ks.probs for ks in ksteps]),
        exact=all(ks.exact for ks in ksteps),
        prefixes_exact=all(proven),
        burn_in_first=torch.stack(first),
        burn_in_kth=torch.stack(kth),
        sq_drift=torch.cat([ks.sq_drift() for ks in ksteps]),
        burn_in_sq_drift=torch.stack(burn_in_sq),
        burn_in_exact=all(burn_in_exact),
        bets=[[] if ks.exact else ks.bets().reshape(-1, 3).tolist() for ks in ksteps],
        burn_in_bets=burn_in_bets,
    )


def predictives(batch: AnswerProcess, horizon: int, config: EMDConfig, generator: torch.Generator) -> KStep:
    """p^(k), k = 1 … `horizon`, with the settings of `config` (J, budgets): the one estimator of every EMD."""
    return kstep_predictives(batch, horizon, config.num_rollouts, generator, config.exact_budget, config.batch_budget)


def emd_generator(seed: int, question: MCQuestion, method: Method) -> torch.Generator:
    """The generator of one question × method EMD evaluation (independent of what else runs)."""
    return make_generator(seed, question.id, method.name, "emd")


@dataclass(frozen=True)
class EMDRow:
    """One method's EMD over questions: EMD‾ mean ± std and the EMD_k(b) curve mean ± std (b = 0 … B); the drift
    tests of EMD‾ and of each EMD_k(b) (`drift_test`, from records that store the unbiased drift; a p where they
    store its betting terms too); with
    `noise_floor.with_floor`, also each figure's Pólya-urn floor (mean, 95% interval) and whether it is above it."""

    method: str
    distance: str
    questions: int
    emd_bar: float
    emd_bar_std: float
    burn_in: list[float]
    burn_in_std: list[float]
    drift: DriftTest | None = None
    burn_in_drift: list[DriftTest] | None = None
    floor: float | None = None
    floor_low: float | None = None
    floor_high: float | None = None
    above_floor: bool | None = None
    floor_p: float | None = None
    floor_replicates: int = 0
    burn_in_floor: list[float] | None = None
    burn_in_floor_low: list[float] | None = None
    burn_in_floor_high: list[float] | None = None
    questions_above_floor: int | None = None  # questions whose own EMD‾ is above their own floor (its p ≤ 2.5%)

    @property
    def floor_band(self) -> tuple[float, float, float] | None:
        """(floor, low, high) of EMD‾'s noise floor and its 95% interval; None without a floor."""
        if self.floor is None or self.floor_low is None or self.floor_high is None:
            return None
        return self.floor, self.floor_low, self.floor_high

    @property
    def burn_in_floor_band(self) -> tuple[list[float], list[float], list[float]] | None:
        """(floor, low, high) of each EMD_k(b)'s noise floor and its 95% interval, b = 0 … B; None without a floor."""
        if self.burn_in_floor is None or self.burn_in_floor_low is None or self.burn_in_floor_high is None:
            return None
        return self.burn_in_floor, self.burn_in_floor_low, self.burn_in_floor_high


def aggregate_emd(method: str, summaries: Sequence[Mapping[str, Any]], distance: str) -> EMDRow:
    """Mean ± std over questions of per-question `QuestionEMD.summary` dicts (as computed or as read back)."""
    if not summaries:
        raise ValueError(f"no EMD results for {method}")
    if any(f"emd_bar_{distance}" not in s for s in summaries):
        raise ValueError(f"{method}: records without the {distance} distance (stored before it existed); "
                         "run again into a new --out directory")
    bar_mean, bar_std = mean_std([s[f"emd_bar_{distance}"] for s in summaries], ddof=1)
    curve_mean, curve_std = mean_std([s[f"emd_k_b_{distance}"] for s in summaries], ddof=1)
    drift, burn_in_drift = None, None
    if all("drift_sq_bar" in s for s in summaries):
        betting = all("drift_terms_bar" in s for s in summaries)  # records stored before this test lack them
        drift = drift_test([s["drift_sq_bar"] for s in summaries], all(s["drift_exact"] for s in summaries),
                           [s["drift_terms_bar"] for s in summaries] if betting else None)
        curves, exact = zip(*[(s["drift_sq_b"], s["burn_in_exact"]) for s in summaries], strict=True)
        bets = zip(*[s["drift_terms_b"] for s in summaries], strict=True) if betting else [None] * len(curves[0])
        burn_in_drift = [drift_test(values, all(exact), at_b)
                         for values, at_b in zip(zip(*curves, strict=True), bets, strict=True)]
    return EMDRow(method, distance, len(summaries), float(bar_mean), float(bar_std), curve_mean.tolist(),
                  curve_std.tolist(), drift, burn_in_drift)


def emd_per_question(
    lm: LanguageModel,
    questions: Sequence[MCQuestion],
    methods: Sequence[Method],
    *,
    config: EMDConfig | None = None,
    seed: int = 0,
    template: str = DEFAULT_PPR_TEMPLATE,
    template_ending: str = DEFAULT_TEMPLATE_ENDING,
) -> dict[str, list[QuestionEMD]]:
    """Each (PPR-type) method's `QuestionEMD` on every question: method name → one per question, in order. Each
    question × method draws from `emd_generator` (run seed, question, method), so these are the numbers the `emd`
    command stores. `.emd_bar(distance)` is a question's EMD‾, `.record()` what the command stores; `emd_rows`
    aggregates them over questions and `noise_floor` adds the Pólya-urn floor, without computing the EMD again.
    AM-PPR methods use `lm` as given (load the adapter into it first)."""
    config = config or EMDConfig()
    if any(not method.resamples for method in methods):
        raise ValueError("EMD needs a resampling method (ppr, ppr-seed<m>, am-ppr…), not direct")
    per_method: dict[str, list[QuestionEMD]] = {method.name: [] for method in methods}
    for question in questions:
        runner = QuestionRunner(lm, question, template, template_ending)
        for method in methods:
            per_method[method.name].append(question_emd(runner, method.num_seeds, config,
                                                        emd_generator(seed, question, method)))
    return per_method


def emd_rows(per_question: Mapping[str, Sequence[QuestionEMD]], distance: str = "l1") -> list[EMDRow]:
    """One `EMDRow` per method of `emd_per_question`'s output (method name → results per question): EMD‾ and
    EMD_k(b), mean ± std over questions, under `distance` (l1, kl or tv)."""
    return [aggregate_emd(parse_method(name).title, [result.summary([distance]) for result in results], distance)
            for name, results in per_question.items()]


def emd_summary(
    lm: LanguageModel,
    questions: Sequence[MCQuestion],
    methods: Sequence[Method],
    *,
    config: EMDConfig | None = None,
    seed: int = 0,
    template: str = DEFAULT_PPR_TEMPLATE,
    distance: str = "l1",
    template_ending: str = DEFAULT_TEMPLATE_ENDING,
) -> list[EMDRow]:
    """EMD‾ and EMD_k(b) of each (PPR-type) method over `questions`, one row per method — the small EMD section of
    a report: `emd_rows(emd_per_question(...), distance)` (use those two to keep each question's EMD). AM-PPR
    methods use `lm` as given (load the adapter into it first)."""
    per_question = emd_per_question(lm, questions, methods, config=config, seed=seed, template=template,
                                    template_ending=template_ending)
    return emd_rows(per_question, distance)
