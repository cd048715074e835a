"""Audit scores a user already has: ROC, AUC, TPR at low FPR and a sound epsilon lower bound.

The input is one score per example, higher meaning "member" (or losses / logits that
:mod:`privaudit.audit.user.scores.score_inputs` turns into scores), for members and non-members. The metrics are those
of
:mod:`privaudit.attacks.metrics` (ROC with no points dropped; TPR at FPR 0.1%, 1%, 10% read at the last ROC point
within the budget). The lower bound is one of :mod:`privaudit.attacks.bounds`, chosen by the *design* that produced
the scores, because only the design makes a bound sound:

* ``design="one-run"`` (default; Steinke, Nasr & Jagielski 2023, main theorem): the members and
  non-members are m candidates of **one** training run, **each included independently by a fair coin**
  (probability 1/2), like privaudit's audit pool. The auditor guesses "member" for the k+ highest
  scores and "non-member" for the k- lowest; (k+, k-) is searched over a fixed grid of 8 pairs with a
  Bonferroni correction (:func:`privaudit.attacks.bounds.one_run.one_run_bound_search`), so the bound holds at
  confidence 1 - beta. If the split was *not* a fair coin per example (e.g. a model's train set against
  its held-out test set), the theorem does not apply: ROC and AUC still describe the attack, but the
  epsilon is not a lower bound on the training algorithm's epsilon.
* ``design="multi-run"`` (Jagielski et al. 2020; Nasr et al. 2021): each score comes from an
  **independent training run** on a fixed neighbouring pair, on D' (the target example included:
  "members") or D (excluded: "non-members"). The threshold is chosen on a seeded half of the runs and
  the errors counted on the other half, with Clopper-Pearson bounds
  (:func:`privaudit.attacks.bounds.multi_run.multi_run_bound`).

Either bound is on add/remove epsilon at ``delta`` for one example (one candidate), at confidence
1 - beta (the multi-run bound at whatever relation the user's fixed pair has). Many examples scored on *one*
model are not independent runs of one pair, so the multi-run design does not apply to them.

Given a claim (:mod:`privaudit.audit.user.claim`), the result carries a verdict and the design's **ceiling**: the
largest bound these counts could give (every guess right). A claim read from an accountant's history has a
mechanism; its verdict rests on the test against that mechanism's own trade-off curve
(:mod:`privaudit.attacks.bounds.mechanism`, one-sided guesses on the same grid, Bonferroni), the (eps, delta)
bound beside it; a stated claim's verdict rests on the (eps, delta) bound. The verdict's test is fixed by the
claim's kind before any score is read.

Each side is sorted once (:class:`privaudit.attacks.metrics.SortedScores`); every metric and guess count is read
from the two sorted sides, so 10^8 scores fit in a few gigabytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from privaudit.attacks import metrics
from privaudit.attacks.bounds.fair_coin import check_fair_coin, fair_coin_subsample, split_beta
from privaudit.audit.user.scores.score_inputs import (KINDS, Scores, check_same_classes, read_scores, read_tf_privacy,
                                                      scores_of)
from privaudit.audit.user.claim import UserClaim, claim_from_args, judge
from privaudit.core.datasets.user_files import check_distinct
from privaudit.core.errors import ConfigError, check_probability, one_of
from privaudit.audit.user.scores.score_bounds import claim_mechanism_bound, design_bound, inverted_warning
from privaudit.audit.user.scores.score_result import FILES, ScoreAudit

DESIGNS = ("one-run", "multi-run")


def _side(value: Any, kind: str, labels: Any, name: str) -> tuple[Scores, bool]:
    """One side's scores, and whether the array is ours to sort in place (read from a file, not the caller's)."""
    if isinstance(value, (str, Path)):
        return read_scores(value, kind, None if labels is None else np.asarray(labels)), True
    if value is None:
        raise ConfigError(f"{name}: missing (give {name} and the other side, or tf_privacy=FILE)")
    kind = "score" if kind == "auto" else kind
    return scores_of(kind, np.asarray(value), labels, name, f"<{name} array>"), False


def audit_scores(members: Any = None, nonmembers: Any = None, *, kind: str = "auto",
                 member_labels: Any = None, nonmember_labels: Any = None, tf_privacy: str | Path | None = None,
                 delta: float | None = None, beta: float = 0.05, design: str = "one-run",
                 claimed_epsilon: float | None = None, relation: str = "add-remove", unit: str = "example",
                 opacus_state: str | Path | None = None, claim: UserClaim | None = None,
                 inclusion_probability: float = 0.5, out: str | Path | None = None,
                 force: bool = False) -> ScoreAudit:
    """Audit member / non-member scores: ROC, AUC, advantage, TPR at FPR 0.1/1/10%, a sound epsilon lower bound
    with its ceiling, and with a claim, a verdict.

    ``members``, ``nonmembers``: arrays or file paths (``.npy``/``.npz``/CSV; see
    :mod:`privaudit.audit.user.scores.score_inputs`), higher = member; ``kind`` says what they hold (``score``,
    ``loss``: score = -loss, ``logits`` / ``probs`` with ``*_labels``: LiRA's logit statistic). ``tf_privacy``: one
    ``.npz`` in TF-Privacy's ``AttackInputData`` layout (``*_train`` = members, ``*_test`` = non-members) instead of the
    two sides. ``design``: ``one-run`` (each example included by an independent fair coin in one training run) or
    ``multi-run`` (each score from an independent run on a fixed neighbouring pair); the bound is sound only
    for the design that produced the scores (see the module docstring). ``inclusion_probability``: the one-run
    design's known probability of each example's inclusion (default 1/2, the fair coin); the counts are tested
    against it, and another value bounds a seeded subsample on which membership is a fair coin
    (:func:`privaudit.attacks.bounds.fair_coin.fair_coin_subsample`). The bound is at ``delta`` (default
    1e-5, or the claim's) with confidence 1 - ``beta``. The claim: ``claimed_epsilon`` at ``delta`` with
    ``relation`` and ``unit``, or ``opacus_state`` (an Opacus accountant's saved state_dict), or ``claim``.
    ``out``: write the report there (JSON, Markdown, HTML, plots); existing files privaudit did not write are
    kept unless ``force``.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> inside = rng.random(2000) < 0.5                     # each example included by a fair coin
    >>> scores = rng.normal(4.0 * inside, 1.0)              # members score higher
    >>> a = audit_scores(scores[inside], scores[~inside], delta=1e-5)
    >>> round(a.auc, 2)
    1.0
    >>> a.eps_lower_bound > 2, a.design
    (True, 'one-run')
    >>> b = audit_scores(scores[inside], scores[~inside], claimed_epsilon=8, delta=1e-5)
    >>> b.verdict.verdict, b.verdict.refutable                # 2,000 candidates cannot show epsilon > 8
    ('not refuted', False)
    """
    if design not in DESIGNS:
        raise one_of("design", design, DESIGNS)
    if kind not in KINDS:
        raise one_of("kind", kind, KINDS)
    check_probability("beta", beta)
    check_probability("inclusion_probability", inclusion_probability)
    if inclusion_probability != 0.5 and design != "one-run":
        raise ConfigError("--inclusion-probability: applies to the one-run design only (a multi-run design has no "
                          "inclusion coin)")
    claim = claim or claim_from_args(claimed_epsilon, delta, relation, unit,
                                     None if opacus_state is None else str(opacus_state))
    delta = claim.delta if claim is not None else (1e-5 if delta is None else delta)
    if not 0 <= delta < 1:
        raise ConfigError(f"delta: must lie in [0, 1), got {delta!r}")
    _check_relation(claim, design)
    if out is not None:
        from privaudit.audit.user import out_dir

        need = 2 * out_dir.input_bytes(members, nonmembers, tf_privacy) + out_dir.REPORT_BYTES
        out_dir.prepare(out, FILES, force=force, need=need)
    (m_side, m_own), (n_side, n_own) = _sides(members, nonmembers, kind, member_labels, nonmember_labels, tf_privacy)
    originals = (m_side.values, n_side.values) if design == "multi-run" else None
    bound_beta, coin = _coin_test(m_side.values.size, n_side.values.size, design, beta, inclusion_probability)
    sides = metrics.SortedScores.of(m_side.values, n_side.values, in_place=m_own and n_own and originals is None)
    fair, coin = _fair_coin_sides(sides, inclusion_probability, coin)
    bound, ceiling = design_bound(fair, originals, design, bound_beta, delta, claim, coin)
    mechanism, mechanism_ceiling = claim_mechanism_bound(fair, originals, design, bound_beta, claim)
    verdict = None if claim is None else (
        judge(claim, mechanism.epsilon, mechanism_ceiling, 1 - beta, mechanism.label) if mechanism is not None
        else judge(claim, bound.epsilon, ceiling, 1 - beta, bound.label))
    summary = sides.summary()
    audit = ScoreAudit(sides.members, sides.nonmembers, design, bound, summary, sides.roc(),
                       {"members": m_side.source, "nonmembers": n_side.source, "kind": m_side.kind}, ceiling,
                       sides.histogram(), claim, verdict, mechanism, mechanism_ceiling,
                       inverted_warning(summary, m_side.kind), inclusion_probability)
    if out is not None:
        audit.write(out, force=force)
    return audit


def _check_relation(claim: UserClaim | None, design: str) -> None:
    """A one-run design bounds add/remove epsilon (one coin adds or removes one candidate): a replace-one claim
    is not comparable with it. A multi-run design bounds the relation of the user's own fixed pair."""
    if claim is not None and claim.relation != "add-remove" and design == "one-run":
        raise ConfigError("--relation replace-one: the one-run design bounds add/remove epsilon (each coin adds or "
                          "removes one candidate), which is not comparable with a replace-one claim; use "
                          "--design multi-run with runs on a fixed replace-one pair")


def _sides(members: Any, nonmembers: Any, kind: str, member_labels: Any, nonmember_labels: Any,
           tf_privacy: str | Path | None) -> tuple[tuple[Scores, bool], tuple[Scores, bool]]:
    """The members' and non-members' scores, from a TF-Privacy file or from each side, of the same kind."""
    if tf_privacy is not None:
        if members is not None or nonmembers is not None:
            raise ConfigError("tf_privacy: give either a TF-Privacy file or members and nonmembers, not both")
        m, n = read_tf_privacy(tf_privacy)
        m_side, n_side = (m, True), (n, True)
    else:
        check_distinct(members, nonmembers)
        m_side = _side(members, kind, member_labels, "members")
        n_side = _side(nonmembers, kind, nonmember_labels, "nonmembers")
    check_same_classes(m_side[0], n_side[0])
    if m_side[0].kind != n_side[0].kind:
        raise ConfigError(f"members and nonmembers: different kinds ({m_side[0].kind} vs {n_side[0].kind}); "
                          "give both sides the same kind of values")
    return m_side, n_side


def _coin_test(n_members: int, n_nonmembers: int, design: str, beta: float,
               inclusion: float = 0.5) -> tuple[float, str | None]:
    """The one-run design's coin (probability ``inclusion``) tested on the counts before any bound
    (:func:`check_fair_coin`, at :data:`COIN_TEST_SHARE` of ``beta``; refuses when contradicted): the bound's beta
    (the rest) and a note. The multi-run design bounds each side's error rate separately, so unequal run counts
    assume nothing: full beta."""
    if design != "one-run":
        return beta, None
    level, bound_beta = split_beta(beta)
    p = check_fair_coin(n_members, n_nonmembers, level, "--members and --nonmembers", inclusion)
    coin = "fair coin" if inclusion == 0.5 else f"inclusion probability {inclusion:g}"
    return bound_beta, (f"{coin} tested on the counts ({n_members} vs {n_nonmembers}: two-sided binomial p = "
                        f"{p:.3g} >= {level:g}); the bound at beta = {bound_beta:g}, so the verdict's confidence "
                        f"{1 - beta:g} counts both")


def _fair_coin_sides(sides: metrics.SortedScores, inclusion: float,
                     coin: str | None) -> tuple[metrics.SortedScores, str | None]:
    """The candidates the one-run bound is computed on: all of them under a fair coin; under a stated inclusion
    probability, the seeded subsample on which membership is a fair coin (:func:`fair_coin_subsample`; the mask is
    drawn independently of the scores, so applying it to the sorted sides is the same draw)."""
    if inclusion == 0.5:
        return sides, coin
    n1 = sides.n_members
    keep = fair_coin_subsample(np.r_[np.ones(n1, bool), np.zeros(sides.n_nonmembers, bool)], inclusion)
    fair = metrics.SortedScores.of(sides.members[keep[:n1]], sides.nonmembers[keep[n1:]], in_place=True)
    if min(fair.n_members, fair.n_nonmembers) == 0:
        raise ConfigError("--inclusion-probability: the fair-coin subsample has no member or no non-member; give "
                          "more examples")
    note = (f"inclusion probability {inclusion:g}: the bound is on a seeded subsample of {fair.n_members} members "
            f"and {fair.n_nonmembers} non-members on which membership is a fair coin (rejection sampling); AUC and "
            "ROC are on every example")
    return fair, f"{coin}; {note}"


