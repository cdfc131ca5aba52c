"""Metrics on arrays: the functional core (`functional`: accuracy, AUROC, calibration, NLL, Brier, bootstrap
intervals and paired tests, the `METRICS` registry) and summaries over questions (`stats`). The public names are
importable from here too (`from beliefdrift.metrics import accuracy`), on first use."""

from typing import TYPE_CHECKING

from beliefdrift import lazy_exports

#: Each module and the public names it defines (imported on first use).
_EXPORTS = {
    "beliefdrift.metrics.functional": (
        "METRICS", "METRIC_NAMES", "MetricSpec", "NLL_EPS", "REPORT_METRICS", "SUM_TOLERANCE", "Interval",
        "MetricWarning",
        "PairedDelta", "ReliabilityBins", "accuracy", "auroc", "bootstrap_ci", "brier", "ce2", "ce2_squared",
        "ce2_interval", "ece", "interval_valid", "nll", "nll_clipped", "paired_bootstrap",
        "paired_mean_bootstrap", "paired_summary", "predictions", "reliability_bins", "resample_indices",
        "sign_flip_p", "summarize", "valid_only",
    ),
    "beliefdrift.metrics.stats": ("mean_std",),
}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)
if TYPE_CHECKING:  # the names `lazy_exports` imports on first use, for editors and type checkers
    from beliefdrift.metrics.functional import (
        METRIC_NAMES as METRIC_NAMES,
        METRICS as METRICS,
        NLL_EPS as NLL_EPS,
        REPORT_METRICS as REPORT_METRICS,
        SUM_TOLERANCE as SUM_TOLERANCE,
        Interval as Interval,
        MetricSpec as MetricSpec,
        MetricWarning as MetricWarning,
        PairedDelta as PairedDelta,
        ReliabilityBins as ReliabilityBins,
        accuracy as accuracy,
        auroc as auroc,
        bootstrap_ci as bootstrap_ci,
        brier as brier,
        ce2 as ce2,
        ce2_interval as ce2_interval,
        ce2_squared as ce2_squared,
        ece as ece,
        interval_valid as interval_valid,
        nll as nll,
        nll_clipped as nll_clipped,
        paired_bootstrap as paired_bootstrap,
        paired_mean_bootstrap as paired_mean_bootstrap,
        paired_summary as paired_summary,
        predictions as predictions,
        reliability_bins as reliability_bins,
        resample_indices as resample_indices,
        sign_flip_p as sign_flip_p,
        summarize as summarize,
        valid_only as valid_only,
    )
    from beliefdrift.metrics.stats import mean_std as mean_std
else:  # (a module `__getattr__` seen by a type checker would let any name pass)
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
