"""report.html renders in headless Chromium: the page has the summary table and the plots, and a screenshot
of it is a non-blank PNG of sensible size. The page is self-contained (no external resource)."""

import re
import shutil
import subprocess

import numpy as np
import pytest

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--hide-scrollbars"]


def test_report_html_is_self_contained(tiny_run):
    _, out = tiny_run
    html = (out / "report.html").read_text()
    assert not re.search(r"""(src|href)=["']?(https?:|//|file:)""", html)
    assert "@import" not in html and "<script" not in html
    assert html.count('src="data:image/png;base64,') == 4  # ROC (loss, lira), theory vs measured, privacy-utility


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium found (Debian package 'chromium'; .ci/run installs it as root)")
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
