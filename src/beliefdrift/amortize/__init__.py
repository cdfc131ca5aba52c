"""Martingale amortization (AM-PPR): rollout datasets, the self-consistency loss and the LoRA trainer.

The trained adapter loads with `beliefdrift.backend.adapters.load_adapter(lm, path)` (and `--adapter` on the CLI).
"""

from beliefdrift import lazy_exports

#: Each module and the public names it defines (imported on first use).
_EXPORTS = {
    "beliefdrift.amortize.backward": ("backward_sc_loss",),
    "beliefdrift.amortize.forward": ("PrefixState", "conditionals", "encode_prefix", "rollout_conditionals"),
    "beliefdrift.amortize.loss": (
        "SCLossOutput", "SelfConsistencyLoss", "draw_horizons", "expected_sc_loss", "horizon_pairs", "log_predictive",
    ),
    "beliefdrift.amortize.rollouts": (
        "RolloutGroup", "generate_group", "generate_groups", "group_id", "load_rollouts", "sample_prefix",
        "sample_rollouts", "save_rollouts",
    ),
    "beliefdrift.config.train": ("TrainConfig",),
    "beliefdrift.amortize.trainer": ("SCTrainer", "plan_updates"),
}
__all__ = [
    "PrefixState",
    "RolloutGroup",
    "SCLossOutput",
    "SCTrainer",
    "SelfConsistencyLoss",
    "TrainConfig",
    "backward_sc_loss",
    "conditionals",
    "draw_horizons",
    "encode_prefix",
    "expected_sc_loss",
    "generate_group",
    "generate_groups",
    "group_id",
    "horizon_pairs",
    "load_rollouts",
    "log_predictive",
    "plan_updates",
    "rollout_conditionals",
    "sample_prefix",
    "sample_rollouts",
    "save_rollouts",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
