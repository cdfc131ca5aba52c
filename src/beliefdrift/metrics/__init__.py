"""Metrics on arrays: the functional core (`functional`: accuracy, AUROC, calibration, NLL, Brier, bootstrap
intervals and paired tests, the `METRICS` registry) and summaries over questions (`stats`). The public names are
importable from here too (`from beliefdrift.metrics import accuracy`), on first use."""

from beliefdrift import lazy_exports

#: Each module and the public names it defines (imported on first use).
_EXPORTS = {
    "beliefdrift.metrics.functional": (
        "METRICS", "METRIC_NAMES", "MetricSpec", "NLL_EPS", "REPORT_METRICS", "SUM_TOLERANCE", "Interval",
        "MetricWarning", "PairedDelta", "ReliabilityBins", "accuracy", "auroc", "bootstrap_ci", "brier", "ce2",
        "ce2_squared", "ce2_interval", "ece", "interval_valid", "nll", "nll_clipped", "paired_bootstrap",
        "paired_mean_bootstrap", "paired_summary", "predictions", "reliability_bins", "resample_indices",
        "sign_flip_p", "sign_test_p", "studentized_p", "summarize", "valid_only",
    ),
    "beliefdrift.metrics.stats": ("mean_std",),
}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
