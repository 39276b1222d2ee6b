//! The discovery snapshot: what `gpuctk_host::discover` found for the running driver, kept in
//! a root-only directory (`[gpuctk] snapshot-dir`, tmpfs under `/run`) so a container's create
//! checks a few `stat`s instead of discovering again (about 700 system calls for 8 GPUs).
//!
//! A snapshot is keyed by the driver's identity: the procfs version file's text, the driver
//! root's `ld.so.cache` (device, inode, size, mtime), the dev root's `/dev` folder (a node made
//! or removed changes its mtime), and the shape of the discovery (roots, options, this
//! program's version). It also records each folder that holds a file the inventory names
//! (device, inode, ctime): a folder changed since is a key that moved. Anything else is
//! rebuilt. It is a cache, never a trust boundary: a file that is not ours (owner, mode, not
//! regular), truncated, unparsable or for another key is ignored and rebuilt, and a path it
//! names that has gone is noticed ([`Lied`]), which rediscovers: by its folder's change where
//! the snapshot vouches for the folder ([`Vouched`]), else where the create path stats or opens
//! it (`docs/security.md`).

use foldhash::HashMap;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

// How much older than the moment its identity was taken a folder's ctime must be for the
// snapshot to vouch for its files (`Folder::vouches`): the same reason, and so the same time,
// as for what a create found in place in a root.
use gpuctk_container::hooks::SETTLED;

use gpuctk_host::{DiscoverOptions, Inventory, Roots};

/// Largest snapshot read: 64 GPUs with every graphics file come to about 60 KiB.
const MAX_SNAPSHOT: u64 = 4 << 20;

/// Bumped when what a snapshot holds changes meaning or shape (2: libraries carry their ELF
/// ABI, which the shim's `update-ldcache` takes instead of reading the file; 3: the folders
/// holding what the inventory names, [`Folder`]; 4: written in [`crate::compact`]'s form, not
/// JSON). The format is in the shape, so in the file's name: a file of another format is not
/// even read.
const FORMAT: u32 = 4;

/// Largest procfs version file read: the driver's is about 200 bytes; a larger one is not it.
const MAX_VERSION: usize = 64 * 1024;

/// What a file was when the snapshot was made.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
    /// For `/dev`, which is also a [`Folder`]: its check then needs no `stat` of its own.
    ctime: i64,
    ctime_nsec: i64,
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
            ctime: md.ctime(),
            ctime_nsec: md.ctime_nsec(),
        })
    }
}

/// What a file stands for in the inventory: discovery keeps only regular files as libraries
/// (read as ELF), binaries, firmware and vendor files, and only sockets and folders as IPC
/// paths, device nodes as nodes. What the shim's `update-ldcache` needs of a mount source is
/// which of the two it is, taken from here for a file the snapshot vouches for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// Anything else: a socket, a folder, a device node.
    Other,
}

/// Every host path `inv` names that a create mounts or makes a node of, with its kind.
fn named(inv: &Inventory) -> Vec<(&Path, Kind)> {
    let files = inv
        .libraries
        .iter()
        .map(|l| l.host_path.as_path())
        .chain(inv.binaries.iter().map(|f| f.host_path.as_path()))
        .chain(inv.firmware.iter().map(|f| f.host_path.as_path()))
        .chain(inv.configs.iter().map(|f| f.host_path.as_path()))
        .map(|p| (p, Kind::File));
    let nodes = inv
        .control_nodes
        .iter()
        .chain(inv.gpus.iter().flat_map(|g| g.node.iter().chain(&g.drm)))
        .map(|n| n.host_path.as_path());
    let others = inv
        .ipc
        .iter()
        .map(|f| f.host_path.as_path())
        .chain(nodes)
        .map(|p| (p, Kind::Other));
    files.chain(others).collect()
}

/// A folder holding files the inventory names, as it was when the snapshot was made. While
/// its device, inode and ctime are the same, no entry of it was made, removed or renamed (each
/// of those stamps the folder's ctime, which, unlike its mtime, cannot be set by a program):
/// the files the snapshot names in it are still there, as what they were. Every field is
/// required in what is read back.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Folder {
    path: PathBuf,
    dev: u64,
    ino: u64,
    ctime: i64,
    ctime_nsec: i64,
    /// When its identity was taken (just before its `stat`), in seconds and nanoseconds since
    /// the epoch.
    taken: i64,
    taken_nsec: i64,
}

/// Nanoseconds since the epoch.
fn nanos(sec: i64, nsec: i64) -> i128 {
    i128::from(sec) * 1_000_000_000 + i128::from(nsec)
}

impl Folder {
    /// The folder at `path` as it is now (`md`, its `stat`), `taken` being a moment just before.
    fn of(path: &Path, taken: SystemTime, md: &std::fs::Metadata) -> Folder {
        let taken = taken
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        Folder {
            path: path.to_path_buf(),
            dev: md.dev(),
            ino: md.ino(),
            ctime: md.ctime(),
            ctime_nsec: md.ctime_nsec(),
            taken: i64::try_from(taken.as_secs()).unwrap_or(i64::MAX),
            taken_nsec: i64::from(taken.subsec_nanos()),
        }
    }

    /// Whether `md`, the folder's `stat` now, is this folder unchanged.
    fn same(&self, md: &std::fs::Metadata) -> bool {
        (self.dev, self.ino, self.ctime, self.ctime_nsec)
            == (md.dev(), md.ino(), md.ctime(), md.ctime_nsec())
    }

    /// Whether an unchanged ctime says that nothing changed in the folder since its identity
    /// was taken. The kernel stamps ctime from a coarse clock (one tick, or one second on a
    /// filesystem with second timestamps): an entry made or removed in the same tick as the
    /// stamp recorded, after the `stat` that took it, stamps the same ctime again and goes
    /// unseen. A ctime at least [`SETTLED`] older than that `stat` is out of reach of such a
    /// change (any later one is stamped later); a newer one is not vouched for, and its files
    /// keep the create's own check (a `stat` each).
    fn vouches(&self) -> bool {
        nanos(self.taken, self.taken_nsec) - nanos(self.ctime, self.ctime_nsec)
            >= SETTLED.as_nanos() as i128
    }

    /// Whether this folder, unchanged but not vouched for when its identity was taken, has
    /// settled since (`now`: a moment after its `stat` now): taken again, it would vouch.
    fn settled_by(&self, now: SystemTime) -> bool {
        let now = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        !self.vouches() && now - nanos(self.ctime, self.ctime_nsec) >= SETTLED.as_nanos() as i128
    }
}

/// The host paths a used snapshot names in folders it vouches for, each with its kind: the
/// create needs no `stat` of them ([`first_gone`], the shim's hook work).
#[derive(Debug, Default)]
pub struct Vouched(HashMap<std::ffi::OsString, Kind>);

impl Vouched {
    /// What `path` is, when the snapshot vouches that it is there. Paths as discovery wrote them
    /// (by their bytes: hashing a `Path` parses its components, which showed in the create's
    /// profile); one written otherwise is not vouched for, and is looked at.
    pub fn kind(&self, path: &Path) -> Option<Kind> {
        self.0.get(path.as_os_str()).copied()
    }
}

/// The folder part of `path` as written, the bytes before its last `/` (none without one): for
/// discovery's own absolute, normalized paths, its parent, with no parse of its components.
fn folder_of(path: &Path) -> &[u8] {
    use std::os::unix::ffi::OsStrExt;
    let b = path.as_os_str().as_bytes();
    b.iter()
        .rposition(|c| *c == b'/')
        .map_or(&[][..], |i| &b[..i])
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
    /// The folders of the files the inventory names, sorted.
    folders: Vec<Folder>,
    inventory: Inventory,
}

/// A snapshot that holds for the host as it is now.
struct Loaded {
    inventory: Inventory,
    /// The files its folders vouch for.
    vouched: Vouched,
    /// A folder it did not vouch for, being changed moments before its identity was taken (a
    /// driver installed just before `cdi generate` or the first create), has settled since:
    /// the snapshot is written again, with each folder and the files it names taken again, so
    /// that later creates take the folder's word for them rather than a `stat` each, from then
    /// on rather than until the driver next changes.
    settled: bool,
}

/// Why a snapshot was not used.
enum NotUsed {
    /// It names a file that is gone (found where its folder changed).
    Lied(Lied),
    /// Not there, not ours, damaged, or made for another driver or configuration.
    Other(String),
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
        let path = dir.join(format!(
            "snapshot-{:016x}.bin",
            gpuctk_container::hooks::fnv1a64(shape.as_bytes())
        ));
        Snapshot { path, shape }
    }

    /// The key as the host is now, with the driver as the caller read it.
    fn key_now(&self, roots: &Roots, driver: &gpuctk_host::RunningDriver) -> Key {
        Key {
            version: driver.text.clone(),
            shape: self.shape.clone(),
            ldcache: FileId::of(&roots.driver_root.join("etc/ld.so.cache")),
            dev: FileId::of(&roots.dev_root.join("dev")),
            gpus_nlink: std::fs::metadata(roots.proc_root.join("driver/nvidia/gpus"))
                .ok()
                .map(|m| m.nlink()),
        }
    }

    /// The inventory of `roots` with `opts`: the snapshot's when it holds for the host as it
    /// is now (`read`), else discovered and written back; `driver` is the running driver as the
    /// caller read it. With the inventory, what the snapshot vouches for when it was used
    /// (`None`: discovered).
    pub fn inventory(
        &self,
        roots: &Roots,
        opts: &DiscoverOptions,
        driver: &gpuctk_host::RunningDriver,
        read: bool,
    ) -> Result<(Inventory, Option<Vouched>), gpuctk_host::DiscoverError> {
        let key = self.key_now(roots, driver);
        if read {
            match self.load(&key, Some(&roots.dev_root.join("dev"))) {
                Ok(Loaded {
                    inventory,
                    vouched,
                    settled,
                }) => {
                    tracing::debug!(
                        "{}: discovery snapshot used ({} files vouched for by their folders)",
                        self.path.display(),
                        vouched.0.len()
                    );
                    if settled {
                        self.store(key, &inventory);
                    }
                    return Ok((inventory, Some(vouched)));
                }
                Err(NotUsed::Lied(lied)) => tracing::warn!("{lied}"),
                Err(NotUsed::Other(why)) => tracing::debug!(
                    "{}: discovery snapshot not used ({why}); discovering",
                    self.path.display()
                ),
            }
        }
        // The key is taken before discovery: a driver changing meanwhile leaves a snapshot
        // under the old key, which the next create rebuilds.
        let inv =
            gpuctk_host::Discovery::run_with_driver(roots, opts, Some(&driver.version))?.inventory;
        self.store(key, &inv);
        Ok((inv, None))
    }

    /// The first of `snapshots` (one host's roots, other shapes) that is current for the host
    /// as it is now, its folders unchanged, with the files it vouches for; the key's `stat`s
    /// are taken once for all. `None` otherwise, and nothing is discovered or written: for a
    /// create that needs no discovery (a static CDI spec's, see
    /// [`crate::decision::LiveHost::known_gpus`] and its `first_missing`).
    pub fn first_current(
        snapshots: &[Snapshot],
        roots: &Roots,
        driver: &gpuctk_host::RunningDriver,
    ) -> Option<(Inventory, Vouched)> {
        let mut key = snapshots.first()?.key_now(roots, driver);
        let dev = roots.dev_root.join("dev");
        snapshots.iter().find_map(|s| {
            key.shape.clone_from(&s.shape);
            let loaded = s.load(&key, Some(&dev)).ok()?;
            if loaded.settled {
                s.store(key.clone(), &loaded.inventory);
            }
            Some((loaded.inventory, loaded.vouched))
        })
    }

    /// The snapshot's inventory when it is ours, made under `key` and, with `dev` (the dev
    /// root's `/dev`, as the key took it now), its folders are unchanged, with the files it
    /// vouches for; why not otherwise.
    fn load(&self, key: &Key, dev: Option<&Path>) -> Result<Loaded, NotUsed> {
        let other = |e: &dyn std::fmt::Display| NotUsed::Other(e.to_string());
        let euid = crate::capped::euid();
        let buf =
            crate::capped::read_owned(&self.path, euid, MAX_SNAPSHOT).map_err(|e| other(&e))?;
        let file: File = crate::compact::from_slice(&buf).map_err(|e| other(&e))?;
        if &file.key != key {
            return Err(other(&"made for another driver or configuration"));
        }
        let Some(dev) = dev else {
            return Ok(Loaded {
                inventory: file.inventory,
                vouched: Vouched::default(),
                settled: false,
            });
        };
        let named = named(&file.inventory);
        let mut vouched = Vouched::default();
        let mut settled = false;
        // Each named file with its folder, found once.
        let named: Vec<(&Path, Kind, &[u8])> =
            named.iter().map(|(p, k)| (*p, *k, folder_of(p))).collect();
        for f in &file.folders {
            use std::os::unix::ffi::OsStrExt;
            let folder = f.path.as_os_str().as_bytes();
            let same = match &key.dev {
                Some(id) if f.path == dev => {
                    (id.dev, id.ino, id.ctime, id.ctime_nsec)
                        == (f.dev, f.ino, f.ctime, f.ctime_nsec)
                }
                _ => std::fs::metadata(&f.path).is_ok_and(|md| f.same(&md)),
            };
            if !same {
                // Say which file went, where one did: the same warning as where a create finds
                // it gone itself.
                let gone = named
                    .iter()
                    .filter(|(_, _, d)| *d == folder)
                    .find(|(p, _, _)| {
                        std::fs::symlink_metadata(p)
                            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
                    });
                return Err(match gone {
                    Some((p, _, _)) => NotUsed::Lied(Lied(p.to_path_buf())),
                    None => other(&format_args!("{}: folder changed", f.path.display())),
                });
            }
            if f.vouches() {
                vouched.0.extend(
                    named
                        .iter()
                        .filter(|(_, _, d)| *d == folder)
                        .map(|(p, k, _)| (p.as_os_str().to_owned(), *k)),
                );
            } else {
                settled |= f.settled_by(SystemTime::now());
            }
        }
        Ok(Loaded {
            inventory: file.inventory,
            vouched,
            settled,
        })
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
        let bytes = crate::compact::to_vec(&File {
            key,
            folders: folders_of(inv)?,
            inventory: inv.clone(),
        })
        .map_err(|e| e.to_string())?;
        write_cache(&self.path, &bytes)
    }

    /// Write the snapshot of an inventory discovered just now (`cdi generate`) for `driver`, as
    /// read before discovery.
    pub fn write(&self, roots: &Roots, inv: &Inventory, driver: &gpuctk_host::RunningDriver) {
        self.store(self.key_now(roots, driver), inv);
    }
}

/// The folders of the files `inv` names, each as it is now; why none, where a file changed
/// since discovery found it.
///
/// A folder is taken after discovery, so each file it names there is checked to be there still,
/// as what discovery found, after the folder's `stat`: a change before that `stat` is found
/// here, one after it changes the folder. Left out (their files keep the create's own check):
/// a folder with the sticky bit (`/tmp`, for the MPS pipe folder: shared scratch, whose entries
/// come and go all the time), and one that holds a symbolic link the inventory names (its
/// target may go without the folder changing).
fn folders_of(inv: &Inventory) -> Result<Vec<Folder>, String> {
    let named = named(inv);
    let mut dirs: Vec<&Path> = named.iter().filter_map(|(p, _)| p.parent()).collect();
    dirs.sort_unstable();
    dirs.dedup();
    let mut out = Vec::new();
    'dirs: for d in dirs {
        let taken = SystemTime::now();
        let md = std::fs::metadata(d).map_err(|e| format!("{}: {e}", d.display()))?;
        if md.mode() & libc::S_ISVTX != 0 {
            continue;
        }
        for (p, kind) in named.iter().filter(|(p, _)| p.parent() == Some(d)) {
            let md = std::fs::symlink_metadata(p)
                .map_err(|e| format!("{}: {e} (changed during discovery)", p.display()))?;
            if md.file_type().is_symlink() {
                continue 'dirs;
            }
            if md.is_file() != (*kind == Kind::File) {
                return Err(format!("{}: changed during discovery", p.display()));
            }
        }
        out.push(Folder::of(d, taken, &md));
    }
    Ok(out)
}

/// The running driver under `proc_root`, its version file read once for a command or a create
/// (the platform probe, the static spec's staleness, the snapshot's key and discovery all take
/// it from here): `None` where the file is absent; an error naming it where it cannot be read,
/// is larger than 64 KiB (not a driver's) or names no version. Read until a read comes back
/// short, with no `stat`: procfs says its files are empty.
pub fn running_driver(
    proc_root: &Path,
) -> Result<Option<gpuctk_host::RunningDriver>, gpuctk_host::VersionFileError> {
    let path = gpuctk_host::platform::version_file(proc_root);
    let read = || -> std::io::Result<Vec<u8>> {
        // Not blocked by a FIFO where `--proc-root` points at a folder of anyone's.
        let f = crate::capped::open_read(&path, 0)?;
        let buf = gpuctk_container::sized::read_single_record(&f, MAX_VERSION as u64)?;
        if buf.len() > MAX_VERSION {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("larger than {MAX_VERSION} bytes"),
            ));
        }
        Ok(buf)
    };
    gpuctk_host::platform::running_driver(proc_root, read())
}

/// The inventory the snapshot file at `path` holds, when it reads as one, with none of a
/// create's checks (owner, key, folders): for the tests that compare what `cdi generate` wrote
/// with a discovery of their own.
pub fn read_inventory(path: &Path) -> Result<Inventory, String> {
    let bytes = crate::capped::read_capped(path, MAX_SNAPSHOT, "the discovery snapshot")
        .map_err(|e| e.to_string())?;
    crate::compact::from_slice::<File>(&bytes)
        .map(|f| f.inventory)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes a cache file of ours (this snapshot, the CDI spec cache): atomically, mode 0600, in
/// its folder, made 0700 when missing and refused unless we own it and nobody else may write
/// to it. Why not, otherwise.
pub(crate) fn write_cache(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let dir = path.parent().ok_or("no directory")?;
    // One `stat` where the folder is there (every write but the first after a boot).
    let md = match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("{}: {e}", dir.display()))?;
            std::fs::metadata(dir)
        }
        md => md,
    }
    .map_err(|e| format!("{}: {e}", dir.display()))?;
    // A folder others may write to is not where a cache of ours lives.
    if md.uid() != crate::capped::euid() || md.mode() & 0o022 != 0 {
        return Err(format!(
            "{}: not a folder of ours writable by us only",
            dir.display()
        ));
    }
    // tmpfs, and rebuilt whenever missing: no fsync.
    // The folder is ours alone: one temp name per file, and no listing of the folder for
    // stale ones on every write (`lazy_cleanup`: a killed writer's is swept by the next write).
    let opts = gpuctk_atomicfile::Options {
        mode: Some(0o600),
        no_sync: true,
        lazy_cleanup: true,
        ..Default::default()
    };
    gpuctk_atomicfile::replace(path, bytes, &opts).map_err(|e| e.to_string())
}

/// The first mount source or device node of `edits` that is gone from the host: where edits
/// planned from a snapshot are not opened anyway, they are checked so ([`Lied`]), but for
/// those the snapshot vouches for (`vouched`: their folders are unchanged).
pub fn first_gone(edits: &gpuctk_cdi::spec::ContainerEdits, vouched: &Vouched) -> Option<PathBuf> {
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
        .filter(|p| vouched.kind(Path::new(p)).is_none())
        .find(|p| gone(p))
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
        assert_eq!(gpuctk_container::hooks::fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    }

    /// A folder stamped just before its identity was taken is not vouched for: a change in the
    /// same clock tick would leave its ctime as recorded. One stamped 2 s or more before is.
    #[test]
    fn a_folder_stamped_now_is_not_vouched() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), b"x").unwrap();
        let md = std::fs::metadata(d.path()).unwrap();
        let stamped =
            SystemTime::UNIX_EPOCH + Duration::new(md.ctime() as u64, md.ctime_nsec() as u32);
        let at = |after: Duration| Folder::of(d.path(), stamped + after, &md);
        assert!(!Folder::of(d.path(), SystemTime::now(), &md).vouches());
        assert!(!at(Duration::ZERO).vouches());
        assert!(!at(SETTLED - Duration::from_nanos(1)).vouches());
        assert!(at(SETTLED).vouches());
        assert!(at(Duration::from_secs(3600)).vouches());
        // A clock set back before the stamp vouches for nothing.
        assert!(!Folder::of(d.path(), stamped - Duration::from_secs(10), &md).vouches());
        // The identity is the folder's: another entry changes it.
        let f = at(SETTLED);
        assert!(f.same(&md));
        std::thread::sleep(Duration::from_millis(20));
        std::fs::remove_file(d.path().join("f")).unwrap();
        assert!(!f.same(&std::fs::metadata(d.path()).unwrap()));
    }

    /// A folder reads back as written, and one cut short anywhere is not read (every field is
    /// required: none is an `Option` that a missing one could be taken for).
    #[test]
    fn a_folder_reads_back_and_one_cut_short_is_not_read() {
        let d = tempfile::tempdir().unwrap();
        let md = std::fs::metadata(d.path()).unwrap();
        let f = Folder::of(d.path(), SystemTime::now(), &md);
        let bytes = crate::compact::to_vec(&f).unwrap();
        assert_eq!(crate::compact::from_slice::<Folder>(&bytes).unwrap(), f);
        for n in 0..bytes.len() {
            assert!(crate::compact::from_slice::<Folder>(&bytes[..n]).is_err());
        }
    }

    /// The version file is read whole in pieces (procfs says it is empty), up to 64 KiB; a
    /// larger one, or one that names no version, is an error naming it; none is no driver.
    #[test]
    fn the_version_file_is_read_whole_and_capped() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("driver/nvidia");
        assert_eq!(running_driver(d.path()), Ok(None));
        std::fs::create_dir_all(&dir).unwrap();
        let text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06\n".repeat(300);
        assert!(text.len() > 4096 && text.len() <= MAX_VERSION);
        std::fs::write(dir.join("version"), &text).unwrap();
        let got = running_driver(d.path()).unwrap().unwrap();
        assert_eq!(got.text, text);
        let mut full = "NVRM version: 570.124.06 ".to_string();
        full.extend(std::iter::repeat_n('x', MAX_VERSION - full.len()));
        std::fs::write(dir.join("version"), &full).unwrap();
        assert_eq!(
            running_driver(d.path()).unwrap().unwrap().text.len(),
            MAX_VERSION
        );
        let file = dir.join("version").display().to_string();
        for (bytes, needle) in [
            (vec![b'x'; MAX_VERSION + 1], "larger than"),
            (b"\xff\xfe".to_vec(), "UTF-8"),
            (b"garbage".to_vec(), "NVRM version"),
        ] {
            std::fs::write(dir.join("version"), bytes).unwrap();
            let e = running_driver(d.path()).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("{file}: ")) && e.contains(needle),
                "{e}"
            );
        }
    }
}
