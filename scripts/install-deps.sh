#!/usr/bin/env bash
# Installs every Debian package T-Rex needs to build, test and run. Idempotent:
# packages already present are skipped, and `apt-get update` runs at most once.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config clang-format
  libglpk-dev glpk-utils                 # MathProg translator + simplex/MIP solver, glpsol for tests
  lp-solve-doc                           # lp_solve's HTML reference guide: collected text of the CPT corpus
  glpk-doc poppler-utils                 # GLPK manuals (PDF) and pdftotext: collected text of the CPT corpus
  coinor-libcbc-dev coinor-cbc           # COIN-OR CBC (second, independent MIP solver)
  nlohmann-json3-dev libcli11-dev libtomlplusplus-dev
  libgtest-dev libbenchmark-dev
  libdnnl-dev                            # oneDNN GEMMs for the training engine
  ocl-icd-opencl-dev opencl-c-headers    # Debian's oneDNN CMake config requires OpenCL (its GPU runtime)
  libopenmpi-dev openmpi-bin             # distributed training
  python3 python3-pulp                   # evaluation harness: Python completions that use PuLP
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
