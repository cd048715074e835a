#!/usr/bin/env bash
# The Fashion-MNIST benchmark end to end (suites/benchmark-fashion-mnist.toml, within 90 minutes on 2 cores):
#   bash scripts/benchmark.sh [OUT]          (OUT: the run's output directory, default reports/benchmark-fashion-mnist)
# installs Debian's dataset-fashion-mnist when it is missing and possible (root + apt, quietly, tolerating failure,
# as .ci/run does for chromium; without it the run stops with one line naming the package, exit 2), runs the suite
# (its progress line estimates the time left from the first minute), timed by /usr/bin/time where present (wall
# clock, peak memory of the largest process), then measures the run into the committed reference and renders
# docs/benchmark.md (scripts/render_benchmark.py).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-reports/benchmark-fashion-mnist}"
if [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && [ -z "${PRIVAUDIT_DATA_DIR:-}" ] \
        && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist) >/dev/null 2>&1 \
        || echo "benchmark: could not install dataset-fashion-mnist; privaudit will say what is missing" >&2
fi
timer=()
if [ -x /usr/bin/time ]; then
    timer=(/usr/bin/time -f "benchmark: wall %e s, peak resident memory of one process %M KiB")
fi
"${timer[@]}" python -m privaudit run suites/benchmark-fashion-mnist.toml --out "$out" --jobs 2
python scripts/render_benchmark.py --measure "$out"
