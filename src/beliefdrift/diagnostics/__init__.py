"""Martingale diagnostics: marginal drift, k-step predictives, expected martingale drift (EMD), c.i.d. check."""

from typing import TYPE_CHECKING

from beliefdrift import lazy_exports

#: Each module and the public names it defines (imported on first use).
_EXPORTS = {
    "beliefdrift.diagnostics.cid": ("CIDCheck", "cid_check", "half_differences", "sign_flip_l1_p", "smallest_p"),
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
    "marginal_drift",
    "marginal_shift",
    "method_floors",
    "noise_floor",
    "pick_prefix",
    "question_emd",
    "question_floor",
    "sign_flip_l1_p",
    "smallest_p",
    "top_prefixes",
    "with_floor",
]
if TYPE_CHECKING:  # the names `lazy_exports` imports on first use, for editors and type checkers
    from beliefdrift.diagnostics.cid import (
        CIDCheck as CIDCheck,
        cid_check as cid_check,
        half_differences as half_differences,
        sign_flip_l1_p as sign_flip_l1_p,
        smallest_p as smallest_p,
    )
    from beliefdrift.diagnostics.emd import (
        DISTANCES as DISTANCES,
        EMDConfig as EMDConfig,
        EMDRow as EMDRow,
        QuestionEMD as QuestionEMD,
        aggregate_emd as aggregate_emd,
        emd_per_question as emd_per_question,
        emd_rows as emd_rows,
        emd_summary as emd_summary,
        kl_divergence as kl_divergence,
        kstep_drift as kstep_drift,
        l1_distance as l1_distance,
        question_emd as question_emd,
    )
    from beliefdrift.diagnostics.kstep import (
        AnswerProcess as AnswerProcess,
        KStep as KStep,
        enumerate_continuations as enumerate_continuations,
        kstep_exact as kstep_exact,
        kstep_monte_carlo as kstep_monte_carlo,
        kstep_predictives as kstep_predictives,
    )
    from beliefdrift.diagnostics.marginal import (
        MarginalDrift as MarginalDrift,
        average_drift as average_drift,
        marginal_drift as marginal_drift,
        marginal_shift as marginal_shift,
    )
    from beliefdrift.diagnostics.noise_floor import (
        method_floors as method_floors,
        noise_floor as noise_floor,
        question_floor as question_floor,
        with_floor as with_floor,
    )
    from beliefdrift.diagnostics.prefixes import (
        Prefix as Prefix,
        TopPrefixes as TopPrefixes,
        burn_in_prefixes as burn_in_prefixes,
        pick_prefix as pick_prefix,
        top_prefixes as top_prefixes,
    )
else:  # (a module `__getattr__` seen by a type checker would let any name pass)
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
