"""Martingale amortization (AM-PPR): rollout datasets, the self-consistency loss and the LoRA trainer.

The trained adapter loads with `beliefdrift.backend.adapters.load_adapter(lm, path)` (and `--adapter` on the CLI).
"""

from typing import TYPE_CHECKING

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
if TYPE_CHECKING:  # the names `lazy_exports` imports on first use, for editors and type checkers
    from beliefdrift.amortize.backward import backward_sc_loss as backward_sc_loss
    from beliefdrift.amortize.forward import PrefixState as PrefixState
    from beliefdrift.amortize.forward import conditionals as conditionals
    from beliefdrift.amortize.forward import encode_prefix as encode_prefix
    from beliefdrift.amortize.forward import rollout_conditionals as rollout_conditionals
    from beliefdrift.amortize.loss import SCLossOutput as SCLossOutput
    from beliefdrift.amortize.loss import SelfConsistencyLoss as SelfConsistencyLoss
    from beliefdrift.amortize.loss import draw_horizons as draw_horizons
    from beliefdrift.amortize.loss import expected_sc_loss as expected_sc_loss
    from beliefdrift.amortize.loss import horizon_pairs as horizon_pairs
    from beliefdrift.amortize.loss import log_predictive as log_predictive
    from beliefdrift.amortize.rollouts import RolloutGroup as RolloutGroup
    from beliefdrift.amortize.rollouts import generate_group as generate_group
    from beliefdrift.amortize.rollouts import generate_groups as generate_groups
    from beliefdrift.amortize.rollouts import group_id as group_id
    from beliefdrift.amortize.rollouts import load_rollouts as load_rollouts
    from beliefdrift.amortize.rollouts import sample_prefix as sample_prefix
    from beliefdrift.amortize.rollouts import sample_rollouts as sample_rollouts
    from beliefdrift.amortize.rollouts import save_rollouts as save_rollouts
    from beliefdrift.amortize.trainer import SCTrainer as SCTrainer
    from beliefdrift.amortize.trainer import plan_updates as plan_updates
    from beliefdrift.config.train import TrainConfig as TrainConfig
else:  # (a module `__getattr__` seen by a type checker would let any name pass)
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
