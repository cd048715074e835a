"""What the DP-SGD-style defenses share: the training skeleton, its accounting, the engine and the release.

* :mod:`~privaudit.defenses.dp.engine.units`      -- what a unit of clipping is (term, view, example, group, batch,
pair);
* :mod:`~privaudit.defenses.dp.engine.gradients`  -- per-unit gradients (``torch.func``) and their clipped sum;
* :mod:`~privaudit.defenses.dp.engine.pairs`      -- Logit-DP's per-pair clipping, direct and efficient;
* :mod:`~privaudit.defenses.dp.release.step`       -- the noisy release and the white-box canary hook;
* :mod:`~privaudit.defenses.dp.accounting` -- mechanisms, sampling plans, calibration and the claim;
* :mod:`~privaudit.defenses.dp.bounds`     -- the papers' sensitivity bounds and the corrected ones;
* :mod:`~privaudit.defenses.dp.base`       -- the training skeleton (:class:`DPDefense`) the methods fill in.
"""

from privaudit.defenses.dp.base import DPConfig, DPDefense, StepContext, StepOutput
from privaudit.defenses.dp.engine.embedder import Embedder, Source, TwoTower
from privaudit.defenses.dp.engine.gradients import ClippedSum, all_unit_gradients, clipped_sum, unit_gradients
from privaudit.defenses.dp.release.randomness import StepRandomness
from privaudit.defenses.dp.release.step import CanaryGradients, DiracCanaries, dirac_canaries
from privaudit.defenses.dp.engine.units import Units, dense_units, pair_units, partition_units

__all__ = ["CanaryGradients", "DiracCanaries", "ClippedSum", "DPConfig", "DPDefense", "Embedder", "Source", "StepContext",
           "StepOutput", "StepRandomness", "TwoTower", "Units", "all_unit_gradients", "clipped_sum", "dense_units",
           "dirac_canaries", "pair_units", "partition_units", "unit_gradients"]
