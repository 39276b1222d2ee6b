//! The devices NVIDIA's toolkit gives only when asked by name (its "gated" modes): GPUDirect
//! Storage's `/dev/nvidia-fs*`, the Mellanox OFED verbs nodes `/dev/infiniband/*`, GDRCopy's
//! `/dev/gdrdrv` and the NVSwitch nodes `/dev/nvidia-nvswitch*`, found by listing the dev root,
//! with what GDS needs besides (`/run/udev`, `/etc/cufile.json`). Reading only.

use std::ffi::OsStr;
use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::inventory::DeviceNode;
use crate::nodes::char_devices_in;
use crate::resolve::host_path;

/// A gated mode, by NVIDIA's `cdi generate --mode` name and `NVIDIA_<NAME>=enabled` variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum GatedMode {
    /// GPUDirect Storage (`nvidia-fs`).
    Gds,
    /// Mellanox OFED (RDMA verbs).
    Mofed,
    /// GDRCopy (`gdrdrv`).
    Gdrcopy,
    /// NVSwitch.
    Nvswitch,
}

impl GatedMode {
    /// All four, in NVIDIA's order (`internal/modifier/cdi.go`).
    pub const ALL: [GatedMode; 4] = [
        GatedMode::Gds,
        GatedMode::Mofed,
        GatedMode::Nvswitch,
        GatedMode::Gdrcopy,
    ];

    /// The `--mode` value and CDI class: `gds`, `mofed`, `gdrcopy`, `nvswitch`.
    pub fn name(self) -> &'static str {
        match self {
            GatedMode::Gds => "gds",
            GatedMode::Mofed => "mofed",
            GatedMode::Gdrcopy => "gdrcopy",
            GatedMode::Nvswitch => "nvswitch",
        }
    }

    /// The variable that asks for it with `=enabled`.
    pub fn env_var(self) -> &'static str {
        match self {
            GatedMode::Gds => "NVIDIA_GDS",
            GatedMode::Mofed => "NVIDIA_MOFED",
            GatedMode::Gdrcopy => "NVIDIA_GDRCOPY",
            GatedMode::Nvswitch => "NVIDIA_NVSWITCH",
        }
    }

    /// What it gives, for messages: the node patterns and the kernel module behind them.
    pub fn what(self) -> &'static str {
        match self {
            GatedMode::Gds => "/dev/nvidia-fs* (load nvidia-fs)",
            GatedMode::Mofed => {
                "/dev/infiniband/uverbs*, /dev/infiniband/rdma_cm (load ib_uverbs, rdma_ucm)"
            }
            GatedMode::Gdrcopy => "/dev/gdrdrv (load gdrdrv)",
            GatedMode::Nvswitch => "/dev/nvidia-nvswitch* (an NVSwitch system's driver)",
        }
    }

    /// (directory under `/dev`, name prefix, whole name) of each node pattern.
    fn patterns(self) -> &'static [(&'static str, &'static str, bool)] {
        match self {
            GatedMode::Gds => &[("", "nvidia-fs", false)],
            GatedMode::Mofed => &[
                ("infiniband", "uverbs", false),
                ("infiniband", "rdma_cm", true),
            ],
            GatedMode::Gdrcopy => &[("", "gdrdrv", true)],
            GatedMode::Nvswitch => &[("", "nvidia-nvswitch", false)],
        }
    }
}

impl fmt::Display for GatedMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for GatedMode {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        GatedMode::ALL.into_iter().find(|m| m.name() == s).ok_or(())
    }
}

/// A [`DeviceNode`] of the character device `md` at `path` (`host` on the host).
fn node(path: String, host: PathBuf, md: &fs::Metadata) -> DeviceNode {
    DeviceNode {
        path,
        host_path: host,
        major: libc::major(md.rdev()),
        minor: libc::minor(md.rdev()),
        mode: md.mode() & 0o7777,
        gid: md.gid(),
    }
}

/// The character device nodes of `mode` under `<dev_root>/dev`, sorted by path, with their
/// modes and groups. A folder that is not there is no node; one that cannot be listed is an
/// error (the message names it).
pub fn gated_nodes(dev_root: &Path, mode: GatedMode) -> io::Result<Vec<DeviceNode>> {
    let mut out = Vec::new();
    for (dir, prefix, whole) in mode.patterns() {
        let container_dir = if dir.is_empty() {
            "/dev".to_string()
        } else {
            format!("/dev/{dir}")
        };
        let host_dir = host_path(dev_root, Path::new(&container_dir));
        let matches = |name: &OsStr| {
            name.to_str().is_some_and(|name| {
                if *whole {
                    name == *prefix
                } else {
                    name.starts_with(prefix)
                }
            })
        };
        let found = char_devices_in(&host_dir, matches).map_err(|(p, e)| named(&p, e))?;
        for (name, md) in found {
            let name = name.to_string_lossy();
            out.push(node(
                format!("{container_dir}/{name}"),
                host_dir.join(&*name),
                &md,
            ));
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The id of an IMEX channel node's name, `channel<id>`.
fn channel_id(name: &OsStr) -> Option<u32> {
    name.to_str()
        .and_then(|n| n.strip_prefix("channel"))
        .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|d| d.parse::<u32>().ok())
}

/// The IMEX channel nodes under `<dev_root>/dev/nvidia-caps-imex-channels` (`channel<id>`,
/// character devices), as (id, node) sorted by id; no folder is none.
pub fn imex_channel_nodes(dev_root: &Path) -> io::Result<Vec<(u32, DeviceNode)>> {
    let container_dir = "/dev/nvidia-caps-imex-channels";
    let host_dir = host_path(dev_root, Path::new(container_dir));
    let found =
        char_devices_in(&host_dir, |n| channel_id(n).is_some()).map_err(|(p, e)| named(&p, e))?;
    let mut out = Vec::new();
    for (name, md) in found {
        let Some(id) = channel_id(&name) else {
            continue;
        };
        let path = format!("{container_dir}/channel{id}");
        out.push((id, node(path, host_dir.join(&name), &md)));
    }
    out.sort_by_key(|(id, _)| *id);
    Ok(out)
}

/// What GDS mounts besides its nodes, as NVIDIA's generator finds them under the driver root:
/// udev's database folder `/run/udev` (cuFile reads it to map NVMe and NIC devices) and the
/// cuFile configuration `/etc/cufile.json`, each (host path, container path) when present.
pub fn gds_mounts(driver_root: &Path) -> io::Result<Vec<(PathBuf, String)>> {
    let mut out = Vec::new();
    for (path, want_dir) in [("/run/udev", true), ("/etc/cufile.json", false)] {
        let host = host_path(driver_root, Path::new(path));
        match fs::metadata(&host) {
            Ok(md) if md.is_dir() == want_dir => out.push((host, path.to_string())),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(named(&host, e)),
        }
    }
    Ok(out)
}

fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in GatedMode::ALL {
            assert_eq!(m.name().parse::<GatedMode>(), Ok(m));
            assert!(m.env_var().starts_with("NVIDIA_"));
        }
        assert!("imex".parse::<GatedMode>().is_err());
    }

    /// Only character devices of the mode's patterns; a missing folder is none; a file in the
    /// place of the folder is an error naming it.
    #[test]
    fn lists_the_patterns_only() {
        let d = tempfile::tempdir().unwrap();
        let dev = d.path().join("dev");
        fs::create_dir_all(dev.join("infiniband")).unwrap();
        fs::write(dev.join("nvidia-fs0"), b"").unwrap();
        assert!(gated_nodes(d.path(), GatedMode::Gds).unwrap().is_empty());
        assert!(gated_nodes(d.path(), GatedMode::Mofed).unwrap().is_empty());
        fs::remove_dir(dev.join("infiniband")).unwrap();
        fs::write(dev.join("infiniband"), b"").unwrap();
        let e = gated_nodes(d.path(), GatedMode::Mofed).unwrap_err();
        assert!(e.to_string().contains("infiniband"), "{e}");
    }
}
