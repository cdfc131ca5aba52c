"""Martingale diagnostics: marginal drift, k-step predictives, expected martingale drift (EMD), c.i.d. check."""

from beliefdrift.diagnostics.cid import CIDCheck, cid_check, half_differences
from beliefdrift.diagnostics.emd import (
    DISTANCES,
    EMDConfig,
    EMDRow,
    QuestionEMD,
    aggregate_emd,
    emd_summary,
    kl_divergence,
    kstep_drift,
    l1_distance,
    question_emd,
)
from beliefdrift.diagnostics.kstep import (
    AnswerProcess,
    KStep,
    enumerate_continuations,
    kstep_exact,
    kstep_monte_carlo,
    kstep_predictives,
)
from beliefdrift.diagnostics.marginal import MarginalDrift, average_drift, marginal_drift, marginal_shift
from beliefdrift.diagnostics.prefixes import Prefix, TopPrefixes, burn_in_prefixes, pick_prefix, top_prefixes

__all__ = [
    "DISTANCES",
    "AnswerProcess",
    "CIDCheck",
    "EMDConfig",
    "EMDRow",
    "KStep",
    "MarginalDrift",
    "Prefix",
    "QuestionEMD",
    "TopPrefixes",
    "aggregate_emd",
    "average_drift",
    "burn_in_prefixes",
    "cid_check",
    "emd_summary",
    "enumerate_continuations",
    "half_differences",
    "kl_divergence",
    "kstep_drift",
    "kstep_exact",
    "kstep_monte_carlo",
    "kstep_predictives",
    "l1_distance",
    "marginal_drift",
    "marginal_shift",
    "pick_prefix",
    "question_emd",
    "top_prefixes",
]
