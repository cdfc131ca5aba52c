"""Martingale diagnostics: marginal drift, k-step predictives, expected martingale drift (EMD)."""

from beliefdrift.diagnostics.marginal import MarginalDrift, marginal_drift

__all__ = ["MarginalDrift", "marginal_drift"]
