//! The driver guards of a GPU container, as NVIDIA 1.20's hooks and libnvidia-container give
//! them: the container's `/proc/driver/nvidia/params` says `ModifyDeviceFiles: 0`, so the driver
//! inside never creates or changes device nodes (`disable-device-node-modification`), and the
//! driver's application profile limits EGL and Vulkan to the container's GPUs
//! (`update-application-profile`).
//!
//! The rewritten params file is written once per container into its bundle directory, which
//! only the engine (root) writes and which goes with the container, and bound read-only over
//! the container's procfs file: by the runtime itself where it takes such a mount (crun), by the
//! hook in the container's mount namespace otherwise (runc refuses mounts inside `/proc`), by
//! legacy injection as one of its mounts. Nothing is left in the container's own filesystem.

use std::io::Read;
use std::path::{Path, PathBuf};

use gpuctk_cdi::spec::Mount;
use gpuctk_core::ops::{APP_PROFILE_DIR, APP_PROFILE_FILE, NVIDIA_PARAMS};

use crate::root::{FileKind, Root, RootError};

/// The params file's name in the bundle directory.
pub const BUNDLE_PARAMS: &str = "gpuctk-nvidia-params";
/// The most we read of the driver's params file (a few KiB on every driver).
pub const MAX_PARAMS: u64 = 64 * 1024;
/// The most `/dev` entries a container may have for us to list.
const MAX_DEV_ENTRIES: usize = 16 * 1024;
/// The mount options of the params file in the container.
const PARAMS_OPTIONS: &[&str] = &["ro", "nosuid", "nodev", "noexec", "bind"];

/// Why a guard could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// The host's params file could not be read.
    #[error("{}: {source}; the NVIDIA driver's procfs is unreadable (is [gpuctk] proc-root right?)", path.display())]
    ReadParams {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The host's params file is larger than any driver writes.
    #[error("{}: larger than {MAX_PARAMS} bytes: not the NVIDIA driver's params file (is [gpuctk] proc-root right?)", path.display())]
    ParamsTooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The bundle directory could not take the rewritten file.
    #[error("bundle {}: cannot write {BUNDLE_PARAMS}: {source}", bundle.display())]
    Bundle {
        /// The bundle directory.
        bundle: PathBuf,
        /// What failed.
        #[source]
        source: Box<RootError>,
    },
    /// Something in the container root failed.
    #[error(transparent)]
    Root(#[from] RootError),
}

/// The params text with `ModifyDeviceFiles: 1` turned into `0`, line for line as NVIDIA's hook
/// writes it; `None` when nothing needs changing (already `0`, or no such line).
pub fn rewrite_params(text: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() + 1);
    let mut changed = false;
    for line in text.split(|b| *b == b'\n') {
        let line = if line == b"ModifyDeviceFiles: 0" {
            return None;
        } else if line == b"ModifyDeviceFiles: 1" {
            changed = true;
            &b"ModifyDeviceFiles: 0"[..]
        } else {
            line
        };
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    // `split` yields an empty piece after the final newline, which is not a line.
    if text.ends_with(b"\n") || text.is_empty() {
        out.pop();
    }
    changed.then_some(out)
}

/// The host's params file under `proc_root`, rewritten; `None` when the driver is not loaded
/// (no file) or already forbids device node changes.
pub fn host_params(proc_root: &Path) -> Result<Option<Vec<u8>>, GuardError> {
    let path = proc_root.join("driver/nvidia/params");
    let err = |source| GuardError::ReadParams {
        path: path.clone(),
        source,
    };
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(err(e)),
    };
    // procfs reports a size of 0: read to the cap, and one byte more to see it passed.
    let mut text = Vec::new();
    file.take(MAX_PARAMS + 1)
        .read_to_end(&mut text)
        .map_err(err)?;
    if text.len() as u64 > MAX_PARAMS {
        return Err(GuardError::ParamsTooLarge { path });
    }
    Ok(rewrite_params(&text))
}

/// Writes `params` into `bundle` (mode 0444) and returns the read-only bind mount of it over
/// the container's params file.
pub fn bundle_params_mount(bundle: &Path, params: &[u8]) -> Result<Mount, GuardError> {
    let err = |source| GuardError::Bundle {
        bundle: bundle.to_path_buf(),
        source: Box::new(source),
    };
    let dir = Root::open(bundle).map_err(err)?;
    dir.write_file_atomic(&format!("/{BUNDLE_PARAMS}"), params, 0o444)
        .map_err(err)?;
    Ok(Mount {
        host_path: bundle.join(BUNDLE_PARAMS).to_string_lossy().into_owned(),
        container_path: NVIDIA_PARAMS.to_string(),
        options: PARAMS_OPTIONS.iter().map(|s| s.to_string()).collect(),
        r#type: Some("bind".to_string()),
    })
}

/// The mount [`disable_device_node_modification`] needs, from the host's procfs under
/// `proc_root`, written into `bundle`; `None` when nothing needs guarding.
pub fn params_mount(proc_root: &Path, bundle: &Path) -> Result<Option<Mount>, GuardError> {
    match host_params(proc_root)? {
        Some(p) => bundle_params_mount(bundle, &p).map(Some),
        None => Ok(None),
    }
}

/// The container's folder of the driver's procfs.
pub const DRIVER_PROC_DIR: &str = "/proc/driver/nvidia";

/// Whether the container's procfs shows the driver's folder: only then is there a params file
/// for the driver inside to read, and one to bind over.
pub fn shows_driver_procfs(root: &Root) -> Result<bool, RootError> {
    match root.metadata(DRIVER_PROC_DIR) {
        Ok(_) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e),
    }
}

/// The minors of the container's GPU nodes (`/dev/nvidiaN` character devices), sorted.
pub fn gpu_minors(root: &Root) -> Result<Vec<u32>, RootError> {
    let dir = match root.open_dir("/dev") {
        Ok(d) => d,
        Err(e) if e.is_not_found() => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut minors = Vec::new();
    for name in dir.names(MAX_DEV_ENTRIES)? {
        let is_gpu = name
            .strip_prefix("nvidia")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !is_gpu {
            continue;
        }
        if let Some(md) = dir.lstat(&name)? {
            if md.kind == FileKind::CharDevice {
                minors.push(libc::minor(md.rdev as libc::dev_t));
            }
        }
    }
    minors.sort_unstable();
    Ok(minors)
}

/// The application profile for GPU `minors`, as NVIDIA writes it; `None` when none is below
/// 64 (the mask's width, which NVIDIA drops too).
pub fn app_profile(minors: &[u32]) -> Option<String> {
    let mask = minors
        .iter()
        .filter(|m| **m < 64)
        .fold(0u64, |mask, m| mask | (1u64 << m));
    (mask != 0).then(|| {
        format!(
            r#"{{"profiles":[{{"name":"_container_","settings":["EGLVisibleDGPUDevices",0x{mask:x}]}}],"rules":[{{"pattern":[],"profile":"_container_"}}]}}"#
        )
    })
}

/// `update-application-profile` on a container whose `/dev` the runtime has made: the profile
/// for its GPU nodes (folder 0555, file 0444). Returns the minors it names.
pub fn update_application_profile(root: &Root) -> Result<Vec<u32>, RootError> {
    let minors = gpu_minors(root)?;
    write_app_profile(root, &minors, None)?;
    Ok(minors)
}

/// Writes the profile for `minors` into `root` (nothing when there are none).
pub fn write_app_profile(
    root: &Root,
    minors: &[u32],
    seen: Option<&mut crate::hooks::SeenLibraries>,
) -> Result<(), RootError> {
    let Some(profile) = app_profile(minors) else {
        return Ok(());
    };
    let dir = root.mkdir_all_open(APP_PROFILE_DIR, 0o555)?;
    let name = APP_PROFILE_FILE.rsplit('/').next().unwrap_or_default();
    // A container started again on its root finds the same profile: left as it is.
    crate::hooks::write_file_if_changed_seen(&dir, name, profile.as_bytes(), 0o444, seen).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_rewritten_line_for_line() {
        let text = b"ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\nRegistryDwords: \"\"\n";
        let out = rewrite_params(text).unwrap();
        assert_eq!(
            out,
            b"ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 0\nDeviceFileUID: 0\nRegistryDwords: \"\"\n"
        );
        assert_eq!(rewrite_params(&out), None);
        assert_eq!(rewrite_params(b"ResmanDebugLevel: 1\n"), None);
        assert_eq!(rewrite_params(b""), None);
        // A value other than 0 or 1 is left as it is, as NVIDIA does.
        assert_eq!(rewrite_params(b"ModifyDeviceFiles: 2\n"), None);
        // No final newline: NVIDIA's scanner adds one.
        assert_eq!(
            rewrite_params(b"ModifyDeviceFiles: 1").unwrap(),
            b"ModifyDeviceFiles: 0\n"
        );
    }

    #[test]
    fn host_params_of_the_mock_driver() {
        let t = tempfile::tempdir().unwrap();
        let cfg = gpuctk_mockhost::HostConfig::new("570.124.06", (12, 8));
        let h = gpuctk_mockhost::create_host(&t.path().join("h"), &cfg).unwrap();
        let text = std::fs::read(h.proc_root.join("driver/nvidia/params")).unwrap();
        let out = host_params(&h.proc_root).unwrap().unwrap();
        let want = String::from_utf8(text)
            .unwrap()
            .replace("\nModifyDeviceFiles: 1\n", "\nModifyDeviceFiles: 0\n");
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }

    #[test]
    fn host_params_absent_unreadable_and_too_large() {
        let t = tempfile::tempdir().unwrap();
        assert!(host_params(t.path()).unwrap().is_none());
        let dir = t.path().join("driver/nvidia");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir(dir.join("params")).unwrap();
        let msg = host_params(t.path()).unwrap_err().to_string();
        assert!(
            msg.contains("driver/nvidia/params") && msg.contains("proc-root"),
            "{msg}"
        );
        std::fs::remove_dir(dir.join("params")).unwrap();
        std::fs::write(dir.join("params"), vec![b'x'; MAX_PARAMS as usize + 1]).unwrap();
        assert!(matches!(
            host_params(t.path()),
            Err(GuardError::ParamsTooLarge { .. })
        ));
    }

    #[test]
    fn bundle_file_is_read_only_and_mounted_read_only() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let m = bundle_params_mount(t.path(), b"ModifyDeviceFiles: 0\n").unwrap();
        let f = t.path().join(BUNDLE_PARAMS);
        assert_eq!(std::fs::read(&f).unwrap(), b"ModifyDeviceFiles: 0\n");
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o444
        );
        assert_eq!(m.container_path, NVIDIA_PARAMS);
        assert!(m.options.iter().any(|o| o == "ro"));
        // Written again for the next create of the same bundle.
        bundle_params_mount(t.path(), b"x").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"x");
    }

    #[test]
    fn profile_as_nvidia_writes_it() {
        assert_eq!(
            app_profile(&[0, 2]).unwrap(),
            r#"{"profiles":[{"name":"_container_","settings":["EGLVisibleDGPUDevices",0x5]}],"rules":[{"pattern":[],"profile":"_container_"}]}"#
        );
        assert_eq!(app_profile(&[]), None);
        assert_eq!(app_profile(&[64, 200]), None);
        assert!(app_profile(&[63]).unwrap().contains("0x8000000000000000"));
    }

    #[test]
    fn profile_from_the_gpu_nodes_only() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let dev = t.path().join("dev");
        std::fs::create_dir(&dev).unwrap();
        let mknod = |name: &str, minor: u32| {
            let c = std::ffi::CString::new(dev.join(name).to_str().unwrap()).unwrap();
            let dev = crate::sys::makedev(195, minor);
            crate::sys::mknodat(rustix::fs::CWD, &c, libc::S_IFCHR, 0o666, dev)
                .unwrap_or_else(|e| panic!("mknod {name}: {e}"));
        };
        mknod("nvidia1", 1);
        mknod("nvidia3", 3);
        mknod("nvidiactl", 255);
        std::fs::write(dev.join("nvidia7"), b"").unwrap(); // not a node
        std::fs::create_dir(dev.join("nvidia9")).unwrap();
        let root = Root::open(t.path()).unwrap();
        assert_eq!(update_application_profile(&root).unwrap(), [1, 3]);
        let f = t
            .path()
            .join("etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf");
        assert!(std::fs::read_to_string(&f).unwrap().contains("0xa]"));
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o444
        );
        assert_eq!(
            std::fs::metadata(f.parent().unwrap())
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o555
        );
        // Again on the same root (issue 21): the same profile is left as it is (no rename over
        // it); other GPUs' is written.
        use std::os::unix::fs::MetadataExt;
        let first = std::fs::metadata(&f).unwrap().ino();
        assert_eq!(update_application_profile(&root).unwrap(), [1, 3]);
        assert_eq!(std::fs::metadata(&f).unwrap().ino(), first);
        write_app_profile(&root, &[2], None).unwrap();
        assert_ne!(std::fs::metadata(&f).unwrap().ino(), first);
        assert!(std::fs::read_to_string(&f).unwrap().contains("0x4]"));
        // No GPU node, no /dev: nothing written.
        let e = tempfile::tempdir().unwrap();
        let root = Root::open(e.path()).unwrap();
        assert!(update_application_profile(&root).unwrap().is_empty());
        assert!(!e.path().join("etc").exists());
    }
}
