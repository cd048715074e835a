"""privaudit: audit the privacy of machine-learning models, from your own scores, your own model, or a suite.

This module is the front door: the documented, stable Python API. Every name below is re-exported
lazily (importing ``privaudit`` imports neither torch nor the layer a name comes from until the name is
used). The packages underneath (``privaudit.core``, ``privaudit.accountants``, ``privaudit.defenses``,
``privaudit.attacks``, ``privaudit.audit``) are the implementation; names reached only through them may change
between versions. ``privaudit`` is the one installed import name: the repository keeps those layers in its
top-level folders (``core/``, ``audit/``, ...), which ``setup.py`` maps under ``privaudit`` at install time and
:func:`_source_checkout_layers` maps when the package is imported from a checkout (``PYTHONPATH``).

Audit scores you already have (members' and non-members' scores, losses or logits; TF-Privacy's arrays):

>>> import numpy as np, privaudit
>>> rng = np.random.default_rng(0)
>>> inside = rng.random(2000) < 0.5            # one training run, each example in by a fair coin
>>> scores = rng.normal(3.0 * inside, 1.0)      # your attack's scores, higher = member
>>> a = privaudit.audit_scores(scores[inside], scores[~inside], delta=1e-5)
>>> round(a.auc, 3), a.eps_lower_bound > 1, a.bound.confidence   # 0.95 in all: 0.005 goes to the fair-coin test
(0.986, True, 0.955)

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
import warnings
from typing import Any

_LAYERS = ("core", "accountants", "defenses", "attacks", "audit")


def _source_checkout_layers() -> list[str]:
    """The checkout root, when this file sits in a source checkout beside the layer folders.

    Installed, the layers are subpackages (``site-packages/privaudit/core``); in a checkout they are siblings
    of this folder (``<repo>/core``), so the checkout root joins ``__path__`` and ``privaudit.core`` resolves to
    ``<repo>/core``. Only a folder holding ``pyproject.toml`` and every layer qualifies.
    """
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file() and all((root / layer / "__init__.py").is_file() for layer in _LAYERS):
        return [str(root)]
    return []


__path__ += [p for p in _source_checkout_layers() if p not in __path__]  # noqa: F821 (a package's own __path__)

from privaudit.core.version import __version__  # noqa: E402 (after __path__: a checkout maps privaudit.core there)

#: public name -> (module, attribute)
_EXPORTS: dict[str, tuple[str, str]] = {
    # your own scores or model
    "audit_scores": ("privaudit.audit.user.scores.score_audit", "audit_scores"),
    "ScoreAudit": ("privaudit.audit.user.scores.score_result", "ScoreAudit"),
    "audit_model": ("privaudit.audit.user.model.model_audit", "audit_model"),
    "audit_training": ("privaudit.audit.user.training.training_audit", "audit_training"),
    "declare_release": ("privaudit.defenses.watch.declared_release", "declare_release"),
    "ModelAudit": ("privaudit.audit.user.model.model_result", "ModelAudit"),
    # defenses
    "make_defense": ("privaudit.defenses", "make_defense"),
    "Budget": ("privaudit.defenses", "Budget"),
    "Trained": ("privaudit.defenses", "Trained"),
    "DEFENSES": ("privaudit.defenses", "DEFENSES"),
    # attacks, metrics and sound bounds
    "make_attack": ("privaudit.attacks", "make_attack"),
    "Target": ("privaudit.attacks", "Target"),
    "AttackResult": ("privaudit.attacks", "AttackResult"),
    "ATTACKS": ("privaudit.attacks", "ATTACKS"),
    "EpsilonLowerBound": ("privaudit.attacks", "EpsilonLowerBound"),
    "one_run_bound": ("privaudit.attacks", "one_run_bound"),
    "multi_run_bound": ("privaudit.attacks", "multi_run_bound"),
    "score_metrics": ("privaudit.attacks.metrics", "score_metrics"),
    "ScoreMetrics": ("privaudit.attacks.metrics", "ScoreMetrics"),
    "reachability_test": ("privaudit.attacks.step.reachability", "reachability_test"),
    "reachable": ("privaudit.attacks.step.reachability", "reachable"),
    # accountants
    "PrivacyClaim": ("privaudit.accountants", "PrivacyClaim"),
    "sampled_gaussian_claim": ("privaudit.accountants.sampled_gaussian", "sampled_gaussian_claim"),
    "epsilon": ("privaudit.accountants", "epsilon"),
    "all_epsilons": ("privaudit.accountants", "all_epsilons"),
    "calibrate": ("privaudit.accountants", "calibrate"),
    "ACCOUNTANTS": ("privaudit.accountants", "ACCOUNTANTS"),
    # datasets
    "load_dataset": ("privaudit.core.datasets", "load_dataset"),
    # sensitivity checks
    "check_sensitivity_claims": ("privaudit.audit.sensitivity", "check_claims"),
    "SensitivityResult": ("privaudit.audit.sensitivity", "SensitivityResult"),
    # suites and reports
    "load_suite": ("privaudit.audit.suite.load", "load_suite"),
    "Suite": ("privaudit.audit.suite.model", "Suite"),
    "run_suite": ("privaudit.audit.run.runner", "run_suite"),
    "RunResult": ("privaudit.audit.run.runner", "RunResult"),
    "shipped_suites": ("privaudit.audit.suite.shipped", "shipped_suites"),
    "write_report": ("privaudit.audit.report", "write_report"),
    "render_report": ("privaudit.audit.verify.evidence", "render_report"),
    "ConfigError": ("privaudit.core.errors", "ConfigError"),
}

#: deprecated public name -> (its replacement, module, attribute): kept for one release; every use warns.
_DEPRECATED: dict[str, tuple[str, str, str]] = {
    # checks the papers' *sensitivity* claims (not privacy claims: those are the `claims` command's)
    "check_claims": ("check_sensitivity_claims", "privaudit.audit.sensitivity", "check_claims"),
    # (scores, membership) where audit_scores takes (members, nonmembers); its TPRs keyed by strings
    "summarize_scores": ("score_metrics(members, nonmembers)", "privaudit.attacks.metrics", "summarize"),
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name in _DEPRECATED:
        new, module, attr = _DEPRECATED[name]
        warnings.warn(f"privaudit.{name} is deprecated and will be removed in the next release; use "
                      f"privaudit.{new}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(module), attr)  # not cached: every use warns
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'privaudit' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
