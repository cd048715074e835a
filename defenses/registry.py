"""Every defense privaudit knows, by name (``module:Class``, imported on first use)."""

from __future__ import annotations

from privaudit.core.registry import Registry
from privaudit.defenses.base import Defense

DEFENSES: Registry[type[Defense]] = Registry("defense", {
    "nonprivate": "privaudit.defenses.nonprivate:NonPrivate",
    "supervised": "privaudit.defenses.supervised:Supervised",
    # the floors: a never-trained encoder, or the raw pixels
    "untrained": "privaudit.defenses.evaluation.untrained:Untrained",
    "alm": "privaudit.defenses.alm:ALM",
    "dp-fedemb": "privaudit.defenses.fedemb:DPFedEmb",
    "dp-fedavg": "privaudit.defenses.fedemb:DPFedAvg",
    "dpsgd": "privaudit.defenses.dpsgd:DPSGD",
    "dp-clip": "privaudit.defenses.dp_clip:DPClip",
    "dpcl-simclr": "privaudit.defenses.dpcl:DPCLSimCLR",
    "dpcl-barlow": "privaudit.defenses.dpcl:DPCLBarlow",
    "dp-gcl": "privaudit.defenses.dp_gcl:DPGCL",
    "logit-dp": "privaudit.defenses.logit_dp:LogitDP",
    # positive controls, not defenses: a DP defense with a planted bug (defenses.controls)
    "control-undernoised": "privaudit.defenses.controls:UnderNoisedControl",
    "control-dpsgd": "privaudit.defenses.controls:DPSGDControl",
    "control-dp-clip": "privaudit.defenses.controls:DPClipControl",
    "control-logit-dp": "privaudit.defenses.controls:LogitDPControl",
    "control-dpcl-simclr": "privaudit.defenses.controls:DPCLSimCLRControl",
    "control-dpcl-barlow": "privaudit.defenses.controls:DPCLBarlowControl",
    "control-dp-fedemb": "privaudit.defenses.controls:DPFedEmbControl",
    "control-dp-fedavg": "privaudit.defenses.controls:DPFedAvgControl",
    "opacus-dpsgd": "privaudit.defenses.opacus_dpsgd:OpacusDPSGD",  # plain DP-SGD classifier on Opacus' PrivacyEngine
    "user-model": "privaudit.defenses.user_model:UserModel",  # a user's own classifier (factory + training function)
})


#: ``defense_class(name)``: the class registered as ``name``; ``make_defense(name, params=None, **overrides)``: an instance
#: with validated settings. An unknown name is a ConfigError listing the accepted ones.
defense_class = DEFENSES.load
make_defense = DEFENSES.create
