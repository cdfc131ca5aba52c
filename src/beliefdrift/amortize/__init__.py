"""Martingale amortization (AM-PPR): rollout datasets, the self-consistency loss and the LoRA trainer.

The trained adapter loads with `beliefdrift.backend.adapters.load_adapter(lm, path)` (and `--adapter` on the CLI).
"""

from typing import TYPE_CHECKING

from beliefdrift.exports import lazy_exports

if TYPE_CHECKING:  # the public names, imported on first use (`beliefdrift.exports`)
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
    __getattr__, __dir__, __all__ = lazy_exports(__name__)
