"""Positive controls: defenses whose privacy claim is known to be false, so an audit can show it catches one.

A control is a DP defense with a planted bug of size ``control_factor`` (f > 1). What is planted (``plant``):

* ``claim`` (the default): the claim is computed for f times the noise multiplier the training adds.
  Calibration therefore picks a multiplier f times too small while the claim still states the target epsilon,
  the kind of mistake (a wrong sensitivity, a noise std off by a factor) the gate exists to catch. Every record
  is honest about the noise added, so the training trace, the step audit and the canaries all see it.
* ``noise``: the claim and every record (the trace's noise std and noise norm) state the calibrated noise, but
  the release adds 1/f of the drawn noise (:meth:`~privaudit.defenses.dp.base.DPDefense.added_noise_scale`):
  a shortfall no bookkeeping shows, which only an end-to-end measurement (the canaries' observations of the
  privatised sums) can catch. The hardest case for the gate.
* ``step``: step :data:`PLANTED_STEP` (0-based) adds 1/f of the calibrated noise and records it: the trace
  check names that step.
* ``steps``: the claim composes only ceil(T / f) of the T steps training runs (and calibration uses that
  shorter account, so the noise is too small for the whole run): the trace check names the first step that
  is not accounted.

The federated defenses (DP-FedEmb, DP-FedAvg) have a control too (:class:`FederatedControl`): each round's release
adds N(0, (sigma gamma / f)^2) while the claim accounts sigma. ``claim`` and ``noise`` plant the same bug there:
the round's trace (:mod:`privaudit.defenses.fedemb.trace`) records the claimed std beside the norm of the noise
drawn, so its noise-norm check sees it, as do the white-box canary users' observations; ``step`` and ``steps`` are
not offered.

It is never a defense: its label and the report say "control", and a suite marks it ``control = true`` so the
gate *expects* it to fail and fails itself when it does not (a gate that cannot catch it has no power at the
suite's size). :class:`UnderNoisedControl` (``control-undernoised``) is DP-GCL (Alg. 1, group-level clipping)
with a planted bug; :data:`CONTROLS` holds one control per DP-SGD-style defense (``control-<defense>``), which
``privaudit gate-power`` plants into a suite.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from privaudit.core.errors import check_positive, one_of
from privaudit.defenses.base import Defense
from privaudit.defenses.dp.base import DPDefense
from privaudit.defenses.dp_clip import DPClip
from privaudit.defenses.dp_gcl import DPGCL
from privaudit.defenses.dpcl import DPCLBarlow, DPCLSimCLR
from privaudit.defenses.dpsgd import DPSGD
from privaudit.defenses.fedemb.defense import DPFedAvg, DPFedEmb
from privaudit.defenses.logit_dp import LogitDP

PLANTS = ("claim", "noise", "step", "steps")
#: The step a ``step`` plant under-noises (0-based: the second step, so the first is a clean reference).
PLANTED_STEP = 1


class PlantedControl(DPDefense):
    """The planted bugs of the module docstring, for any DP-SGD-style defense (a mixin before the defense)."""

    def claim_for(self, plan, mechanisms, gradient_multiplier, delta):
        factor, plant = self.config.control_factor, self.config.plant
        if plant == "claim":
            gradient_multiplier = gradient_multiplier * factor
        elif plant == "steps":
            plan = dataclasses.replace(plan, steps=max(1, math.ceil(plan.steps / factor)))
        return super().claim_for(plan, mechanisms, gradient_multiplier, delta)

    def step_noise_std(self, step: int, noise_std: float) -> float:
        planted = self.config.plant == "step" and step == PLANTED_STEP
        return noise_std / self.config.control_factor if planted else noise_std

    def added_noise_scale(self) -> float:
        return 1.0 / self.config.control_factor if self.config.plant == "noise" else 1.0


def _control_config(base: type, owner: str, plants: tuple[str, ...] = PLANTS) -> type:
    """``base`` (a defense's config dataclass) with ``control_factor`` (claimed / actual noise) and ``plant`` (one of
    ``plants``), named ``<owner>.Config`` (picklable: found as the attribute of the module-level control class
    ``owner``)."""

    @dataclass(frozen=True)
    class ControlConfig(base):
        control_factor: float = 10.0
        plant: str = "claim"

        def validate(self) -> None:
            super().validate()
            check_positive("control_factor", self.control_factor)
            if self.plant not in plants:
                raise one_of("plant", self.plant, plants)

    ControlConfig.__name__, ControlConfig.__qualname__ = "Config", f"{owner}.Config"
    return ControlConfig


def _control(base: type[DPDefense], name: str, class_name: str) -> type[DPDefense]:
    """``base`` with the planted bugs, registered as ``name``, bound in this module as ``class_name``."""
    return type(class_name, (PlantedControl, base),
                {"name": name, "Config": _control_config(base.Config, class_name), "__module__": __name__,
                 "__doc__": f"{base.__name__} with a planted bug of size ``control_factor`` (module docstring)."})


#: The plants a federated control offers (module docstring).
FEDERATED_PLANTS = ("claim", "noise")


class FederatedControl:
    """A federated defense whose rounds add 1/f of the noise its claim accounts (a mixin before the defense)."""

    def run_round(self, encoder, head, plan, users, x, y, num_classes, clip_norm, sigma, gens, canary=None):
        return super().run_round(encoder, head, plan, users, x, y, num_classes, clip_norm,
                                 sigma / self.config.control_factor, gens, canary=canary)


def _federated_control(base: type[Defense], name: str, class_name: str) -> type[Defense]:
    """``base`` (DP-FedEmb or DP-FedAvg) with the planted under-noising, registered as ``name``."""
    return type(class_name, (FederatedControl, base),
                {"name": name, "Config": _control_config(base.Config, class_name, FEDERATED_PLANTS),
                 "__module__": __name__,
                 "__doc__": f"{base.__name__} whose rounds add 1/``control_factor`` of the claimed noise."})


UnderNoisedControl = _control(DPGCL, "control-undernoised", "UnderNoisedControl")
UnderNoisedConfig = UnderNoisedControl.Config
DPSGDControl = _control(DPSGD, "control-dpsgd", "DPSGDControl")
DPClipControl = _control(DPClip, "control-dp-clip", "DPClipControl")
LogitDPControl = _control(LogitDP, "control-logit-dp", "LogitDPControl")
DPCLSimCLRControl = _control(DPCLSimCLR, "control-dpcl-simclr", "DPCLSimCLRControl")
DPCLBarlowControl = _control(DPCLBarlow, "control-dpcl-barlow", "DPCLBarlowControl")

DPFedEmbControl = _federated_control(DPFedEmb, "control-dp-fedemb", "DPFedEmbControl")
DPFedAvgControl = _federated_control(DPFedAvg, "control-dp-fedavg", "DPFedAvgControl")

#: The control of each DP-SGD-style and federated defense, by the defense's name.
CONTROLS: dict[str, type[Defense]] = {"dp-gcl": UnderNoisedControl, "dpsgd": DPSGDControl, "dp-clip": DPClipControl,
                                      "logit-dp": LogitDPControl, "dpcl-simclr": DPCLSimCLRControl,
                                      "dpcl-barlow": DPCLBarlowControl, "dp-fedemb": DPFedEmbControl,
                                      "dp-fedavg": DPFedAvgControl}
