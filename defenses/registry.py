"""Every defense privaudit knows, by name (``module:Class``, imported on first use)."""

from __future__ import annotations

from core.registry import Registry
from defenses.base import Defense

DEFENSES: Registry[type[Defense]] = Registry("defense", {
    "nonprivate": "defenses.nonprivate:NonPrivate",
    "supervised": "defenses.supervised:Supervised",
    "alm": "defenses.alm:ALM",
    "dp-fedemb": "defenses.fedemb:DPFedEmb",
    "dp-fedavg": "defenses.fedemb:DPFedAvg",
    "dpsgd": "defenses.dpsgd:DPSGD",
    "dp-clip": "defenses.dp_clip:DPClip",
    "dpcl-simclr": "defenses.dpcl:DPCLSimCLR",
    "dpcl-barlow": "defenses.dpcl:DPCLBarlow",
    "dp-gcl": "defenses.dp_gcl:DPGCL",
    "logit-dp": "defenses.logit_dp:LogitDP",
    "control-undernoised": "defenses.controls:UnderNoisedControl",  # a positive control, not a defense
    "opacus-dpsgd": "defenses.opacus_dpsgd:OpacusDPSGD",  # plain DP-SGD classifier on Opacus' PrivacyEngine
    "user-model": "defenses.user_model:UserModel",  # a user's own classifier (factory + training function)
})


#: ``defense_class(name)``: the class registered as ``name``; ``make_defense(name, params=None, **overrides)``: an instance
#: with validated settings. An unknown name is a ConfigError listing the accepted ones.
defense_class = DEFENSES.load
make_defense = DEFENSES.create
