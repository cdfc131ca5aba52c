"""Martingale diagnostics: marginal drift, k-step predictives, expected martingale drift (EMD), c.i.d. check."""

from beliefdrift import lazy_exports

#: Each module and the public names it defines (imported on first use).
_EXPORTS = {
    "beliefdrift.diagnostics.cid": ("CIDCheck", "cid_check", "half_differences", "last_answer_test"),
    "beliefdrift.diagnostics.emd": (
        "DISTANCES", "EMDConfig", "EMDRow", "QuestionEMD", "aggregate_emd", "emd_per_question", "emd_rows",
        "emd_summary", "kl_divergence", "kstep_drift", "l1_distance", "question_emd",
    ),
    "beliefdrift.diagnostics.kstep": (
        "AnswerProcess", "KStep", "enumerate_continuations", "kstep_exact", "kstep_monte_carlo", "kstep_predictives",
    ),
    "beliefdrift.diagnostics.marginal": ("MarginalDrift", "average_drift", "marginal_drift", "marginal_shift"),
    "beliefdrift.diagnostics.noise_floor": ("method_floors", "noise_floor", "question_floor", "with_floor"),
    "beliefdrift.diagnostics.prefixes": ("Prefix", "TopPrefixes", "burn_in_prefixes", "pick_prefix", "top_prefixes"),
}
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
    "emd_per_question",
    "emd_rows",
    "emd_summary",
    "enumerate_continuations",
    "half_differences",
    "kl_divergence",
    "kstep_drift",
    "kstep_exact",
    "kstep_monte_carlo",
    "kstep_predictives",
    "l1_distance",
    "last_answer_test",
    "marginal_drift",
    "marginal_shift",
    "method_floors",
    "noise_floor",
    "pick_prefix",
    "question_emd",
    "question_floor",
    "top_prefixes",
    "with_floor",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
