#!/usr/bin/env bash
# Installs what gpuctk needs to build, demo and test on Debian 12 / Ubuntu, as root.
# Idempotent: safe to run again. Also fetches the real (non-free) Debian NVIDIA 535 driver
# packages that one test unpacks with dpkg-deb; they are never installed.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
    echo "setup.sh: run as root (it installs packages and the tests create device nodes)" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# uidmap: the rootless podman test. dpkg-dev, man-db, groff-base, systemd, zsh and fish:
# scripts/package.sh and the package tests (dpkg-shlibdeps, man -l, systemd-analyze verify, zsh -n,
# fish's own completion). systemd and dbus: the cgroup2 tests boot a systemd in namespaces of
# its own for runc's and crun's systemd cgroup driver (crun reaches it over the system bus).
# rpm and file: the RPM (scripts/package.sh --rpm) and the static build's checks. arm64, built
# once per run (scripts/static.sh --arch arm64): rustup has only this machine's std, so Debian's
# own newer Rust (rustc-web, with libstd-rust-web-dev for arm64), the cross gcc and qemu-user,
# which runs the arm64 binaries and unit tests.
PKGS="gcc libc6-dev binutils busybox-static runc crun docker.io containerd podman uidmap ca-certificates curl strace dpkg-dev man-db groff-base systemd dbus zsh fish rpm file qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross rustc-web cargo-web libstd-rust-web-dev:arm64"
# A newly added architecture leaves its :arm64 packages missing, so the update below fetches
# its lists.
if [ "$(dpkg --print-architecture)" != arm64 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
fi
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# The rootless test bind-mounts its own copies over these (an empty file is what shadow starts from).
for f in /etc/subuid /etc/subgid; do [ -e "$f" ] || : >"$f"; done

if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "setup.sh: installing the Rust toolchain with rustup" >&2
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c clippy,rustfmt
    export PATH="$HOME/.cargo/bin:$PATH"
fi
# The musl standard library: scripts/static.sh links the shipped amd64 binary with musl, whose
# start-up skips glibc's CPU probing (about 0.2 ms of every exec on a VM; docs/performance.md,
# "A musl build"). rustup fetches it; where its server cannot be reached, static.sh says so and
# builds with glibc, as before.
if [ "$(dpkg --print-architecture 2>/dev/null || uname -m)" = amd64 ] && command -v rustup >/dev/null 2>&1 \
    && ! rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
    rustup target add x86_64-unknown-linux-musl >&2 \
        || echo "setup.sh: could not install rustup's x86_64-unknown-linux-musl standard library; scripts/static.sh will build the amd64 binary with glibc" >&2
fi

# The real driver packages, from Debian's non-free component, through a private apt
# configuration so the machine's own sources stay untouched.
DEBS=target/nvidia-debs
NVIDIA_DEBS=(libcuda1 libnvidia-ml1 nvidia-smi nvidia-egl-common nvidia-vulkan-common nvidia-opencl-common)
if ! (cd "$DEBS" 2>/dev/null && for p in "${NVIDIA_DEBS[@]}"; do ls "${p}"_*.deb || exit 1; done) >/dev/null 2>&1; then
    apt_dir=$(mktemp -d)
    trap 'rm -rf "$apt_dir"' EXIT
    mkdir -p "$apt_dir/sources" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$DEBS"
    # The archive is the one this machine's own apt sources use for its release's main component
    # (any mirror or snapshot serves non-free beside main). A machine that is not Debian has no
    # Debian source: GPUCTK_DEBIAN_MIRROR names one (default deb.debian.org, bookworm).
    suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
    comp=non-free
    uri=${GPUCTK_DEBIAN_MIRROR:-}
    if [ -z "$uri" ] && [ "$(. /etc/os-release && echo "$ID")" = debian ]; then
        uri=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT) $(IDENTIFIER)' 2>/dev/null \
            | awk -v s="$suite" '$2 == s && $3 == "main" && $4 == "Packages" { print $1; exit }')
    fi
    if [ -z "$uri" ]; then
        [ "$(. /etc/os-release && echo "$ID")" = debian ] || suite=bookworm
        uri=http://deb.debian.org/debian
        echo "setup.sh: no Debian source for $suite main in this machine's apt sources; using $uri (set GPUCTK_DEBIAN_MIRROR to change it)" >&2
    fi
    cat >"$apt_dir/sources/nonfree.sources" <<SRC
Types: deb
URIs: $uri
Suites: $suite
Components: $comp
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt_dir/sources"
          -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
          -o "APT::Sandbox::User=root")
    apt-get "${opts[@]}" update -qq 2>/dev/null
    (cd "$DEBS" && apt-get "${opts[@]}" download "${NVIDIA_DEBS[@]}" -qq) \
        || echo "setup.sh: warning: could not download the Debian NVIDIA packages; the real-driver test will fail" >&2
fi
# Debian's aarch64 ldconfig (static), run under qemu-aarch64 by the ld.so.cache tests of the
# aarch64 flags: the x86 ldconfig refuses aarch64 libraries. Unpacked, never installed.
if [ ! -x target/arm64/sbin/ldconfig ]; then
    mkdir -p target/arm64
    (cd target/arm64 && apt-get -o APT::Sandbox::User=root download -qq libc-bin:arm64 && dpkg-deb -x libc-bin_*_arm64.deb .) \
        || echo "setup.sh: warning: could not fetch libc-bin:arm64; the aarch64 ld.so.cache test will fail" >&2
fi
# crun refuses a hybrid cgroup setup while hugetlb sits on the cgroup2 hierarchy ("cgroups in
# hybrid mode not supported"); giving hugetlb its own v1 hierarchy moves it off cgroup2.
if grep -qw hugetlb /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null; then
    mkdir -p /sys/fs/cgroup/hugetlb
    mountpoint -q /sys/fs/cgroup/hugetlb || mount -t cgroup -o hugetlb cgroup /sys/fs/cgroup/hugetlb
fi

echo "setup.sh: ready"
