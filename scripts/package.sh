#!/usr/bin/env bash
# Builds the Debian package gpuctk_<version>_<arch>.deb: the release binary without the test
# fakes (--no-default-features), its NVIDIA names as links, man pages and bash/zsh/fish
# completions made by the built binary itself, the CDI refresh units, the udev rule and the
# maintainer scripts from packaging/. No conffile: postinst writes config.toml when there is
# none, as NVIDIA's does. Layout and reasons: docs/packaging.md.
#
# Usage: scripts/package.sh [--out DIR]   (default: the repository root)
# Needs cargo, dpkg-deb, dpkg-shlibdeps (dpkg-dev), strip (binutils), gzip. Any user: the files
# are owned by root in the package (--root-owner-group), whoever builds it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

out=$root
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out=${2:?"package.sh: --out needs a directory"}; shift 2 ;;
        --out=*) out=${1#--out=}; shift ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) echo "package.sh: unknown argument '$1' (usage: scripts/package.sh [--out DIR])" >&2; exit 2 ;;
    esac
done
for tool in dpkg-deb dpkg-shlibdeps strip gzip; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "package.sh: $tool not found; install dpkg-dev, binutils and gzip (scripts/setup.sh does)" >&2
        exit 1
    }
done
mkdir -p "$out"
out=$(cd "$out" && pwd)

# One release build; cargo reuses it when nothing changed.
"${CARGO:-cargo}" build --release -p gpuctk --no-default-features --locked
target=${CARGO_TARGET_DIR:-$root/target}
case "$target" in /*) ;; *) target=$root/$target ;; esac
bin=$target/release/gpuctk

version=$("$bin" --version | awk '{print $2}')
arch=$(dpkg --print-architecture)
# Reproducible: every file dated at the last commit (dpkg-deb reads SOURCE_DATE_EPOCH too).
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage=$work/stage
umask 022

install -D -m 0755 "$bin" "$stage/usr/bin/gpuctk"
strip --strip-unneeded "$stage/usr/bin/gpuctk"
# The personalities: the binary dispatches on the name it is run by.
for name in nvidia-ctk nvidia-container-runtime nvidia-container-runtime.cdi \
    nvidia-container-runtime.legacy nvidia-container-runtime-hook nvidia-container-toolkit \
    nvidia-cdi-hook nvidia-container-cli; do
    ln -s gpuctk "$stage/usr/bin/$name"
done
ctk=$stage/usr/bin/nvidia-ctk

# Man pages from the clap definitions, compressed as Debian ships them.
"$ctk" man --output "$work/man" >/dev/null
mkdir -p "$stage/usr/share/man/man1"
for page in "$work"/man/*.1; do
    gzip -9n -c "$page" >"$stage/usr/share/man/man1/$(basename "$page").gz"
done

# Completions for both names users type, each made by the binary run under that name.
mkdir -p "$stage/usr/share/bash-completion/completions" \
    "$stage/usr/share/zsh/vendor-completions" "$stage/usr/share/fish/vendor_completions.d"
for name in gpuctk nvidia-ctk; do
    "$stage/usr/bin/$name" completion bash >"$stage/usr/share/bash-completion/completions/$name"
    "$stage/usr/bin/$name" completion zsh >"$stage/usr/share/zsh/vendor-completions/_$name"
    "$stage/usr/bin/$name" completion fish >"$stage/usr/share/fish/vendor_completions.d/$name.fish"
done

install -D -m 0644 packaging/systemd/gpuctk-cdi-refresh.service \
    "$stage/usr/lib/systemd/system/gpuctk-cdi-refresh.service"
install -D -m 0644 packaging/systemd/gpuctk-cdi-refresh.path \
    "$stage/usr/lib/systemd/system/gpuctk-cdi-refresh.path"
install -D -m 0644 packaging/udev/99-gpuctk-nvidia.rules \
    "$stage/usr/lib/udev/rules.d/99-gpuctk-nvidia.rules"
install -D -m 0644 packaging/debian/copyright "$stage/usr/share/doc/gpuctk/copyright"

# Shared-library dependencies as Debian computes them (a control file is all it needs).
mkdir -p "$work/shlibs/debian"
printf 'Source: gpuctk\n\nPackage: gpuctk\nArchitecture: any\n' >"$work/shlibs/debian/control"
depends=$(cd "$work/shlibs" && dpkg-shlibdeps -O "$stage/usr/bin/gpuctk" 2>/dev/null \
    | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "package.sh: dpkg-shlibdeps found no dependencies for $bin" >&2; exit 1; }

mkdir -p "$stage/DEBIAN"
installed_size=$(du -sk --apparent-size --exclude=DEBIAN "$stage" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@DEPENDS@/$depends/" \
    -e "s/@INSTALLED_SIZE@/$installed_size/" packaging/debian/control.in >"$stage/DEBIAN/control"
for script in preinst postinst prerm postrm; do
    install -m 0755 "packaging/debian/$script" "$stage/DEBIAN/$script"
done
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z \
    | xargs -0 md5sum) >"$stage/DEBIAN/md5sums"
find "$stage" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

deb=$out/gpuctk_${version}_${arch}.deb
# Built under a temp name and renamed: a failed build never leaves a truncated .deb.
dpkg-deb --root-owner-group --build "$stage" "$out/.gpuctk.deb.tmp" >/dev/null
mv -f "$out/.gpuctk.deb.tmp" "$deb"
echo "$deb"
