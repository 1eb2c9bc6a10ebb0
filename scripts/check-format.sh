#!/usr/bin/env bash
# Fails when a tracked C++ file differs from what clang-format makes of it.
# The tree is formatted with Debian bookworm's clang-format 14 (installed by
# scripts/install-deps.sh); other major versions lay some code out differently,
# so with another version the check is skipped (exit 77) rather than failed.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(clang-format --version | grep -oE 'version [0-9]+' | grep -oE '[0-9]+')
if [ "$version" != 14 ]; then
  echo "clang-format $version is not 14: format check skipped"
  exit 77
fi
if ! git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  echo "not a git checkout: format check skipped"
  exit 77
fi
git ls-files -z '*.cpp' '*.hpp' | xargs -0 clang-format --dry-run -Werror
echo "$(git ls-files '*.cpp' '*.hpp' | wc -l) files formatted"
