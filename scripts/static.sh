#!/usr/bin/env bash
# Builds what the packages and the installer image ship: the static release binary (static-pie
# with musl on amd64, or glibc where rustup's musl standard library is missing; glibc on arm64;
# -C target-feature=+crt-static), without the test fakes and without in-process NVML
# (--no-default-features), and the small dynamically linked NVML helper gpuctk-nvml, which the
# packages install as /usr/libexec/gpuctk/gpuctk-nvml. The binary needs no libc at run time, so
# it runs on every glibc from 2.17 on (RHEL 7, Amazon Linux 2) and in an image FROM scratch. Why
# static, and how NVML fits: docs/architecture.md, "One static binary, and where NVML goes".
#
# Usage: scripts/static.sh [--arch amd64|arm64]   (default: this machine's)
# Prints the helper's path, then the binary's path on the last line. One build per architecture,
# reused by cargo while nothing changed: scripts/package.sh and scripts/image.sh both call this.
#
# Target dirs under $CARGO_TARGET_DIR, apart from the dynamic test build (so that this never
# waits on a running `cargo test`'s lock) and apart from each other (other RUSTFLAGS, which cargo
# would otherwise rebuild everything for on every switch): static/ and nvml/ for amd64, with the
# usual cargo; cross/ and cross-nvml/ for arm64, cross-built with Debian's toolchain (rustc-web,
# libstd-rust-web-dev:arm64, gcc-aarch64-linux-gnu: scripts/setup.sh installs them), since
# rustup here has no aarch64 std; CROSS_CARGO and CROSS_RUSTC name that cargo and rustc (default
# /usr/bin/cargo, /usr/bin/rustc). The arm64 unit tests (tests/arm64.rs) build in cross/ too,
# in the dev profile.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
while [ $# -gt 0 ]; do
    case "$1" in
        --arch) arch=${2:?"static.sh: --arch needs amd64 or arm64"}; shift 2 ;;
        --arch=*) arch=${1#--arch=}; shift ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) echo "static.sh: unknown argument '$1' (usage: scripts/static.sh [--arch amd64|arm64])" >&2; exit 2 ;;
    esac
done
target=${CARGO_TARGET_DIR:-$root/target}
case "$target" in /*) ;; *) target=$root/$target ;; esac

# --fatal-warnings: glibc marks the NSS lookups a static program cannot use safely (getpwnam
# and friends) with a link-time warning; here that warning fails the build. (Its dlopen gets no
# such warning here: the check for NVML's code below keeps dlopen out.)
flags='-C target-feature=+crt-static -C link-arg=-Wl,--fatal-warnings'
# The functions the shim's calls and the hooks run, laid out together at the start of the code
# (scripts/hot-text.ld, written by scripts/hot-text.sh, which says how): an exec faults in a few
# pages of code where they were scattered over 6 MB. v0 mangling spells out each generic
# function's type arguments, which the script's patterns name.
case "$target" in *[[:space:]]*)
    echo "static.sh: the target dir's path has white space, which RUSTFLAGS cannot carry: $target" >&2
    exit 1 ;;
esac
# The script is linked from a copy named by its digest: cargo does not look at a linker
# script's text, but sees RUSTFLAGS change, so a new list (hot-text.sh, a pull) is linked in.
hot=$target/hot-text-$(sha256sum scripts/hot-text.ld | cut -c1-16).ld
[ -e "$hot" ] || { mkdir -p "$target" && cp scripts/hot-text.ld "$hot.tmp" && mv "$hot.tmp" "$hot"; }
flags="$flags -C symbol-mangling-version=v0 -C link-arg=-Wl,-T,$hot"
# -z pack-relative-relocs (amd64, a static-pie): its own start-up applies its ~8,500 relative
# relocations from a RELR table of 2 KB instead of a 200 KB RELA one (binutils >= 2.38 at build
# time; musl >= 1.2.4 or glibc >= 2.36, whose code that reads it is linked in): about ten page faults fewer on
# every exec, which the runtime shim pays three times per container (docs/performance.md).
# Debian's arm64 rustc links static without PIE: no relocations to pack (ld warns, and
# --fatal-warnings fails, if asked).
relr=
case "$arch" in
    amd64|x86_64)
        # musl where rustup has its standard library (scripts/setup.sh installs it): its
        # start-up does none of the CPU probing glibc's static start-up does (`cpuid`, which
        # traps to the hypervisor on a VM): about 0.2 ms less CPU on every exec, which the
        # runtime shim pays on every runtime call. The binary brings its own allocator
        # (crates/alloc), so musl's malloc is not on any path. Without that library: glibc, as
        # before, and a warning.
        triple=x86_64-unknown-linux-musl
        libdir=$(${RUSTC:-rustc} --print target-libdir --target "$triple" 2>/dev/null || true)
        if ! compgen -G "$libdir/libstd-*.rlib" >/dev/null; then
            echo "static.sh: WARNING: rustup's $triple standard library is not installed (rustup target add $triple); building with glibc instead, which costs about 0.2 ms more CPU per exec" >&2
            triple=x86_64-unknown-linux-gnu
        fi
        helper_triple=x86_64-unknown-linux-gnu
        dir=$target/static
        flags="$flags -C link-arg=-Wl,-z,pack-relative-relocs"
        relr=1
        helper_dir=$target/nvml
        cargo=${CARGO:-cargo}
        build() { "$cargo" build --release --target "$1" --locked "${@:2}" >&2; }
        ;;
    arm64|aarch64)
        triple=aarch64-unknown-linux-gnu
        helper_triple=$triple
        dir=$target/cross
        helper_dir=$target/cross-nvml
        cargo=${CROSS_CARGO:-/usr/bin/cargo}
        rustc=${CROSS_RUSTC:-/usr/bin/rustc}
        for tool in "$cargo" "$rustc" aarch64-linux-gnu-gcc; do
            command -v "$tool" >/dev/null 2>&1 || {
                echo "static.sh: $tool not found; install rustc-web, cargo-web, libstd-rust-web-dev:arm64 and gcc-aarch64-linux-gnu (scripts/setup.sh does)" >&2
                exit 1
            }
        done
        build() {
            RUSTC=$rustc CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
                "$cargo" build --release --target "$1" --locked "${@:2}" >&2
        }
        ;;
    *)
        echo "static.sh: unknown architecture '$arch' (amd64 or arm64)" >&2
        exit 2
        ;;
esac
# Whole-program LTO in one codegen unit for the shipped binary only (the workspace's release
# profile keeps thin LTO and 4 units for the test builds): 1.1 MB less code, 22 fewer page
# faults and about 0.1 to 0.2 ms less CPU on every create, for about a minute more of build
# (docs/performance.md, round eight).
CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 \
    CARGO_TARGET_DIR=$dir RUSTFLAGS=$flags build "$triple" -p gpuctk --no-default-features
# The helper is the one program that loads NVML: dynamically linked, it needs the glibc it was
# built against (this machine's) where it runs; without it, gpuctk says so in one line.
CARGO_TARGET_DIR=$helper_dir RUSTFLAGS= build "$helper_triple" -p gpuctk-nvml
helper=$helper_dir/$helper_triple/release/gpuctk-nvml
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
# No NVML in the static binary: a static glibc program that dlopens a library gets a second C
# library in the process. The only dlopen of ours is host::nvml's (the `nvml` feature, off here);
# its function names would be in the binary if it were linked.
if grep -q nvmlInit_v2 "$bin"; then
    echo "static.sh: $bin links NVML's in-process code (dlopen): build it without the nvml feature; the helper gpuctk-nvml asks NVML" >&2
    exit 1
fi
# The relocations packed (the flag above is silently ignored by a linker without it).
if [ -n "$relr" ] && ! readelf -dW "$bin" | grep -q '(RELR)'; then
    echo "static.sh: $bin has no RELR relocation table: the linker ignored -z pack-relative-relocs (binutils >= 2.38 needed)" >&2
    exit 1
fi
# The helper must be dynamic (it dlopens NVML).
if ! readelf -lW "$helper" | grep -q 'Requesting program interpreter'; then
    echo "static.sh: $helper has no program interpreter: the NVML helper must be dynamically linked" >&2
    exit 1
fi
echo "$helper"
echo "$bin"
