#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# image.sh SOURCE_DIR DEBS_DIR - scripts/image for the pod tests: weightd's image from the packages
# install.package left in DEBS_DIR (or built here when there are none), or the cached image of
# this tree. Skipped (exit 77) with the reason when this host cannot build images; under CI=true
# that is a failure.
set -euo pipefail
src=${1:?usage: image.sh SOURCE_DIR DEBS_DIR}
debs=${2:?usage: image.sh SOURCE_DIR DEBS_DIR}
why=
[ "$(id -u)" = 0 ] || why="building the image needs root (mmdebstrap, podman)"
for tool in podman runc mmdebstrap; do
  command -v "$tool" >/dev/null || why="$tool is not installed (scripts/deps installs it)"
done
if [ -n "$why" ]; then
  echo "SKIP: $why"
  [ "${CI:-}" != true ] || { echo "FAIL: CI=true: the image must build in CI"; exit 1; }
  exit 77
fi
# the packages install.package built, if they are this tree's
args=()
if [ -f "$debs/tree" ] && [ "$(cat "$debs/tree")" = "$("$src/scripts/image" --print-key)" ]; then
  args=(--debs "$debs")
fi
exec "$src/scripts/image" "${args[@]}"
