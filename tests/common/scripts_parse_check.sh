#!/usr/bin/env bash
# Every shell script of the repository parses (bash -n): the scripts CI never runs (tools/gpu-check
# runs on a lent GPU machine only, with minutes of device time) must not be found broken there.
# A quoting slip in one line of tools/gpu-check kept it from parsing for days unnoticed.
# Usage: scripts_parse_check.sh REPO-ROOT
set -uo pipefail
root=${1:?usage: scripts_parse_check.sh REPO-ROOT}
n=0 bad=0
while IFS= read -r -d '' f; do
  head -1 "$f" | grep -qE '^#!.*\b(ba)?sh\b' || continue
  n=$((n + 1))
  if ! out=$(bash -n "$f" 2>&1); then
    echo "does not parse: ${f#"$root"/}: $out"
    bad=$((bad + 1))
  fi
done < <(find "$root/tools" "$root/.ci" "$root/tests" "$root/perf" "$root/examples" -type f \
           -not -path '*/build*' -print0 2>/dev/null)
echo "$n shell scripts, $bad that do not parse"
[ "$n" -gt 5 ] || { echo "found too few scripts: is $root the repository?"; exit 1; }
[ "$bad" -eq 0 ]
