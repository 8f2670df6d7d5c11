#!/bin/sh
# Installs requirements.txt's torch pin from PyTorch's own index before the rest of the requirements, where
# that gives a better build than the default index: on Linux PyPI's torch is the CUDA build (GBs of GPU
# libraries), useless without an NVIDIA GPU. Used by `make setup` and the Dockerfile (the same line).
#
#   TORCH_INDEX_URL set (the Dockerfile's build arg, or `make setup TORCH_INDEX_URL=...`): torch from there.
#   Otherwise, on Linux without an NVIDIA GPU: https://download.pytorch.org/whl/cpu. Elsewhere nothing here:
#   PyPI's build is already right (CUDA with a GPU; CPU/MPS on macOS; CPU on Windows).
#
# Where that index cannot be reached (offline machines, mirrors only), nothing is installed here and the
# requirements step takes torch from the default index. `--index-url` keeps pip's configured extra indexes
# and find-links (a PIP_EXTRA_INDEX_URL variable would replace the configured ones). Idempotent: does nothing
# when the pinned torch is installed.
set -u
PY=${1:?usage: sh scripts/install-torch.sh PYTHON}
PIN=$(sed -n 's/^\(torch==[^ #]*\).*/\1/p' requirements.txt)
[ -n "$PIN" ] || { echo "install-torch: no torch== pin in requirements.txt" >&2; exit 1; }
"$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('torch').split('+')[0] != '${PIN#torch==}')" \
  2>/dev/null && exit 0
URL=${TORCH_INDEX_URL:-}
if [ -z "$URL" ]; then
  [ "$(uname -s)" = Linux ] || exit 0
  nvidia-smi -L >/dev/null 2>&1 && exit 0
  URL=https://download.pytorch.org/whl/cpu
fi
if ! "$PY" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1].rstrip('/') + '/torch/', timeout=15)" \
    "$URL" >/dev/null 2>&1; then
  echo "install-torch: $URL cannot be reached; torch comes from the default index with the requirements" >&2
  exit 0
fi
"$PY" -m pip install -q --index-url "$URL" "$PIN" ||
  echo "install-torch: $PIN from $URL failed; torch comes from the default index with the requirements" >&2
exit 0
