//! What kind of host this is, told in one order for every command: the NVIDIA kernel driver
//! (its procfs version file, read once by the caller, whose text also keys the discovery
//! snapshot), else WSL2's signs, else a Jetson's markers.

use std::io;
use std::path::{Path, PathBuf};

use crate::procfs::{self, DriverVersion, ProcError};
use crate::resolve::is_absent;
use crate::wsl::WslError;

/// The driver's version file, inside the proc root.
pub const VERSION_FILE: &str = "driver/nvidia/version";

/// The driver's version file under `proc_root`.
pub fn version_file(proc_root: &Path) -> PathBuf {
    proc_root.join(VERSION_FILE)
}

/// The running NVIDIA kernel driver, as its version file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningDriver {
    /// The file's whole text (a discovery snapshot's key: a reinstall changes its build date).
    pub text: String,
    /// The version in it.
    pub version: DriverVersion,
}

/// The driver's version file is there but cannot be read, is not text or names no version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {why}; this does not look like the NVIDIA kernel module's version file: check that procfs is what [gpuctk] proc-root in config.toml names (--proc-root where the command has one)", file.display())]
pub struct VersionFileError {
    /// The file.
    pub file: PathBuf,
    /// What is wrong.
    pub why: String,
}

/// The running driver under `proc_root`, from what reading its version file gave (`read`:
/// its bytes, or the read's error): `None` where the file is absent (no NVIDIA kernel module
/// loaded). A file that is there but cannot be read, is not text or names no version is an
/// error naming it, neither "no driver" nor "a driver": the platform probes would take the
/// host for another kind unseen.
pub fn running_driver(
    proc_root: &Path,
    read: io::Result<Vec<u8>>,
) -> Result<Option<RunningDriver>, VersionFileError> {
    let file = version_file(proc_root);
    let bad = |why: String| VersionFileError {
        file: file.clone(),
        why,
    };
    let bytes = match read {
        Ok(b) => b,
        Err(e) if is_absent(&e) => return Ok(None),
        Err(e) => return Err(bad(e.to_string())),
    };
    let text = String::from_utf8(bytes).map_err(|_| bad(ProcError::NotText.to_string()))?;
    let version = procfs::parse_version(&text).map_err(|e| bad(e.to_string()))?;
    Ok(Some(RunningDriver { text, version }))
}

/// [`running_driver`], the file read here (capped as every procfs file the driver writes).
pub fn read_running_driver(proc_root: &Path) -> Result<Option<RunningDriver>, VersionFileError> {
    let read =
        crate::discover::read_capped(&version_file(proc_root), crate::discover::MAX_PROC_FILE);
    running_driver(proc_root, read)
}

/// What kind of host a request routed just in time (or `cdi generate --mode auto`) is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    /// WSL2: `/dev/dxg` or `libdxcore.so`, no NVIDIA kernel driver.
    Wsl,
    /// A Jetson: the Tegra markers, no NVIDIA kernel driver.
    Tegra,
    /// A host with the NVIDIA kernel driver, or with no sign of either: discovery serves it.
    Other,
}

/// A sign of a platform is there but cannot be looked at (each error names it).
#[derive(Debug, thiserror::Error)]
pub enum PlatformError {
    /// `/dev/dxg` or `libdxcore.so`.
    #[error("{0}; cannot tell whether this is a WSL2 host")]
    Wsl(#[source] WslError),
    /// `/etc/nv_tegra_release` or `/sys/devices/soc0/family`.
    #[error("{0}; cannot tell whether this is a Jetson")]
    Tegra(#[source] io::Error),
}

/// The kind of host, asked in this order, each step only when the one before says no: the
/// NVIDIA kernel driver (`driver`: its version, as the caller read it once), then WSL2's signs
/// (`libdxcore.so` under `driver_root`, `/dev/dxg` under `dev_root`; NVIDIA's `auto` asks
/// dxcore first), then a Jetson's markers under `driver_root`. A host with the driver is
/// [`Platform::Other`] whatever else it has, as NVIDIA's `auto` takes NVML over Tegra.
pub fn probe(
    driver: Option<&DriverVersion>,
    driver_root: &Path,
    dev_root: &Path,
) -> Result<Platform, PlatformError> {
    if driver.is_some() {
        return Ok(Platform::Other);
    }
    if crate::wsl::has_signs(driver_root, dev_root).map_err(PlatformError::Wsl)? {
        return Ok(Platform::Wsl);
    }
    if crate::csv::is_tegra(driver_root, driver_root).map_err(PlatformError::Tegra)? {
        return Ok(Platform::Tegra);
    }
    Ok(Platform::Other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    const TEXT: &str =
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  Wed Feb 26 2025\n";

    #[test]
    fn the_version_file_is_absent_a_driver_or_an_error_naming_it() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path();
        assert_eq!(read_running_driver(p).unwrap(), None);
        fs::create_dir_all(p.join("driver/nvidia")).unwrap();
        let f = p.join(VERSION_FILE);
        fs::write(&f, TEXT).unwrap();
        let d = read_running_driver(p).unwrap().unwrap();
        assert_eq!((d.text.as_str(), d.version.as_str()), (TEXT, "570.124.06"));
        for (bytes, needle) in [
            (&b"hello world\n"[..], "NVRM version"),
            (b"", "NVRM version"),
            (b"\xff\xfe\x00garbage", "UTF-8"),
        ] {
            fs::write(&f, bytes).unwrap();
            let e = read_running_driver(p).unwrap_err().to_string();
            assert!(e.starts_with(&format!("{}: ", f.display())), "{e}");
            assert!(e.contains(needle) && e.contains("proc-root"), "{e}");
        }
        // Unreadable (a folder in its place): an error naming it, not "no driver".
        fs::remove_file(&f).unwrap();
        fs::create_dir(&f).unwrap();
        let e = read_running_driver(p).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}: ", f.display())), "{e}");
        // A read that failed otherwise than "absent" is an error too.
        let e = running_driver(p, Err(io::Error::from_raw_os_error(libc::EIO))).unwrap_err();
        assert_eq!(e.file, f);
    }

    #[test]
    fn probe_asks_the_driver_then_wsl_then_tegra() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        let v = DriverVersion::parse("570.124.06").unwrap();
        assert_eq!(probe(None, r, r).unwrap(), Platform::Other);
        fs::create_dir_all(r.join("etc")).unwrap();
        fs::write(r.join("etc/nv_tegra_release"), "# R36\n").unwrap();
        assert_eq!(probe(None, r, r).unwrap(), Platform::Tegra);
        fs::create_dir_all(r.join("usr/lib/wsl/lib")).unwrap();
        fs::write(r.join("usr/lib/wsl/lib/libdxcore.so"), "x").unwrap();
        assert_eq!(probe(None, r, r).unwrap(), Platform::Wsl);
        // The driver wins over both.
        assert_eq!(probe(Some(&v), r, r).unwrap(), Platform::Other);
    }
}
