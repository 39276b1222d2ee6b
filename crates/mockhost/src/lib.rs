//! gpuctk-mockhost: a fake GPU host for tests and `gpuctk demo`.
//!
//! No machine here has a GPU, so everything gpuctk touches is built for
//! real around a fake core: character device nodes made with mknod whose
//! major has no driver (opening them gives ENXIO, which the fake libraries
//! read as "GPU present and allowed"), ELF shared objects and executables
//! compiled from `csrc/` at build time and embedded in this crate, /proc
//! files in the kernel module's formats, and an ld.so.cache made by the
//! real ldconfig.
//!
//! * [`create_host`] builds a host tree for a [`HostConfig`];
//! * [`create_rootfs`] builds a small Debian-like container image holding
//!   `/usr/bin/gpuctk-probe`, whose output [`ProbeReport`] parses.

#![deny(missing_docs)]

mod artifacts;
mod error;
mod host;
mod ids;
mod patch;
mod probe;
mod procfs;
mod rootfs;
mod sys;

pub use error::Error;
pub use host::{
    compat_libcuda, create_host, load_host, Arch, HostConfig, Layout, MockGpu, MockHost, DRM_MAJOR,
    HOST_JSON, MAX_GPUS, MAX_IMEX_CHANNELS, MIG_CONFIG_MINOR, MIG_MONITOR_MINOR, NVIDIACTL_MINOR,
    NVIDIA_MAJOR, NVIDIA_MODESET_MINOR, VENDOR_FILES,
};
pub use ids::{fnv1a64, gpu_bus_id, gpu_uuid};
pub use patch::{cuda_note_json, PatchError};
pub use probe::{LibraryLoad, ProbeReport};
pub use rootfs::{create_rootfs, create_rootfs_from, probe_binary, RootfsConfig, PROBE_PATH};
