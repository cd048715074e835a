"""Positive controls: defenses whose privacy claim is known to be false, so an audit can show it catches one.

:class:`UnderNoisedControl` is DP-GCL (Alg. 1, group-level clipping) with a planted bug: its claim is computed
for ``control_factor`` times the noise multiplier the training actually adds. Calibration therefore picks a
multiplier that many times too small while the claim still states the target epsilon, exactly the kind of
mistake (a wrong sensitivity, a noise std off by a factor) the gate exists to catch. It is never a defense:
its label and the report say "control", and a suite marks it ``control = true`` so the gate *expects* it to
fail and fails itself when it does not (a gate that cannot catch this has no power at the suite's size).
"""

from __future__ import annotations

from dataclasses import dataclass

from privaudit.core.errors import check_positive
from privaudit.defenses.dp_gcl import DPGCL, DPGCLConfig


@dataclass(frozen=True)
class UnderNoisedConfig(DPGCLConfig):
    control_factor: float = 10.0  # claimed noise / actual noise

    def validate(self) -> None:
        super().validate()
        check_positive("control_factor", self.control_factor)


class UnderNoisedControl(DPGCL):
    """DP-GCL that adds 1 / ``control_factor`` of the noise its (add/remove, per-example) claim states."""

    name = "control-undernoised"
    Config = UnderNoisedConfig

    def claim_for(self, plan, mechanisms, gradient_multiplier, delta):
        return super().claim_for(plan, mechanisms, gradient_multiplier * self.config.control_factor, delta)
