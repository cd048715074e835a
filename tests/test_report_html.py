"""report.html renders in headless Chromium: the page has the summary table and the plots, and a screenshot
of it is a non-blank PNG of sensible size. The page is self-contained (no external resource)."""

import re
import shutil
import subprocess

import numpy as np
import pytest

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome",
                                                      "chromium-headless-shell", "chrome-headless-shell")) if p), None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--hide-scrollbars"]


def test_report_html_is_self_contained(tiny_run):
    _, out = tiny_run
    html = (out / "report.html").read_text()
    assert not re.search(r"""(src|href)=["']?(https?:|//|file:)""", html)
    assert "@import" not in html and "<script" not in html
    assert html.count('src="data:image/png;base64,') == 4  # ROC (loss, lira), theory vs measured, privacy-utility


NO_CHROMIUM = "no chromium found (Debian package 'chromium-headless-shell'; .ci/run installs it as root)"


@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_report_html_renders_in_headless_chromium(tiny_run, tmp_path):
    import matplotlib.image

    _, out = tiny_run
    url = (out / "report.html").resolve().as_uri()
    profile = tmp_path / "profile"
    dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", url], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert 'id="summary-table"' in dom and "kernel-sum" in dom and "nonprivate" in dom
    for figure in ("fig-epsilon", "fig-roc-loss", "fig-roc-lira", "fig-privacy-utility"):
        assert f'id="{figure}"' in dom
    assert "Gate: PASS" in dom

    shot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--window-size=1280,2000",
                    f"--screenshot={shot}", url], capture_output=True, timeout=120, check=True)
    image = matplotlib.image.imread(str(shot))
    assert image.shape[0] == 2000 and image.shape[1] == 1280
    grey = image[..., :3].mean(axis=2)
    assert grey.std() > 0.05  # not blank: text, tables and plots
    assert (grey < 0.5).mean() > 0.005  # dark pixels (text, axes) on the light page
    # The plots are drawn: the theory-versus-measurement bars are red, the ROC curves blue/orange.
    rgb = image[..., :3]
    red = (rgb[..., 0] > 0.7) & (rgb[..., 1] < 0.5) & (rgb[..., 2] < 0.5)
    assert red.sum() > 200
    assert np.isfinite(image).all()


def test_the_screenshot_script_finds_a_headless_shell(monkeypatch, tmp_path):
    """Only chromium-headless-shell on PATH (no full browser): found; PRIVAUDIT_CHROMIUM wins; none: one line."""
    script = _screenshot_script()
    monkeypatch.delenv("PRIVAUDIT_CHROMIUM", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(script.shutil, "which", lambda n: f"/usr/bin/{n}" if n == "chromium-headless-shell" else None)
    assert script.chromium() == "/usr/bin/chromium-headless-shell"
    monkeypatch.setenv("PRIVAUDIT_CHROMIUM", "/opt/shell")
    assert script.chromium() == "/opt/shell"
    monkeypatch.delenv("PRIVAUDIT_CHROMIUM")
    monkeypatch.setattr(script.shutil, "which", lambda n: None)
    shell = tmp_path / "ms-playwright" / "chromium_headless_shell-1169" / "chrome-linux" / "headless_shell"
    shell.parent.mkdir(parents=True)
    shell.touch()
    assert script.chromium() == str(shell)
    shell.unlink()
    with pytest.raises(SystemExit, match="no chromium found .*chromium-headless-shell"):
        script.chromium()


def _screenshot_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "screenshot_report.py"
    spec = importlib.util.spec_from_file_location("screenshot_report", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_report_fits_a_1280_pixel_window_with_the_verdict_first(tiny_run, tmp_path):
    """No table is wider than a 1280 px window (nothing hides off to the right), and the summary's first column
    is the verdict."""
    _, out = tiny_run
    script = _screenshot_script()
    layout = script.measure(out / "report.html", 1280, tmp_path)
    assert layout["window"] == 1280 and len(layout["tables"]) >= 2
    assert script.overflow(layout) == []
    html = (out / "report.html").read_text()
    summary = html.split('id="summary-table"', 1)[1]
    assert summary.index("<th>verdict</th>") < summary.index("<th>defense</th>")
    png = tmp_path / "shot.png"
    assert script.main([str(out), "--out", str(png), "--height", "1200"]) == 0 and png.stat().st_size > 10_000


def test_every_table_leads_with_its_conclusion_in_markdown_and_html():
    from privaudit.audit.report import html, markdown

    headers, rows = ["defense", "AUC", "verdict"], [["dp-gcl", "0.5", "pass (add-remove, per example)"]]
    assert markdown.table(headers, rows).splitlines()[0] == "| verdict | defense | AUC |"
    page = html.table(headers, rows, table_id="t", badge_cols=("verdict",))
    assert page.index("verdict") < page.index("defense") and '<td class="num">0.5</td>' in page


def test_white_box_attacks_are_the_registered_canary_audits():
    """The privacy-utility figure's white-box panel takes exactly the attacks that read the training's internals:
    the registered attacks whose settings are the white-box canary audits'."""
    from privaudit.attacks.canaries.canary_audit import CanaryAuditConfig
    from privaudit.attacks.registry import ATTACKS, attack_class
    from privaudit.audit.report.plots import WHITE_BOX

    white = {name for name in ATTACKS if issubclass(attack_class(name).Config, CanaryAuditConfig)}
    assert white == set(WHITE_BOX)


def _cell(defense: str, eps, attacks: dict[str, float], probe: float = 0.9) -> dict:
    from cell_records import make_attack_record, make_cell_record

    return make_cell_record(f"digits/{defense}/eps={eps}", defense=defense, target_epsilon=eps, epsilon={"rdp": eps},
                            utility={"linear_probe_accuracy": probe}, details={"defense_name": defense},
                            attacks={label: make_attack_record(0.0, auc=auc) for label, auc in attacks.items()}
                            ).to_dict()


def test_privacy_utility_puts_each_attack_in_its_own_panel():
    """DP-FedEmb's white-box canary users belong to the white-box panel, not the black-box one."""
    from privaudit.audit.report.plots import _privacy_utility_points

    cells = [_cell("dp-fedemb", 8.0, {"lira": 0.52, "user-canary": 0.69, "user-data-canary": 0.55}),
             _cell("dp-gcl", 8.0, {"lira": 0.51, "gradient-canary": 0.76})]
    report = {"suite": {"attacks": [{"label": n, "name": n} for n in
                                    ("lira", "user-canary", "user-data-canary", "gradient-canary")]}, "cells": cells}
    points, _ = _privacy_utility_points(report, cells)
    assert points["dp-fedemb"][8.0] == [(0.9, 0.55, 0.69)]
    assert points["dp-gcl"][8.0] == [(0.9, 0.51, 0.76)]


def test_panels_hold_at_most_eight_curves_each_with_its_own_colour_and_marker():
    from privaudit.audit.report.plots import MAX_CURVES, _style, facets, family

    defenses = ["nonprivate", "dpcl-simclr", "dpcl-simclr", "alm", "alm", "dp-gcl", "dp-gcl", "logit-dp", "logit-dp",
                "dp-fedemb", "dp-fedemb", "control-undernoised"]
    cells = [_cell(d, 1.0, {}) for d in defenses]
    panels = facets(cells, family)
    assert [len(p) for p in panels] == [8, 4] and all(len(p) <= MAX_CURVES for p in panels)
    # families stay whole: the positive control joins DP-GCL's panel, and the next families open a new one
    assert [c["defense"] for c in panels[0]][-3:] == ["dp-gcl", "dp-gcl", "control-undernoised"]
    assert {family(c) for c in panels[1]} == {"Logit-DP", "DP-FedEmb"}
    styles = [(_style(i)["color"], _style(i)["marker"]) for i in range(MAX_CURVES)]
    assert len({c for c, _ in styles}) == len({m for _, m in styles}) == MAX_CURVES
    assert len(facets([_cell("x", 1.0, {})] * 11, family)) == 2  # one family of 11 curves is split, 8 + 3


def test_score_audit_shows_the_same_markers_in_markdown_and_html(tmp_path):
    """A TPR read below the FPR resolution is marked "(unresolved)" in both renderings."""
    import numpy as np

    import privaudit
    from privaudit.audit.report.summary import UNRESOLVED

    rng = np.random.default_rng(0)
    result = privaudit.audit_scores(rng.normal(1.0, 1.0, 300), rng.normal(0.0, 1.0, 300), out=tmp_path / "a")
    md, page = (tmp_path / "a" / "report.md").read_text(), (tmp_path / "a" / "report.html").read_text()
    assert result.to_dict()["fpr_resolved"]["0.001"] is False
    assert md.count(UNRESOLVED.strip()) == page.count(UNRESOLVED.strip()) == 1


def test_summary_and_plot_show_the_white_box_trajectory_bound():
    """The bound the gate compares for white-box canaries (ε_lb traj) is a column of the summary and attack
    tables, and the theory-versus-measurement bar is the strongest of the three bounds an attack reports."""
    from privaudit.audit.report import summary as s

    from cell_records import make_attack_record, make_cell_record

    cell = make_cell_record("c", defense="dp-gcl", target_epsilon=8.0, epsilon={},
                            attacks={"loss": make_attack_record(0.3, auc=0.52),
                                     "gradient-canary": make_attack_record(2.8, eps_lb_mechanism=4.0,
                                                                           eps_lb_trajectory=7.6, auc=0.76)}).to_dict()
    report = {"cells": [cell], "suite": {}}
    assert s.strongest_bound(cell) == 7.6
    row = dict(zip(s.summary_headers(report), s.summary_rows(report)[0]))
    assert (row["strongest attack"], row["ε_lb"], row["ε_lb mech"], row["ε_lb traj"]) == ("gradient-canary", "2.8",
                                                                                           "4", "7.6")
    rows = [dict(zip(s.ATTACK_HEADERS, r)) for r in s.attack_rows(report)]
    assert [r["ε_lb traj"] for r in rows] == ["-", "7.6"]
