#!/usr/bin/env bash
# The peers' byte tests on the CPU (make test-peers): every peer that
# claims the contract's bytes gives the CPU mirror's bytes on small tables
# (bin/divgpu verify), every twin fails, every bound's instrumented ratio is
# at most 1 and its shrunken twin's is not; then the campaign protocol and the
# renderer end to end on lavapipe with the peers on the CPU.
#
# It makes its own virtual environment ($PEERS_VENV, default
# ~/.cache/divgpu/peers-venv) with numpy and PyTorch. PyTorch's CPU-only index
# is tried first; where it cannot be reached (it could not from the build
# machine on 2026-12-05: only PyPI is reachable) the PyPI wheel is installed,
# which brings the CUDA libraries too (about 5.4 GB, about 70 s there) and runs
# on the CPU all the same. A package that cannot be installed or imported is a
# failure, never a skip.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${PEERS_VENV:-$HOME/.cache/divgpu/peers-venv}
PY=$VENV/bin/python
if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV"
fi
if ! "$PY" -c 'import numpy, torch' 2>/dev/null; then
  echo "peers: installing numpy and torch into $VENV"
  "$PY" -m pip install -q numpy
  if ! "$PY" -m pip install -q --retries 0 --timeout 20 torch --index-url https://download.pytorch.org/whl/cpu 2>/dev/null; then
    echo "peers: PyTorch's CPU index is unreachable; installing torch from PyPI"
    "$PY" -m pip install -q torch
  fi
fi
"$PY" -c 'import numpy, torch; print(f"peers: numpy {numpy.__version__}, torch {torch.__version__}")'

[ -f build/divgpu.so ] || { echo "peers: build/divgpu.so is missing (make build)" >&2; exit 1; }
exec "$PY" tests/peers_test.py "$@"
