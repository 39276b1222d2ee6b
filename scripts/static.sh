#!/usr/bin/env bash
# Builds the static release binary that the packages and the installer image ship: static-pie
# with glibc (-C target-feature=+crt-static), without the test fakes (--no-default-features).
# It needs no libc at run time, so one binary runs on every glibc from 2.17 on (RHEL 7, Amazon
# Linux 2) and in an image FROM scratch. Why static, and how NVML fits: docs/architecture.md.
#
# Usage: scripts/static.sh [--arch amd64|arm64]   (default: this machine's)
# Prints the binary's path on the last line. One build per architecture, reused by cargo while
# nothing changed: scripts/package.sh and scripts/image.sh both call this.
#
# amd64 builds with the usual cargo into $CARGO_TARGET_DIR/static (apart from the dynamic builds,
# so that it never waits on a running `cargo test`'s lock). arm64 cross-builds with Debian's
# toolchain (rustc-web, libstd-rust-web-dev:arm64, gcc-aarch64-linux-gnu: scripts/setup.sh
# installs them) into $CARGO_TARGET_DIR/cross, since rustup here has no aarch64 std; CROSS_CARGO
# and CROSS_RUSTC name that cargo and rustc (default /usr/bin/cargo, /usr/bin/rustc).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
while [ $# -gt 0 ]; do
    case "$1" in
        --arch) arch=${2:?"static.sh: --arch needs amd64 or arm64"}; shift 2 ;;
        --arch=*) arch=${1#--arch=}; shift ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "static.sh: unknown argument '$1' (usage: scripts/static.sh [--arch amd64|arm64])" >&2; exit 2 ;;
    esac
done
target=${CARGO_TARGET_DIR:-$root/target}
case "$target" in /*) ;; *) target=$root/$target ;; esac

# --fatal-warnings: glibc marks the functions a static program cannot use safely (NSS lookups
# such as getpwnam, dlopen) with a link-time warning; here that warning fails the build.
flags='-C target-feature=+crt-static -C link-arg=-Wl,--fatal-warnings'
case "$arch" in
    amd64|x86_64)
        triple=x86_64-unknown-linux-gnu
        dir=$target/static
        CARGO_TARGET_DIR=$dir RUSTFLAGS=$flags "${CARGO:-cargo}" build --release -p gpuctk \
            --no-default-features --target "$triple" --locked >&2
        ;;
    arm64|aarch64)
        triple=aarch64-unknown-linux-gnu
        dir=$target/cross
        cargo=${CROSS_CARGO:-/usr/bin/cargo}
        rustc=${CROSS_RUSTC:-/usr/bin/rustc}
        for tool in "$cargo" "$rustc" aarch64-linux-gnu-gcc; do
            command -v "$tool" >/dev/null 2>&1 || {
                echo "static.sh: $tool not found; install rustc-web, cargo-web, libstd-rust-web-dev:arm64 and gcc-aarch64-linux-gnu (scripts/setup.sh does)" >&2
                exit 1
            }
        done
        CARGO_TARGET_DIR=$dir RUSTC=$rustc RUSTFLAGS=$flags \
            CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
            "$cargo" build --release -p gpuctk --no-default-features --target "$triple" --locked >&2
        ;;
    *)
        echo "static.sh: unknown architecture '$arch' (amd64 or arm64)" >&2
        exit 2
        ;;
esac
bin=$dir/$triple/release/gpuctk

# Static, and nothing that would load glibc's shared pieces at run time: no interpreter, no
# NEEDED entry, and no NSS lookup (a static glibc's getpwnam and friends dlopen libnss_*.so of the
# exact glibc it was linked with; gpuctk works with numeric ids only). glibc's own internal
# dlopen (iconv's gconv modules, libgcc_s for pthread_cancel) is linked but never reached: gpuctk
# calls neither, and glibc's linker warning for a program's own dlopen does not appear.
if readelf -lW "$bin" | grep -q 'Requesting program interpreter'; then
    echo "static.sh: $bin has a program interpreter: not a static build" >&2
    exit 1
fi
if readelf -dW "$bin" | grep -q '(NEEDED)'; then
    echo "static.sh: $bin needs shared libraries: $(readelf -dW "$bin" | grep '(NEEDED)' | tr -s ' ')" >&2
    exit 1
fi
nss=$(nm "$bin" | awk '{print $NF}' | grep -Ex "$(cat <<'RE'
(getpw(nam|uid|ent)|getgr(nam|gid|ent)|getspnam|getaddrinfo|gethostby(name|name2|addr)|getservby(name|port)|getprotoby(name|number)|initgroups|getgrouplist|getnetby(name|addr))(_r)?|__nss_(lookup|next|module_load|database_lookup)[a-z_0-9]*
RE
)" | sort -u | tr '\n' ' ' || true)
if [ -n "$nss" ]; then
    echo "static.sh: $bin links glibc's NSS lookups, which need its shared libraries at run time: $nss" >&2
    exit 1
fi
echo "$bin"
