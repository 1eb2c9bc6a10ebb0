#!/usr/bin/env bash
# Installs the Python parity oracle environment into reference/.venv (git-ignored).
# Idempotent: re-running only installs what is missing or at the wrong version.
# Python is used ONLY by reference/ to generate test fixtures; `make test` never needs it.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${repo_root}/reference/.venv"
python_bin="${PYTHON:-python3}"

TORCH_VERSION=2.15.0
TRANSFORMERS_VERSION=5.24.0

if [[ ! -x "${venv}/bin/python" ]]; then
  "${python_bin}" -m venv "${venv}"
fi
pip=("${venv}/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install --quiet --upgrade pip

# torch without its nvidia-* CUDA wheels: the oracle runs on the CPU only.
if ! "${venv}/bin/python" -c "import torch,sys; sys.exit(torch.__version__.split('+')[0] != '${TORCH_VERSION}')" 2>/dev/null; then
  "${pip[@]}" install --no-deps "torch==${TORCH_VERSION}"
fi
# The cu13 torch wheel's shared libraries link against a few CUDA libraries that the CUDA toolkit
# in /usr/local/cuda-13.0 on the build machines does not ship (cuFile, cuSPARSELt, NVSHMEM) or ships
# too old (NCCL); install just those wheels (~0.6 GB instead of the full multi-GB set). torch
# preloads them from site-packages/nvidia/*. If torch still cannot be imported (a machine without
# the CUDA toolkit), fall back to the complete dependency set.
"${pip[@]}" install --no-deps nvidia-cufile==1.20.0.107 nvidia-cusparselt-cu13==0.10.0 \
  nvidia-nvshmem-cu13==3.8.0 nvidia-nccl-cu13==2.32.3
if ! "${venv}/bin/python" -c "import torch" 2>/dev/null; then
  echo "torch does not import with the minimal CUDA wheels; installing its full dependency set" >&2
  "${pip[@]}" install "torch==${TORCH_VERSION}"
fi
# torch's pure-Python requirements (see `pip show torch`, Requires:), then the rest.
"${pip[@]}" install filelock typing-extensions sympy mpmath networkx jinja2 MarkupSafe fsspec setuptools
"${pip[@]}" install "transformers==${TRANSFORMERS_VERSION}" safetensors==0.8.0 tokenizers==0.23.3 \
  tensorboard==2.21.0 numpy==2.4.6 huggingface_hub==2.4.0

"${venv}/bin/python" - <<'PY'
import torch
assert float(torch.ones(2) @ torch.ones(2)) == 2.0
from transformers import DeepseekV4ForCausalLM, DeepseekV4Config  # noqa: F401
import transformers, safetensors, numpy
print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
      f"safetensors {safetensors.__version__}, numpy {numpy.__version__}: OK")
PY
