"""privaudit: audit the privacy of machine-learning models, from your own scores, your own model, or a suite.

This module is the front door: the documented, stable Python API. Every name below is re-exported
lazily (importing ``privaudit`` imports neither torch nor the layer a name comes from until the name is
used). The packages underneath (``core``, ``accountants``, ``defenses``, ``attacks``, ``audit``) are the
implementation; names reached only through them may change between versions.

Audit scores you already have (members' and non-members' scores, losses or logits; TF-Privacy's arrays):

>>> import numpy as np, privaudit
>>> rng = np.random.default_rng(0)
>>> inside = rng.random(2000) < 0.5            # one training run, each example in by a fair coin
>>> scores = rng.normal(3.0 * inside, 1.0)      # your attack's scores, higher = member
>>> a = privaudit.audit_scores(scores[inside], scores[~inside], delta=1e-5)
>>> round(a.auc, 3), a.eps_lower_bound > 1, a.bound.confidence
(0.986, True, 0.95)

Account a DP-SGD claim under every accountant, and calibrate its noise:

>>> claim = privaudit.sampled_gaussian_claim(1.1, steps=1000, delta=1e-5, sample_rate=0.01)
>>> eps = privaudit.all_epsilons(claim)
>>> round(eps["rdp"].epsilon, 2), eps["pure"].applicable
(1.71, False)
>>> template = lambda z: privaudit.sampled_gaussian_claim(z, steps=1000, delta=1e-5, sample_rate=0.01)
>>> round(privaudit.calibrate(template, 1.71, "rdp"), 2)
1.1

The shipped audit suites, and a suite loaded by name:

>>> "quickstart" in privaudit.shipped_suites()
True
>>> privaudit.load_suite("quickstart").name
'quickstart'

Public names: see :data:`__all__`; the README's "Python API" section says what each is for.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: public name -> (module, attribute)
_EXPORTS: dict[str, tuple[str, str]] = {
    # your own scores or model
    "audit_scores": ("audit.score_audit", "audit_scores"),
    "ScoreAudit": ("audit.score_audit", "ScoreAudit"),
    "audit_model": ("audit.model_audit", "audit_model"),
    # defenses
    "make_defense": ("defenses", "make_defense"),
    "Budget": ("defenses", "Budget"),
    "Trained": ("defenses", "Trained"),
    "DEFENSES": ("defenses", "DEFENSES"),
    # attacks, metrics and sound bounds
    "make_attack": ("attacks", "make_attack"),
    "Target": ("attacks", "Target"),
    "AttackResult": ("attacks", "AttackResult"),
    "ATTACKS": ("attacks", "ATTACKS"),
    "EpsilonLowerBound": ("attacks", "EpsilonLowerBound"),
    "one_run_bound": ("attacks", "one_run_bound"),
    "multi_run_bound": ("attacks", "multi_run_bound"),
    "summarize_scores": ("attacks.metrics", "summarize"),
    # accountants
    "PrivacyClaim": ("accountants", "PrivacyClaim"),
    "sampled_gaussian_claim": ("accountants.dpsgd", "sampled_gaussian_claim"),
    "epsilon": ("accountants", "epsilon"),
    "all_epsilons": ("accountants", "all_epsilons"),
    "calibrate": ("accountants", "calibrate"),
    "ACCOUNTANTS": ("accountants", "ACCOUNTANTS"),
    # datasets
    "load_dataset": ("core.datasets", "load_dataset"),
    # sensitivity checks
    "check_claims": ("audit.sensitivity", "check_claims"),
    # suites and reports
    "load_suite": ("audit.suite", "load_suite"),
    "run_suite": ("audit.runner", "run_suite"),
    "shipped_suites": ("audit.shipped", "shipped_suites"),
    "write_report": ("audit.report", "write_report"),
    "render_report": ("audit.report", "render_from_json"),
    "ConfigError": ("core.errors", "ConfigError"),
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'privaudit' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
