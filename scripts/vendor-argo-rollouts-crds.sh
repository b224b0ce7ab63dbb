#!/usr/bin/env bash
# Copy each supported Argo Rollouts release's own CRDs from its Go module
# into testdata/vendor/argo-rollouts/<version>/ (the releases and module
# hashes of scripts/tools/argo-rollouts/versions), so that the recipe checks
# read them from the repository and nothing outside it.
#
#   scripts/vendor-argo-rollouts-crds.sh          # (re)write the copies
#   scripts/vendor-argo-rollouts-crds.sh --check  # exit 1 when a copy differs
#                                                 # from its module
#
# The module comes from the Go module proxy (checked against the Go
# checksum database and the pinned hash), the one scripts/build-tools.sh
# builds the rollouts-controller from.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
check=
[ "${1:-}" = --check ] && check=1
command -v go >/dev/null || PATH=/usr/local/go/bin:$PATH
export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod
crds="analysis-run-crd.yaml analysis-template-crd.yaml cluster-analysis-template-crd.yaml rollout-crd.yaml experiment-crd.yaml"
status=0
while read -r tool version modsum; do
  case $tool in argo-rollouts-*) ;; *) continue ;; esac
  info=$(go mod download -json "github.com/argoproj/argo-rollouts@$version")
  dir=$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' <<<"$info")
  sum=$(sed -n 's/^\t"Sum": "\(.*\)",$/\1/p' <<<"$info")
  [ "$sum" = "$modsum" ] || { echo "argo-rollouts $version: module hash $sum, pinned $modsum" >&2; exit 1; }
  out=$root/testdata/vendor/argo-rollouts/$version
  if [ -n "$check" ]; then
    for f in $crds LICENSE; do
      src=$dir/manifests/crds/$f
      [ "$f" = LICENSE ] && src=$dir/LICENSE
      cmp -s "$src" "$out/$f" || { echo "vendor-argo-rollouts-crds: $out/$f differs from $version's module ($src)" >&2; status=1; }
    done
    continue
  fi
  mkdir -p "$out"
  for f in $crds; do install -m 0644 "$dir/manifests/crds/$f" "$out/$f"; done
  install -m 0644 "$dir/LICENSE" "$out/LICENSE"
  cat > "$out/README.md" <<README
# Argo Rollouts $version CRDs (test fixture)

The CustomResourceDefinitions of Argo Rollouts $version, copied unchanged
from the release's Go module (\`github.com/argoproj/argo-rollouts@$version\`,
module hash \`$sum\`, \`manifests/crds/\`) by
\`scripts/vendor-argo-rollouts-crds.sh\`; Apache-2.0 (\`LICENSE\` beside
them, the module's). \`scripts/argo-rollouts-check.sh\` installs them on
the test API server before it applies the recipes of
\`docs/integrations/argo/\` with strict field validation and runs that
release's rollouts-controller (built from the same module by
\`scripts/build-tools.sh\`); it also checks that these copies are still
byte-identical to the module's (\`--check\`).

$(for f in $crds; do printf -- '- `%s`: sha256 `%s`\n' "$f" "$(sha256sum "$out/$f" | cut -d' ' -f1)"; done)
README
  echo "wrote $out"
done < "$root/scripts/tools/argo-rollouts/versions"
exit $status
