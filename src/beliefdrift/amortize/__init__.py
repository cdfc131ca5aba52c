"""Martingale amortization (AM-PPR): rollout datasets, the self-consistency loss and the LoRA trainer.

The trained adapter loads with `beliefdrift.adapters.load_adapter(lm, path)` (and `--adapter` on the CLI).
"""

from beliefdrift.amortize.backward import backward_sc_loss
from beliefdrift.amortize.forward import PrefixState, conditionals, encode_prefix, rollout_conditionals
from beliefdrift.amortize.loss import (
    SCLossOutput,
    SelfConsistencyLoss,
    draw_horizons,
    expected_sc_loss,
    horizon_pairs,
    log_predictive,
)
from beliefdrift.amortize.rollouts import (
    RolloutGroup,
    generate_group,
    generate_rollouts,
    group_id,
    load_rollouts,
    sample_prefix,
    sample_rollouts,
    save_rollouts,
)
from beliefdrift.amortize.trainer import SCTrainer, TrainConfig, plan_updates

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
    "generate_rollouts",
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
