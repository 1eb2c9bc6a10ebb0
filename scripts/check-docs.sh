#!/usr/bin/env bash
# The documentation a user reads first is there and points at files that
# exist: README.md carries the two set-up commands, and every relative link
# in README.md and docs/**/*.md names a file or folder of the repository.
#
#   scripts/check-docs.sh        (from anywhere; exit 1 with the offenders)
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
for command in "make demo" "make test"; do
  if ! grep -q "^$command " README.md; then
    echo "README.md: the set-up command '$command' is missing" >&2
    status=1
  fi
done

while IFS= read -r file; do
  dir=$(dirname "$file")
  # Inline links [text](target): relative targets only (no scheme, no anchor-only).
  while IFS= read -r target; do
    path=${target%%#*}
    [[ -z "$path" || "$path" == *://* || "$path" == mailto:* ]] && continue
    if [[ ! -e "$dir/$path" ]]; then
      echo "$file: link to '$target' names no file" >&2
      status=1
    fi
  done < <(grep -o '\]([^) ]*)' "$file" | sed 's/^](//; s/)$//')
done < <(find README.md docs -name '*.md' | sort)

exit $status
