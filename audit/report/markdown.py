"""``report.md``: the report as Markdown, generated from ``report.json`` (plots as files in ``plots/``)."""

from __future__ import annotations

from typing import Any

from privaudit.attacks.noise.released_noise import NOISE_ALPHA
from privaudit.audit.report import summary as s


EXPLAIN = ("ε per accountant is the theoretical epsilon of the mechanism the defense actually implements (∞: no "
           "privacy mechanism; n/a: the accountant does not apply, see Claims and caveats). ε_lb is the strongest "
           "attack's sound empirical lower bound on ε at its own neighbouring relation and unit (add/remove inclusion "
           "coins, replace-one paired canaries, or canary users), valid for any (ε, δ)-DP mechanism; ε_lb mech "
           "(white-box canaries) is the one-run f-DP bound against the claim's own mechanism (its PLD trade-off "
           "curve, noise scaled): it refutes that mechanism, not every (ε, δ) one; ε_lb traj (white-box canaries "
           "seen at every step, Nasr et al. 2023) is the per-step Gaussian bound composed over the claim's steps, "
           "the bound the gate compares where it exists (else ε_lb mech, else ε_lb); AUC and TPR@1%FPR are that attack's. "
           "Verdict: pass (relation, unit) (every sound comparison is consistent; the bound and the claim are at that "
           "relation and unit), FAIL, or not comparable (no bound at the claim's relation and unit: the gate cannot "
           "check it by attack).")

ATTACK_EXPLAIN = ("ε_lb: the attack's sound lower bound at its own confidence; ε_lb mech: the bound against the "
                  "claim's own mechanism (white-box canaries); ε_lb traj: the white-box trajectory bound (every "
                  "step's canary observation, composed over the claim's steps), the one compared with the claim where "
                  "it exists (else ε_lb mech, else ε_lb); "
                  "ε_lb (gate): the compared bound "
                  "recomputed at the family-wise confidence the gate uses (Bonferroni over every comparison made); "
                  "comparison: consistent, exceeds (the gate fails), or why the bound and the claim are not "
                  "comparable; released noise / claimed: the std of the noise the release added on the canaries' "
                  "coordinates over every step, over the claim's (≤: its upper confidence bound), a chi-square test "
                  f"the gate applies at level {NOISE_ALPHA:g} (below 1 at that level: the gate fails); across steps: "
                  "the std of disjoint consecutive steps' residual differences over the fresh noise's (0: reused "
                  "noise); per tensor: the same test on each parameter tensor's canaries, Bonferroni over the "
                  "tensors (a failing tensor is named).")


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table, its conclusion column first (:func:`privaudit.audit.report.summary.lead`)."""
    def esc(x: str) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ")

    headers, rows = s.lead(headers, rows)

    lines = ["| " + " | ".join(map(esc, headers)) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(map(esc, row)) + " |" for row in rows]
    return "\n".join(lines)


def header_lines(report: dict[str, Any]) -> list[str]:
    suite = report["suite"]
    commit = report.get("git_commit") or "unknown"
    return [f"# privaudit report: {suite['name']}", "",
            (suite.get("description") or "").strip(), "",
            f"Suite `{suite['path']}` · privaudit {report['version']} · commit `{commit}` · device "
            f"{report['device']} (run times: `timings.json`)", ""]


def gate_lines(report: dict[str, Any]) -> list[str]:
    gate = report["gate"]
    lines = [f"**Gate: {'PASS' if gate['status'] == 'pass' else 'FAIL'}**", ""]
    lines += [f"- {r}" for r in gate["reasons"]]
    lines += [f"- note: {n}" for n in gate.get("notes", [])]
    return lines + [""]


def summary_lines(report: dict[str, Any]) -> list[str]:
    """The summary table and its explanation, the utility panel, and the errors."""
    grid = s.grid_line(report)
    lines = ["## Summary", "", table(s.summary_headers(report), s.summary_rows(report)), "",
             (f"{grid}. " if grid else "") + EXPLAIN, ""]
    panel = s.panel_rows(report)
    if panel:
        lines += ["## Utility beside leakage", "", table(s.PANEL_HEADERS, panel), "", s.PANEL_EXPLAIN, ""]
    errors = s.errors(report)
    if errors:
        lines += ["## Errors", ""] + [f"- {e}" for e in errors] + [""]
    return lines


def sensitivity_lines(report: dict[str, Any]) -> list[str]:
    """The sensitivity table with the register's notes, and the step-level audit."""
    lines = ["## Sensitivity claims", ""]
    rows = s.sensitivity_rows(report)
    if rows:
        lines += [table(s.SENSITIVITY_HEADERS, rows), "",
                  "Witness paths are relative to the report's directory; `privaudit sensitivity --replay FILE` "
                  "reproduces a violation.", ""]
        notes = s.sensitivity_notes(report)
        if notes:
            lines += [f"- {n}" for n in notes] + [""]
    else:
        lines += ["No sensitivity checks in this run.", ""]
    if report.get("step_audit"):
        from privaudit.audit.step.render import STEP_EXPLAIN, STEP_HEADERS, step_rows

        lines += ["## Step-level audit", "", table(STEP_HEADERS, step_rows(report)), "", STEP_EXPLAIN, ""]
    return lines


def final_model_lines(report: dict[str, Any]) -> list[str]:
    """The last-iterate heuristic beside each DP-SGD cell's claim and its final-model attacks (none without one)."""
    rows = s.final_model_rows(report)
    if not rows:
        return []
    return ["## The final model: what hiding the iterates buys", "", table(s.FINAL_MODEL_HEADERS, rows), "",
            s.FINAL_MODEL_EXPLAIN, ""]


def caveat_lines(report: dict[str, Any]) -> list[str]:
    """Each defense's claim and caveats, the accountants that do not apply and the bounds' notes."""
    lines = ["## Claims and caveats", ""]
    for entry in s.claim_notes(report):
        lines.append(f"- **{entry['defense']}**: {'; '.join(entry['mechanisms'])} ({entry['relation']}, per "
                     f"{entry['unit']}, sampler {entry['sampler'] or '-'}, paper accountant "
                     f"{entry['paper_accountant']}); source: {entry['source'] or '-'}")
        lines += [f"  - {note}" for note in entry["notes"]]
    return lines + [f"- {n}" for n in s.not_applicable(report) + s.bound_notes(report)] + [""]


def render(report: dict[str, Any], plots: dict[str, str]) -> str:
    """Markdown text; ``plots`` maps figure names to their paths relative to the report."""
    lines = header_lines(report) + gate_lines(report) + summary_lines(report)
    lines += ["## Attacks and the theory-versus-measurement check", "",
              table(s.ATTACK_HEADERS, s.attack_rows(report)), "", ATTACK_EXPLAIN, ""]
    if "epsilon" in plots:
        lines += [f"![theory versus measurement]({plots['epsilon']})", ""]
    lines += final_model_lines(report)
    rocs = [k for k in plots if k.startswith("roc-")]
    if rocs:
        lines += ["## ROC curves", ""] + [f"![{k}]({plots[k]})" for k in rocs] + [""]
    if "privacy-utility" in plots:
        lines += ["## Privacy–utility", "", f"![privacy-utility]({plots['privacy-utility']})", ""]
    lines += sensitivity_lines(report) + caveat_lines(report)
    lines += ["## Reproduce", "",
              f"`privaudit run {report['suite']['path']}` with privaudit {report['version']} (commit "
              f"`{report.get('git_commit') or 'unknown'}`); every number above is recomputable from "
              "`report.json` and the per-example scores (`cells/*/attacks/*/scores.npz`).", ""]
    return "\n".join(lines)
