"""Metrics on arrays: the functional core (`functional`: accuracy, AUROC, calibration, NLL, Brier, bootstrap
intervals and paired tests, the `METRICS` registry) and summaries over questions (`stats`). The public names are
importable from here too (`from beliefdrift.metrics import accuracy`), on first use."""

from typing import TYPE_CHECKING

from beliefdrift.exports import lazy_exports

if TYPE_CHECKING:  # the public names, imported on first use (`beliefdrift.exports`)
    from beliefdrift.metrics.functional import METRIC_NAMES as METRIC_NAMES
    from beliefdrift.metrics.functional import METRICS as METRICS
    from beliefdrift.metrics.functional import NLL_EPS as NLL_EPS
    from beliefdrift.metrics.functional import REPORT_METRICS as REPORT_METRICS
    from beliefdrift.metrics.functional import SUM_TOLERANCE as SUM_TOLERANCE
    from beliefdrift.metrics.functional import Interval as Interval
    from beliefdrift.metrics.functional import MetricSpec as MetricSpec
    from beliefdrift.metrics.functional import MetricWarning as MetricWarning
    from beliefdrift.metrics.functional import PairedDelta as PairedDelta
    from beliefdrift.metrics.functional import ReliabilityBins as ReliabilityBins
    from beliefdrift.metrics.functional import accuracy as accuracy
    from beliefdrift.metrics.functional import auroc as auroc
    from beliefdrift.metrics.functional import bootstrap_ci as bootstrap_ci
    from beliefdrift.metrics.functional import bounded_mean_p as bounded_mean_p
    from beliefdrift.metrics.functional import brier as brier
    from beliefdrift.metrics.functional import ce2 as ce2
    from beliefdrift.metrics.functional import ce2_interval as ce2_interval
    from beliefdrift.metrics.functional import ce2_squared as ce2_squared
    from beliefdrift.metrics.functional import ece as ece
    from beliefdrift.metrics.functional import interval_valid as interval_valid
    from beliefdrift.metrics.functional import nll as nll
    from beliefdrift.metrics.functional import nll_bound as nll_bound
    from beliefdrift.metrics.functional import nll_clipped as nll_clipped
    from beliefdrift.metrics.functional import paired_bootstrap as paired_bootstrap
    from beliefdrift.metrics.functional import paired_mean_bootstrap as paired_mean_bootstrap
    from beliefdrift.metrics.functional import paired_summary as paired_summary
    from beliefdrift.metrics.functional import predictions as predictions
    from beliefdrift.metrics.functional import reliability_bins as reliability_bins
    from beliefdrift.metrics.functional import resample_indices as resample_indices
    from beliefdrift.metrics.functional import sign_flip_p as sign_flip_p
    from beliefdrift.metrics.functional import sign_test_p as sign_test_p
    from beliefdrift.metrics.functional import studentized_p as studentized_p
    from beliefdrift.metrics.functional import summarize as summarize
    from beliefdrift.metrics.functional import valid_only as valid_only
    from beliefdrift.metrics.stats import mean_std as mean_std
else:  # (a module `__getattr__` seen by a type checker would let any name pass)
    __getattr__, __dir__, __all__ = lazy_exports(__name__)
