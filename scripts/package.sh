#!/usr/bin/env bash
# Builds gpuctk's packages: the Debian package gpuctk_<version>_<arch>.deb and/or the RPM
# gpuctk-<version>-1.<rpm-arch>.rpm, for amd64 or arm64. Both hold the same files: the static
# release binary of scripts/static.sh (no libc needed: any glibc, no test fakes) and its NVML
# helper /usr/libexec/gpuctk/gpuctk-nvml (dynamic: NVML can only be dlopen'ed), its NVIDIA
# names as links, man pages and bash/zsh/fish completions made by the built binary itself, the
# CDI refresh units, the udev rule; and maintainer scripts doing the same in each format
# (packaging/debian/, packaging/rpm/gpuctk.spec.in). No conffile: the install writes config.toml
# when there is none, as NVIDIA's does. Layout and reasons: docs/packaging.md.
#
# Usage: scripts/package.sh [--out DIR] [--arch amd64|arm64] [--deb] [--rpm] [--rpm-release N]
#   default: the repository root, this machine's architecture, --deb only, RPM release 1.
#   Prints each package's path.
# Needs dpkg-deb, strip (binutils), gzip, file; rpmbuild (rpm) for --rpm; for arm64 the cross
# toolchain and qemu-aarch64 (qemu-user), which runs the arm64 binary to make the man pages and
# completions. Any user: the files are owned by root in the packages, whoever builds them.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

out=$root
arch=$(dpkg --print-architecture)
deb=0
rpm=0
release=1
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out=${2:?"package.sh: --out needs a directory"}; shift 2 ;;
        --out=*) out=${1#--out=}; shift ;;
        --arch) arch=${2:?"package.sh: --arch needs amd64 or arm64"}; shift 2 ;;
        --arch=*) arch=${1#--arch=}; shift ;;
        --deb) deb=1; shift ;;
        --rpm) rpm=1; shift ;;
        --rpm-release) release=${2:?"package.sh: --rpm-release needs a number"}; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) echo "package.sh: unknown argument '$1' (usage: scripts/package.sh [--out DIR] [--arch amd64|arm64] [--deb] [--rpm])" >&2; exit 2 ;;
    esac
done
[ "$deb$rpm" != 00 ] || deb=1
case "$release" in
    ''|*[!0-9]*) echo "package.sh: --rpm-release '$release' is not a number" >&2; exit 2 ;;
esac
case "$arch" in
    amd64|x86_64) arch=amd64 rpm_arch=x86_64 strip=strip run=() ;;
    arm64|aarch64) arch=arm64 rpm_arch=aarch64 strip=aarch64-linux-gnu-strip run=(qemu-aarch64) ;;
    *) echo "package.sh: unknown architecture '$arch' (amd64 or arm64)" >&2; exit 2 ;;
esac
tools="$strip gzip file"
[ "$deb" = 0 ] || tools="$tools dpkg-deb"
[ "$rpm" = 0 ] || tools="$tools rpmbuild"
[ "$arch" = amd64 ] || tools="$tools qemu-aarch64"
for tool in $tools; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "package.sh: $tool not found; install dpkg-dev, binutils, gzip, file, rpm, qemu-user and gcc-aarch64-linux-gnu (scripts/setup.sh does)" >&2
        exit 1
    }
done
mkdir -p "$out"
out=$(cd "$out" && pwd)

# One static build per architecture, shared with scripts/image.sh; cargo reuses it. Its NVML
# helper goes to /usr/libexec/gpuctk ([gpuctk] nvml-helper's default).
built=$(scripts/static.sh --arch "$arch" | tail -n 2)
helper=$(printf '%s\n' "$built" | head -n 1)
bin=$(printf '%s\n' "$built" | tail -n 1)

version=$("${run[@]}" "$bin" --version | awk '{print $2}')
# Reproducible: every file dated at the last commit (dpkg-deb and rpmbuild read SOURCE_DATE_EPOCH).
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage=$work/stage
umask 022

install -D -m 0755 "$bin" "$stage/usr/bin/gpuctk"
"$strip" --strip-unneeded "$stage/usr/bin/gpuctk"
install -D -m 0755 "$helper" "$stage/usr/libexec/gpuctk/gpuctk-nvml"
"$strip" --strip-unneeded "$stage/usr/libexec/gpuctk/gpuctk-nvml"
# The personalities: the binary dispatches on the name it is run by.
for name in nvidia-ctk nvidia-container-runtime nvidia-container-runtime.cdi \
    nvidia-container-runtime.legacy nvidia-container-runtime-hook nvidia-container-toolkit \
    nvidia-cdi-hook nvidia-container-cli; do
    ln -s gpuctk "$stage/usr/bin/$name"
done
ctk=$stage/usr/bin/nvidia-ctk

# Man pages from the clap definitions, compressed as Debian and RPM distributions ship them.
"${run[@]}" "$ctk" man --output "$work/man" >/dev/null
mkdir -p "$stage/usr/share/man/man1"
for page in "$work"/man/*.1; do
    gzip -9n -c "$page" >"$stage/usr/share/man/man1/$(basename "$page").gz"
done

# Completions for both names users type, each made by the binary run under that name.
mkdir -p "$stage/usr/share/bash-completion/completions" \
    "$stage/usr/share/zsh/vendor-completions" "$stage/usr/share/fish/vendor_completions.d"
for name in gpuctk nvidia-ctk; do
    "${run[@]}" "$stage/usr/bin/$name" completion bash >"$stage/usr/share/bash-completion/completions/$name"
    "${run[@]}" "$stage/usr/bin/$name" completion zsh >"$stage/usr/share/zsh/vendor-completions/_$name"
    "${run[@]}" "$stage/usr/bin/$name" completion fish >"$stage/usr/share/fish/vendor_completions.d/$name.fish"
done

install -D -m 0644 packaging/systemd/gpuctk-cdi-refresh.service \
    "$stage/usr/lib/systemd/system/gpuctk-cdi-refresh.service"
install -D -m 0644 packaging/systemd/gpuctk-cdi-refresh.path \
    "$stage/usr/lib/systemd/system/gpuctk-cdi-refresh.path"
install -D -m 0644 packaging/udev/99-gpuctk-nvidia.rules \
    "$stage/usr/lib/udev/rules.d/99-gpuctk-nvidia.rules"
find "$stage" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

if [ "$deb" = 1 ]; then
    debroot=$work/deb
    cp -a "$stage" "$debroot"
    install -D -m 0644 packaging/debian/copyright "$debroot/usr/share/doc/gpuctk/copyright"
    mkdir -p "$debroot/DEBIAN"
    installed_size=$(du -sk --apparent-size --exclude=DEBIAN "$debroot" | cut -f1)
    # No Depends: the binary is static (scripts/static.sh checks it), it needs no libc6.
    sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" \
        -e "s/@INSTALLED_SIZE@/$installed_size/" packaging/debian/control.in >"$debroot/DEBIAN/control"
    for script in preinst postinst prerm postrm; do
        install -m 0755 "packaging/debian/$script" "$debroot/DEBIAN/$script"
    done
    (cd "$debroot" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z \
        | xargs -0 md5sum) >"$debroot/DEBIAN/md5sums"
    find "$debroot" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
    pkg=$out/gpuctk_${version}_${arch}.deb
    # Built under a temp name and renamed: a failed build never leaves a truncated package.
    dpkg-deb --root-owner-group --build "$debroot" "$out/.gpuctk.deb.tmp" >/dev/null
    mv -f "$out/.gpuctk.deb.tmp" "$pkg"
    echo "$pkg"
fi

if [ "$rpm" = 1 ]; then
    # The same files at RPM distributions' paths: zsh's site-functions, the license in
    # /usr/share/licenses.
    rpmroot=$work/rpmroot
    cp -a "$stage" "$rpmroot"
    mkdir -p "$rpmroot/usr/share/zsh/site-functions"
    mv "$rpmroot"/usr/share/zsh/vendor-completions/* "$rpmroot/usr/share/zsh/site-functions/"
    rmdir "$rpmroot/usr/share/zsh/vendor-completions"
    install -D -m 0644 packaging/debian/copyright "$rpmroot/usr/share/licenses/gpuctk/copyright"
    find "$rpmroot" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
    # Files and links only: the directories (/usr/bin...) belong to the distribution's packages.
    (cd "$rpmroot" && find . ! -type d -printf '/%P\n' | sort) >"$work/files"
    sed -e "s|@VERSION@|$version|" -e "s|@RELEASE@|$release|" -e "s|@STAGE@|$rpmroot|" -e "s|@FILELIST@|$work/files|" \
        packaging/rpm/gpuctk.spec.in >"$work/gpuctk.spec"
    top=$work/rpmbuild
    mkdir -p "$top"
    rpmbuild -bb --quiet --target "$rpm_arch-linux" \
        --define "_topdir $top" --define "_tmppath $work/tmp" \
        --define "_buildhost gpuctk" --define "use_source_date_epoch_as_buildtime 1" \
        --define "clamp_mtime_to_source_date_epoch 1" --define "_binary_payload w6.xzdio" \
        "$work/gpuctk.spec" >"$work/rpmbuild.log" 2>&1 || {
        cat "$work/rpmbuild.log" >&2
        echo "package.sh: rpmbuild failed" >&2
        exit 1
    }
    built=$top/RPMS/$rpm_arch/gpuctk-$version-$release.$rpm_arch.rpm
    pkg=$out/gpuctk-$version-$release.$rpm_arch.rpm
    cp "$built" "$out/.gpuctk.rpm.tmp"
    mv -f "$out/.gpuctk.rpm.tmp" "$pkg"
    echo "$pkg"
fi
