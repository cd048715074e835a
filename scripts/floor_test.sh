#!/usr/bin/env bash
# Reproduce the dependency-floor test: a fresh virtual environment with the lowest declared version of every
# runtime dependency, privaudit installed from this checkout (not editable), and the fast test subset.
#
#   scripts/floor_test.sh [VENV_DIR]        (default /tmp/venv-floor; needs python3.11 and a package index)
#
# torch 2.2.0 from PyPI is the CUDA build on Linux (about 2.5 GB with its nvidia-* wheels); where
# download.pytorch.org is reachable, `--index-url https://download.pytorch.org/whl/cpu` gets the CPU build.
# Takes about 11 minutes on 2 shared CPU cores (plus the download).
set -euo pipefail
VENV=${1:-/tmp/venv-floor}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FLOORS=(torch==2.2.0 numpy==1.26.0 opacus==1.4.0 dp-accounting==0.4.4 scipy==1.10.0 scikit-learn==1.3.0
        threadpoolctl==2.0.0 tqdm==4.64.0 safetensors==0.4.0 matplotlib==3.7.0 pillow==10.0.0)
python3.11 -m venv "$VENV"
"$VENV/bin/pip" install "${FLOORS[@]}" pytest pytest-benchmark
SRC=$(mktemp -d)
trap 'rm -rf "$SRC"' EXIT
# Test a copy of the checkout (same files as the installed wheel), so edits made during the run do not leak in.
(cd "$ROOT" && git ls-files -co --exclude-standard | tar -cf - -T -) | tar -xf - -C "$SRC"
"$VENV/bin/pip" install --no-deps "$SRC"
"$VENV/bin/pip" check
"$VENV/bin/python" -c "import torch, numpy, opacus, dp_accounting, scipy, sklearn; print('torch', torch.__version__, \
'numpy', numpy.__version__, 'opacus', opacus.__version__, 'scipy', scipy.__version__, 'scikit-learn', sklearn.__version__)"
cd "$SRC"
OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 "$VENV/bin/python" -m pytest -m "not slow" -q -rfE -p no:cacheprovider
