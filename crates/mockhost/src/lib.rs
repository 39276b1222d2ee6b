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
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod artifacts;
mod driverless;
mod error;
mod host;
mod ids;
mod mig;
mod patch;
mod probe;
mod procfs;
mod rootfs;
mod sys;
mod tegra;
mod wsl;

pub use error::Error;
pub use host::{
    compat_libcuda, create_host, load_host, Arch, GatedDevices, GatedMajors, HostConfig, Layout,
    MockGpu, MockHost, DRM_MAJOR, HOST_JSON, INFINIBAND_VERBS_MAJOR, MAX_GPUS, MAX_IMEX_CHANNELS,
    MIG_CONFIG_MINOR, MIG_MONITOR_MINOR, NVIDIACTL_MINOR, NVIDIA_FS_NODES, NVIDIA_MAJOR,
    NVIDIA_MODESET_MINOR, NVSWITCHCTL_MINOR, VENDOR_FILES, VIDEO_GID,
};
pub use ids::{fnv1a64, gpu_bus_id, gpu_uuid, mig_uuid};
pub use mig::{ci_minor, gi_minor, parse_mig_arg, MockMig, MAX_MIG_PER_GPU, MIG_MINORS_GPUS};
pub use patch::{cuda_note_json, PatchError};
pub use probe::{LibraryLoad, ProbeReport};
pub use rootfs::{create_rootfs, create_rootfs_from, probe_binary, RootfsConfig, PROBE_PATH};
pub use tegra::{create_tegra_host, TegraHost, TEGRA_DRIVER_VERSION, TEGRA_LIB_DIR, TEGRA_NODES};
pub use wsl::{create_wsl_host, WslHost, WSL_DRIVER_VERSION, WSL_STORE_DIR};
