"""Metrics on arrays: the functional core (`functional`: accuracy, AUROC, calibration, NLL, Brier, bootstrap intervals,
the `METRICS` registry) and summaries over questions (`stats`)."""
