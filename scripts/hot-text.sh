#!/usr/bin/env bash
# Writes scripts/hot-text.ld, the linker script that scripts/static.sh links the shipped binary
# with: it places the functions that the runtime shim's calls and the hooks run side by side at
# the start of the code, so that each exec faults in a few contiguous pages of code instead of
# pages scattered over 6 MB (docs/performance.md, round eleven).
#
# Which functions those are is measured, not guessed: the static binary runs each path on a mock
# host under valgrind's callgrind, which names every function that ran. The paths, in the order
# their functions are laid out: pass-through calls (state, start, kill, delete), a create with no
# GPU and the delete of that container (which drops its runtime record), a create of 8 GPUs just in time on a new root and again on the same root, a create from
# a static CDI spec under runc with its hooks, and `cdi generate` (the refresh unit's).
#
# Names are written as patterns that do not depend on the build: symbols are mangled with v0
# (static.sh's -C symbol-mangling-version=v0), whose names spell out a generic function's type
# arguments; the crate hashes and back-references in them, which change with versions and flags,
# are wildcards. A function missing from the list (new code on a hot path) still links, among
# the others; run this again after such a change. Needs root, valgrind and runc.
#
# Usage: scripts/hot-text.sh   (rebuilds with static.sh before and after)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/scripts/hot-text.ld

for tool in valgrind runc; do
    if ! command -v "$tool" >/dev/null; then
        echo "hot-text.sh: $tool not found (apt-get install $tool)" >&2
        exit 1
    fi
done
if [ "$(id -u)" != 0 ]; then
    echo "hot-text.sh: run as root (a mock host has device nodes; runc runs a container)" >&2
    exit 1
fi

bin=$(scripts/static.sh | tail -1)
# The mock host builder is in the default build only (the shipped one leaves test fakes out).
cargo build --release --locked -p gpuctk >&2
mock=${CARGO_TARGET_DIR:-$root/target}/release/gpuctk

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hot-text.XXXXXX")
cleanup() {
    runc --root "$tmp/state" delete -f hot-cdi >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT
"$mock" mock-host create "$tmp/host" --gpus 8 >/dev/null
"$mock" mock-host rootfs "$tmp/image" >/dev/null
field() { sed -n "s/.*\"$1\": *\"\([^\"]*\)\".*/\1/p" "$tmp/host/mock-host.json" | head -1; }
driver_root=$(field driver_root)
dev_root=$(field dev_root)
proc_root=$(field proc_root)

# The hooks a static spec names run as this wrapper, which runs the binary under callgrind.
mkdir -p "$tmp/cg" "$tmp/hookbin"
ln -s "$bin" "$tmp/hookbin/nvidia-cdi-hook"
cat >"$tmp/hookbin/hook" <<EOF
#!/bin/sh
exec valgrind --tool=callgrind --demangle=no --callgrind-out-file=$tmp/cg/4-hook-\$1-%p $tmp/hookbin/nvidia-cdi-hook "\$@" 2>>$tmp/valgrind.log
EOF
chmod +x "$tmp/hookbin/hook"

config() { # config FILE RUNTIME [more toml]
    cat >"$1" <<EOF
[nvidia-container-cli]
root = "$driver_root"

[nvidia-container-runtime]
runtimes = ["$2"]
${3:-}

[gpuctk]
dev-root = "$dev_root"
proc-root = "$proc_root"
hook-path = "$tmp/hookbin/hook"
snapshot-dir = "$tmp/snap"
EOF
}
config "$tmp/true.toml" /bin/true
config "$tmp/runc.toml" "$(command -v runc)" "[nvidia-container-runtime.modes.cdi]
spec-dirs = [\"$tmp/cdi\"]"

bundle() { # bundle DIR ENV...
    mkdir -p "$1"
    [ -e "$1/rootfs" ] || cp -a "$tmp/image" "$1/rootfs"
    local env='"PATH=/usr/bin:/bin"'
    for e in "${@:2}"; do env="$env, \"$e\""; done
    cat >"$1/config.json" <<EOF
{"ociVersion": "1.0.2", "process": {"terminal": false, "user": {"uid": 0, "gid": 0},
 "args": ["/bin/true"], "env": [$env], "cwd": "/"},
 "root": {"path": "rootfs", "readonly": false}, "hostname": "hot",
 "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
  {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]}],
 "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}, {"type": "ipc"}, {"type": "uts"}]}}
EOF
}
ln -s "$bin" "$tmp/nvidia-container-runtime"
cg() { # cg NAME CONFIG PROGRAM ARGS...: one call under callgrind (up to the exec of the runtime)
    GPUCTK_CONFIG=$2 valgrind --tool=callgrind --demangle=no --dump-before=execve \
        --callgrind-out-file="$tmp/cg/$1" "${@:3}" >/dev/null 2>>"$tmp/valgrind.log"
}
shim() { # shim NAME CONFIG ARGS...: one call of the runtime shim
    cg "$1" "$2" "$tmp/nvidia-container-runtime" "${@:3}"
}

# --root: what the shim records of a container lands in the temp dir, not in /run.
rs=(--root "$tmp/state")
shim 0-state "$tmp/true.toml" "${rs[@]}" state hot
shim 0-start "$tmp/true.toml" "${rs[@]}" start hot
shim 0-kill "$tmp/true.toml" "${rs[@]}" kill hot 9
shim 0-delete "$tmp/true.toml" "${rs[@]}" delete hot
bundle "$tmp/none"
shim 1-create-none "$tmp/true.toml" "${rs[@]}" create --bundle "$tmp/none" hot1
# The create recorded its runtime, the one the config names: this delete drops the record and
# becomes the runtime. (A record of another runtime makes the delete wait: rare, not profiled.)
shim 1-delete-recorded "$tmp/true.toml" "${rs[@]}" delete hot1
bundle "$tmp/jit" NVIDIA_VISIBLE_DEVICES=all
cp "$tmp/jit/config.json" "$tmp/jit.json"
shim 2-create-jit "$tmp/true.toml" "${rs[@]}" create --bundle "$tmp/jit" hot2
# The same root again once what the first create made there has settled (hooks/seen.rs).
sleep 2.1
cp "$tmp/jit.json" "$tmp/jit/config.json"
shim 3-create-jit-again "$tmp/true.toml" "${rs[@]}" create --bundle "$tmp/jit" hot3
mkdir -p "$tmp/cdi"
"$bin" cdi generate --config "$tmp/runc.toml" --output "$tmp/cdi/nvidia.yaml" \
    --nvidia-cdi-hook-path "$tmp/hookbin/hook" --driver-root "$driver_root" \
    --dev-root "$dev_root" --proc-root "$proc_root" >/dev/null
bundle "$tmp/static" NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all
shim 4-create-static "$tmp/runc.toml" "${rs[@]}" create --bundle "$tmp/static" hot-cdi
cg 5-generate "$tmp/runc.toml" "$bin" cdi generate --config "$tmp/runc.toml" \
    --output "$tmp/generated.yaml" --driver-root "$driver_root" --dev-root "$dev_root" \
    --proc-root "$proc_root"

# Each run's functions as callgrind lists them (not in the order they ran), the runs in the
# order above; callgrind numbers a dump made before an exec NAME.1.
files=$(cd "$tmp/cg" && ls | sort)
n=$(echo "$files" | wc -l)
if [ "$n" -lt 10 ] || ! echo "$files" | grep -q '^4-hook-'; then
    echo "hot-text.sh: expected callgrind data of 9 runs and the static spec's hooks, got: $files" >&2
    tail -20 "$tmp/valgrind.log" >&2
    exit 1
fi
{
    cat <<'EOF'
/* Written by scripts/hot-text.sh: the functions the runtime shim's calls and the hooks run,
   laid out together at the start of the code (scripts/static.sh links with it). A function
   not named here links among the rest, as without this file. */
SECTIONS
{
  .text.gpuctk_hot :
  {
EOF
    for f in $files; do
        sed -n 's/^c\{0,1\}fn=([0-9]*) \(.*\)$/\1/p' "$tmp/cg/$f"
    done | awk '!seen[$0]++' | sed -E \
        -e '/^0x/d; s/^\(below main\)$/__libc_start_main/' \
        -e "s/'[0-9]+$//" \
        -e 's/\.llvm\.[0-9]+$//' \
        -e 's/Cs[0-9A-Za-z]*_/Cs*_/g' \
        -e 's/B[0-9A-Za-z]*_/B*_/g' |
        awk '!seen[$0]++ && /^[A-Za-z_][A-Za-z0-9_.*]*$/ {
            # A function the compiler deems cold (a #[cold] one, as RawVec and hashbrown mark
            # their growth) is in .text.unlikely.NAME; a C function is often an alias of __NAME.
            n = $0; alts = n " " n ".* unlikely." n " unlikely." n ".*";
            if (n !~ /^_/) alts = alts " __" n;
            out = ""; k = split(alts, a, " ");
            for (i = 1; i <= k; i++) out = out " .text." a[i];
            print "    *(" substr(out, 2) ")";
        }'
    cat <<'EOF'
  }
}
INSERT BEFORE .text;
EOF
} >"$out.tmp"
mv "$out.tmp" "$out"
echo "hot-text.sh: $(grep -c '^    \*(' "$out") functions in $out" >&2
scripts/static.sh >/dev/null
