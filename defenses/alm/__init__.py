"""The Additive Logistic Mechanism (Yang, Gohari & Topcu): noise added once to a fine-tuned head.

* :mod:`defenses.alm.mechanisms` – logistic / Laplace / Gaussian noise and their calibration;
* :mod:`defenses.alm.head` – deterministic head fine-tuning on frozen features, batched;
* :mod:`defenses.alm.curve` – utility loss (Def. 6.1) and the privacy–utility curve (Sec. 6.1);
* :mod:`defenses.alm.defense` – the defense (Algorithm 1), with the sampled sensitivity
  (Algorithm 2 / Rubinstein–Aldà, from :mod:`defenses.sensitivity_sampling`).
"""

from defenses.alm.defense import ALM, ALMConfig

__all__ = ["ALM", "ALMConfig"]
