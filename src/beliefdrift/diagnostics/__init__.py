"""Martingale diagnostics: marginal drift, k-step predictives, expected martingale drift (EMD), c.i.d. check."""

from typing import TYPE_CHECKING

from beliefdrift.exports import lazy_exports

if TYPE_CHECKING:  # the public names, imported on first use (`beliefdrift.exports`)
    from beliefdrift.diagnostics.cid import CIDCheck as CIDCheck
    from beliefdrift.diagnostics.cid import cid_check as cid_check
    from beliefdrift.diagnostics.cid import half_differences as half_differences
    from beliefdrift.diagnostics.cid import last_answer_test as last_answer_test
    from beliefdrift.diagnostics.emd import DISTANCES as DISTANCES
    from beliefdrift.diagnostics.emd import EMDConfig as EMDConfig
    from beliefdrift.diagnostics.emd import EMDRow as EMDRow
    from beliefdrift.diagnostics.emd import QuestionEMD as QuestionEMD
    from beliefdrift.diagnostics.emd import aggregate_emd as aggregate_emd
    from beliefdrift.diagnostics.emd import emd_per_question as emd_per_question
    from beliefdrift.diagnostics.emd import emd_rows as emd_rows
    from beliefdrift.diagnostics.emd import emd_summary as emd_summary
    from beliefdrift.diagnostics.emd import kl_divergence as kl_divergence
    from beliefdrift.diagnostics.emd import kstep_drift as kstep_drift
    from beliefdrift.diagnostics.emd import l1_distance as l1_distance
    from beliefdrift.diagnostics.emd import question_emd as question_emd
    from beliefdrift.diagnostics.kstep import AnswerProcess as AnswerProcess
    from beliefdrift.diagnostics.kstep import KStep as KStep
    from beliefdrift.diagnostics.kstep import enumerate_continuations as enumerate_continuations
    from beliefdrift.diagnostics.kstep import kstep_exact as kstep_exact
    from beliefdrift.diagnostics.kstep import kstep_monte_carlo as kstep_monte_carlo
    from beliefdrift.diagnostics.kstep import kstep_predictives as kstep_predictives
    from beliefdrift.diagnostics.marginal import MarginalDrift as MarginalDrift
    from beliefdrift.diagnostics.marginal import average_drift as average_drift
    from beliefdrift.diagnostics.marginal import marginal_drift as marginal_drift
    from beliefdrift.diagnostics.marginal import marginal_shift as marginal_shift
    from beliefdrift.diagnostics.noise_floor import method_floors as method_floors
    from beliefdrift.diagnostics.noise_floor import question_floor as question_floor
    from beliefdrift.diagnostics.noise_floor import with_floor as with_floor
    from beliefdrift.diagnostics.prefixes import Prefix as Prefix
    from beliefdrift.diagnostics.prefixes import TopPrefixes as TopPrefixes
    from beliefdrift.diagnostics.prefixes import burn_in_prefixes as burn_in_prefixes
    from beliefdrift.diagnostics.prefixes import pick_prefix as pick_prefix
    from beliefdrift.diagnostics.prefixes import top_prefixes as top_prefixes
else:  # (a module `__getattr__` seen by a type checker would let any name pass)
    __getattr__, __dir__, __all__ = lazy_exports(__name__)
