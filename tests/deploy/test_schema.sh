#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_schema.sh DEPLOY_DIR - deploy/kubernetes checked offline against the Kubernetes API's
# schemas (schema.js: npm's kubernetes-models, pinned by scripts/deps), file by file and as
# kustomize renders the whole (kubectl kustomize, built into kubectl), whose rendering must also
# carry the registry of kustomization.yaml's images: entry on every weightd container.
set -euo pipefail
d=${1:?usage: test_schema.sh DEPLOY_DIR}
here=$(dirname "$0")
for tool in node kubectl; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is not installed (scripts/deps installs it)"; exit 1; }
done
echo "--- each manifest"
node "$here/schema.js" "$d"/*.yaml
echo "--- kubectl kustomize $d"
rendered=$(mktemp)
trap 'rm -f "$rendered"' EXIT
kubectl kustomize "$d" >"$rendered"
node "$here/schema.js" "$rendered"
want=$(awk '/newName:/ {n=$2} /newTag:/ {t=$2} END {print n ":" t}' "$d/kustomization.yaml")
images=$(grep -E '^\s+image:' "$rendered" | awk '{print $2}' | sort -u)
if [ "$images" != "$want" ]; then
  echo "FAIL: the rendered containers run $images, not $want (kustomization.yaml's images:)"
  echo "0 passed, 1 failed"
  exit 1
fi
echo "ok: every container of the rendering runs $want"
echo "1 passed, 0 failed"
