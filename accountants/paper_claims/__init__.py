"""The privacy claims the papers state, re-derived by every applicable accountant.

- :mod:`.data` — the claims as the papers state them (DPCL, DP-GCL, DP-FedEmb, Logit-DP): each printed
  number with its noise, steps, sampling, delta, the accountant the paper used and where it stands;
- :mod:`.readings` — :class:`PaperClaim`, :class:`Reading` (one way to account for a claim) and the
  mechanism builders;
- :mod:`.check` — :func:`check_claim`: does the number come out of the paper's own recipe, and is it
  reproduced, optimistic or conservative on the mechanism the algorithm runs;
- :mod:`.verdict` — the verdict on the tightest sound accountant (:func:`tight_verdict`, :data:`VERDICTS`).
"""

from privaudit.accountants.paper_claims.check import ClaimCheck, check_claim
from privaudit.accountants.paper_claims.data import PAPERS, paper_claims
from privaudit.accountants.paper_claims.readings import TOLERANCE, PaperClaim, Reading, sgd_mechanism
from privaudit.accountants.paper_claims.verdict import VERDICTS, TightVerdict, paper_method, tight_verdict

_sgd = sgd_mechanism  # the builder's name where it lived in one module (tests build ad-hoc claims with it)

__all__ = ["PAPERS", "TOLERANCE", "VERDICTS", "ClaimCheck", "PaperClaim", "Reading", "TightVerdict", "check_claim",
           "paper_claims", "paper_method", "sgd_mechanism", "tight_verdict"]
