"""The per-unit gradient engine shared by the DP defenses.

* :mod:`~defenses.dp.units`      -- what a unit of clipping is (term, view, example, group, batch, pair);
* :mod:`~defenses.dp.gradients`  -- per-unit gradients (``torch.func``) and their clipped sum;
* :mod:`~defenses.dp.pairs`      -- Logit-DP's per-pair clipping, direct and efficient;
* :mod:`~defenses.dp.step`       -- the noisy release and the white-box canary hook;
* :mod:`~defenses.dp.accounting` -- mechanisms, sampling plans, calibration and the claim;
* :mod:`~defenses.dp.bounds`     -- the papers' sensitivity bounds and the corrected ones;
* :mod:`~defenses.dp.base`       -- the training skeleton (:class:`DPDefense`) the methods fill in.
"""

from defenses.dp.base import DPConfig, DPDefense, StepContext, StepOutput
from defenses.dp.embedder import Embedder, Source, TwoTower
from defenses.dp.gradients import ClippedSum, all_unit_gradients, clipped_sum, unit_gradients
from defenses.dp.randomness import StepRandomness
from defenses.dp.step import CanaryGradients, DiracCanaries, dirac_canaries
from defenses.dp.units import Units, dense_units, pair_units, partition_units

__all__ = ["CanaryGradients", "DiracCanaries", "ClippedSum", "DPConfig", "DPDefense", "Embedder", "Source", "StepContext",
           "StepOutput", "StepRandomness", "TwoTower", "Units", "all_unit_gradients", "clipped_sum", "dense_units",
           "dirac_canaries", "pair_units", "partition_units", "unit_gradients"]
