//! WSL2: what a Windows host's GPU looks like inside a WSL2 distribution, as [`WslHost`].
//!
//! WSL has no NVIDIA kernel module (no `/proc/driver/nvidia`, no `/dev/nvidia*`): the GPU is
//! reached through `/dev/dxg` (the DirectX kernel driver), and the user-space driver lives in
//! the Windows driver store, mounted under `/usr/lib/wsl/drivers/<inf folder>/`, with
//! `libdxcore.so` (and copies of libcuda, NVML and nvidia-smi) in `/usr/lib/wsl/lib`.
//!
//! As NVIDIA's `pkg/nvcdi/driver-wsl.go` finds it: `libdxcore.so` from `/usr/lib/wsl/lib`; the
//! NVIDIA store is the store folder holding `libcuda.so.1.1` (NVIDIA asks dxcore for the store
//! folders; gpuctk lists them, since dxcore talks to a GPU only a real Windows host has); from
//! it the [`REQUIRED_STORE_FILES`] present, then every other `*.so*`, `*.bin` and `*.dll` it
//! holds. Every path is looked up inside the driver (or dev) root.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::resolve::{host_path, is_absent, regular_file_in_root};
use crate::DeviceNode;

/// The DirectX node the GPU is reached through.
pub const DXG_NODE: &str = "/dev/dxg";
/// Where WSL mounts `libdxcore.so` and the driver's copies of its main files.
pub const WSL_LIB_DIR: &str = "/usr/lib/wsl/lib";
/// Where WSL mounts the Windows driver store's folders.
pub const WSL_DRIVERS_DIR: &str = "/usr/lib/wsl/drivers";
/// The library that tells a WSL host (NVIDIA's `auto` loads it to tell).
pub const DXCORE: &str = "libdxcore.so";
/// The file whose folder is the NVIDIA driver store.
pub const STORE_MARKER: &str = "libcuda.so.1.1";
/// The store files NVIDIA mounts by name, in its order.
pub const REQUIRED_STORE_FILES: [&str; 8] = [
    "libcuda.so.1.1",
    "libcuda_loader.so",
    "libnvidia-ptxjitcompiler.so.1",
    "libnvidia-ml.so.1",
    "libnvidia-ml_loader.so",
    "libnvdxgdmal.so.1",
    "nvcubins.bin",
    "nvidia-smi",
];
/// The most store folders looked at (a host has one per display adapter driver).
const MAX_STORES: usize = 1024;
/// The most entries of one store folder looked at (NVIDIA's holds about 150).
const MAX_STORE_ENTRIES: usize = 16384;

/// Why the WSL driver cannot be found.
#[derive(Debug, thiserror::Error)]
pub enum WslError {
    /// A file or folder exists but cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// No store folder holds libcuda.
    #[error("{}: no driver store folder holds {STORE_MARKER}; is the NVIDIA driver installed on the Windows host (and --driver-root right)?", dir.display())]
    NoStore {
        /// The drivers folder looked in.
        dir: PathBuf,
    },
    /// No `/dev/dxg`.
    #[error("{}: absent or not a character device; WSL2 reaches the GPU through it (check --dev-root)", path.display())]
    NoDxg {
        /// Where it was looked for.
        path: PathBuf,
    },
}

/// A file to mount: its host path and its path in the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WslFile {
    /// On the host (under the driver root, links resolved inside it).
    pub host_path: PathBuf,
    /// In the container: where the host has it.
    pub path: String,
}

/// The GPU of a WSL2 host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WslHost {
    /// `/dev/dxg`.
    pub dxg: DeviceNode,
    /// The NVIDIA driver store folder, inside the driver root.
    pub store: String,
    /// `libdxcore.so`, when present.
    pub dxcore: Option<WslFile>,
    /// The [`REQUIRED_STORE_FILES`] present in the store, in that order.
    pub required: Vec<WslFile>,
    /// The store's other `*.so*`, `*.bin` and `*.dll` files, in that order, each group by name.
    pub additional: Vec<WslFile>,
}

impl WslHost {
    /// Every file to mount: `libdxcore.so`, then the required and additional store files.
    pub fn files(&self) -> impl Iterator<Item = &WslFile> {
        self.dxcore
            .iter()
            .chain(self.required.iter())
            .chain(self.additional.iter())
    }
}

/// `inner` (a file's path inside `root`) as a mount when it is a regular file, its links
/// followed inside the root; `None` when absent or not a file.
fn regular_file(root: &Path, inner: &str) -> Result<Option<WslFile>, WslError> {
    match regular_file_in_root(root, Path::new(inner)) {
        Ok(r) => Ok(r.map(|r| WslFile {
            host_path: host_path(root, &r),
            path: inner.to_string(),
        })),
        Err(source) => Err(WslError::Read {
            path: host_path(root, Path::new(inner)),
            source,
        }),
    }
}

/// The names in a folder, sorted; empty when the folder is absent.
fn names_in(dir: &Path, max: usize) -> Result<Vec<String>, WslError> {
    let entries = match crate::discover::read_dir_entries_at_most(dir, max) {
        Ok(e) => e,
        Err(e) if is_absent(&e) => return Ok(Vec::new()),
        Err(source) => {
            return Err(WslError::Read {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut names: Vec<String> = entries
        .into_iter()
        .filter_map(|e| e.name.into_string().ok())
        .collect();
    names.sort();
    Ok(names)
}

/// `/dev/dxg` under `dev_root`, when it is a character device.
pub fn dxg_node(dev_root: &Path) -> Result<Option<DeviceNode>, WslError> {
    let host = host_path(dev_root, Path::new(DXG_NODE));
    match std::fs::metadata(&host) {
        Ok(md) if md.file_type().is_char_device() => Ok(Some(DeviceNode {
            path: DXG_NODE.to_string(),
            host_path: host,
            major: libc::major(md.rdev()),
            minor: libc::minor(md.rdev()),
            mode: md.mode() & 0o7777,
            gid: md.gid(),
        })),
        Ok(_) => Ok(None),
        Err(e) if is_absent(&e) => Ok(None),
        Err(source) => Err(WslError::Read { path: host, source }),
    }
}

/// The NVIDIA driver store folder inside `driver_root`: the first store folder, by name, that
/// holds [`STORE_MARKER`] as a regular file.
pub fn driver_store(driver_root: &Path) -> Result<Option<String>, WslError> {
    let drivers = host_path(driver_root, Path::new(WSL_DRIVERS_DIR));
    let mut found: Vec<String> = Vec::new();
    for name in names_in(&drivers, MAX_STORES)? {
        let inner = format!("{WSL_DRIVERS_DIR}/{name}");
        let md = match std::fs::symlink_metadata(drivers.join(&name)) {
            Ok(md) => md,
            Err(e) if is_absent(&e) => continue,
            Err(source) => {
                return Err(WslError::Read {
                    path: drivers.join(&name),
                    source,
                })
            }
        };
        if md.is_dir() && regular_file(driver_root, &format!("{inner}/{STORE_MARKER}"))?.is_some() {
            found.push(inner);
        }
    }
    if found.len() > 1 {
        tracing::warn!(
            "several WSL driver stores hold {STORE_MARKER}: {}; using the first",
            found.join(", ")
        );
    }
    Ok(found.into_iter().next())
}

/// Whether a store file name is one NVIDIA mounts besides the required ones (`*.so*`,
/// `*.bin`, `*.dll`).
fn additional_kind(name: &str) -> Option<usize> {
    if name.contains(".so") {
        Some(0)
    } else if name.ends_with(".bin") {
        Some(1)
    } else if name.ends_with(".dll") {
        Some(2)
    } else {
        None
    }
}

/// The WSL GPU under these roots: `/dev/dxg` under `dev_root`, the driver under `driver_root`.
pub fn discover(driver_root: &Path, dev_root: &Path) -> Result<WslHost, WslError> {
    let dxg = dxg_node(dev_root)?.ok_or_else(|| WslError::NoDxg {
        path: host_path(dev_root, Path::new(DXG_NODE)),
    })?;
    let store = driver_store(driver_root)?.ok_or_else(|| WslError::NoStore {
        dir: host_path(driver_root, Path::new(WSL_DRIVERS_DIR)),
    })?;
    let dxcore = regular_file(driver_root, &format!("{WSL_LIB_DIR}/{DXCORE}"))?;
    if dxcore.is_none() {
        tracing::warn!("{WSL_LIB_DIR}/{DXCORE}: absent under the driver root; CUDA in the container cannot reach the GPU without it");
    }
    let mut required = Vec::new();
    for name in REQUIRED_STORE_FILES {
        match regular_file(driver_root, &format!("{store}/{name}"))? {
            Some(f) => required.push(f),
            None => tracing::debug!("{store}/{name}: absent; not mounted"),
        }
    }
    let mut groups: [Vec<WslFile>; 3] = Default::default();
    for name in names_in(
        &host_path(driver_root, Path::new(&store)),
        MAX_STORE_ENTRIES,
    )? {
        if REQUIRED_STORE_FILES.contains(&name.as_str()) {
            continue;
        }
        let Some(g) = additional_kind(&name) else {
            continue;
        };
        if let Some(f) = regular_file(driver_root, &format!("{store}/{name}"))? {
            groups[g].push(f);
        }
    }
    Ok(WslHost {
        dxg,
        store,
        dxcore,
        required,
        additional: groups.into_iter().flatten().collect(),
    })
}

/// Whether these roots show WSL2's signs, as NVIDIA's `auto` tells it (dxcore present), taking
/// `/dev/dxg` as a sign too: `libdxcore.so` under the driver root or `/dev/dxg` under the dev
/// root. An error reading either is an error, not "no". Whether the NVIDIA kernel driver is
/// loaded is asked first, by [`crate::platform::probe`].
pub fn has_signs(driver_root: &Path, dev_root: &Path) -> Result<bool, WslError> {
    Ok(dxg_node(dev_root)?.is_some()
        || regular_file(driver_root, &format!("{WSL_LIB_DIR}/{DXCORE}"))?.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn store(r: &Path, name: &str) -> PathBuf {
        let s = r.join("usr/lib/wsl/drivers").join(name);
        fs::create_dir_all(&s).unwrap();
        s
    }

    #[test]
    fn finds_the_store_that_holds_libcuda() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        // Another adapter's store, first by name, without libcuda.
        let other = store(r, "iigd_dch.inf_amd64_1");
        fs::write(other.join("libd3d12core.so"), b"x").unwrap();
        let nv = store(r, "nvlti.inf_amd64_2");
        for f in [
            "libcuda.so.1.1",
            "libcuda_loader.so",
            "libnvidia-ml.so.1",
            "nvcubins.bin",
            "nvidia-smi",
            "libnvidia-gpucomp.so",
            "nvxdapix.dll",
            "nvlti.inf",
            "libnvwgf2umx.so",
        ] {
            fs::write(nv.join(f), b"x").unwrap();
        }
        fs::create_dir_all(nv.join("sub.so")).unwrap();
        // A link in the store out of the root stays inside it.
        std::os::unix::fs::symlink("/etc/passwd", nv.join("libout.so")).unwrap();
        let lib = r.join("usr/lib/wsl/lib");
        fs::create_dir_all(&lib).unwrap();
        fs::write(lib.join("libdxcore.so"), b"x").unwrap();
        let e = discover(r, r).unwrap_err().to_string();
        assert!(e.contains("dev/dxg: absent"), "{e}");
        fs::create_dir_all(r.join("dev")).unwrap();
        nix_mknod(&r.join("dev/dxg"));
        let h = discover(r, r).unwrap();
        assert_eq!(h.store, "/usr/lib/wsl/drivers/nvlti.inf_amd64_2");
        assert_eq!(h.dxg.path, "/dev/dxg");
        let names: Vec<&str> = h.files().map(|f| f.path.as_str()).collect();
        let s = "/usr/lib/wsl/drivers/nvlti.inf_amd64_2";
        assert_eq!(
            names,
            [
                "/usr/lib/wsl/lib/libdxcore.so".to_string(),
                format!("{s}/libcuda.so.1.1"),
                format!("{s}/libcuda_loader.so"),
                format!("{s}/libnvidia-ml.so.1"),
                format!("{s}/nvcubins.bin"),
                format!("{s}/nvidia-smi"),
                format!("{s}/libnvidia-gpucomp.so"),
                format!("{s}/libnvwgf2umx.so"),
                format!("{s}/nvxdapix.dll"),
            ]
        );
        assert!(has_signs(r, r).unwrap());
        fs::remove_file(nv.join("libcuda.so.1.1")).unwrap();
        let e = discover(r, r).unwrap_err().to_string();
        assert!(
            e.contains("no driver store folder holds libcuda.so.1.1"),
            "{e}"
        );
    }

    fn nix_mknod(p: &Path) {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &c,
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::from_raw_mode(0o666),
            rustix::fs::makedev(10, 61),
        )
        .unwrap();
    }

    #[test]
    fn not_wsl_without_its_signs() {
        let t = tempfile::tempdir().unwrap();
        assert!(!has_signs(t.path(), t.path()).unwrap());
    }

    /// Review finding (session 8, a sibling of `is_tegra`'s): a driver version file that
    /// cannot be read was taken for "no NVIDIA driver", and with `libdxcore.so` present the
    /// host for a WSL2 one.
    #[test]
    fn an_unreadable_driver_version_is_an_error_naming_it() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        let lib = r.join("usr/lib/wsl/lib");
        fs::create_dir_all(&lib).unwrap();
        fs::write(lib.join("libdxcore.so"), b"x").unwrap();
        // A folder where the file belongs: it opens, and reading it fails (EISDIR).
        let version = r.join("proc/driver/nvidia/version");
        fs::create_dir_all(&version).unwrap();
        let e = crate::platform::read_running_driver(&r.join("proc"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&version.display().to_string()), "{e}");
        fs::remove_dir(&version).unwrap();
        let driver = crate::platform::read_running_driver(&r.join("proc")).unwrap();
        assert_eq!(driver, None);
        assert_eq!(
            crate::platform::probe(None, r, r).unwrap(),
            crate::platform::Platform::Wsl
        );
    }
}
