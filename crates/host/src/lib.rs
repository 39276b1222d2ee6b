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
pub use procfs::DriverVersion;

/// Whether the NVIDIA kernel driver is loaded under `proc_root`: its
/// `<proc_root>/driver/nvidia/version` is there (its text is not needed). Absent is "no"; a
/// file that is there but cannot be read is an error naming it, never a "no": the platform
/// probes (WSL2, Jetson) would take the host for another kind unseen.
pub fn driver_loaded(proc_root: &std::path::Path) -> std::io::Result<bool> {
    let file = proc_root.join("driver/nvidia/version");
    match discover::read_capped(&file, discover::MAX_PROC_FILE) {
        Ok(_) => Ok(true),
        Err(e) if resolve::is_absent(&e) => Ok(false),
        Err(e) => Err(std::io::Error::new(
            e.kind(),
            format!("{}: {e}", file.display()),
        )),
    }
}

/// The first of `paths` (each with what it is, e.g. `"mount source"`) that does not exist on
/// the host, as `"<what> <path>"`: a static spec naming it no longer fits the host.
pub fn first_missing<'a>(paths: impl IntoIterator<Item = (&'a str, &'a str)>) -> Option<String> {
    paths
        .into_iter()
        .find(|(_, p)| std::fs::symlink_metadata(p).is_err())
        .map(|(what, p)| format!("{what} {p}"))
}
