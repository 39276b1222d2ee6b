#!/usr/bin/env bash
# The whole test suite: installs what it needs, then runs every test of the workspace.
# As root on Debian 12 / Ubuntu (the tests mknod device nodes and run real runc and crun).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
export GPUCTK_NVIDIA_DEBS="$PWD/target/nvidia-debs"
cargo test --workspace --locked "$@"
