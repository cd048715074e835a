"""DP-FedEmb and DP-FedAvg (Xu et al.): user-level DP training of an embedding backbone.

* :mod:`privaudit.defenses.fedemb.users` – user partitions and virtual clients (Algorithm 1 lines 2–3);
* :mod:`privaudit.defenses.fedemb.local` – vmapped local training of all virtual clients (lines 4–12);
* :mod:`privaudit.defenses.fedemb.aggregate` – clipping, noise, aggregation, adaptive clipping (lines 13–15);
* :mod:`privaudit.defenses.fedemb.defense` – the two defenses, their claims and evaluation.
"""

from privaudit.defenses.fedemb.defense import DPFedAvg, DPFedEmb, FedAvgConfig, FedEmbConfig

__all__ = ["DPFedAvg", "DPFedEmb", "FedAvgConfig", "FedEmbConfig"]
