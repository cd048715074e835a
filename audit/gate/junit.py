"""A run's gate as JUnit test cases (:mod:`privaudit.audit.junit`): one per cell and check, one per sensitivity claim
and step audit, each failure carrying the gate's own reasons.

A cell's cases: each bound-versus-claim comparison (an attack, a step-audit pair: failed when its bound exceeds the
claim, skipped when it is not comparable, with the reason), its trace against its claim, each released-noise check,
and for a positive control whether it was caught; an errored cell is one error. Every reason the gate gives lands in
the case it names (matched by the words it begins with); a reason no case names is a failing ``gate`` case, so a
failing gate is never a passing suite.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from privaudit.audit.junit import Case


def _num(x: Any) -> str:
    return "-" if x is None else f"{x:.4g}"


class _Reasons:
    """The gate's reasons, each taken once by the first case whose prefix it begins with."""

    def __init__(self, reasons: Sequence[str]):
        self.left = list(dict.fromkeys(reasons))

    def take(self, *prefixes: str) -> list[str]:
        taken = [r for r in self.left if r.startswith(prefixes)]
        self.left = [r for r in self.left if r not in taken]
        return taken


def _case(classname: str, name: str, reasons: list[str], details: str, *, skipped: str | None = None,
          error: bool = False, time: float = 0.0) -> Case:
    if reasons:
        return Case(classname, name, "error" if error else "failed", "\n".join(reasons), details, time)
    if skipped is not None:
        return Case(classname, name, "skipped", skipped, details, time)
    return Case(classname, name, "passed", "", details, time)


def _comparison(cid: str, c: Mapping[str, Any], pool: _Reasons, time: float) -> Case:
    """One bound against the claim: failed on the gate's reasons naming it, skipped when not comparable."""
    attack = c["attack"]
    gated = c.get("gate_eps_lower_bound")
    details = (f"bound: {c.get('method')} {_num(c.get('eps_lower_bound'))}"
               + (f" (gate: {_num(gated)} at {100 * c['gate_confidence']:.4g}% confidence)" if gated is not None
                  else "")
               + f"; claim: {_num(c.get('epsilon'))} ({c.get('accountant')}); verdict: {c['verdict']}"
               + (f"; {c['reason']}" if c.get("reason") else ""))
    reasons = pool.take(f"cell {cid}: {attack}'s ", f"cell {cid}: {attack} reaches AUC")
    errored = attack.startswith("step audit (") and (c.get("reason") or "").startswith("the pair errored")
    if errored:
        pair = attack[len("step audit ("):-len(" pair)")]
        reasons += pool.take(f"cell {cid}: its step audit's {pair} pair errored")
        return _case(cid, attack, reasons or [c["reason"]], details, error=True, time=time)
    if c["verdict"] == "exceeds" and not reasons:  # the verdict fails the case even where no reason was kept
        reasons = [f"cell {cid}: {attack}'s bound exceeds its claim"]
    return _case(cid, attack, reasons, details, time=time,
                 skipped=c.get("reason") if c["verdict"] == "not comparable" else None)


def _noise_cases(cid: str, gate: Mapping[str, Any], pool: _Reasons) -> list[Case]:
    """Each released-noise check of each white-box comparison: failed, passed, or skipped when not judged."""
    from privaudit.attacks.noise.noise_structure import COORDINATES, INDEPENDENCE, PER_TENSOR
    from privaudit.audit.gate.judge import noise_failures

    out = []
    for n in gate.get("released_noise") or ():
        failures = noise_failures([n])
        for name, part in (("released noise", n), (INDEPENDENCE, n.get("independence") or {}),
                           (PER_TENSOR, n.get("tensors") or {}), (COORDINATES, n.get("coordinates") or {})):
            if not part:
                continue
            texts = [text for check, text in failures if check == name]
            reasons = [r for t in texts for r in pool.take(f"cell {cid}: {t}")] or [f"cell {cid}: {t}" for t in texts]
            if gate.get("control") and reasons:  # a control's noise shortfall is what it is for
                out.append(_case(cid, f"{n['attack']}: {name}", [], "caught, as expected: " + "; ".join(texts)))
                continue
            out.append(_case(cid, f"{n['attack']}: {name}", reasons, "", skipped=part.get("unjudged")))
    return out


def _trace_case(cell: Mapping[str, Any], pool: _Reasons, time: float) -> list[Case]:
    trace = (cell.get("claim_checks") or {}).get("trace")
    if not trace:
        return []
    from privaudit.audit.findings import fold_findings

    cid, steps, control = cell["id"], trace.get("steps"), (cell.get("gate") or {}).get("control")
    reasons = pool.take(f"cell {cid}: its trace does not match its claim")
    found = [f"cell {cid}: its trace does not match its claim: {f['message']}"
             for f in fold_findings(trace.get("mismatches") or (), steps=steps, check="field")]
    details = f"the training trace ({steps} steps) against the claim's event"
    if control and found:
        return [_case(cid, "trace", [], details + ": does not match, as a positive control is expected to",
                      time=time)]
    return [_case(cid, "trace", reasons or found, details, time=time)]


def _seconds(timings: Mapping[str, Any], stage: str) -> float:
    value = timings.get(stage)
    return float(value) if isinstance(value, (int, float)) else 0.0


def cell_cases(cell: Mapping[str, Any], pool: _Reasons, timings: Mapping[str, Any] | None = None) -> list[Case]:
    """One cell's cases (module docstring); ``timings``: the cell's stage times (``timings.json``: an attack's is
    its comparison's time, the claim checks' the trace's)."""
    cid, gate, timings = cell["id"], cell.get("gate") or {}, timings or {}
    error = (cell.get("details") or {}).get("error")
    if error:
        return [_case(cid, "cell", pool.take(f"cell {cid} errored") or [f"cell {cid} errored: {error}"], "",
                      error=True, time=sum(_seconds(timings, k) for k in timings))]
    cases = [_comparison(cid, c, pool, _seconds(timings, c["attack"])) for c in gate.get("comparisons") or ()]
    cases += _trace_case(cell, pool, _seconds(timings, "claim checks")) + _noise_cases(cid, gate, pool)
    if gate.get("control"):
        by = ", ".join(gate.get("caught_by") or ())
        cases.append(_case(cid, "positive control", pool.take(f"cell {cid}: positive control not caught"),
                           f"caught by {by}" if by else "not caught"))
    left = pool.take(f"cell {cid}: ", f"cell {cid} ")
    if left:
        cases.append(_case(cid, "gate", left, ""))
    return cases


def _sensitivity_cases(results: Sequence[Mapping[str, Any]], pool: _Reasons) -> list[Case]:
    out = []
    for r in results:
        claim = r.get("claim")
        details = (f"observed {_num(r.get('observed'))}, bound {_num(r.get('bound'))} ({r.get('source')}); verdict: "
                   f"{r.get('verdict')}")
        reasons = pool.take(f"sensitivity claim {claim} ", f"sensitivity claim {claim}:")
        out.append(_case("sensitivity", str(claim), reasons, details,
                         error=any(" errored" in x for x in reasons)))
    return out


def _step_cases(results: Sequence[Mapping[str, Any]], pool: _Reasons) -> list[Case]:
    out = []
    for r in results:
        name = r.get("defense") or r.get("label") or "?"
        out.append(_case("step audit", str(name), pool.take(f"step audit of {name}:"),
                         f"verdict: {r.get('verdict')}"))
    return out


def gate_cases(report: Mapping[str, Any], timings: Mapping[str, Any] | None = None) -> list[Case]:
    """Every case of a judged run's ``report`` (report.json's content, or ``privaudit gate``'s recomputed one):
    its cells', its sensitivity claims', its step audits', and a failing ``gate`` case holding every reason no
    other case names."""
    gate = report.get("gate") or {}
    pool = _Reasons([*gate.get("reasons", ()), *(r for c in report.get("cells") or ()
                                                  for r in (c.get("gate") or {}).get("reasons", ()))])
    cells = (timings or {}).get("cells") or {}
    cases = [case for cell in report.get("cells") or () for case in cell_cases(cell, pool, cells.get(cell["id"]))]
    cases += _sensitivity_cases(report.get("sensitivity") or (), pool)
    cases += _step_cases(report.get("step_audit") or (), pool)
    suite = (report.get("suite") or {}).get("name") or "suite"
    if pool.left or (gate.get("status") == "fail" and not any(c.outcome in ("failed", "error") for c in cases)):
        cases.append(_case(suite, "gate", pool.left or [f"the gate failed ({gate.get('status')})"], ""))
    return cases
