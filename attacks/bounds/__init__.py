"""Statistically sound empirical lower bounds on epsilon.

Two families, both *lower* bounds on the epsilon of the audited training algorithm at a stated
confidence (never point estimates):

* **One run** (Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training Run", main
  theorem and the p-value routine of their paper). m canaries are each included independently with
  probability 1/2 in one training run; the auditor guesses "in" for the k+ highest scores, "out" for
  the k- lowest and abstains on the rest: r = k+ + k- guesses, v correct. If the algorithm is
  (eps, delta)-DP w.r.t. each canary's inclusion,

      P[v correct] <= P[Binomial(r, q) >= v] + 2 m delta alpha*,   q = e^eps / (1 + e^eps),
      alpha* = max_{1 <= i <= v} (1/i) P[v - i <= Binomial(r, q) < v],

  and the bound is the largest eps whose p-value is below beta. k+ and k- must be fixed before the
  scores are seen (:func:`one_run_bound`); trying several (k+, k-) pairs and keeping the best is only
  sound after a correction for the search, done here by a union bound (Bonferroni: each pair is
  tested at beta / #pairs, :func:`one_run_bound_search`). Searching without correction, as some
  public tools do, overstates the bound.

* **Multi run** on a fixed neighbouring pair (D, D'): independent training runs, each on D or D',
  a score per run and a threshold. Any (eps, delta)-DP mechanism satisfies
  FPR + e^eps FNR >= 1 - delta and FNR + e^eps FPR >= 1 - delta (Kairouz et al. 2015); with
  Clopper-Pearson upper confidence bounds FPR_hi, FNR_hi at alpha/2 each,

      eps_lb = max(ln((1 - delta - FPR_hi) / FNR_hi), ln((1 - delta - FNR_hi) / FPR_hi), 0)

  holds with confidence 1 - alpha (Jagielski et al. 2020; Nasr et al. 2021). The threshold is chosen
  on a separate half of the runs, or every threshold is tested with a Bonferroni correction.
  The Gaussian-DP variant (Nasr et al. 2023, "Tight Auditing of Differentially Private Machine
  Learning") turns the same confidence bounds into mu_lb = Phi^-1(1 - FPR_hi) - Phi^-1(FNR_hi) and
  reports the epsilon of mu_lb-GDP at delta. It is a lower bound only under the *assumption* that the
  mechanism's trade-off curve is Gaussian (true for the Gaussian mechanism and, asymptotically,
  DP-SGD); it is labelled as such and never the default.

* **Paired one run (replace-one)**: slots of two candidates, a fair coin picks which one is trained
  on; the same p-value with replace-one neighbours (:func:`paired_one_run_bound`, proof sketch there).
  Every bound carries the ``relation`` and ``unit`` it is on; :func:`check_relation_unit` rejects one
  a bound cannot be stated at, naming both.

* **f-DP one run** (Mahloujifar, Melis & Chaudhuri 2025, "Auditing f-Differential Privacy in One
  Run"): the same guesses tested against a trade-off curve (:func:`fdp_one_run_bound`): the (eps,
  delta) curve (sound for any mechanism) or the Gaussian one (mu_lb; its epsilon assumes a Gaussian
  curve). :func:`best_one_run_bound` reports the larger of Steinke's and the f-DP bound, each at
  beta / 2 (a rule fixed before the scores are seen).

Per-example membership-inference rates measured on one model are not independent trials of a fixed
neighbouring pair, so they are never turned into a Clopper-Pearson bound here; the audit pool's
random 1/2 inclusion makes any attack's scores a valid *one-run* audit instead.

Modules: :mod:`~privaudit.attacks.bounds.lower_bound` (the bound's record, its relation and unit),
:mod:`~privaudit.attacks.bounds.one_run` (one run and its paired replace-one form),
:mod:`~privaudit.attacks.bounds.fair_coin` (the fair-coin test behind a one-run audit),
:mod:`~privaudit.attacks.bounds.fdp` (f-DP one run), :mod:`~privaudit.attacks.bounds.multi_run` (multi run),
:mod:`~privaudit.attacks.bounds.gdp` (Gaussian DP), and the bounds against a claim's own mechanism
(:mod:`~privaudit.attacks.bounds.mechanism`), over a whole training trajectory
(:mod:`~privaudit.attacks.bounds.trajectory`) and from a pooled error count
(:mod:`~privaudit.attacks.bounds.pooled_gdp`).
"""
