"""``report.html``: one self-contained page (inline CSS, plots as base64 PNG, no external resource),
generated from ``report.json``."""

from __future__ import annotations

import base64
import html
import re
from typing import Any

from privaudit.audit.report import summary as s
from privaudit.audit.report.markdown import ATTACK_EXPLAIN, EXPLAIN

CSS = """
:root { --fg:#1f2328; --muted:#59636e; --line:#d1d9e0; --bg:#ffffff; --soft:#f6f8fa;
        --pass:#1a7f37; --fail:#cf222e; --warn:#9a6700; }
* { box-sizing: border-box; }
body { font: 14px/1.5 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: var(--fg);
       background: var(--bg); margin: 0; }
main { max-width: 1400px; margin: 0 auto; padding: 24px 24px 64px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 36px 0 10px; padding-bottom: 6px; border-bottom: 1px solid var(--line); }
p.meta { color: var(--muted); margin: 0 0 18px; font-size: 13px; }
p.lede { margin: 6px 0 14px; }
.gate { border-radius: 8px; padding: 14px 18px; margin: 18px 0; border: 1px solid; }
.gate.pass { border-color: var(--pass); background: #dafbe1; }
.gate.fail { border-color: var(--fail); background: #ffebe9; }
.gate strong { font-size: 18px; }
.gate ul { margin: 8px 0 0; padding-left: 20px; }
.gate li.note { color: var(--muted); }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; font-size: 12px; margin: 6px 0 10px; }
th, td { padding: 4px 6px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { background: var(--soft); font-weight: 600; }
td { overflow-wrap: break-word; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; overflow-wrap: normal; }
tr:hover td { background: #fafbfc; }
.badge { display: inline-block; padding: 1px 7px; border-radius: 10px; font-size: 11.5px; font-weight: 600;
         overflow-wrap: normal; }
td:first-child { min-width: 9em; }
.badge.pass { background: #dafbe1; color: var(--pass); }
.badge.fail { background: #ffebe9; color: var(--fail); }
.badge.warn { background: #fff8c5; color: var(--warn); }
.badge.muted { background: var(--soft); color: var(--muted); }
.figs { display: flex; flex-wrap: wrap; gap: 18px; }
figure { margin: 0; border: 1px solid var(--line); border-radius: 8px; padding: 8px; background: #fff; }
figure img { display: block; max-width: 100%; height: auto; }
figcaption { color: var(--muted); font-size: 12px; margin-top: 4px; max-width: 640px; }
ul.notes li { margin: 3px 0; }
code { background: var(--soft); padding: 1px 5px; border-radius: 4px; font-size: 12.5px; }
small { color: var(--muted); }
"""

# A cell that is one number (or infinity, not applicable, none) is right aligned and never wrapped.
NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?|∞|n/a|-")


def e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def breakable(text: Any) -> str:
    """Escaped text that may wrap after each ``/`` (cell ids and file paths are long words)."""
    return e(text).replace("/", "/<wbr>")


def badge(text: str) -> str:
    low = text.lower()
    kind = ("fail" if low.startswith(("fail", "error", "violated", "exceeds")) else
            "warn" if ("not comparable" in low or low.startswith("inconclusive")) else
            "muted" if low.startswith(("no claim", "secondary")) or low == "-" else "pass")
    return f'<span class="badge {kind}">{e(text)}</span>'


def table(headers: list[str], rows: list[list[str]], *, table_id: str, badge_cols: tuple[str, ...] = ()) -> str:
    """An HTML table, its conclusion column first (:func:`privaudit.audit.report.summary.lead`); numbers right
    aligned, text wrapping so the table fits the window."""
    headers, rows = s.lead(headers, rows)
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for h, value in zip(headers, row):
            if h in badge_cols:
                cells.append(f"<td>{badge(value)}</td>")
            else:
                cells.append(f'<td class="num">{e(value)}</td>' if NUMBER.fullmatch(str(value))
                             else f"<td>{breakable(value)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="scroll"><table id="{table_id}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


def figure(name: str, png: bytes, caption: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure id="fig-{e(name)}"><img alt="{e(name)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{e(caption)}</figcaption></figure>")


CAPTIONS = {
    "epsilon": "Theory versus measurement: each accountant's ε for the claim the defense implements (markers; "
               "arrows: ε = ∞) and the strongest sound empirical lower bound (bars). A bar past a marker "
               "contradicts that accountant (where the two are comparable; see the attack table).",
    "privacy-utility": "Linear-probe accuracy and the strongest attack's AUC against the target ε: black-box attacks "
                       "(on the released model) and white-box audits (canaries in the training's internals) apart; "
                       "dashed: non-private baselines; dotted: chance. Defense families in rows of at most eight "
                       "curves.",
}


def render(report: dict[str, Any], plots: dict[str, bytes]) -> str:
    """The HTML report of ``report``, its figures (PNG bytes by name) embedded."""
    suite = report["suite"]
    status = report["gate"]["status"]
    parts = (_header(report) + _summary(report) + _measurement(report, plots) + _sensitivity(report)
             + _step_audit(report) + _caveats(report))
    parts.append(f'<h2 id="reproduce">Reproduce</h2><p><code>privaudit run {e(suite["path"])}</code> with privaudit '
                 f"{e(report['version'])}; every number is recomputable from <code>report.json</code> and the "
                 "per-example scores in <code>cells/*/attacks/*/scores.npz</code>.</p>")
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>privaudit report: {e(suite['name'])} ({'PASS' if status == 'pass' else 'FAIL'})</title>"
            f"<style>{CSS}</style></head><body><main>\n{body}\n</main></body></html>\n")


def _header(report: dict[str, Any]) -> list[str]:
    """Title, provenance, the suite's description and the gate's verdict with its reasons and notes."""
    suite, gate = report["suite"], report["gate"]
    status = gate["status"]
    parts = [f"<h1>privaudit report: {e(suite['name'])}</h1>",
             f"<p class=\"meta\">suite <code>{e(suite['path'])}</code> · privaudit {e(report['version'])} · commit "
             f"<code>{e(report.get('git_commit') or 'unknown')}</code> · device {e(report['device'])} · run times in "
             "<code>timings.json</code></p>"]
    if suite.get("description"):
        parts.append(f'<p class="lede">{e(suite["description"].strip())}</p>')
    items = "".join(f"<li>{e(r)}</li>" for r in gate["reasons"])
    items += "".join(f'<li class="note">{e(n)}</li>' for n in gate.get("notes", []))
    parts.append(f'<section class="gate {status}" id="gate"><strong>Gate: {"PASS" if status == "pass" else "FAIL"}'
                 f"</strong>{f'<ul>{items}</ul>' if items else ''}</section>")
    return parts


def _summary(report: dict[str, Any]) -> list[str]:
    """The summary table, the utility panel beside leakage, and the errors."""
    parts = ['<h2 id="summary">Summary</h2>',
             table(s.summary_headers(report), s.summary_rows(report), table_id="summary-table",
                   badge_cols=("verdict",))]
    grid = s.grid_line(report)
    parts.append(f"<p><small>{e((grid + '. ') if grid else '')}{e(EXPLAIN)}</small></p>")
    panel = s.panel_rows(report)
    if panel:
        parts.append('<h2 id="utility">Utility beside leakage</h2>')
        parts.append(table(s.PANEL_HEADERS, panel, table_id="utility-table"))
        parts.append(f"<p><small>{e(s.PANEL_EXPLAIN)}</small></p>")
    errors = s.errors(report)
    if errors:
        parts.append('<h2 id="errors">Errors</h2><ul class="notes">' + "".join(f"<li>{e(x)}</li>" for x in errors)
                     + "</ul>")
    return parts


def _measurement(report: dict[str, Any], plots: dict[str, bytes]) -> list[str]:
    """Theory versus measurement (figure and attack table), the ROC curves and the privacy-utility figure."""
    parts = ['<h2 id="measurement">Theory versus measurement</h2>']
    if "epsilon" in plots:
        parts.append('<div class="figs">' + figure("epsilon", plots["epsilon"], CAPTIONS["epsilon"]) + "</div>")
    parts.append(table(s.ATTACK_HEADERS, s.attack_rows(report), table_id="attack-table", badge_cols=("comparison",)))
    parts.append(f"<p><small>{e(ATTACK_EXPLAIN)}</small></p>")
    final = s.final_model_rows(report)
    if final:
        parts.append('<h2 id="final-model">The final model: what hiding the iterates buys</h2>')
        parts.append(table(s.FINAL_MODEL_HEADERS, final, table_id="final-model-table"))
        parts.append(f"<p><small>{e(s.FINAL_MODEL_EXPLAIN)}</small></p>")
    rocs = [k for k in plots if k.startswith("roc-")]
    if rocs:
        parts.append('<h2 id="roc">ROC curves</h2><div class="figs">' + "".join(
            figure(k, plots[k], f"{k[4:]}: log-log ROC per cell, one panel per group of defense families (at most "
                                "eight curves); dashed: chance (TPR = FPR); the axes start at half the FPR resolution "
                                "1/#non-members.") for k in rocs) + "</div>")
    if "privacy-utility" in plots:
        parts.append('<h2 id="privacy-utility">Privacy–utility</h2><div class="figs">'
                     + figure("privacy-utility", plots["privacy-utility"], CAPTIONS["privacy-utility"]) + "</div>")
    return parts


def _sensitivity(report: dict[str, Any]) -> list[str]:
    parts = ['<h2 id="sensitivity">Sensitivity claims</h2>']
    rows = s.sensitivity_rows(report)
    if not rows:
        return parts + ["<p>No sensitivity checks in this run.</p>"]
    parts.append(table(s.SENSITIVITY_HEADERS, rows, table_id="sensitivity-table", badge_cols=("verdict",)))
    parts.append("<p><small>Witness paths are relative to this report's directory; "
                 "<code>privaudit sensitivity --replay FILE</code> reproduces a violation.</small></p>")
    notes = s.sensitivity_notes(report)
    if notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>")
    return parts


def _step_audit(report: dict[str, Any]) -> list[str]:
    if not report.get("step_audit"):
        return []
    from privaudit.audit.step.render import STEP_EXPLAIN, STEP_HEADERS, step_rows

    return ['<h2 id="step-audit">Step-level audit</h2>',
            table(STEP_HEADERS, step_rows(report), table_id="step-audit-table", badge_cols=("verdict",)),
            f"<p><small>{e(STEP_EXPLAIN)}</small></p>"]


def _caveats(report: dict[str, Any]) -> list[str]:
    """Each defense's claim (mechanisms, relation, unit, sampler, paper accountant, source, notes), then the
    accountants that do not apply and the bounds' notes."""
    parts = ['<h2 id="caveats">Claims and caveats</h2><ul class="notes">']
    for entry in s.claim_notes(report):
        notes = "".join(f"<li>{e(n)}</li>" for n in entry["notes"])
        parts.append(f"<li><strong>{e(entry['defense'])}</strong>: {e('; '.join(entry['mechanisms']))} "
                     f"({e(entry['relation'])}, per {e(entry['unit'])}, sampler {e(entry['sampler'] or '-')}, paper "
                     f"accountant {e(entry['paper_accountant'])}); source: {e(entry['source'] or '-')}"
                     f"{f'<ul>{notes}</ul>' if notes else ''}</li>")
    parts += [f"<li>{e(n)}</li>" for n in s.not_applicable(report) + s.bound_notes(report)]
    parts.append("</ul>")
    return parts
