"""Render a report.html in headless Chromium to a PNG, and say whether anything needs horizontal scrolling.

    python scripts/screenshot_report.py reports/quickstart            # -> reports/quickstart/report-1280.png
    python scripts/screenshot_report.py reports/quickstart/report.html --width 1280 --height 4000 --out shot.png

The page is drawn at ``--width`` CSS pixels (default 1280, a laptop screen) and ``--height`` pixels tall (default:
the page's own height, measured first, capped at 16000). A second pass loads a copy of the page with a small
script appended that measures the document's and every table's width against the window's; the script prints
them and exits 1 when the page or a table is wider than the window (something would be off-screen), 0 when not.
Chromium runs with a fresh profile in a temporary directory, without network or background services.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--hide-scrollbars", "--mute-audio"]

# Appended to a copy of the page: writes the measurements into the DOM, which --dump-dom prints.
MEASURE = """<script>
window.addEventListener("load", function () {
  var tables = Array.prototype.map.call(document.querySelectorAll("table"), function (t) {
    return {id: t.id || null, width: Math.ceil(t.getBoundingClientRect().right)};
  });
  var result = {window: window.innerWidth, page: document.documentElement.scrollWidth,
                height: document.documentElement.scrollHeight, tables: tables};
  var pre = document.createElement("pre");
  pre.id = "privaudit-measure";
  pre.textContent = JSON.stringify(result);
  document.body.appendChild(pre);
});
</script>"""


#: Executables tried on PATH, in order: full Chromium / Chrome, then the headless shells (Debian's
#: chromium-headless-shell package, Google's chrome-headless-shell, Playwright's headless_shell).
NAMES = ("chromium", "chromium-browser", "google-chrome", "chromium-headless-shell", "chrome-headless-shell",
         "headless_shell")
#: Playwright's download of the headless shell, when it is not on PATH.
PLAYWRIGHT = "ms-playwright/chromium_headless_shell-*/chrome-linux*/*headless_shell"


def chromium() -> str:
    """The browser to run: $PRIVAUDIT_CHROMIUM, else the first of :data:`NAMES` on PATH, else Playwright's shell."""
    import glob
    import os

    cache = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
    found = (os.environ.get("PRIVAUDIT_CHROMIUM") or next((p for p in map(shutil.which, NAMES) if p), None)
             or next(iter(sorted(glob.glob(os.path.join(cache, PLAYWRIGHT)), reverse=True)), None))
    if found is None:
        raise SystemExit(f"screenshot_report: no chromium found (tried {', '.join(NAMES)} and Playwright's cache; "
                         "Debian: apt-get install chromium or chromium-headless-shell; or set PRIVAUDIT_CHROMIUM)")
    return found


def run_chromium(args: list[str], profile: Path) -> str:
    done = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=180, check=True)
    return done.stdout


def measure(html: Path, width: int, workdir: Path) -> dict:
    """The window's, the page's and each table's width (CSS pixels) and the page's height, as Chromium lays
    the page out at ``width``."""
    copy = workdir / "measure.html"
    copy.write_text(html.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    dom = run_chromium([f"--window-size={width},1000", "--virtual-time-budget=5000", "--dump-dom", copy.as_uri()],
                       workdir / "profile-measure")
    found = re.search(r'<pre id="privaudit-measure">(.*?)</pre>', dom, flags=re.S)
    if found is None:
        raise SystemExit("screenshot_report: the page did not report its layout")
    return json.loads(found.group(1).replace("&quot;", '"'))


def screenshot(html: Path, png: Path, width: int, height: int, workdir: Path) -> None:
    run_chromium([f"--window-size={width},{height}", f"--screenshot={png.resolve()}", html.resolve().as_uri()],
                 workdir / "profile-shot")


def overflow(layout: dict) -> list[str]:
    """What is wider than the window: the page, and each table by id."""
    limit = layout["window"]
    wide = [f"page {layout['page']} px"] if layout["page"] > limit else []
    return wide + [f"table {t['id'] or '?'} {t['width']} px" for t in layout["tables"] if t["width"] > limit]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("report", help="a report.html, or the run directory holding it")
    parser.add_argument("--out", default=None, help="the PNG (default: report-<width>.png beside the report)")
    parser.add_argument("--width", type=int, default=1280, help="window width in CSS pixels (default 1280)")
    parser.add_argument("--height", type=int, default=None, help="window height (default: the page's height)")
    args = parser.parse_args(argv)
    html = Path(args.report)
    html = html / "report.html" if html.is_dir() else html
    if not html.is_file():
        raise SystemExit(f"screenshot_report: {html}: no such file")
    png = Path(args.out) if args.out else html.with_name(f"report-{args.width}.png")
    with tempfile.TemporaryDirectory(prefix="privaudit-shot-") as tmp:
        layout = measure(html, args.width, Path(tmp))
        height = args.height or min(max(layout["height"], 600), 16000)
        screenshot(html, png, args.width, height, Path(tmp))
    wide = overflow(layout)
    print(f"{png}: {args.width} x {height} px; page {layout['page']} px wide in a {layout['window']} px window; "
          f"{len(layout['tables'])} tables; " + (f"wider than the window: {', '.join(wide)}" if wide
                                                  else "nothing needs horizontal scrolling"))
    return 1 if wide else 0


if __name__ == "__main__":
    sys.exit(main())
