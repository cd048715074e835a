"""Sensitivity: checks of the papers' sensitivity claims, and sampled sensitivity of training algorithms.

* :func:`check_claims` — search each registered claim for a violating neighbouring pair
  (:mod:`.register`, :mod:`.search`, :mod:`.check`); a violation leaves a witness file that
  :func:`replay` reproduces (:mod:`.witness`).
* :mod:`.sampled` — the ALM paper's sensitivity sampler and Rubinstein–Aldà's.
"""

from privaudit.audit.sensitivity.check import RESULT_KEYS, SensitivityResult, check_claim, check_claims
from privaudit.audit.sensitivity.register import CLAIMS, PAPER_CLAIMS, ClaimSpec, Context, Setting, select
from privaudit.audit.sensitivity.witness import load_witness, replay

__all__ = ["CLAIMS", "PAPER_CLAIMS", "RESULT_KEYS", "ClaimSpec", "Context", "SensitivityResult", "Setting",
           "check_claim", "check_claims", "load_witness", "replay", "select"]
