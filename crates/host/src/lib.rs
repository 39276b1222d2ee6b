//! Host discovery: what NVIDIA driver, GPUs, device nodes and driver files this machine has,
//! read from procfs, `/dev` and the driver root's `ld.so.cache` into an [`Inventory`].
#![deny(missing_docs)]

pub mod catalog;
pub mod cuda;
pub mod discover;
pub mod elf;
pub mod inventory;
pub mod procfs;
pub mod resolve;

pub use catalog::Capability;
pub use cuda::{cuda_version_for_branch, CudaVersion};
pub use discover::{discover, DiscoverError, DiscoverOptions};
pub use inventory::{DeviceNode, Gpu, HostFile, Inventory, Library, Roots};
pub use procfs::DriverVersion;
