//! The NVIDIA device nodes a host has, and the ones its driver says it should have: the facts
//! behind `nvidia-ctk system create-device-nodes` and `create-dev-char-symlinks`. Reading only;
//! the commands make the nodes and links.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::resolve::host_path;

/// A character device node, by its name under `/dev`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The name under `/dev`, e.g. `nvidia0`, `nvidia-caps/nvidia-cap1`.
    pub name: String,
    /// Its major.
    pub major: u32,
    /// Its minor.
    pub minor: u32,
}

/// Nodes that are not GPUs' or control nodes and that NVIDIA's link creation leaves alone.
const SKIPPED_PREFIXES: [&str; 3] = ["nvidia-fs", "nvidia-nvswitch", "nvidia-nvlink"];

/// The most entries of `/dev` (or `/dev/nvidia-caps`) looked at.
const MAX_DEV_ENTRIES: usize = 16384;

/// The character devices among the first [`MAX_DEV_ENTRIES`] entries of `dir` whose names
/// `keep` takes, each with its metadata (the node itself, not a link to one). No folder is no
/// node; one removed since the listing is not there. An error comes with the path it is about.
pub(crate) fn char_devices_in(
    dir: &Path,
    keep: impl Fn(&OsStr) -> bool,
) -> Result<Vec<(OsString, fs::Metadata)>, (PathBuf, io::Error)> {
    // The project's reader: std's `ReadDir` panics when `closedir` fails.
    let entries = match crate::discover::read_dir_entries_at_most(dir, MAX_DEV_ENTRIES) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err((dir.to_path_buf(), e)),
    };
    let mut out = Vec::new();
    for e in entries {
        if !keep(&e.name) {
            continue;
        }
        let path = dir.join(&e.name);
        let md = match fs::symlink_metadata(&path) {
            Ok(md) => md,
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) => return Err((path, err)),
        };
        if md.file_type().is_char_device() {
            out.push((e.name, md));
        }
    }
    Ok(out)
}

fn char_nodes_in(dir: &Path, prefix: &str, under: &str, out: &mut Vec<Node>) -> io::Result<()> {
    let keep = |name: &OsStr| {
        let name = name.to_string_lossy();
        name.starts_with(prefix) && !SKIPPED_PREFIXES.iter().any(|p| name.starts_with(p))
    };
    for (name, md) in char_devices_in(dir, keep).map_err(|(_, e)| e)? {
        out.push(Node {
            name: format!("{under}{}", name.to_string_lossy()),
            major: libc::major(md.rdev()),
            minor: libc::minor(md.rdev()),
        });
    }
    Ok(())
}

/// The NVIDIA character devices under `<dev_root>/dev` (`nvidia*` and `nvidia-caps/nvidia-*`),
/// sorted by name.
pub fn existing_nodes(dev_root: &Path) -> io::Result<Vec<Node>> {
    let dev = host_path(dev_root, Path::new("/dev"));
    let mut out = Vec::new();
    char_nodes_in(&dev, "nvidia", "", &mut out)?;
    char_nodes_in(
        &dev.join("nvidia-caps"),
        "nvidia-",
        "nvidia-caps/",
        &mut out,
    )?;
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// What a management container gets (NVIDIA's `cdi generate --mode management`): every NVIDIA
/// character device under `<dev_root>/dev` as [`existing_nodes`] finds them, and the IMEX
/// channels (`nvidia-caps-imex-channels/channel*`), with their modes and groups. Found by
/// listing, not from procfs: a management container sees what the host has.
pub fn management_nodes(dev_root: &Path) -> io::Result<Vec<crate::DeviceNode>> {
    let dev = host_path(dev_root, Path::new("/dev"));
    let mut found = existing_nodes(dev_root)?;
    let mut channels = Vec::new();
    char_nodes_in(
        &dev.join("nvidia-caps-imex-channels"),
        "channel",
        "nvidia-caps-imex-channels/",
        &mut channels,
    )?;
    channels.sort_by(|a, b| a.name.cmp(&b.name));
    found.extend(channels);
    let mut out = Vec::with_capacity(found.len());
    for n in found {
        let host = dev.join(&n.name);
        // Gone since the listing: left out, as a node that was never there.
        let Ok(md) = fs::symlink_metadata(&host) else {
            continue;
        };
        out.push(crate::DeviceNode {
            path: format!("/dev/{}", n.name),
            host_path: host,
            major: n.major,
            minor: n.minor,
            mode: md.mode() & 0o7777,
            gid: md.gid(),
        });
    }
    Ok(out)
}

/// Why the expected nodes cannot be told.
#[derive(Debug, thiserror::Error)]
pub enum NodesError {
    /// procfs cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A GPU's information file cannot be used.
    #[error(transparent)]
    Information(#[from] crate::checks::InformationError),
}

/// The nodes the loaded driver implies, from procfs: `nvidiaN` for each GPU it lists, and, with
/// `control`, `nvidiactl` (255) and `nvidia-modeset` (254) on the `nvidia` major (or
/// `nvidia-frontend`), `nvidia-uvm` (0) and `nvidia-uvm-tools` (1) on the `nvidia-uvm` major
/// when that module is loaded. Majors come from `<proc_root>/devices`, 195 when not listed.
pub fn expected_nodes(
    proc_root: &Path,
    gpus: bool,
    control: bool,
) -> Result<Vec<Node>, NodesError> {
    let majors = crate::checks::char_majors(proc_root).map_err(|source| NodesError::Read {
        path: proc_root.join("devices"),
        source,
    })?;
    let nvidia = crate::procfs::nvidia_major(&majors);
    let node = |name: &str, major, minor| Node {
        name: name.to_string(),
        major,
        minor,
    };
    let mut out = Vec::new();
    if gpus {
        let infos =
            crate::checks::gpu_informations(proc_root).map_err(|source| NodesError::Read {
                path: proc_root.join("driver/nvidia/gpus"),
                source,
            })?;
        for info in infos {
            let minor = info?.minor;
            out.push(node(&format!("nvidia{minor}"), nvidia, minor));
        }
    }
    if control {
        out.push(node("nvidiactl", nvidia, 255));
        out.push(node("nvidia-modeset", nvidia, 254));
        if let Some(uvm) = crate::procfs::uvm_major(&majors) {
            out.push(node("nvidia-uvm", uvm, 0));
            out.push(node("nvidia-uvm-tools", uvm, 1));
        }
    }
    Ok(out)
}
