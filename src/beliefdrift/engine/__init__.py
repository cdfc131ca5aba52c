"""The sampling engine over `backend/`: direct queries, seeds and PPR paths (`resampling`), the estimators q*, q*_RB
and θ̂_1 (`estimators`), and the methods by name (`methods`)."""
