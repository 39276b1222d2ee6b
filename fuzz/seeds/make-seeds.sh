#!/usr/bin/env bash
# Builds the seed inputs of every fuzz target into fuzz/corpus/<target>/ from real-format sources:
# mock hosts made by `gpuctk mock-host create` (procfs text, ELF libraries compiled from C, an
# ld.so.cache written by the real ldconfig), the test fixtures of the crates, and NVIDIA's
# generated spec in shared/reference. Run once before the first `cargo fuzz run`; the committed
# corpora are this plus what the fuzzers found, minimized with `cargo fuzz cmin`.
#   usage: fuzz/seeds/make-seeds.sh [path to a built gpuctk binary]
set -euo pipefail
cd "$(dirname "$0")/../.."
gpuctk=${1:-target/debug/gpuctk}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
c=fuzz/corpus
seed() { mkdir -p "$c/$1"; cp "$2" "$c/$1/${3:-$(basename "$2")}"; }
text() { mkdir -p "$c/$1"; printf '%s' "$3" > "$c/$1/$2"; }

"$gpuctk" mock-host create "$work/deb" --gpus 2 >/dev/null
"$gpuctk" mock-host create "$work/rhel" --gpus 1 --layout rhel --driver-version 535.54.03 >/dev/null
"$gpuctk" mock-host create "$work/dc" --gpus 3 --layout driver-container --driver-version 550.90.07 >/dev/null

# ld.so.cache: ldconfig's own output, new format and compat (old + new) layouts.
seed ldcache "$work/deb/etc/ld.so.cache" deb.cache
seed ldcache "$work/rhel/etc/ld.so.cache" rhel.cache
seed ldcache /etc/ld.so.cache system.cache
for fmt in compat old; do
    ldconfig -c "$fmt" -r "$work/deb" -C "/etc/ld.so.cache.$fmt" # -C is inside the root
    seed ldcache "$work/deb/etc/ld.so.cache.$fmt" "$fmt.cache"
done

# procfs: the three files discovery parses, and params (not parsed today, real-format text).
for h in deb rhel dc; do
    p=$(find "$work/$h" -path '*proc/driver/nvidia/version' | head -1)
    p=${p%/driver/nvidia/version}
    seed procfs "$p/driver/nvidia/version" "$h-version"
    seed procfs "$p/devices" "$h-devices"
    seed procfs "$p/driver/nvidia/params" "$h-params"
    for g in "$p"/driver/nvidia/gpus/*/information; do
        seed procfs "$g" "$h-information-$(basename "$(dirname "$g")")"
    done
done

# ELF: driver libraries and binaries of the mock host, and a compat libcuda with the CUDA
# forward-compatibility note the enable-cuda-compat hook reads.
lib=$(dirname "$(find "$work/deb" -name 'libcuda.so.570.124.06' | head -1)")
seed elf "$lib/libcuda.so.570.124.06" libcuda.so
seed elf "$lib/libnvidia-ml.so.570.124.06" libnvidia-ml.so
seed elf "$lib/libGLX_nvidia.so.570.124.06" libGLX_nvidia.so
smi=$(find "$work/deb" -name nvidia-smi -type f | head -1)
[ -n "$smi" ] && seed elf "$smi" nvidia-smi
python3 - "$work/note.bin" <<'PY'
import struct, sys
name = b"NVIDIA Corporation\0"
desc = b'{"CUDA Version":"12.9"}'
pad = lambda b: b + b"\0" * (-len(b) % 4)
open(sys.argv[1], "wb").write(struct.pack("<III", len(name), len(desc), 1) + pad(name) + pad(desc))
PY
objcopy --add-section .note.cuda.fwd_compatibility="$work/note.bin" \
    --set-section-flags .note.cuda.fwd_compatibility=noload,readonly \
    "$lib/libcuda.so.570.124.06" "$work/compat-libcuda.so"
seed elf "$work/compat-libcuda.so" compat-libcuda.so
strip -o "$work/stripped.so" "$lib/libnvidia-ml.so.570.124.06" && seed elf "$work/stripped.so" stripped.so

# CDI specs: NVIDIA's, ours for each host in both formats, and the test fixtures.
for f in crates/cdi/tests/data/nvidia-ctk-cdi-generate.yaml; do seed cdi_yaml "$f" nvidia.yaml; done
for h in deb rhel dc; do
    roots=(--driver-root "$(jq -r .driver_root "$work/$h/mock-host.json")"
           --dev-root "$(jq -r .dev_root "$work/$h/mock-host.json")"
           --proc-root "$(jq -r .proc_root "$work/$h/mock-host.json")")
    "$gpuctk" cdi generate "${roots[@]}" --format yaml --output "$work/$h.yaml" >/dev/null
    "$gpuctk" cdi generate "${roots[@]}" --format json --output "$work/$h.json" >/dev/null
    seed cdi_yaml "$work/$h.yaml" "$h.yaml"
    seed cdi_json "$work/$h.json" "$h.json"
done
python3 -c 'import json,sys,yaml' 2>/dev/null && python3 - "$c" <<'PY' || true
import json, sys, yaml
c = sys.argv[1]
spec = yaml.safe_load(open("crates/cdi/tests/data/nvidia-ctk-cdi-generate.yaml"))
json.dump(spec, open(f"{c}/cdi_json/nvidia.json", "w"), indent=2)
PY

# config.json requests: the reference configs and requests from every source.
seed request crates/cdi/tests/data/original-config.json original.json
seed request crates/cdi/tests/data/nvidia-runtime-config.json nvidia-runtime.json
text request env.json '{"process":{"env":["PATH=/bin","NVIDIA_VISIBLE_DEVICES=0,GPU-0986a80f","NVIDIA_DRIVER_CAPABILITIES=compute,utility","NVIDIA_REQUIRE_CUDA=cuda>=12.0 brand=tesla"],"capabilities":{"bounding":["CAP_SYS_ADMIN"]}}}'
text request legacy.json '{"process":{"env":["CUDA_VERSION=11.8","DOCKER_RESOURCE_GPU=1"]}}'
text request mounts.json '{"process":{"env":[]},"mounts":[{"destination":"/var/run/nvidia-container-devices/0","source":"/dev/null","type":"bind"},{"destination":"/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/1","source":"/dev/null"}]}'
text request annotations.json '{"process":{"env":["NVIDIA_VISIBLE_DEVICES=void"]},"annotations":{"cdi.k8s.io/gpu":"nvidia.com/gpu=0,nvidia.com/gpu=1","nvidia.cdi.k8s.io/x":"nvidia.com/gpu=all"}}'
text request cdi-env.json '{"process":{"env":["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all","NVIDIA_DRIVER_CAPABILITIES=all"]}}'

# NVIDIA_VISIBLE_DEVICES and NVIDIA_DRIVER_CAPABILITIES values.
text visible_devices all all
text visible_devices list '0,1, 2 ,3'
text visible_devices uuid 'GPU-0986a80f-9ded-4980-0986-ab0f9ded4e99,GPU-121c'
text visible_devices mig '0:1,MIG-0986a80f-9ded-4980-0986-ab0f9ded4e99,MIG-GPU-0986a80f-9ded-4980-0986-ab0f9ded4e99/1/0'
text visible_devices cdi 'nvidia.com/gpu=0,nvidia.com/gpu=all,example.com/x=y'
text visible_devices none none
text visible_devices void void
text capabilities all all
text capabilities default 'compute,utility'
text capabilities every 'compute,compat32,graphics,utility,video,display,ngx'
text capabilities spaces ' compute , ,utility,'

# config.toml: NVIDIA's keys and ours.
text config_toml nvidia.toml '#disable-require = false
#swarm-resource = "DOCKER_RESOURCE_GPU"
accept-nvidia-visible-devices-envvar-when-unprivileged = true
accept-nvidia-visible-devices-as-volume-mounts = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
ldconfig = "@/sbin/ldconfig"
load-kmods = true
root = "/run/nvidia/driver"

[nvidia-container-runtime]
debug = "/var/log/nvidia-container-runtime.log"
log-level = "info"
mode = "auto"
runtimes = ["docker-runc", "runc", "crun"]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime.modes.csv]
mount-spec-path = "/etc/nvidia-container-runtime/host-files-for-container.d"

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false

[nvidia-ctk]
path = "nvidia-ctk"

[gpuctk]
dev-root = "/"
proc-root = "/proc"
hook-path = "/usr/bin/nvidia-cdi-hook"
accept-cdi-annotations-when-unprivileged = false
'
text config_toml inline.toml 'nvidia-container-runtime = { mode = "cdi", runtimes = ["runc"] }
gpuctk.dev-root = "/host"
'

# Engine configs: the engines crate's fixtures.
for f in crates/engines/tests/data/daemon.json*; do seed engine_docker "$f"; done
text engine_docker empty.json '{}'
for f in crates/engines/tests/data/containerd-*.toml crates/engines/tests/data/crio.conf \
         crates/engines/tests/data/*.expected; do
    case $f in *daemon.json*) continue ;; esac
    seed engine_toml "$f"
done
