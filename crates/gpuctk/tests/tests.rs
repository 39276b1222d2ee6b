//! gpuctk's integration tests: one binary, one module per area. Every test gets its own temp
//! dir (`util::TestDir`) and runs the real `gpuctk` binary against mock GPU hosts built by
//! `gpuctk mock-host create` (real device nodes, real ELF files, real `ldconfig` output).
//! They run as root, since mock hosts need mknod.

mod util;

/// arm64 from this machine: the cross-built static binary in .deb and RPM under qemu-user, and
/// the pure crates' unit tests cross-built and run under qemu-user.
mod arm64;

/// The malicious-image suite: every attack through every delivery path, sentinels unchanged.
mod attacks;
/// Malformed input of every kind: one clear line, a non-zero exit, nothing half-written.
mod bad_input;
/// A cgroup v2-only `/sys/fs/cgroup` (a private mount namespace): every delivery under runc
/// and crun, each container with exactly its GPUs.
mod cgroup2;
/// `cdi list`, `cdi validate`, `info`, `demo` and the `nvidia-ctk` personality.
mod commands;
/// docs/compat.md's done rows against the binary: each flag in its command's help, each
/// config key loading without a warning.
mod compat_table;
/// 50 at once: runtime configures, shim creates, prestart hooks, readers of a spec being rewritten.
mod concurrency;
/// Kubernetes' node path: containerd's CRI plugin driven over gRPC as the kubelet does,
/// with the RuntimeClass handler `nvidia` running our shim.
mod cri;
/// Discovery errors that were swallowed (an unreadable firmware folder): generate fails.
mod discovery_errors;
/// `doctor`: a healthy mock host is all ok; each way of breaking it is named, with its fix.
mod doctor;
/// docker, podman, containerd and `runtime configure`.
mod engines;
/// Writers killed at every step and fed write, fsync and rename errors: no file lost or torn.
mod faults;
/// The package build (`--no-default-features`) links no mock host and compiles cleanly.
mod features;
/// `cdi generate` on every layout, GPU count and driver version; the spec matches the host.
mod generate;
/// enroot and Apptainer's `nvidia-container-cli configure` without `--pid`: root in a user
/// namespace, an unprivileged user, root without one.
mod hpc;
/// `install` / `uninstall` on temp host roots, and the installer image under podman, then
/// containerd running a GPU pod through the CRI from what it installed.
mod install;
/// The binary crate's module graph: no import cycle.
mod layout;
/// MIG: the mock host's MIG mode and MIG devices through `cdi generate`, the shim and the hooks.
mod mig;
/// NVIDIA's `nvidia-ctk` names scripts use: `cdi generate`'s environment variables, `-v`,
/// `--config`, `--devices`, `--device-id none`, `runtime configure --executable-path` and
/// `--cdi.enable`; NVIDIA's stock config.toml quiet on container create.
mod nvidia_cli;
/// A kernel without the newer system calls (openat2, fchmodat2, open_tree, clone3, ...): deliveries
/// and attacks again under a seccomp filter that makes them `ENOSYS`, as Linux 4.18 does.
mod old_kernel;
/// The Debian package: built by scripts/package.sh, installed with dpkg in a copy-on-write
/// namespace, used by docker and podman, removed and purged; completions and man pages.
mod package;
/// Jetson (CSV mode) on a mock Jetson: `cdi generate --mode csv` and the shim under runc and crun.
mod platforms;
/// Discovery on the real Debian 535 driver packages, unpacked with dpkg-deb.
mod real_driver;
/// One test per fixed bug.
mod regression;
/// Rootless podman as an unprivileged user made by the test: CDI and the shim, crun and runc.
mod rootless;
/// The runtime shim and the hooks under real runc and crun.
mod runtime;
/// What ships for other distributions: the static binary in a root without libc, the RPM
/// installed, upgraded and erased with `rpm --root`, swapped with NVIDIA's packages.
mod ship;
/// The discovery snapshot: read on the second create, rebuilt when the driver changes or it
/// is not ours, damaged or names a file that is gone.
mod snapshot;
