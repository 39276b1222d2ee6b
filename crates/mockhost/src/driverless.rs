//! What the mock hosts without an NVIDIA kernel driver (the Jetson and the WSL2 one) share: a
//! major no driver on this machine has, an empty host root with its `/dev`, a procfs `devices`
//! file with no NVIDIA driver in it, and their libraries' config patched in.

use std::fs;
use std::path::{Path, PathBuf};

use crate::{patch, procfs, sys, Error};

/// The start of a driverless mock host.
pub(crate) struct Base {
    /// The host's root (driver and dev root).
    pub root: PathBuf,
    /// Its `/dev`, made (mode 0755) and empty.
    pub dev: PathBuf,
    /// Its procfs.
    pub proc_root: PathBuf,
    /// A major no driver has on this machine: opening its nodes gives ENXIO.
    pub major: u32,
}

/// The start of a driverless mock host in `dir` (absent or empty), whose procfs `devices` file
/// is `proc_devices`.
pub(crate) fn base(dir: &Path, proc_devices: &[u8]) -> Result<Base, Error> {
    let real_devices = Path::new("/proc/devices");
    let real = fs::read_to_string(real_devices).unwrap_or_default();
    let major = procfs::pick_free_major(&real, &[]).ok_or_else(|| Error::NoFreeMajor {
        path: real_devices.into(),
    })?;
    let root = sys::prepare_empty_dir(dir)?;
    let dev = root.join("dev");
    sys::make_dir(&dev, 0o755)?;
    let proc_root = root.join("proc");
    sys::write_file(&proc_root.join("devices"), proc_devices, 0o444)?;
    Ok(Base {
        root,
        dev,
        proc_root,
        major,
    })
}

/// Artifact `name`'s `bytes` with `config` patched in.
pub(crate) fn patched(bytes: &[u8], config: &str, name: &str) -> Result<Vec<u8>, Error> {
    patch::patch_config(bytes, config).map_err(|source| Error::Patch {
        artifact: name.into(),
        source,
    })
}
