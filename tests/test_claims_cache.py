"""``privaudit claims`` reads the committed checks (accountants/paper_claims/verdicts.json) only while they are this
code's: the modules they were computed by are unchanged (checked here, so a change without ``python
scripts/claims_cache.py`` fails), a fresh computation gives them, and a stale file is not used but said and
recomputed. The command prints no warning."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest

from privaudit.accountants.paper_claims import check_claim, paper_claims
from privaudit.accountants.paper_claims import cache as claims_cache
from privaudit.audit.cli import main

ROOT = Path(__file__).resolve().parents[1]
#: Claims whose check takes a fraction of a second (the others take seconds to half a minute each).
QUICK = ("logit-cor44", "logit-sec5")


def _committed() -> dict:
    return json.loads(claims_cache.CACHE.read_text(encoding="utf-8"))


def _fresh(claim_id: str) -> dict:
    from privaudit.audit.commands.claims import strict_json

    return strict_json(check_claim(next(c for c in paper_claims() if c.id == claim_id)).to_dict())


def test_the_committed_checks_were_computed_by_this_code():
    committed = _committed()
    changed = [name for name, fp in committed["modules"].items() if claims_cache.module_fingerprint(name) != fp]
    assert changed == [], f"{changed} changed since the checks were computed: run python scripts/claims_cache.py"
    assert list(committed["claims"]) == [c.id for c in paper_claims()]
    expected = {"privaudit.accountants.pld.pld_epsilon", "privaudit.accountants.paper_claims.data"}
    assert expected <= set(committed["modules"])


def test_a_fingerprint_ignores_docstrings_and_layout_but_not_code():
    code = 'def f(x):\n    """Twice x."""\n    return 2 * x  # doubled\n'
    fp = claims_cache.fingerprint(code)
    assert claims_cache.fingerprint('def f(x):\n    """Two times x."""\n\n    return (2 * x)\n') == fp
    assert claims_cache.fingerprint(code.replace("2 *", "3 *")) != fp


def test_the_quick_claims_computed_afresh_are_the_committed_ones():
    committed = _committed()
    if committed["environment"]["keyed"] != claims_cache.environment()["keyed"]:
        pytest.skip(f"the checks were computed with {committed['environment']['keyed']}")
    for claim_id in QUICK:
        assert claims_cache.differences(committed["claims"][claim_id], _fresh(claim_id)) == [], claim_id


@pytest.mark.slow
def test_every_claim_computed_afresh_is_the_committed_one():
    """Every claim's check recomputed (about two minutes): the committed file is what this code computes."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import claims_cache as script

    assert script.main(["--check"]) == 0


def test_a_stale_file_is_not_used_but_said_and_recomputed(tmp_path, monkeypatch, capsys):
    committed = _committed()
    assert main(["claims", "--id", "logit-sec5"]) == 0
    cached = capsys.readouterr()
    assert cached.err == ""
    stale = {**committed, "modules": {**committed["modules"], "privaudit.accountants.pld.pld": "0" * 64}}
    (tmp_path / "verdicts.json").write_text(json.dumps(stale))
    monkeypatch.setattr(claims_cache, "CACHE", tmp_path / "verdicts.json")
    assert claims_cache.read_cache(tmp_path / "verdicts.json") == ({}, "privaudit.accountants.pld.pld changed since")
    other = {**committed, "environment": {**committed["environment"], "keyed": {"dp-accounting": "0.0.1"}}}
    (tmp_path / "other.json").write_text(json.dumps(other))
    assert claims_cache.read_cache(tmp_path / "other.json")[1].startswith("computed with dp-accounting 0.0.1, this is")
    assert main(["claims", "--id", "logit-sec5"]) == 0
    fresh = capsys.readouterr()
    assert fresh.err.startswith("privaudit: computing 1 claims' checks (privaudit.accountants.pld.pld changed since)")
    assert fresh.out == cached.out


def test_the_listing_prints_no_warning(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["claims"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "dpcl-simclr-dpsim" in out and "verdict:" in out
