"""The Additive Logistic Mechanism (Yang, Gohari & Topcu): noise added once to a fine-tuned head.

* :mod:`privaudit.defenses.alm.mechanisms` – logistic / Laplace / Gaussian noise and their calibration;
* :mod:`privaudit.defenses.alm.head` – deterministic head fine-tuning on frozen features, batched;
* :mod:`privaudit.defenses.alm.curve` – utility loss (Def. 6.1) and the privacy–utility curve (Sec. 6.1);
* :mod:`privaudit.defenses.alm.defense` – the defense (Algorithm 1), with the sampled sensitivity
  (Algorithm 2 / Rubinstein–Aldà, from :mod:`privaudit.defenses.sensitivity_sampling`).
"""

from privaudit.defenses.alm.defense import ALM, ALMConfig

__all__ = ["ALM", "ALMConfig"]
