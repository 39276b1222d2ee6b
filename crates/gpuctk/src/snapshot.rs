//! The discovery snapshot: what `gpuctk_host::discover` found for the running driver, kept in
//! a root-only directory (`[gpuctk] snapshot-dir`, tmpfs under `/run`) so a container's create
//! checks a few `stat`s instead of discovering again (about 700 system calls for 8 GPUs).
//!
//! A snapshot is keyed by the driver's identity: the procfs version file's text, the driver
//! root's `ld.so.cache` (device, inode, size, mtime), the dev root's `/dev` folder (a node made
//! or removed changes its mtime), and the shape of the discovery (roots, options, this
//! program's version). Anything else is rebuilt. It is a cache, never a trust boundary: a file
//! that is not ours (owner, mode, not regular), truncated, unparsable or for another key is
//! ignored and rebuilt, and a path it names that has gone is noticed where the create path
//! opens it anyway ([`Lied`]), which rediscovers (`docs/security.md`).

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use gpuctk_host::{DiscoverOptions, Inventory, Roots};

/// Largest snapshot read: 64 GPUs with every graphics file come to about 100 KiB.
const MAX_SNAPSHOT: u64 = 4 << 20;

/// Bumped when what a snapshot holds changes meaning or shape (2: libraries carry their ELF
/// ABI, which the shim's `update-ldcache` takes instead of reading the file).
const FORMAT: u32 = 2;

/// What a file was when the snapshot was made.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
}

impl FileId {
    /// `None` when `path` does not exist (or cannot be stat'ed): that is part of the key too.
    fn of(path: &Path) -> Option<FileId> {
        let md = std::fs::metadata(path).ok()?;
        Some(FileId {
            dev: md.dev(),
            ino: md.ino(),
            size: md.size(),
            mtime: md.mtime(),
            mtime_nsec: md.mtime_nsec(),
        })
    }
}

/// The driver's identity and the discovery's shape: a snapshot is used only under the same key.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Key {
    /// Roots, options and this program's version, as text (also hashed into the file name).
    shape: String,
    /// `<proc root>/driver/nvidia/version`, whole.
    version: String,
    /// `<driver root>/etc/ld.so.cache`.
    ldcache: Option<FileId>,
    /// `<dev root>/dev`.
    dev: Option<FileId>,
    /// The link count of `<proc root>/driver/nvidia/gpus`: 2 and one per GPU folder, which
    /// procfs keeps current (a GPU unbound from the driver leaves the version file as it was).
    gpus_nlink: Option<u64>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct File {
    key: Key,
    inventory: Inventory,
}

/// A path a snapshot named was gone where the create path opened it: the snapshot lied (the
/// driver changed in a way its key does not see), and discovery is done again.
#[derive(Debug, thiserror::Error)]
#[error("{0}: named by the discovery snapshot but gone; discovering again")]
pub struct Lied(pub PathBuf);

/// Where the snapshots of one discovery shape live, and what it is keyed by.
pub struct Snapshot {
    path: PathBuf,
    shape: String,
}

/// 64-bit FNV-1a: a stable name for a shape (std's hasher may change between releases).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Snapshot {
    /// The snapshot of discovering `roots` with `opts`, in `dir`.
    pub fn new(dir: &Path, roots: &Roots, opts: &DiscoverOptions) -> Snapshot {
        let shape = format!(
            "gpuctk {} format {FORMAT}\ndriver root {}\ndev root {}\nproc root {}\nskip graphics {}\nlibrary search {:?}\nconfig search {:?}\n",
            env!("CARGO_PKG_VERSION"),
            roots.driver_root.display(),
            roots.dev_root.display(),
            roots.proc_root.display(),
            opts.skip_graphics,
            opts.library_search_paths,
            opts.config_search_paths,
        );
        let path = dir.join(format!("snapshot-{:016x}.json", fnv1a(shape.as_bytes())));
        Snapshot { path, shape }
    }

    /// The key as the host is now; `None` without a readable version file (no driver: discovery
    /// says why).
    fn key_now(&self, roots: &Roots, version: Option<&str>) -> Option<Key> {
        let version = match version {
            Some(v) => v.to_string(),
            None => std::fs::read_to_string(roots.proc_root.join("driver/nvidia/version")).ok()?,
        };
        Some(Key {
            shape: self.shape.clone(),
            version,
            ldcache: FileId::of(&roots.driver_root.join("etc/ld.so.cache")),
            dev: FileId::of(&roots.dev_root.join("dev")),
            gpus_nlink: std::fs::metadata(roots.proc_root.join("driver/nvidia/gpus"))
                .ok()
                .map(|m| m.nlink()),
        })
    }

    /// The inventory of `roots` with `opts`: the snapshot's when it holds for the host as it
    /// is now (`read`), else discovered and written back. `version` is the version file's text
    /// when the caller read it already. The bool says whether the snapshot was used.
    pub fn inventory(
        &self,
        roots: &Roots,
        opts: &DiscoverOptions,
        version: Option<&str>,
        read: bool,
    ) -> Result<(Inventory, bool), gpuctk_host::DiscoverError> {
        let key = self.key_now(roots, version);
        if let (true, Some(key)) = (read, &key) {
            match self.load(key) {
                Ok(inv) => {
                    tracing::debug!("{}: discovery snapshot used", self.path.display());
                    return Ok((inv, true));
                }
                Err(why) => tracing::debug!(
                    "{}: discovery snapshot not used ({why}); discovering",
                    self.path.display()
                ),
            }
        }
        // The key is taken before discovery: a driver changing meanwhile leaves a snapshot
        // under the old key, which the next create rebuilds.
        let inv = gpuctk_host::discover(roots, opts)?;
        if let Some(key) = key {
            self.store(key, &inv);
        }
        Ok((inv, false))
    }

    /// The snapshot's inventory when one is current for the host as it is now; `None`
    /// otherwise, and nothing is discovered or written (for a create that needs no discovery,
    /// see [`crate::decision::LiveHost::known_gpus`]).
    pub fn current(&self, roots: &Roots, version: Option<&str>) -> Option<Inventory> {
        let key = self.key_now(roots, version)?;
        self.load(&key).ok()
    }

    /// The snapshot's inventory when it is ours and made under `key`; why not otherwise.
    fn load(&self, key: &Key) -> Result<Inventory, String> {
        let euid = rustix::process::geteuid().as_raw();
        let buf =
            crate::capped::read_owned(&self.path, euid, MAX_SNAPSHOT).map_err(|e| e.to_string())?;
        let file: File = serde_json::from_slice(&buf).map_err(|e| e.to_string())?;
        if &file.key != key {
            return Err("made for another driver or configuration".into());
        }
        Ok(file.inventory)
    }

    /// Write the snapshot, replacing any (a failure is one debug line: it is a cache).
    fn store(&self, key: Key, inv: &Inventory) {
        if let Err(e) = self.try_store(key, inv) {
            tracing::debug!(
                "{}: discovery snapshot not written: {e}",
                self.path.display()
            );
        }
    }

    fn try_store(&self, key: Key, inv: &Inventory) -> Result<(), String> {
        let bytes = serde_json::to_vec(&File {
            key,
            inventory: inv.clone(),
        })
        .map_err(|e| e.to_string())?;
        write_cache(&self.path, &bytes)
    }

    /// Write the snapshot of an inventory discovered just now (`cdi generate`).
    pub fn write(&self, roots: &Roots, inv: &Inventory) {
        if let Some(key) = self.key_now(roots, None) {
            self.store(key, inv);
        }
    }
}

/// Writes a cache file of ours (this snapshot, the CDI spec cache): atomically, mode 0600, in
/// its folder, made 0700 when missing and refused unless we own it and nobody else may write
/// to it. Why not, otherwise.
pub(crate) fn write_cache(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let dir = path.parent().ok_or("no directory")?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    // A folder others may write to is not where a cache of ours lives.
    let md = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if md.uid() != rustix::process::geteuid().as_raw() || md.mode() & 0o022 != 0 {
        return Err(format!(
            "{}: not a folder of ours writable by us only",
            dir.display()
        ));
    }
    // tmpfs, and rebuilt whenever missing: no fsync.
    let opts = gpuctk_atomicfile::Options {
        mode: Some(0o600),
        no_sync: true,
        ..Default::default()
    };
    gpuctk_atomicfile::replace(path, bytes, &opts).map_err(|e| e.to_string())
}

/// The first mount source or device node of `edits` that is gone from the host: where edits
/// planned from a snapshot are not opened anyway, they are checked so ([`Lied`]).
pub fn first_gone(edits: &gpuctk_cdi::spec::ContainerEdits) -> Option<PathBuf> {
    let gone = |p: &str| {
        std::fs::symlink_metadata(p).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    };
    edits
        .mounts
        .iter()
        .map(|m| m.host_path.as_str())
        .chain(
            edits
                .device_nodes
                .iter()
                .map(|d| d.host_path.as_deref().unwrap_or(&d.path)),
        )
        .find(|p| gone(p))
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_names_the_file() {
        let r = Roots::default();
        let a = Snapshot::new(Path::new("/x"), &r, &DiscoverOptions::default());
        let b = Snapshot::new(
            Path::new("/x"),
            &r,
            &DiscoverOptions {
                skip_graphics: true,
                ..Default::default()
            },
        );
        assert_ne!(a.path, b.path);
        assert!(a.path.starts_with("/x"));
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    }
}
