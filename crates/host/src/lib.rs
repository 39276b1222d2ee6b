//! Host discovery: what NVIDIA driver, GPUs, device nodes and driver files this machine has,
//! read from procfs, `/dev` and the driver root's `ld.so.cache` into an [`Inventory`].
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod caps;
pub mod catalog;
pub mod checks;
pub mod csv;
pub mod cuda;
pub mod discover;
pub mod gated;
pub mod inventory;
pub mod mig;
pub mod nodes;
#[allow(unsafe_code)] // calls into the NVML library it loads
pub mod nvml;
pub mod platform;
pub mod procfs;
pub mod resolve;
#[allow(unsafe_code)]
mod sys;
pub mod watch;
pub mod wsl;

pub use caps::{CapsError, MigCapability};
pub use catalog::Capability;
pub use cuda::{cuda_version_for_branch, cuda_version_known, CudaVersion};
pub use discover::{discover, DiscoverError, DiscoverOptions, Discovery};
pub use gated::GatedMode;
pub use inventory::{DeviceNode, DrmLink, ElfAbi, Gpu, HostFile, Inventory, Library, Roots};
pub use platform::{Platform, PlatformError, RunningDriver, VersionFileError};
pub use procfs::DriverVersion;

/// The first of `paths` (each with what it is, e.g. `"mount source"`) that does not exist on
/// the host, as `"<what> <path>"`: a static spec naming it no longer fits the host.
pub fn first_missing<'a>(paths: impl IntoIterator<Item = (&'a str, &'a str)>) -> Option<String> {
    paths
        .into_iter()
        .find(|(_, p)| std::fs::symlink_metadata(p).is_err())
        .map(|(what, p)| format!("{what} {p}"))
}
