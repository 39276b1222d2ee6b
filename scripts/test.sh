#!/usr/bin/env bash
# The whole test suite: installs what it needs, then runs every test of the workspace.
# As root on Debian 12 / Ubuntu (the tests mknod device nodes and run real runc, crun, dockerd,
# podman and containerd).
set -euo pipefail
cd "$(dirname "$0")/.."
# .ci/run has just run it.
[ "${GPUCTK_SETUP_DONE:-}" = 1 ] || ./scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
export GPUCTK_NVIDIA_DEBS="$PWD/target/nvidia-debs"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --workspace --locked "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
# cargo ends on the doc-test binaries, which have no tests; say the total plainly.
awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$rc"
