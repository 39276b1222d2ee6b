//! MIG capabilities and IMEX channels, the device nodes that are not GPUs: the driver's
//! `driver/nvidia/capabilities/mig/{config,monitor}` files under the proc root name the minor of
//! the `/dev/nvidia-caps/nvidia-cap<N>` node that grants each capability (the `nvidia-caps`
//! major in `/proc/devices`), and IMEX channel `N` is `/dev/nvidia-caps-imex-channels/channelN`
//! (the `nvidia-caps-imex-channels` major). Read only when a container asks for them.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::inventory::{DeviceNode, Roots};
use crate::resolve::host_path;

/// The capabilities directory under the proc root, as the container sees it under `/proc`.
pub const CAPS_PROC_DIR: &str = "driver/nvidia/capabilities";
/// The `/proc/devices` name of the MIG capability nodes' major.
pub const CAPS_MAJOR_NAME: &str = "nvidia-caps";
/// The `/proc/devices` name of the IMEX channel nodes' major.
pub const IMEX_MAJOR_NAME: &str = "nvidia-caps-imex-channels";
/// The directory of the IMEX channel nodes.
pub const IMEX_DEV_DIR: &str = "/dev/nvidia-caps-imex-channels";
/// The highest IMEX channel id the driver has (2^20 - 1).
pub const MAX_IMEX_CHANNEL: u32 = (1 << 20) - 1;

/// A capability file is a few dozen bytes; more is not the driver's.
const MAX_CAP_FILE: u64 = 4096;

/// A global MIG capability (`NVIDIA_MIG_CONFIG_DEVICES`, `NVIDIA_MIG_MONITOR_DEVICES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum MigCapability {
    /// Reconfiguring MIG (creating and destroying instances).
    Config,
    /// Monitoring every MIG instance.
    Monitor,
}

impl MigCapability {
    /// Its file name under `capabilities/mig/`.
    pub fn name(self) -> &'static str {
        match self {
            MigCapability::Config => "config",
            MigCapability::Monitor => "monitor",
        }
    }
}

/// The fields of a capability file (`DeviceFileMinor: N`, `DeviceFileMode: M` in decimal,
/// `DeviceFileModify: B`), as the driver prints them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapFile {
    /// The minor of `/dev/nvidia-caps/nvidia-cap<minor>`.
    pub minor: u32,
    /// The node's mode the driver asks for.
    pub mode: u32,
    /// Whether the driver may (re)create the node.
    pub modify: bool,
}

/// Why a capability or channel cannot be given; each names the file or node and the fix.
#[derive(Debug, thiserror::Error)]
pub enum CapsError {
    /// The capability file cannot be read.
    #[error("{}: {source}; the driver has no MIG capabilities here (a driver older than R450, or not loaded)", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The capability file is not in the driver's format.
    #[error("{}: {source}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: CapFileError,
    },
    /// `/proc/devices` does not list the major.
    #[error("{}: no character device {name}; load the NVIDIA driver (nvidia.ko registers it)", path.display())]
    NoMajor {
        /// `/proc/devices` under the proc root.
        path: PathBuf,
        /// The name looked for.
        name: &'static str,
    },
    /// The node is missing or not the device it must be.
    #[error("{}: {reason}; create it with `mknod -m {mode:o} {} c {major} {minor}` (nvidia-modprobe does this)", host.display(), path)]
    Node {
        /// The node on the host.
        host: PathBuf,
        /// Its path in the container.
        path: String,
        /// What is wrong.
        reason: String,
        /// The major it must have.
        major: u32,
        /// The minor it must have.
        minor: u32,
        /// The mode to create it with.
        mode: u32,
    },
    /// An IMEX channel id out of the driver's range.
    #[error("IMEX channel {id}: channels are 0 to {MAX_IMEX_CHANNEL}")]
    ChannelRange {
        /// The id.
        id: u32,
    },
}

/// What is wrong with a capability file's text.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CapFileError {
    /// A field the driver always writes is missing.
    #[error("no {key} line")]
    Missing {
        /// The field.
        key: &'static str,
    },
    /// A field that is not a number.
    #[error("{key}: {value:?} is not a number")]
    NotANumber {
        /// The field.
        key: &'static str,
        /// Its value, at most 80 characters.
        value: String,
    },
    /// `DeviceFileMode` beyond the permission bits.
    #[error("DeviceFileMode: {0} is not a file mode")]
    Mode(u32),
    /// `DeviceFileModify` other than 0 or 1.
    #[error("DeviceFileModify: {0} is not 0 or 1")]
    Modify(u32),
    /// More than the driver ever writes (three short lines): not read on, not cut short.
    #[error("larger than {MAX_CAP_FILE} bytes; this is not a capability file the driver wrote")]
    TooLarge,
}

/// Parses a capability file's text.
pub fn parse_cap_file(text: &str) -> Result<CapFile, CapFileError> {
    let field = |key: &'static str| -> Result<u32, CapFileError> {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .ok_or(CapFileError::Missing { key })?;
        line.trim().parse().map_err(|_| CapFileError::NotANumber {
            key,
            value: line.trim().chars().take(80).collect(),
        })
    };
    let minor = field("DeviceFileMinor")?;
    let mode = field("DeviceFileMode")?;
    if mode > 0o7777 {
        return Err(CapFileError::Mode(mode));
    }
    let modify = match field("DeviceFileModify")? {
        0 => false,
        1 => true,
        v => return Err(CapFileError::Modify(v)),
    };
    Ok(CapFile {
        minor,
        mode,
        modify,
    })
}

/// The host directory `<proc_root>/driver/nvidia/capabilities`.
pub fn caps_proc_dir(roots: &Roots) -> PathBuf {
    roots.proc_root.join(CAPS_PROC_DIR)
}

pub(crate) fn major_of(roots: &Roots, name: &'static str) -> Result<u32, CapsError> {
    let path = roots.proc_root.join("devices");
    let majors =
        crate::checks::char_majors(&roots.proc_root).map_err(|source| CapsError::Read {
            path: path.clone(),
            source,
        })?;
    crate::procfs::char_major(&majors, &[name]).ok_or(CapsError::NoMajor { path, name })
}

/// The node `path` under the dev root, which must be the character device `major:minor`.
pub(crate) fn node(
    roots: &Roots,
    path: String,
    major: u32,
    minor: u32,
    mode: u32,
) -> Result<DeviceNode, CapsError> {
    let host = host_path(&roots.dev_root, Path::new(&path));
    let wrong = |reason: String| CapsError::Node {
        host: host.clone(),
        path: path.clone(),
        reason,
        major,
        minor,
        mode,
    };
    let md = std::fs::symlink_metadata(&host).map_err(|e| wrong(e.to_string()))?;
    if !md.file_type().is_char_device() {
        return Err(wrong("not a character device".into()));
    }
    let (ma, mi) = (libc::major(md.rdev()), libc::minor(md.rdev()));
    if (ma, mi) != (major, minor) {
        return Err(wrong(format!("is {ma}:{mi}, not {major}:{minor}")));
    }
    Ok(DeviceNode {
        path,
        host_path: host,
        major,
        minor,
        mode: md.mode() & 0o7777,
        gid: md.gid(),
    })
}

/// The node that grants `cap`: its minor from `capabilities/mig/<name>`, its major from
/// `/proc/devices` (`nvidia-caps`), checked on the host.
pub fn mig_capability(roots: &Roots, cap: MigCapability) -> Result<DeviceNode, CapsError> {
    let file = mig_cap_file(roots, cap)?;
    let major = major_of(roots, CAPS_MAJOR_NAME)?;
    node(
        roots,
        format!("/dev/nvidia-caps/nvidia-cap{}", file.minor),
        major,
        file.minor,
        file.mode,
    )
}

/// `capabilities/mig/<name>` of `cap`, read capped and parsed.
fn mig_cap_file(roots: &Roots, cap: MigCapability) -> Result<CapFile, CapsError> {
    read_cap_file(caps_proc_dir(roots).join("mig").join(cap.name()))
}

/// A capability file, read capped and parsed.
pub(crate) fn read_cap_file(path: PathBuf) -> Result<CapFile, CapsError> {
    let mut text = String::new();
    // One byte past the cap tells a file cut short from one that ends there.
    std::fs::File::open(&path)
        .and_then(|f| f.take(MAX_CAP_FILE + 1).read_to_string(&mut text))
        .map_err(|source| CapsError::Read {
            path: path.clone(),
            source,
        })?;
    if text.len() as u64 > MAX_CAP_FILE {
        return Err(CapsError::Parse {
            path,
            source: CapFileError::TooLarge,
        });
    }
    parse_cap_file(&text).map_err(|source| CapsError::Parse { path, source })
}

/// The minor of the node that grants `cap`, from `capabilities/mig/<name>`; `None` when the
/// driver has no such file (no MIG support loaded).
pub fn mig_capability_minor(roots: &Roots, cap: MigCapability) -> Result<Option<u32>, CapsError> {
    match mig_cap_file(roots, cap) {
        Ok(f) => Ok(Some(f.minor)),
        Err(CapsError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The node of IMEX channel `id`, checked on the host (the `nvidia-caps-imex-channels` major).
pub fn imex_channel(roots: &Roots, id: u32) -> Result<DeviceNode, CapsError> {
    if id > MAX_IMEX_CHANNEL {
        return Err(CapsError::ChannelRange { id });
    }
    let major = major_of(roots, IMEX_MAJOR_NAME)?;
    node(
        roots,
        format!("{IMEX_DEV_DIR}/channel{id}"),
        major,
        id,
        0o666,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_files_parse_as_the_driver_prints_them() {
        let f = parse_cap_file("DeviceFileMinor: 1\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
            .unwrap();
        assert_eq!(
            f,
            CapFile {
                minor: 1,
                mode: 0o444,
                modify: true
            }
        );
        assert!(
            parse_cap_file("DeviceFileMinor: x\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
                .unwrap_err()
                .to_string()
                .contains("DeviceFileMinor")
        );
        assert_eq!(
            parse_cap_file("DeviceFileMinor: 2\nDeviceFileMode: 292\n"),
            Err(CapFileError::Missing {
                key: "DeviceFileModify"
            })
        );
        assert_eq!(
            parse_cap_file("DeviceFileMinor: 2\nDeviceFileMode: 99999\nDeviceFileModify: 0\n"),
            Err(CapFileError::Mode(99999))
        );
    }

    /// Review finding (session 8): a file over the cap was cut at 4 KiB without a word, and its
    /// first lines parsed as if they were all of it.
    #[test]
    fn a_cap_file_over_the_cap_is_refused_not_cut() {
        let t = tempfile::tempdir().unwrap();
        let good = "DeviceFileMinor: 1\nDeviceFileMode: 292\nDeviceFileModify: 1\n";
        let path = t.path().join("access");
        std::fs::write(&path, good).unwrap();
        assert_eq!(read_cap_file(path.clone()).unwrap().minor, 1);
        let padded = format!("{good}{}", "#".repeat(MAX_CAP_FILE as usize));
        std::fs::write(&path, padded).unwrap();
        let e = read_cap_file(path.clone()).unwrap_err();
        assert!(matches!(
            e,
            CapsError::Parse {
                source: CapFileError::TooLarge,
                ..
            }
        ));
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        // Exactly the cap is still read.
        let exact = format!("{good}{}", "#".repeat(MAX_CAP_FILE as usize - good.len()));
        std::fs::write(&path, exact).unwrap();
        assert_eq!(read_cap_file(path).unwrap().minor, 1);
    }

    fn roots(dir: &Path) -> Roots {
        Roots {
            driver_root: dir.to_path_buf(),
            dev_root: dir.to_path_buf(),
            proc_root: dir.join("proc"),
        }
    }

    #[test]
    fn missing_files_and_majors_name_the_file() {
        let t = std::env::temp_dir().join(format!("gpuctk-caps-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        let r = roots(&t);
        let e = mig_capability(&r, MigCapability::Config).unwrap_err();
        assert!(
            e.to_string()
                .contains("proc/driver/nvidia/capabilities/mig/config"),
            "{e}"
        );
        std::fs::create_dir_all(t.join("proc/driver/nvidia/capabilities/mig")).unwrap();
        std::fs::write(
            t.join("proc/driver/nvidia/capabilities/mig/monitor"),
            "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n",
        )
        .unwrap();
        std::fs::write(t.join("proc/devices"), "Character devices:\n195 nvidia\n").unwrap();
        let e = mig_capability(&r, MigCapability::Monitor).unwrap_err();
        assert!(
            e.to_string().contains("no character device nvidia-caps"),
            "{e}"
        );
        std::fs::write(
            t.join("proc/devices"),
            "Character devices:\n195 nvidia\n237 nvidia-caps\n",
        )
        .unwrap();
        let e = mig_capability(&r, MigCapability::Monitor).unwrap_err();
        assert!(
            e.to_string()
                .contains("mknod -m 444 /dev/nvidia-caps/nvidia-cap2 c 237 2"),
            "{e}"
        );
        let e = imex_channel(&r, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("0 to 1048575"), "{e}");
        let _ = std::fs::remove_dir_all(&t);
    }
}
