"""What every rendering of a report shows, computed once from ``report.json``: the summary table, the
theory-versus-measurement rows, the sensitivity table and the caveats. Markdown, HTML and the terminal
only format these rows.
"""

from __future__ import annotations

from typing import Any
from privaudit.audit.sensitivity.verdict import display

UTILITY_KEYS = ("knn_accuracy", "linear_probe_accuracy")
# The registered attacks that read the training's internals (white-box canaries: their Config derives from
# privaudit.attacks.canaries.canary_audit.CanaryAuditConfig; tests/test_report_html.py keeps the two in step); every
# other attack queries the released model.
WHITE_BOX = ("gradient-canary", "user-canary")


def fmt(x: Any, digits: int = 3) -> str:
    """Numbers to 3 significant digits, None to a dash."""
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


#: Beside a TPR read at an FPR below the resolution 1/#non-members (there it is read at FPR 0): every rendering
#: (Markdown, HTML, the terminal) shows the same marker.
UNRESOLVED = " (unresolved)"


def tpr_text(attack: dict[str, Any], fpr: str, text: Any = None) -> str:
    """``attack``'s TPR at ``fpr`` (a key of ``tpr_at_fpr``), formatted (or ``text``), with :data:`UNRESOLVED`
    when that FPR is below the attack's resolution (``fpr_resolved``, at the top level or in ``details``)."""
    resolved = attack.get("fpr_resolved") or (attack.get("details") or {}).get("fpr_resolved") or {}
    value = fmt((attack.get("tpr_at_fpr") or {}).get(fpr)) if text is None else str(text)
    return value + ("" if resolved.get(fpr, True) else UNRESOLVED)


def accountants(report: dict[str, Any]) -> list[str]:
    """Accountant names in first-seen order across cells."""
    names: list[str] = []
    for cell in report["cells"]:
        for name in cell.get("epsilon", {}):
            if name not in names:
                names.append(name)
    return names


def shown_accountants(report: dict[str, Any]) -> list[str]:
    """Accountants worth a column: those giving a finite epsilon for some cell (else the first, for ∞)."""
    names = accountants(report)
    finite = [n for n in names if any(c.get("epsilon", {}).get(n) is not None for c in report["cells"])]
    return finite or names[:1]


def varies(report: dict[str, Any], key: str) -> bool:
    return len({str(c.get(key)) for c in report["cells"]}) > 1


def epsilon_text(cell: dict[str, Any], name: str) -> str:
    """A cell's epsilon under one accountant: a number, "inf" (no mechanism) or "n/a" (not applicable)."""
    detail = ((cell.get("details") or {}).get("epsilon") or {}).get(name) or {}
    if detail.get("infinite"):
        return "∞"
    value = cell.get("epsilon", {}).get(name)
    return "n/a" if value is None else fmt(value)


def strongest_attack(cell: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """The attack with the largest lower bound (then the largest AUC)."""
    attacks = cell.get("attacks") or {}
    if not attacks:
        return None, None
    label = max(attacks, key=lambda k: (attacks[k].get("eps_lower_bound") or 0.0, attacks[k].get("auc") or 0.0))
    return label, attacks[label]


def strongest_bound(cell: dict[str, Any]) -> float:
    """The largest lower bound any attack on ``cell`` measured: the sound any-mechanism bound, the bound against
    the claim's mechanism or the white-box trajectory bound (both of the last refute the claim's mechanism)."""
    return max([0.0] + [a.get(k) or 0.0 for a in (cell.get("attacks") or {}).values()
                        for k in ("eps_lower_bound", "eps_lb_mechanism", "eps_lb_trajectory")])


def attack_names(report: dict[str, Any]) -> dict[str, str]:
    """Each attack label of the suite -> the registered attack it runs."""
    return {a["label"]: a["name"] for a in (report.get("suite") or {}).get("attacks", []) if "label" in a}


FINAL_MODEL_HEADERS = ["cell", "ε (smallest accountant)", "ε last iterate (heuristic)", "heuristic / ε",
                       "strongest final-model attack", "its ε_lb", "ε_lb / heuristic"]

FINAL_MODEL_EXPLAIN = (
    "The accountants' ε holds as if every step's noised sum were released; a released model is the last iterate. "
    "ε last iterate (Steinke et al. 2025) is the exact ε of DP-SGD's final model for linear losses: the claim's T "
    "steps of one sampled Gaussian summed, P = Binomial(T, q) + N(0, T z²) against N(0, T z²). It is a heuristic, "
    "not a bound: contrived losses leak more, up to ε; no verdict reads it. It is attained by a target with a "
    "constant gradient, so a final-model audit cannot be expected to reach beyond it with natural data. Final-model "
    "attacks: those that query the released model (every attack but the white-box canaries); their ε_lb is the "
    "larger of the sound and the against-the-mechanism bound; ε_lb / heuristic is the share of the heuristic's "
    "reach the audit showed. Cells whose claim is not T steps of one sampled Gaussian are left out.")


def final_model_rows(report: dict[str, Any]) -> list[list[str]]:
    """One row per cell with a finite last-iterate heuristic: the claim's ε, the heuristic, and the strongest bound
    of the attacks that see only the released model, as a share of the heuristic."""
    names = attack_names(report)
    rows = []
    for cell in report["cells"]:
        heuristic = ((cell.get("details") or {}).get("last_iterate") or {}).get("epsilon")
        if heuristic is None:
            continue
        finite = [e for e in (cell.get("epsilon") or {}).values() if e is not None]
        claimed = min(finite) if finite else None
        best, label = 0.0, None
        for key, a in (cell.get("attacks") or {}).items():
            if names.get(key, key) in WHITE_BOX:
                continue
            bound = max(a.get("eps_lower_bound") or 0.0, a.get("eps_lb_mechanism") or 0.0)
            if label is None or bound > best:
                best, label = bound, key
        rows.append([cell["id"], fmt(claimed), fmt(heuristic),
                     fmt(heuristic / claimed) if claimed else "-", label or "-",
                     fmt(best) if label else "-", fmt(best / heuristic) if label and heuristic > 0 else "-"])
    return rows


def own_utility(cell: dict[str, Any]) -> str:
    """The defense's own utility metrics (everything beyond k-NN and linear probe), as ``key=value``."""
    extra = {k: v for k, v in (cell.get("utility") or {}).items() if k not in UTILITY_KEYS}
    return ", ".join(f"{k}={fmt(v)}" for k, v in extra.items() if not isinstance(v, (dict, list))) or "-"


def verdict(cell: dict[str, Any]) -> str:
    """One word or phrase per cell: FAIL, error, pass, not comparable (why: the gate could not check the
    claim with these bounds), or no claim."""
    gate = cell.get("gate") or {}
    if (cell.get("details") or {}).get("error"):
        return "error"
    if gate.get("control"):
        return "control caught (expected)" if gate.get("caught") else "FAIL: control not caught"
    if gate.get("status") == "fail":
        return "FAIL"
    comparisons = gate.get("comparisons") or []
    consistent = [c for c in comparisons if c["verdict"] == "consistent"]
    if consistent:
        at = sorted({f"{c.get('relation', 'add-remove')}, per {c.get('unit', 'example')}" for c in consistent})
        return f"pass ({'; '.join(at)})"
    reasons = [c["reason"] for c in comparisons if c.get("reason")]
    if any("infinite" in r for r in reasons):
        return "no claim (ε = ∞)"
    if any("replace-one" in r for r in reasons):
        return "not comparable: replace-one"
    if any("user" in r for r in reasons):
        return "not comparable: user-level"
    if reasons:
        return "not comparable"
    return "pass (no attacks)"


#: Columns that carry a table's conclusion: renderers put the first one present first (:func:`lead`).
LEAD_COLUMNS = ("verdict", "comparison")


def lead(headers: list[str], rows: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """``headers`` and ``rows`` with the conclusion column (:data:`LEAD_COLUMNS`) moved first, so a reader sees
    the verdict before the numbers and a narrow window never hides it off to the right."""
    at = next((headers.index(h) for h in LEAD_COLUMNS if h in headers), None)
    if at is None or at == 0:
        return headers, rows
    def move(row: list[str]) -> list[str]:
        return [row[at], *row[:at], *row[at + 1:]]
    return move(headers), [move(r) for r in rows]


def summary_headers(report: dict[str, Any]) -> list[str]:
    return (["defense"] + (["dataset"] if varies(report, "dataset") else []) + ["target ε"]
            + (["seed"] if varies(report, "seed") else []) + [f"ε {a}" for a in shown_accountants(report)]
            + ["strongest attack", "ε_lb", "ε_lb mech", "ε_lb traj", "AUC", "TPR@1%FPR", "k-NN acc (encoder)", "linear probe (encoder)",
               "own utility (released model)", "verdict"])


def summary_rows(report: dict[str, Any]) -> list[list[str]]:
    """The summary table: one row per cell (dataset and seed columns only when they vary)."""
    rows = []
    names = shown_accountants(report)
    datasets, seeds = varies(report, "dataset"), varies(report, "seed")
    for cell in report["cells"]:
        label, attack = strongest_attack(cell)
        utility = cell.get("utility") or {}
        caveat = " †" if (cell.get("claim") or {}).get("notes") else ""
        rows.append([
            cell["defense"] + caveat, *([cell["dataset"]] if datasets else []), fmt(cell.get("target_epsilon")),
            *([str(cell["seed"])] if seeds else []),
            *[epsilon_text(cell, n) for n in names],
            label or "-", fmt(attack and attack.get("eps_lower_bound")), fmt(attack and attack.get("eps_lb_mechanism")),
            fmt(attack and attack.get("eps_lb_trajectory")), fmt(attack and attack.get("auc")),
            tpr_text(attack, "0.01") if attack else "-",
            fmt(utility.get("knn_accuracy")), fmt(utility.get("linear_probe_accuracy")), own_utility(cell),
            verdict(cell),
        ])
    return rows


ATTACK_HEADERS = ["cell", "attack", "variant", "AUC", "TPR@0.1%", "TPR@1%", "TPR@10%", "members / non-members",
                  "ε_lb", "ε_lb mech", "ε_lb traj", "ε_lb (gate)", "smallest ε (accountant)", "comparison",
                  "released noise / claimed"]


def attack_rows(report: dict[str, Any]) -> list[list[str]]:
    """Every attack of every cell, with its bound-versus-claim comparison."""
    rows = []
    for cell in report["cells"]:
        comparisons = {c["attack"]: c for c in (cell.get("gate") or {}).get("comparisons", [])}
        noise = {n["attack"]: n for n in (cell.get("gate") or {}).get("released_noise") or []}
        for label, a in (cell.get("attacks") or {}).items():
            c = comparisons.get(label, {})
            eps = "-" if c.get("epsilon") is None else f"{fmt(c['epsilon'])} ({c['accountant']})"
            comparison = c.get("verdict", "-")
            if c.get("reason"):  # the short form; the caveats section gives the full reasons
                comparison += f": {c['reason'].split(':')[0].split(';')[0]}"
            rows.append([cell["id"], label, a.get("variant") or "-", fmt(a.get("auc")),
                         *(tpr_text(a, k) for k in ("0.001", "0.01", "0.1")),
                         f"{a.get('n_members')} / {a.get('n_nonmembers')}",
                         fmt(a.get("eps_lower_bound")), fmt(a.get("eps_lb_mechanism")), fmt(a.get("eps_lb_trajectory")),
                         fmt(c.get("gate_eps_lower_bound")),
                         eps, comparison, released_noise_text(noise.get(label))
                         + _release_texts(label, noise)])
    return rows


def released_noise_text(check: dict[str, Any] | None) -> str:
    """The gate's released-noise check of an attack: measured std over claimed, its upper bound, the verdict."""
    if not check:
        return "-"
    if "unjudged" in check:
        return f"not judged: {check['unjudged']}"
    verdict = "less than claimed (FAIL)" if check["rejected"] else "consistent"
    return f"{check['std_ratio']:.4g} (≤ {check['std_ratio_upper']:.4g}): {verdict}" + structure_text(check)


def _release_texts(label: str, noise: dict[str, dict[str, Any]]) -> str:
    """The released-noise checks of the attack's probes on the step's other releases (DPCL's similarity matrix or
    statistics), each after the gradient's, or nothing."""
    prefix = f"{label} ("
    return "".join(f"; {name[len(prefix):-1]}: {released_noise_text(check)}" for name, check in sorted(noise.items())
                   if name.startswith(prefix))


def structure_text(check: dict[str, Any]) -> str:
    """The gate's checks of the noise across steps, per tensor and across coordinates
    (:mod:`privaudit.attacks.noise.noise_structure`), short."""
    pairs, tensors = check.get("independence") or {}, check.get("tensors") or {}
    out = ""
    if pairs:
        out += ("; across steps: not judged" if "unjudged" in pairs else
                f"; across steps: {pairs['std_ratio']:.4g} " + ("(reused or correlated: FAIL)" if pairs["rejected"]
                                                                 else "consistent"))
    if tensors:
        if "unjudged" in tensors:
            out += "; per tensor: not judged"
        elif tensors["rejected"]:
            out += "; per tensor: FAIL on " + ", ".join(repr(t) for t in tensors["rejected"])
        else:
            out += f"; per tensor: {len(tensors['tensors'])} consistent"
        if tensors.get("uncovered"):
            out += f" ({len(tensors['uncovered'])} without canaries)"
    coordinates = check.get("coordinates") or {}
    if coordinates:
        out += ("; across coordinates: not judged" if "unjudged" in coordinates else
                f"; across coordinates: {coordinates['std_ratio']:.4g} " + ("(correlated: FAIL)"
                                                                            if coordinates["rejected"] else "consistent"))
    return out


SENSITIVITY_HEADERS = ["claim", "source", "relation", "bound", "observed", "ratio", "supremum", "observed / supremum",
                       "verdict", "expected", "witness"]


def sensitivity_rows(report: dict[str, Any]) -> list[list[str]]:
    """One row per checked claim; ``supremum`` is the quantity's closed-form supremum where derived."""
    expect = ((report["suite"].get("sensitivity") or {}).get("expect")) or {}
    rows = []
    for r in report.get("sensitivity") or []:
        sup = (r.get("config") or {}).get("closed_form_supremum") or {}
        rows.append([r.get("claim", "-"), r.get("source", "-"), r.get("relation", "-"), fmt(r.get("bound")),
                     fmt(r.get("observed")), fmt(r.get("ratio")),
                     f"{fmt(sup.get('value'))} = {sup['formula']}" if sup.get("formula") else "-",
                     fmt(sup.get("search_ratio")), display(r.get("verdict", "-")),
                     display(expect.get(r.get("claim"), "holds")), r.get("witness") or "-"])
    return rows


def sensitivity_notes(report: dict[str, Any]) -> list[str]:
    """The register's notes of each checked claim (why a bound is loose, what the constructions reach)."""
    return [f"{r.get('claim', '-')}: {n}" for r in report.get("sensitivity") or []
            for n in (r.get("config") or {}).get("notes") or []]


def claim_notes(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each defense's claim once: mechanism, relation, unit, paper accountant, source and its caveats.

    A caveat every cell of the defense shares is listed once; one that differs between cells (it quotes
    that cell's noise or epsilon) is prefixed with the cell's target epsilon (or id).
    """
    by_defense: dict[str, list[dict[str, Any]]] = {}
    for cell in report["cells"]:
        if cell.get("claim"):
            by_defense.setdefault(cell["defense"], []).append(cell)
    out = []
    for defense, cells in by_defense.items():
        claim = cells[0]["claim"]
        shared = set.intersection(*(set(c["claim"].get("notes") or []) for c in cells))
        notes: list[str] = [n for n in claim.get("notes") or [] if n in shared]
        for c in cells:
            tag = f"ε={c['target_epsilon']:g}" if c.get("target_epsilon") is not None else c["id"]
            notes += [f"[{tag}] {n}" for n in c["claim"].get("notes") or [] if n not in shared]
        mechanisms = list(dict.fromkeys(c["claim"].get("mechanism") for c in cells))
        out.append({"defense": defense, "source": claim.get("source"), "relation": claim.get("relation"),
                    "unit": claim.get("unit"), "paper_accountant": claim.get("paper_accountant"),
                    "sampler": claim.get("sampler"), "mechanisms": mechanisms, "notes": notes})
    return out


def grid_line(report: dict[str, Any]) -> str:
    """The constant parts of the grid, for the line under the summary table."""
    parts = []
    if not varies(report, "dataset") and report["cells"]:
        parts.append(f"dataset {report['cells'][0]['dataset']}")
    if not varies(report, "seed") and report["cells"]:
        parts.append(f"seed {report['cells'][0]['seed']}")
    if any((c.get("claim") or {}).get("notes") for c in report["cells"]):
        parts.append("† the claim carries caveats (see Claims and caveats)")
    hidden = [a for a in accountants(report) if a not in shown_accountants(report)]
    if hidden:
        parts.append(f"accountants without a finite ε for any cell (not shown): {', '.join(hidden)}")
    return "; ".join(parts)


def not_applicable(report: dict[str, Any]) -> list[str]:
    """Why accountants were not applicable: one line per defense, each accountant with its reason once."""
    per_defense: dict[str, dict[str, str]] = {}
    for cell in report["cells"]:
        for name, d in ((cell.get("details") or {}).get("epsilon") or {}).items():
            if d.get("epsilon") is None and not d.get("infinite"):
                reason = str(d.get("reason") or "")
                reason = reason[len(name) + 2:] if reason.startswith(f"{name}: ") else reason
                per_defense.setdefault(cell["defense"], {}).setdefault(name, reason)
    return [f"{defense}: not applicable: " + "; ".join(f"{n} ({r})" for n, r in reasons.items())
            for defense, reasons in per_defense.items()]


def bound_notes(report: dict[str, Any]) -> list[str]:
    """The attacks' caveats on their bounds, each once, with the defenses and attacks it applies to."""
    where: dict[str, list[str]] = {}
    for cell in report["cells"]:
        for label, a in (cell.get("attacks") or {}).items():
            for note in (((a.get("details") or {}).get("bound") or {}).get("notes") or []):
                tag = f"{cell['defense']}/{label}"
                if tag not in where.setdefault(note, []):
                    where[note].append(tag)
    return [f"{note} ({', '.join(tags)})" for note, tags in where.items()]


def errors(report: dict[str, Any]) -> list[str]:
    return [f"{c['id']}: {c['details']['error']}" for c in report["cells"] if (c.get("details") or {}).get("error")]


PANEL_HEADERS = ["defense", "target ε", "init", "linear probe: trained", "init", "random", "non-private (same steps)",
                 "gap closed", "k-NN: trained", "init", "random", "non-private", "gap closed",
                 "trained vs init (McNemar)"]


def _vs_init(panel: dict[str, Any]) -> str:
    """'probe -1/270 (p 0.75), k-NN +2/270 (p 1)': change in test examples right, one-sided p of a drop."""
    parts = []
    for metric, name in (("linear_probe_accuracy", "probe"), ("knn_accuracy", "k-NN")):
        c = (panel.get("vs_init") or {}).get(metric)
        if c:
            parts.append(f"{name} {c['gained'] - c['lost']:+d}/{c['n']} (p {c['p_drop']:.2g})")
    return ", ".join(parts) or "-"


def panel_rows(report: dict[str, Any]) -> list[list[str]]:
    """Utility beside leakage: each cell's encoder against its init, a random one and non-private training."""
    rows = []
    for cell in report["cells"]:
        panel = (cell.get("utility") or {}).get("panel")
        if not panel:
            continue
        gap = panel.get("gap_closed") or {}
        row = [cell["defense"], fmt(cell.get("target_epsilon")), str(((cell.get("details") or {}).get("init") or {})
                                                                     .get("init", "-"))]
        for metric in ("linear_probe_accuracy", "knn_accuracy"):
            row += [fmt((panel.get(k) or {}).get(metric)) for k in ("trained", "init", "random", "nonprivate")]
            row.append(fmt(gap.get(metric)))
        row.append(_vs_init(panel))
        rows.append(row)
    return rows


PANEL_EXPLAIN = ("Each encoder's accuracy on the test split (probe trained on the members' features): the released "
                 "model, where its training started (init: public = SimCLR on the public split), the seeded random "
                 "encoder, and non-private training from the same init with the same number of steps and batch size; "
                 "gap closed = (trained - random) / (non-private - random); trained vs init: the change in test "
                 "examples classified right and the exact McNemar one-sided p-value of a drop (small p: the model "
                 "ended below its init beyond sampling noise).")
