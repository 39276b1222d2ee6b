#!/usr/bin/env bash
# Builds the installer's OCI image offline: a static gpuctk without the mock host
# (--no-default-features) in an image FROM scratch (deploy/image/Containerfile).
#
#   scripts/image.sh [TAG]            default TAG: localhost/gpuctk-installer:latest
#
# Environment: CARGO_TARGET_DIR (scripts/static.sh builds into its static/ subdirectory, the
# same build as the packages'), PODMAN_ROOT and
# PODMAN_RUNROOT (podman's --root/--runroot: tests keep their images out of the host's storage),
# PODMAN (the podman command, with any global flags: --storage-driver, --cgroup-manager...), GPUCTK_STATIC_BINARY (use this static binary, do not build one).
# Prints the image ID on the last line.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-localhost/gpuctk-installer:latest}
bin=${GPUCTK_STATIC_BINARY:-}
if [ -z "$bin" ]; then
    # The packages' build (scripts/static.sh checks that it is static and uses no NSS).
    bin=$(scripts/static.sh --arch amd64 | tail -n 1)
fi
# A dynamically linked binary would not start in an image without a libc.
if ! file -L "$bin" | grep -Eq 'statically linked|static-pie linked'; then
    echo "image.sh: $bin is not statically linked; build it with scripts/static.sh" >&2
    exit 1
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$bin" "$ctx/gpuctk"
cp deploy/image/Containerfile "$ctx/Containerfile"
podman=(${PODMAN:-podman})
[ -n "${PODMAN_ROOT:-}" ] && podman+=(--root "$PODMAN_ROOT")
[ -n "${PODMAN_RUNROOT:-}" ] && podman+=(--runroot "$PODMAN_RUNROOT")
# Offline: nothing to pull (FROM scratch) and no network in the build.
"${podman[@]}" build --pull=never --network=none --quiet -t "$tag" -f "$ctx/Containerfile" "$ctx"
