//! File access inside a container's root filesystem that no symlink in the
//! image can steer outside that root.
//!
//! A [`Root`] holds an `O_PATH` descriptor of the root directory. Every
//! container path (`/etc/ld.so.cache`) is resolved by the kernel with
//! `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)` relative to that
//! descriptor, so `..` and absolute symlinks stop at the root exactly as
//! they would for a process chrooted there, and `/proc/self/fd`-style magic
//! links are refused. Files are then created, replaced and linked with the
//! `*at` calls relative to a parent directory descriptor obtained the same
//! way, using only single, symlink-free names (`O_CREAT|O_EXCL|O_NOFOLLOW`,
//! `renameat`, `symlinkat`, `mkdirat`). No host path is ever built by
//! joining strings.
//!
//! Where a container path must be *named* (the resolved compat directory in
//! a loader configuration file), [`Root::canonicalize`] walks the path one
//! component at a time (`fstatat(AT_SYMLINK_NOFOLLOW)` + `readlinkat` relative
//! to a directory descriptor that moves along, see `walk`: linear, and capped
//! as the kernel's resolution is), and then checks that the name it computed
//! opens, without following any symlink, the very inode the kernel's own
//! in-root resolution gives. `/proc/self/fd` is never read.
//!
//! On kernels without `openat2` (before Linux 5.6) the same resolutions are made in userspace,
//! one `O_PATH` component at a time, with every step checked (see `opath`).

use foldhash::{HashMap, HashMapExt};
use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::ops::ControlFlow;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};

use crate::sys;

/// Why an operation inside the container root failed. Every variant names
/// the container path (and the root where that helps).
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    /// The root directory itself could not be opened.
    #[error("opening the container root {}: {source}", path.display())]
    OpenRoot {
        /// The host path of the root.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A system call on a path inside the root failed.
    #[error("{path} (in container root {}): {op}: {source}", root.display())]
    Io {
        /// The root, as a host path.
        root: PathBuf,
        /// The container path.
        path: String,
        /// What was being done, e.g. `open`, `rename`.
        op: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The path cannot name something inside the container.
    #[error("{path:?}: not a usable container path: {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A file was larger than the caller allows.
    #[error("{path} (in container root {}): {size} bytes, more than the {cap} allowed", root.display())]
    TooLarge {
        /// The root, as a host path.
        root: PathBuf,
        /// The container path.
        path: String,
        /// Its size.
        size: u64,
        /// The limit.
        cap: u64,
    },
    /// A file was expected but something else is there.
    #[error("{path} (in container root {}): expected a regular file, found a {kind}", root.display())]
    NotRegular {
        /// The root, as a host path.
        root: PathBuf,
        /// The container path.
        path: String,
        /// What is there.
        kind: FileKind,
    },
    /// Something would have replaced a directory.
    #[error("{path} (in container root {}): is a directory; refusing to replace it", root.display())]
    IsDirectory {
        /// The root, as a host path.
        root: PathBuf,
        /// The container path.
        path: String,
    },
    /// More than 40 symlinks were followed while resolving a path.
    #[error("{path} (in container root {}): too many levels of symbolic links", root.display())]
    Loop {
        /// The root, as a host path.
        root: PathBuf,
        /// The container path.
        path: String,
    },
    /// Resolving a path took in more components (its own and its symlinks' together) than
    /// [`MAX_WALK_COMPONENTS`].
    #[error("{path} (in container root {}): resolving it takes more than {cap} path components, symlink targets included; not followed", root.display())]
    TooManyComponents {
        /// The root, as a host path.
        root: PathBuf,
        /// The container path.
        path: String,
        /// The limit.
        cap: usize,
    },
    /// The directory given as a container root is a directory of the host itself.
    #[error("{}: refusing to use it as a container root: {reason}; check the OCI state's root (or --container-spec / ROOTFS)", path.display())]
    NotAContainerRoot {
        /// The host path given.
        path: PathBuf,
        /// Which host directory it is.
        reason: String,
    },
    /// A directory has more entries than the caller reads.
    #[error("{path} (in container root {}): more than {cap} entries", root.display())]
    TooManyEntries {
        /// The root, as a host path.
        root: PathBuf,
        /// The container path.
        path: String,
        /// The limit.
        cap: usize,
    },
    /// The file system changed while a path was being resolved.
    #[error("{path} (in container root {}): changed while it was being resolved (last seen as {resolved}); try again", root.display())]
    Raced {
        /// The root, as a host path.
        root: PathBuf,
        /// The container path.
        path: String,
        /// What the walk computed.
        resolved: String,
    },
}

impl RootError {
    fn not_container_root(path: &Path, reason: String) -> RootError {
        RootError::NotAContainerRoot {
            path: path.to_path_buf(),
            reason,
        }
    }

    /// True when the path (or one of its parents) does not exist.
    pub fn is_not_found(&self) -> bool {
        self.errno() == Some(libc::ENOENT)
    }

    /// The OS error number, for [`RootError::Io`].
    pub fn errno(&self) -> Option<i32> {
        match self {
            RootError::Io { source, .. } | RootError::OpenRoot { source, .. } => {
                source.raw_os_error()
            }
            _ => None,
        }
    }
}

/// The type of a file, from `st_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link.
    Symlink,
    /// Character device.
    CharDevice,
    /// Block device.
    BlockDevice,
    /// Named pipe.
    Fifo,
    /// Unix socket.
    Socket,
}

impl FileKind {
    /// The kind of a `st_mode` (its `S_IFMT` bits).
    pub(crate) fn from_mode(mode: u32) -> FileKind {
        match mode & libc::S_IFMT {
            libc::S_IFDIR => FileKind::Dir,
            libc::S_IFLNK => FileKind::Symlink,
            libc::S_IFCHR => FileKind::CharDevice,
            libc::S_IFBLK => FileKind::BlockDevice,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            _ => FileKind::File,
        }
    }
}

impl std::fmt::Display for FileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FileKind::File => "regular file",
            FileKind::Dir => "directory",
            FileKind::Symlink => "symbolic link",
            FileKind::CharDevice => "character device",
            FileKind::BlockDevice => "block device",
            FileKind::Fifo => "named pipe",
            FileKind::Socket => "socket",
        })
    }
}

/// What [`Root::metadata`] and [`Root::symlink_metadata`] report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metadata {
    /// File type.
    pub kind: FileKind,
    /// Permission bits, including setuid/setgid/sticky (`st_mode & 0o7777`).
    pub mode: u32,
    /// Size in bytes.
    pub size: u64,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device of the file system holding it.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// The device a device node stands for (`st_rdev`; 0 for other files).
    pub rdev: u64,
    /// Last modification (seconds, nanoseconds).
    pub mtime: (i64, u64),
    /// Last status change (seconds, nanoseconds): set by the kernel only.
    pub ctime: (i64, u64),
}

impl Metadata {
    /// Whether this is a regular file of permission bits `mode` and `len` bytes: one that may
    /// hold what is about to be written with that mode ([`Dir::write_file_if_changed`]).
    pub fn may_hold(&self, len: usize, mode: u32) -> bool {
        self.kind == FileKind::File && self.mode == mode && self.size == len as u64
    }

    fn from_stat(st: &sys::Stat) -> Metadata {
        Metadata {
            kind: FileKind::from_mode(st.st_mode),
            mode: st.st_mode & 0o7777,
            size: st.st_size as u64,
            uid: st.st_uid,
            gid: st.st_gid,
            dev: st.st_dev,
            ino: st.st_ino,
            rdev: st.st_rdev,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }

    fn same_inode(&self, other: &Metadata) -> bool {
        self.dev == other.dev && self.ino == other.ino
    }
}

/// What [`Root::symlink_force`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkOutcome {
    /// Nothing was there; the link was created.
    Created,
    /// A file or a link with another target was replaced.
    Replaced,
    /// The link already pointed at the target.
    Unchanged,
}

/// What [`Dir::look_link`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkLook {
    /// A symlink, with this target.
    Target(OsString),
    /// Nothing of that name.
    Absent,
    /// Something that is not a symlink.
    NotLink,
}

/// Most symlinks followed in one resolution, as the kernel's limit.
pub const MAX_SYMLINKS: usize = 40;

/// Resolution flags used for every lookup from the root.
const IN_ROOT: u64 = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;

/// Resolution flags for names already known to be symlink-free.
const IN_ROOT_NO_SYMLINKS: u64 = IN_ROOT | libc::RESOLVE_NO_SYMLINKS;

/// Serial number for temporary names within this process.
static TMP_SERIAL: AtomicU64 = AtomicU64::new(0);

#[cfg(test)]
thread_local! {
    /// Bytes of path this thread handed to [`openat2`]: the kernel's lookup work, which the
    /// unit tests hold linear in the path resolved.
    static OPENAT2_PATH_BYTES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Names this thread handed to [`fstatat_nofollow`] (`lstat`s).
    pub(crate) static LSTATS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Folders this thread read with `getdents64` ([`for_each_listed`]), not from a kept listing.
    pub(crate) static LISTINGS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// An open container root filesystem.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    path: PathBuf,
    /// Folders a [`LexicalResolver`] opened, by their symlink-free path (`usr/lib`), kept
    /// ([`LexicalResolver::keep_folders`]) so that [`Root::open_dir`], [`Root::mkdir_all_open`]
    /// and [`Dir::open_dir`] take them instead of resolving the path again.
    kept: HashMap<String, Arc<DirFd>>,
    /// Names a [`LexicalResolver`] found missing, by their symlink-free path, and the count of
    /// changes ([`Root::changes`]) they were handed over at: while nothing changed the root's
    /// names since, [`Root::open_dir`] of a path through one says so with no lookup.
    absent: (foldhash::HashSet<String>, u64),
    /// Changes made to the root's names other than through a folder's own descriptor (by path:
    /// a resolution from the root may reach any folder, under any name), and through one (which
    /// another descriptor of the same folder may have listed): a listing kept on a [`DirFd`]
    /// holds as long as this count is the one it was read (or updated) at.
    changes: AtomicU64,
}

/// A folder's descriptor, shared by the [`Dir`]s of that folder (a [`Root`] keeps some open).
#[derive(Debug)]
pub(crate) struct DirFd {
    fd: OwnedFd,
    /// Opened for reading, so it can be listed (not `O_PATH` only).
    readable: bool,
    /// Whether it was listed before (its offset is then past its first entry).
    listed: AtomicBool,
    /// Its device and inode, once asked ([`Dir::id`]).
    id: std::sync::OnceLock<(u64, u64)>,
    /// Its whole listing, kept from the first reading to its end ([`for_each_listed`]), so that
    /// a later reader of this descriptor (the shim's mount-cover walk lists the library folder,
    /// `update-ldcache` then scans it) reads no folder again.
    listing: std::sync::Mutex<Option<Arc<Listing>>>,
}

impl DirFd {
    pub(crate) fn new(fd: OwnedFd, readable: bool) -> Arc<DirFd> {
        Arc::new(DirFd {
            fd,
            readable,
            listed: AtomicBool::new(false),
            id: std::sync::OnceLock::new(),
            listing: std::sync::Mutex::new(None),
        })
    }

    /// The listing kept on it, where nothing changed the root's names since (`changes`, the
    /// root's count now).
    fn kept_listing(&self, changes: u64) -> Option<Arc<Listing>> {
        let kept = self.listing.lock().unwrap_or_else(PoisonError::into_inner);
        kept.as_ref().filter(|l| l.changes == changes).cloned()
    }
}

/// A folder's entries (not `.` and `..`) as one reading of it to its end gave them, with their
/// `d_type`s, and the root's count of changes ([`Root::changes`]) it holds at: every name in
/// one buffer, so that keeping a library folder of 300 names costs a few allocations, not 300.
///
/// The image's folder may change under us meanwhile by other processes: true as well of the two
/// readings this saves one of, a few milliseconds apart in one create; a listing is kept on a
/// descriptor only, which lives no longer than the work on the root it was opened for.
/// Changes made with raw `*at` calls on descriptors of their own (legacy injection's mount
/// points, its sweep of leftovers) are not counted: they are made where no kept folder is in
/// play (only the shim keeps folders), and a folder opened anew carries no listing.
#[derive(Clone, Debug)]
pub(crate) struct Listing {
    changes: u64,
    bytes: Vec<u8>,
    /// Each entry: where its name lies in `bytes`, and its kind.
    entries: Vec<(std::ops::Range<usize>, rustix::fs::FileType)>,
}

impl Listing {
    fn push(&mut self, name: &[u8], kind: rustix::fs::FileType) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(name);
        self.entries.push((start..self.bytes.len(), kind));
    }

    fn iter(&self) -> impl Iterator<Item = (&[u8], rustix::fs::FileType)> {
        self.entries
            .iter()
            .map(|(r, kind)| (self.bytes.get(r.clone()).unwrap_or_default(), *kind))
    }

    /// Entry `name` is now of `kind`: added, or its kind changed. (Where the file system gives
    /// no `d_type`, a reading would say `DT_UNKNOWN`, and the reader look; the kind we just made
    /// it is what that look finds.)
    fn set(&mut self, name: &[u8], kind: rustix::fs::FileType) {
        let bytes = &self.bytes;
        match self
            .entries
            .iter_mut()
            .find(|(r, _)| bytes.get(r.clone()) == Some(name))
        {
            Some((_, k)) => *k = kind,
            None => self.push(name, kind),
        }
    }
}

/// Calls `f` with each entry (name, `d_type`) of folder `fd` (opened for reading), never `.` or
/// `..`, until it says stop: from the listing kept on `fd` where the root's names did not change
/// since it was read ([`Root::changes`]; changes made through `fd` itself update it), else read
/// by `getdents64`, and kept when read to its end with at most [`walk::MAX_LISTED`] entries (a
/// folder that hit a reader's cap is not kept: its next reader reads it again, as before).
fn for_each_listed<B>(
    root: &Root,
    fd: &DirFd,
    mut f: impl FnMut(&[u8], rustix::fs::FileType) -> ControlFlow<B>,
) -> io::Result<Option<B>> {
    let changes = root.changes.load(Ordering::SeqCst);
    if let Some(kept) = fd.kept_listing(changes) {
        for (name, kind) in kept.iter() {
            if let ControlFlow::Break(b) = f(name, kind) {
                return Ok(Some(b));
            }
        }
        return Ok(None);
    }
    #[cfg(test)]
    LISTINGS.with(|c| c.set(c.get() + 1));
    let rewind = fd.listed.swap(true, Ordering::Relaxed);
    let mut keep = Some(Listing {
        changes,
        bytes: Vec::new(),
        entries: Vec::new(),
    });
    let stopped = sys::for_each_entry(fd.as_fd(), rewind, |name, kind| {
        let bytes = name.to_bytes();
        if bytes == b"." || bytes == b".." {
            return ControlFlow::Continue(());
        }
        if let Some(l) = keep.as_mut() {
            if l.entries.len() < walk::MAX_LISTED {
                l.push(bytes, kind);
            } else {
                keep = None;
            }
        }
        f(bytes, kind)
    })?;
    if let (None, Some(l)) = (&stopped, keep) {
        *fd.listing.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(l));
    }
    Ok(stopped)
}

impl AsFd for DirFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Root {
    /// Opens the directory `path` (a host path, e.g. `<bundle>/rootfs`) as
    /// the root that all later container paths are resolved in.
    pub fn open(path: impl AsRef<Path>) -> Result<Root, RootError> {
        let path = path.as_ref().to_path_buf();
        let err = |source| RootError::OpenRoot {
            path: path.clone(),
            source,
        };
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| err(io::Error::from_raw_os_error(libc::EINVAL)))?;
        let fd = sys::open(&c, libc::O_PATH | libc::O_DIRECTORY).map_err(err)?;
        Ok(Root {
            fd,
            path,
            kept: HashMap::new(),
            absent: Default::default(),
            changes: AtomicU64::new(0),
        })
    }

    /// The kept folder ([`LexicalResolver::keep_folders`]) at `path`, when `path` names one by
    /// its symlink-free path, as the resolver walked it; `listable`: only one opened for
    /// reading.
    fn kept_dir(&self, path: &str, listable: bool) -> Option<Arc<DirFd>> {
        if self.kept.is_empty() {
            return None;
        }
        self.kept
            .get(plain_key(path)?)
            .filter(|d| d.readable || !listable)
            .cloned()
    }

    /// Whether `path`, as written, leads through a name a resolver found missing
    /// ([`Root::absent`]) by a prefix of real folders, and nothing changed the root's names
    /// since: then it does not resolve, as its lookup would say.
    fn known_absent(&self, path: &str) -> bool {
        let (names, at) = &self.absent;
        if names.is_empty() || self.changes.load(Ordering::SeqCst) != *at {
            return false;
        }
        let Some(key) = plain_key(path) else {
            return false;
        };
        // Each prefix, shortest first: `usr`, `usr/local`, `usr/local/cuda`, ...
        key.match_indices('/')
            .map(|(i, _)| &key[..i])
            .chain([key])
            .any(|prefix| names.contains(prefix))
    }

    /// Drops the root without closing its descriptor and its kept folders': for a process that
    /// execs next (the shim), whose descriptors are all `O_CLOEXEC`, so that the exec closes
    /// them instead of one `close` call each. The kernel's work is the same.
    pub fn close_at_exec(self) {
        std::mem::forget(self);
    }

    /// [`Root::open`] for a container root handed to us by an engine or a user: refuses the
    /// host's own root, its system directories and the directory holding this program (see
    /// `check_not_host_dir`). Every hook and injection entry point opens its root this way;
    /// plain [`Root::open`] is for roots already known to be a container's (inside its mount
    /// namespace, where its root is `/`).
    pub fn open_container(path: impl AsRef<Path>) -> Result<Root, RootError> {
        let root = Root::open(path)?;
        let md = fstat(root.fd.as_fd()).map_err(|source| RootError::OpenRoot {
            path: root.path.clone(),
            source,
        })?;
        check_not_host_dir(&root.path, &md)?;
        Ok(root)
    }

    /// The host path the root was opened from (for messages only; it is
    /// never used to reach files).
    pub fn host_path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn io_err(&self, path: &str, op: &'static str, source: io::Error) -> RootError {
        RootError::Io {
            root: self.path.clone(),
            path: path.to_string(),
            op,
            source,
        }
    }

    /// `openat2` from the root with in-root resolution.
    fn open_in_root(
        &self,
        path: &str,
        flags: i32,
        resolve: u64,
        op: &'static str,
    ) -> Result<OwnedFd, RootError> {
        let rel = relative_cstring(path)?;
        openat2(self.fd.as_fd(), &rel, flags, resolve).map_err(|e| self.io_err(path, op, e))
    }

    /// Opens `path` for reading, following symlinks inside the root. Only
    /// regular files are opened (a FIFO or a device planted in the image
    /// could otherwise block or have side effects on open).
    ///
    /// A file replaced by a rename between the type check and the open (another container's
    /// hook rewriting `/etc/ld.so.cache` in a shared rootfs) is checked again, up to
    /// [`REPLACED_RETRIES`] times: only a path that keeps changing is [`RootError::Raced`].
    pub fn open_read(&self, path: &str) -> Result<File, RootError> {
        self.open_read_seen(path).map(|(file, _)| file)
    }

    /// [`Root::open_read`] with what `fstat` said of the file opened.
    fn open_read_seen(&self, path: &str) -> Result<(File, Metadata), RootError> {
        for _ in 0..REPLACED_RETRIES {
            let probe = self.open_in_root(path, libc::O_PATH, IN_ROOT, "open")?;
            let before = fstat(probe.as_fd()).map_err(|e| self.io_err(path, "stat", e))?;
            if before.kind != FileKind::File {
                return Err(RootError::NotRegular {
                    root: self.path.clone(),
                    path: path.to_string(),
                    kind: before.kind,
                });
            }
            let fd = self.open_in_root(
                path,
                libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
                IN_ROOT,
                "open",
            )?;
            let after = fstat(fd.as_fd()).map_err(|e| self.io_err(path, "stat", e))?;
            if after.same_inode(&before) {
                return Ok((File::from(fd), after));
            }
        }
        Err(RootError::Raced {
            root: self.path.clone(),
            path: path.to_string(),
            resolved: path.to_string(),
        })
    }

    /// Reads a whole regular file, refusing files larger than `cap` bytes.
    pub fn read_to_vec(&self, path: &str, cap: u64) -> Result<Vec<u8>, RootError> {
        let (file, seen) = self.open_read_seen(path)?;
        self.read_capped(file, seen.size, path, cap)
    }

    /// The bytes of `file` (`size` as `fstat` gave it), refusing more than `cap`: one read
    /// where the file is still that size ([`crate::sized::read_sized`]).
    fn read_capped(
        &self,
        file: impl Read,
        size: u64,
        path: &str,
        cap: u64,
    ) -> Result<Vec<u8>, RootError> {
        let too_large = |size| RootError::TooLarge {
            root: self.path.clone(),
            path: path.to_string(),
            size,
            cap,
        };
        if size > cap {
            return Err(too_large(size));
        }
        let buf =
            crate::sized::read_sized(file, size, cap).map_err(|e| self.io_err(path, "read", e))?;
        if buf.len() as u64 > cap {
            return Err(too_large(buf.len() as u64));
        }
        Ok(buf)
    }

    /// The entry names of directory `path` (symlinks followed inside the
    /// root), sorted, without `.` and `..`. Names that are not UTF-8 are
    /// left out: nothing we look for has one. Fails with
    /// [`RootError::TooManyEntries`] as soon as the directory holds more
    /// than `cap` entries, so an image cannot make us read and sort a
    /// million names: there is no uncapped listing of a container root.
    pub fn read_dir_names_limited(&self, path: &str, cap: usize) -> Result<Vec<String>, RootError> {
        self.open_dir(path)?.names(cap)
    }

    /// Opens directory `path` (symlinks followed inside the root) for
    /// listing and for single-name lookups relative to it, which cost one
    /// path component each instead of a walk from the root.
    pub fn open_dir(&self, path: &str) -> Result<Dir<'_>, RootError> {
        if let Some(fd) = self.kept_dir(path, true) {
            return Ok(Dir {
                root: self,
                fd,
                path: path.to_string(),
            });
        }
        if self.known_absent(path) {
            let e = io::Error::from_raw_os_error(libc::ENOENT);
            return Err(self.io_err(path, "open directory", e));
        }
        let fd = self.open_in_root(
            path,
            libc::O_RDONLY | libc::O_DIRECTORY,
            IN_ROOT,
            "open directory",
        )?;
        Ok(Dir {
            root: self,
            fd: DirFd::new(fd, true),
            path: path.to_string(),
        })
    }

    /// `stat` of `path`, following symlinks inside the root.
    pub fn metadata(&self, path: &str) -> Result<Metadata, RootError> {
        let fd = self.open_in_root(path, libc::O_PATH, IN_ROOT, "stat")?;
        fstat(fd.as_fd()).map_err(|e| self.io_err(path, "stat", e))
    }

    /// `lstat` of `path`: the parent is resolved inside the root, the last
    /// component is not followed.
    pub fn symlink_metadata(&self, path: &str) -> Result<Metadata, RootError> {
        let (parent, name) = split_parent(path)?;
        let dir = self.open_in_root(
            &parent,
            libc::O_PATH | libc::O_DIRECTORY,
            IN_ROOT,
            "open parent",
        )?;
        fstatat_nofollow(dir.as_fd(), &name).map_err(|e| self.io_err(path, "lstat", e))
    }

    /// Like [`Root::symlink_metadata`], with "does not exist" as `None`.
    pub fn try_symlink_metadata(&self, path: &str) -> Result<Option<Metadata>, RootError> {
        match self.symlink_metadata(path) {
            Ok(m) => Ok(Some(m)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The target of symlink `path` (parent resolved in-root, the link
    /// itself not followed).
    pub fn read_link(&self, path: &str) -> Result<OsString, RootError> {
        let (parent, name) = split_parent(path)?;
        let dir = self.open_in_root(
            &parent,
            libc::O_PATH | libc::O_DIRECTORY,
            IN_ROOT,
            "open parent",
        )?;
        readlinkat(dir.as_fd(), &name).map_err(|e| self.io_err(path, "readlink", e))
    }

    /// Opens the canonical (symlink-free) component list as a directory,
    /// refusing any symlink on the way.
    fn open_canonical_dir(&self, comps: &[OsString], shown: &str) -> Result<OwnedFd, RootError> {
        self.open_in_root(
            &absolute_path(comps),
            libc::O_PATH | libc::O_DIRECTORY,
            IN_ROOT_NO_SYMLINKS,
            "open directory",
        )
        .map_err(|e| match e {
            RootError::Io { source, op, .. } => self.io_err(shown, op, source),
            other => other,
        })
    }

    /// Where `path` leads inside the root as far as it exists, symlinks
    /// followed component by component, with the components that do not
    /// exist yet appended as they are: what a runtime resolving the path
    /// in-root later will reach, for deciding whether a mount will hide it
    /// (`/usr/lib64 -> /proc/self/root/x` gives `/proc/self/root/x`).
    pub fn resolve_lexically(&self, path: &str) -> Result<String, RootError> {
        let walk = self.walk(path, true)?;
        let mut all = walk.existing;
        all.extend(walk.missing);
        Ok(absolute_path(&all))
    }

    /// The path `path` resolves to inside the root, symlinks followed, as a
    /// container-absolute path (`/usr/local/cuda/compat` →
    /// `/usr/local/cuda-12.9/compat`). The path must exist.
    ///
    /// Computed by walking components (`fstatat` + `readlinkat`), then
    /// verified: the result, opened with no symlink allowed, must be the
    /// same inode as `path` opened with the kernel's in-root resolution.
    ///
    /// Like [`Root::open_read`], a mismatch is walked again (a file replaced by a rename in
    /// between) before it is reported as [`RootError::Raced`].
    pub fn canonicalize(&self, path: &str) -> Result<String, RootError> {
        let mut canonical = String::new();
        for _ in 0..REPLACED_RETRIES {
            let walk = self.walk(path, false)?;
            canonical = absolute_path(&walk.existing);
            let by_kernel = self.metadata(path)?;
            let by_name = self
                .open_in_root(&canonical, libc::O_PATH, IN_ROOT_NO_SYMLINKS, "stat")
                .and_then(|fd| fstat(fd.as_fd()).map_err(|e| self.io_err(path, "stat", e)));
            if matches!(by_name, Ok(m) if m.same_inode(&by_kernel)) {
                return Ok(canonical);
            }
        }
        Err(RootError::Raced {
            root: self.path.clone(),
            path: path.to_string(),
            resolved: canonical,
        })
    }

    /// `mkdir -p` inside the root: follows existing symlinks in-root
    /// (including dangling ones, whose targets are created inside the
    /// root), creates each missing component with `mkdirat` relative to
    /// its symlink-free parent. `mode` is subject to the umask, as mkdir's.
    pub fn mkdir_all(&self, path: &str, mode: u32) -> Result<(), RootError> {
        if self.open_symlink_free_dir(path).is_some() {
            return Ok(());
        }
        self.mkdir_all_walk(path, mode)
    }

    /// [`Root::mkdir_all`], and the folder then opened as the kernel resolves `path` in the
    /// root (`O_PATH`: for the `*at` calls of [`Dir`], not for listing it), as
    /// [`Root::write_file_atomic`] and [`Root::symlink_force`] open a parent: so the files put
    /// into it cost no resolution each. A folder that exists, with no symlink on its path, costs
    /// one in-root open, no walk.
    pub fn mkdir_all_open(&self, path: &str, mode: u32) -> Result<Dir<'_>, RootError> {
        if let Some(fd) = self.kept_dir(path, false) {
            return Ok(Dir {
                root: self,
                fd,
                path: path.to_string(),
            });
        }
        // Below a kept folder (one the resolver walked, `/etc`): the missing rest made from
        // it, each name opened following nothing, with no walk and no resolution from the root.
        if let Some(fd) = self.mkdir_below_kept(path, mode) {
            return Ok(Dir {
                root: self,
                fd: DirFd::new(fd, false),
                path: path.to_string(),
            });
        }
        let fd = match self.open_symlink_free_dir(path) {
            Some(fd) => fd,
            None => {
                self.mkdir_all_walk(path, mode)?;
                self.open_in_root(
                    path,
                    libc::O_PATH | libc::O_DIRECTORY,
                    IN_ROOT,
                    "open directory",
                )?
            }
        };
        Ok(Dir {
            root: self,
            fd: DirFd::new(fd, false),
            path: path.to_string(),
        })
    }

    /// [`Root::mkdir_all_open`] from the longest kept folder that is a proper prefix of `path`:
    /// each further name made (`mkdirat`, one that is there already is fine) and opened as one
    /// name following nothing. `None` where `path` has no kept prefix, a component that is not
    /// plain, or a name on the way that is not a folder (a symlink): the caller then walks, and
    /// the folders made here are those the walk would have made.
    fn mkdir_below_kept(&self, path: &str, mode: u32) -> Option<OwnedFd> {
        if self.kept.is_empty() {
            return None;
        }
        let comps: Vec<&str> = plain_key(path)?.split('/').collect();
        let (base, rest) = (1..comps.len())
            .rev()
            .find_map(|n| Some((self.kept.get(&comps[..n].join("/"))?, &comps[n..])))?;
        let mut fd: Option<OwnedFd> = None;
        for c in rest {
            let cname = CString::new(*c).ok()?;
            let at = fd.as_ref().map_or(base.fd.as_fd(), |f| f.as_fd());
            let (next, made) = mkdir_step(at, OsStr::new(c), &cname, mode).ok()?;
            // Made in the kept folder: its kept listing says so; made deeper, in a folder
            // opened here: the root's other listings are stale all the same.
            match (made, fd.is_none()) {
                (true, true) => self.changed_in(base, c, Some(rustix::fs::FileType::Directory)),
                (true, false) => self.changed(),
                (false, _) => {}
            }
            fd = Some(next);
        }
        fd
    }

    /// Folder `path` when it exists with no symlink on its way: where the walk would find it,
    /// and where the kernel's in-root resolution does. `None` for anything else (a missing
    /// component, a symlink, which the walk follows under its own budget and rules), so that
    /// it is walked and gives what it always gave.
    fn open_symlink_free_dir(&self, path: &str) -> Option<OwnedFd> {
        self.open_in_root(
            path,
            libc::O_PATH | libc::O_DIRECTORY,
            IN_ROOT_NO_SYMLINKS,
            "open directory",
        )
        .ok()
    }

    /// Counts a change of the root's names: every listing kept on a folder's descriptor is
    /// stale from now on ([`Root::changes`]). Called after the change, whether it was made in
    /// whole or in part: a listing read meanwhile holds the count from before.
    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
    }

    /// [`Dir::changed`] for folder descriptor `fd`: entry `name` of it is now of kind `now`.
    fn changed_in(&self, fd: &DirFd, name: &str, now: Option<rustix::fs::FileType>) {
        let mut kept = fd.listing.lock().unwrap_or_else(PoisonError::into_inner);
        let before = self.changes.fetch_add(1, Ordering::SeqCst);
        match (kept.as_mut(), now) {
            (Some(l), Some(kind)) if l.changes == before => {
                let l = Arc::make_mut(l);
                l.set(name.as_bytes(), kind);
                l.changes = before + 1;
            }
            _ => *kept = None,
        }
    }

    /// The walk of [`Root::mkdir_all`].
    fn mkdir_all_walk(&self, path: &str, mode: u32) -> Result<(), RootError> {
        let found = self.walk(path, true)?;
        let mut fd = self.open_canonical_dir(&found.existing, path)?;
        if !found.missing.is_empty() {
            // Made in folders opened by path, not through the descriptors kept listings are on.
            let made = self.mkdir_missing(&mut fd, found.missing, path, mode);
            self.changed();
            made?;
        }
        Ok(())
    }

    /// Makes the folders `missing`, one in the other, in folder `fd`, which ends on the last.
    fn mkdir_missing(
        &self,
        fd: &mut OwnedFd,
        missing: Vec<OsString>,
        path: &str,
        mode: u32,
    ) -> Result<(), RootError> {
        for c in missing {
            let cname = name_cstring(&c, path)?;
            *fd = mkdir_step(fd.as_fd(), &c, &cname, mode)
                .map_err(|(op, e)| self.io_err(path, op, e))?
                .0;
        }
        Ok(())
    }

    /// Opens the parent directory of `path` (in-root) for `*at` calls and
    /// returns it with the final name.
    fn parent_dir(&self, path: &str) -> Result<(OwnedFd, OsString), RootError> {
        let (parent, name) = split_parent(path)?;
        let dir = self.open_in_root(
            &parent,
            libc::O_RDONLY | libc::O_DIRECTORY,
            IN_ROOT,
            "open parent directory",
        )?;
        Ok((dir, name))
    }

    /// Replaces (or creates) regular file `path` atomically: the bytes go to
    /// a new temporary file (`O_CREAT|O_EXCL|O_NOFOLLOW`) in the same in-root
    /// directory, which is given `mode` and renamed over `path`. Nothing is
    /// fsynced: the files we write into a container root are written again
    /// at every container create, so a power cut costs nothing that the next
    /// start does not redo, and an fsync cost milliseconds per start. A
    /// symlink at `path` is replaced, never followed; a directory there is
    /// an error. A failure leaves the old file in place. The parent
    /// directory must exist.
    pub fn write_file_atomic(&self, path: &str, bytes: &[u8], mode: u32) -> Result<(), RootError> {
        let (dir, name) = self.parent_dir(path)?;
        let dfd = dir.as_fd();
        self.refuse_directory(dfd, &name, path)?;
        let replaced = self.replace_at(dfd, &name, path, bytes, mode);
        // In a folder opened by path (see [`Root::changes`]).
        self.changed();
        replaced
    }

    /// The atomic replace of [`Root::write_file_atomic`] in the open folder `dfd`, once a
    /// directory at `name` has been refused; `path` names it in messages.
    fn replace_at(
        &self,
        dfd: BorrowedFd<'_>,
        name: &OsStr,
        path: &str,
        bytes: &[u8],
        mode: u32,
    ) -> Result<(), RootError> {
        let tmp = temp_name(name);
        let ctmp = name_cstring(&tmp, path)?;
        let fd = sys::openat(
            dfd,
            &ctmp,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
            0o600,
        )
        .map_err(|e| self.io_err(path, "create temporary file", e))?;
        let mut file = File::from(fd);
        let written = (|| -> Result<(), (&'static str, io::Error)> {
            file.write_all(bytes).map_err(|e| ("write", e))?;
            sys::fchmod(file.as_fd(), mode).map_err(|e| ("chmod", e))?;
            rename_at(dfd, &tmp, name).map_err(|e| ("rename", e))
        })();
        if let Err((op, e)) = written {
            // Failure to remove it is harmless: a temporary name, swept later.
            let _ = sys::unlinkat(dfd, &ctmp, false);
            if op == "rename" && e.raw_os_error() == Some(libc::EISDIR) {
                return Err(RootError::IsDirectory {
                    root: self.path.clone(),
                    path: path.to_string(),
                });
            }
            return Err(self.io_err(path, op, e));
        }
        Ok(())
    }

    fn refuse_directory(
        &self,
        dfd: BorrowedFd<'_>,
        name: &OsStr,
        path: &str,
    ) -> Result<(), RootError> {
        match fstatat_nofollow(dfd, name) {
            Ok(m) if m.kind == FileKind::Dir => Err(RootError::IsDirectory {
                root: self.path.clone(),
                path: path.to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// `ln -sf target link` inside the root: the parent of `link` is
    /// resolved in-root and must exist; an existing link with the same
    /// target is left alone, a file or another link is replaced atomically
    /// (new link under a temporary name, then `renameat`), a directory is
    /// refused. `target` is stored verbatim: it is resolved later, by the
    /// container, inside its own root.
    pub fn symlink_force(&self, target: &str, link: &str) -> Result<LinkOutcome, RootError> {
        let ctarget = symlink_target(target)?;
        let (dir, name) = self.parent_dir(link)?;
        let linked = self.symlink_force_at(dir.as_fd(), &name, &ctarget, link, false);
        if !matches!(linked, Ok(LinkOutcome::Unchanged)) {
            // In a folder opened by path (see [`Root::changes`]).
            self.changed();
        }
        linked
    }

    /// [`Root::symlink_force`] of `name` in the open folder `dfd`; `link` names it in messages.
    /// `listed`: a current listing of the folder holds `name`.
    fn symlink_force_at(
        &self,
        dfd: BorrowedFd<'_>,
        name: &OsStr,
        ctarget: &CStr,
        link: &str,
        listed: bool,
    ) -> Result<LinkOutcome, RootError> {
        // One call for what is there: in a new container's root (engines give every new
        // container a new one), nothing, so the link is made first; where a listing shows the
        // name (a container started again on its old root), it is read first.
        let cname = name_cstring(name, link)?;
        let mut made = if listed {
            None
        } else {
            match sys::symlinkat(ctarget, dfd, &cname) {
                Ok(()) => return Ok(LinkOutcome::Created),
                Err(e) => Some(e),
            }
        };
        let current = readlinkat(dfd, name);
        if current
            .as_ref()
            .is_ok_and(|c| c.as_bytes() == ctarget.to_bytes())
        {
            // There already: nothing to write (on a read-only root too).
            return Ok(LinkOutcome::Unchanged);
        }
        if let Some(e) = made.take_if(|e| e.raw_os_error() != Some(libc::EEXIST)) {
            return Err(self.io_err(link, "symlink", e));
        }
        match current {
            Ok(_) => {}
            // Not there after all (the listing is older): made now.
            Err(e) if made.is_none() && e.raw_os_error() == Some(libc::ENOENT) => {
                let Err(e) = sys::symlinkat(ctarget, dfd, &cname) else {
                    return Ok(LinkOutcome::Created);
                };
                if e.raw_os_error() != Some(libc::EEXIST) {
                    return Err(self.io_err(link, "symlink", e));
                }
                // Something appeared meanwhile: replaced below, unless a folder.
                self.refuse_directory(dfd, name, link)?;
            }
            // Gone meanwhile: the rename below puts the link there all the same.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            // Not a symlink: a directory is refused, anything else replaced.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => match fstatat_nofollow(dfd, name) {
                Ok(m) if m.kind == FileKind::Dir => {
                    return Err(RootError::IsDirectory {
                        root: self.path.clone(),
                        path: link.to_string(),
                    })
                }
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(self.io_err(link, "lstat", e)),
            },
            Err(e) => return Err(self.io_err(link, "readlink", e)),
        }
        let tmp = temp_name(name);
        let ctmp = name_cstring(&tmp, link)?;
        sys::symlinkat(ctarget, dfd, &ctmp).map_err(|e| self.io_err(link, "symlink", e))?;
        if let Err(e) = rename_at(dfd, &tmp, name) {
            // Failure to remove it is harmless: a temporary name, swept later.
            let _ = sys::unlinkat(dfd, &ctmp, false);
            return Err(self.io_err(link, "rename", e));
        }
        Ok(LinkOutcome::Replaced)
    }

    /// `chmod mode path` inside the root, symlinks followed in-root.
    ///
    /// The file is opened with `O_PATH` through in-root resolution and its
    /// mode changed through that descriptor with `fchmodat2(fd, "",
    /// AT_EMPTY_PATH)` (Linux ≥ 6.6), so exactly the inode found inside the
    /// root changes. On older kernels the path is first made symlink-free
    /// with [`Root::canonicalize`]; directories and regular files are then
    /// opened by that name (`O_NOFOLLOW`, `RESOLVE_NO_SYMLINKS`), checked to
    /// be the same inode and `fchmod`ed; other types (device nodes, which
    /// must not be opened) are checked with `fstatat(AT_SYMLINK_NOFOLLOW)`
    /// in their symlink-free parent and changed by `fchmodat` on that
    /// single name (a swap to a symlink between the check and the call is
    /// the one window left, on old kernels only).
    pub fn chmod(&self, path: &str, mode: u32) -> Result<(), RootError> {
        // A mode changes no name and no entry's kind: the kept listings hold.
        self.chmod_impl(path, mode, true)
    }

    fn chmod_impl(&self, path: &str, mode: u32, try_fchmodat2: bool) -> Result<(), RootError> {
        let fd = self.open_in_root(path, libc::O_PATH, IN_ROOT, "open")?;
        if try_fchmodat2 {
            match sys::fchmodat2_empty(fd.as_fd(), mode) {
                Ok(()) => return Ok(()),
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENOSYS) | Some(libc::EINVAL) | Some(libc::EOPNOTSUPP)
                    ) => {}
                Err(e) => return Err(self.io_err(path, "chmod", e)),
            }
        }
        let before = fstat(fd.as_fd()).map_err(|e| self.io_err(path, "stat", e))?;
        let flags = match before.kind {
            FileKind::Dir => Some(libc::O_RDONLY | libc::O_DIRECTORY),
            FileKind::File => Some(libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY),
            _ => None,
        };
        let canonical = self.canonicalize(path)?;
        if let Some(flags) = flags {
            let fd = self.open_in_root(
                &canonical,
                flags | libc::O_NOFOLLOW,
                IN_ROOT_NO_SYMLINKS,
                "open",
            )?;
            let now = fstat(fd.as_fd()).map_err(|e| self.io_err(path, "stat", e))?;
            if !now.same_inode(&before) {
                return Err(RootError::Raced {
                    root: self.path.clone(),
                    path: path.to_string(),
                    resolved: path.to_string(),
                });
            }
            sys::fchmod(fd.as_fd(), mode).map_err(|e| self.io_err(path, "chmod", e))?;
            return Ok(());
        }
        let (parent, name) = split_parent(&canonical)?;
        let dir = self.open_in_root(
            &parent,
            libc::O_PATH | libc::O_DIRECTORY,
            IN_ROOT_NO_SYMLINKS,
            "open parent",
        )?;
        let now =
            fstatat_nofollow(dir.as_fd(), &name).map_err(|e| self.io_err(path, "lstat", e))?;
        if now.kind == FileKind::Symlink || !now.same_inode(&before) {
            return Err(RootError::Raced {
                root: self.path.clone(),
                path: path.to_string(),
                resolved: canonical,
            });
        }
        let cname = name_cstring(&name, path)?;
        sys::fchmodat(dir.as_fd(), &cname, mode).map_err(|e| self.io_err(path, "chmod", e))
    }
}

/// `path` as the key of the folders and missing names a [`LexicalResolver`] hands its root
/// (`usr/lib`, by symlink-free path); `None` for the root itself and for a path with an empty,
/// `.` or `..` component, which is resolved as ever.
fn plain_key(path: &str) -> Option<&str> {
    let key = path.trim_start_matches('/').trim_end_matches('/');
    let plain = !key
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..");
    plain.then_some(key)
}

/// Path components without empty ones and `.`; `..` kept.
fn components(bytes: &[u8]) -> impl Iterator<Item = OsString> + '_ {
    bytes
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(|c| OsString::from_vec(c.to_vec()))
}

/// `/` and the components joined by `/`, each as lossy UTF-8: built in one string (a create
/// makes one per path it resolves; a `format!` of a joined `Vec` cost three allocations more).
fn absolute_path(comps: &[OsString]) -> String {
    let mut s = String::with_capacity(comps.iter().map(|c| c.len() + 1).sum::<usize>().max(1));
    for c in comps {
        s.push('/');
        s.push_str(&c.to_string_lossy());
    }
    if s.is_empty() {
        s.push('/');
    }
    s
}

fn check_path(path: &str) -> Result<(), RootError> {
    if path.contains('\0') {
        return Err(RootError::InvalidPath {
            path: path.to_string(),
            reason: "contains a NUL byte",
        });
    }
    Ok(())
}

/// A symlink target as [`Root::symlink_force`] takes it: not empty, no NUL.
fn symlink_target(target: &str) -> Result<CString, RootError> {
    CString::new(target)
        .ok()
        .filter(|_| !target.is_empty())
        .ok_or_else(|| RootError::InvalidPath {
            path: target.to_string(),
            reason: "a symlink target must be non-empty and contain no NUL",
        })
}

/// The path relative to the root for openat2 (`.` for the root itself).
fn relative_cstring(path: &str) -> Result<CString, RootError> {
    check_path(path)?;
    let rel = path.trim_start_matches('/');
    let rel = if rel.is_empty() { "." } else { rel };
    Ok(CString::new(rel).expect("checked for NUL"))
}

fn name_cstring(name: &OsStr, path: &str) -> Result<CString, RootError> {
    CString::new(name.as_bytes()).map_err(|_| RootError::InvalidPath {
        path: path.to_string(),
        reason: "contains a NUL byte",
    })
}

/// Splits a container path into its parent (as a path) and final name,
/// which must be a plain name (not `.`, `..` or empty).
pub(crate) fn split_parent(path: &str) -> Result<(String, OsString), RootError> {
    check_path(path)?;
    let trimmed = path.trim_end_matches('/');
    let (parent, name) = match trimmed.rfind('/') {
        Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
        None => ("", trimmed),
    };
    if name.is_empty() || name == "." || name == ".." {
        return Err(RootError::InvalidPath {
            path: path.to_string(),
            reason: "the last component must be a file name (not empty, `.` or `..`)",
        });
    }
    let parent = if parent.is_empty() { "/" } else { parent };
    Ok((parent.to_string(), OsString::from(name)))
}

fn temp_name(name: &OsStr) -> OsString {
    let n = TMP_SERIAL.fetch_add(1, Ordering::Relaxed);
    let mut t = OsString::from(".");
    // Keep the name short enough for NAME_MAX even for long final names.
    let bytes = name.as_bytes();
    t.push(OsStr::from_bytes(&bytes[..bytes.len().min(200)]));
    t.push(format!(".gpuctk-{}-{n}", process_id()));
    t
}

/// Folder `name` (`cname`) of folder `at`, made where missing (one that is there is fine), then
/// opened as that one name following nothing: if something raced a symlink into place, this
/// fails instead of escaping. Whether it was made; the failing step's name on an error.
fn mkdir_step(
    at: BorrowedFd<'_>,
    name: &OsStr,
    cname: &CStr,
    mode: u32,
) -> Result<(OwnedFd, bool), (&'static str, io::Error)> {
    let made = match sys::mkdirat(at, cname, mode) {
        Ok(()) => true,
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => false,
        Err(e) => return Err(("mkdir", e)),
    };
    let fd = walk::open_child_dir(at, name).map_err(|e| ("open directory", e))?;
    Ok((fd, made))
}

/// This process's id, asked once: musl keeps no copy, so every `getpid` is a system call, and
/// a create names two or three temp files. (The binary never forks without an exec.)
fn process_id() -> u32 {
    static PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *PID.get_or_init(std::process::id)
}

/// The crate's one `openat2(2)`: `path` relative to `dirfd` with the `RESOLVE_*` bits in
/// `resolve`, always `O_CLOEXEC`, never creating (mode 0). Retried on `EAGAIN`, which
/// `RESOLVE_IN_ROOT` returns when a concurrent rename could have let `..` escape (the documented
/// answer is to retry), and on `EINTR`.
///
/// Any rename or mount on the machine during a lookup through `..` gives `EAGAIN`, so on a busy
/// host tight retries can all lose: after [`QUICK_RETRIES`] the retries back off, and give up
/// once [`RETRY_SLEEP_BUDGET`] has been slept (a rename storm in the image costs that much, no
/// more).
///
/// Where the kernel has no `openat2` (`ENOSYS`, before Linux 5.6), the first call learns it and
/// this and every later call resolve the path in userspace with the same rules (`opath`).
pub(crate) fn openat2(
    dirfd: BorrowedFd<'_>,
    path: &CStr,
    flags: i32,
    resolve: u64,
) -> io::Result<OwnedFd> {
    #[cfg(test)]
    OPENAT2_PATH_BYTES.with(|c| c.set(c.get() + path.to_bytes().len() as u64));
    let mut slept = std::time::Duration::ZERO;
    for attempt in 0u32.. {
        if attempt > QUICK_RETRIES {
            if slept >= RETRY_SLEEP_BUDGET {
                break;
            }
            // 50 µs doubling to 3.2 ms.
            let pause = std::time::Duration::from_micros(50 << (attempt - QUICK_RETRIES).min(6));
            std::thread::sleep(pause);
            slept += pause;
        }
        let result = if opath::emulating() {
            opath::openat2(dirfd, path, flags, resolve)
        } else {
            let result = sys::openat2(dirfd, path, flags, resolve);
            opath::learn(&result);
            if opath::emulating() {
                // Before Linux 5.6: resolve in userspace from now on.
                opath::openat2(dirfd, path, flags, resolve)
            } else {
                result
            }
        };
        let e = match result {
            Ok(fd) => return Ok(fd),
            Err(e) => e,
        };
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
    Err(io::Error::from_raw_os_error(libc::EAGAIN))
}

/// How often [`Root::open_read`] and [`Root::canonicalize`] check a path again whose file was replaced under it.
const REPLACED_RETRIES: usize = 64;

/// `EAGAIN` retries of [`openat2`] made at once.
const QUICK_RETRIES: u32 = 32;
/// The most [`openat2`] sleeps between retries before it reports `EAGAIN`.
const RETRY_SLEEP_BUDGET: std::time::Duration = std::time::Duration::from_millis(100);

/// Whether `file`, just opened, holds exactly `bytes`. The caller compares its size (from
/// `lstat`) with `bytes` first: a file of another size differs without being read. One read of
/// one byte more than `bytes` then says it all (a longer file differs; a short read is its end).
fn same_bytes(file: &File, bytes: &[u8]) -> io::Result<bool> {
    let len = bytes.len() as u64;
    Ok(crate::sized::read_sized(file, len, len)? == bytes)
}

fn fstat(fd: BorrowedFd<'_>) -> io::Result<Metadata> {
    Ok(Metadata::from_stat(&sys::fstat(fd)?))
}

fn cstring(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn fstatat_nofollow(dirfd: BorrowedFd<'_>, name: &OsStr) -> io::Result<Metadata> {
    #[cfg(test)]
    LSTATS.with(|c| c.set(c.get() + 1));
    Ok(Metadata::from_stat(&sys::fstatat_nofollow(
        dirfd,
        &cstring(name)?,
    )?))
}

/// The target of symlink `name` (`""`: the `O_PATH` descriptor `dirfd` itself), at most
/// `PATH_MAX` bytes.
fn readlinkat(dirfd: BorrowedFd<'_>, name: &OsStr) -> io::Result<OsString> {
    sys::readlinkat(dirfd, &cstring(name)?, libc::PATH_MAX as usize)
}

fn rename_at(dirfd: BorrowedFd<'_>, from: &OsStr, to: &OsStr) -> io::Result<()> {
    sys::renameat(dirfd, &cstring(from)?, &cstring(to)?)
}

/// The kind a directory entry's `d_type` says, `None` for `DT_UNKNOWN`.
fn dirent_kind(t: rustix::fs::FileType) -> Option<FileKind> {
    (t != rustix::fs::FileType::Unknown).then(|| FileKind::from_mode(t.as_raw_mode()))
}

/// Why [`Dir::names_where`] stopped reading.
enum Stop {
    Keep(RootError),
    Cap,
}

/// A directory inside a [`Root`], opened once ([`Root::open_dir`], [`Dir::open_dir`]; or by
/// [`Root::mkdir_all_open`] with `O_PATH`, for lookups and files in it but not for listing), so
/// that each file in it is reached by a single name, with no resolution from the root. The
/// descriptor stays on a folder inside the root whatever the image's symlinks do meanwhile.
#[derive(Debug)]
pub struct Dir<'r> {
    root: &'r Root,
    fd: Arc<DirFd>,
    path: String,
}

impl<'r> Dir<'r> {
    fn child(&self, name: &str) -> String {
        if self.path.ends_with('/') {
            format!("{}{name}", self.path)
        } else {
            format!("{}/{name}", self.path)
        }
    }

    /// The entry names, sorted, without `.` and `..` (non-UTF-8 names left
    /// out); [`RootError::TooManyEntries`] past `cap` entries.
    pub fn names(&self, cap: usize) -> Result<Vec<String>, RootError> {
        self.names_where(cap, |_| Ok(true))
    }

    /// The entry names that `keep` accepts, sorted, reading at most `cap` entries
    /// ([`RootError::TooManyEntries`] past them) and holding only the names kept: how a folder
    /// too full to list is searched for a few entries.
    pub fn names_where(
        &self,
        cap: usize,
        keep: impl FnMut(&str) -> Result<bool, RootError>,
    ) -> Result<Vec<String>, RootError> {
        let entries = self.entries_where(cap, keep)?;
        Ok(entries.into_iter().map(|(n, _)| n).collect())
    }

    /// [`Dir::names`], each with the kind its directory entry gives (`d_type`; `None` where the
    /// file system does not say). A hint only: the entry may change before it is looked at.
    pub fn names_and_kinds(
        &self,
        cap: usize,
    ) -> Result<Vec<(String, Option<FileKind>)>, RootError> {
        self.entries_where(cap, |_| Ok(true))
    }

    /// [`Dir::names_where`] with each name's `d_type` kind.
    fn entries_where(
        &self,
        cap: usize,
        mut keep: impl FnMut(&str) -> Result<bool, RootError>,
    ) -> Result<Vec<(String, Option<FileKind>)>, RootError> {
        let err = |op, e| self.root.io_err(&self.path, op, e);
        let mut names = Vec::new();
        let mut seen = 0usize;
        let result = for_each_listed(self.root, &self.fd, |bytes, kind| {
            if let Ok(s) = std::str::from_utf8(bytes) {
                if seen >= cap {
                    return ControlFlow::Break(Stop::Cap);
                }
                seen += 1;
                match keep(s) {
                    Ok(true) => names.push((s.to_string(), dirent_kind(kind))),
                    Ok(false) => {}
                    Err(e) => return ControlFlow::Break(Stop::Keep(e)),
                }
            }
            ControlFlow::Continue(())
        });
        match result {
            Ok(None) => {}
            Err(e) => return Err(err("read directory", e)),
            Ok(Some(Stop::Keep(e))) => return Err(e),
            Ok(Some(Stop::Cap)) => {
                return Err(RootError::TooManyEntries {
                    root: self.root.path.clone(),
                    path: self.path.clone(),
                    cap,
                })
            }
        }
        names.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(names)
    }

    /// Whether entry `name` is a regular file mounted there (a bind mount, which is how
    /// runtimes and the legacy hook deliver driver libraries), without following a symlink:
    /// `statx`'s `STATX_ATTR_MOUNT_ROOT` (Linux 5.8), or, where the kernel does not report it, a
    /// device other than the folder's. `false` when it does not exist.
    pub fn is_mounted_file(&self, name: &str) -> Result<bool, RootError> {
        let path = self.child(name);
        let c = name_cstring(OsStr::new(name), &path)?;
        let stx = match sys::statx_type_nofollow(self.fd.as_fd(), &c) {
            Ok(stx) => stx,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(false),
            Err(e) => return Err(self.root.io_err(&path, "statx", e)),
        };
        if u32::from(stx.stx_mode) & libc::S_IFMT != libc::S_IFREG {
            return Ok(false);
        }
        let mount_root = rustix::fs::StatxAttributes::MOUNT_ROOT;
        if stx.stx_attributes_mask.contains(mount_root) {
            return Ok(stx.stx_attributes.contains(mount_root));
        }
        let dir = fstat(self.fd.as_fd()).map_err(|e| self.root.io_err(&self.path, "stat", e))?;
        Ok(sys::makedev(stx.stx_dev_major, stx.stx_dev_minor) != dir.dev)
    }

    /// The folder's device and inode (`fstat` of its descriptor): which folder it is, however
    /// it was reached.
    pub fn id(&self) -> Result<(u64, u64), RootError> {
        if let Some(id) = self.fd.id.get() {
            return Ok(*id);
        }
        self.metadata().map(|m| (m.dev, m.ino))
    }

    /// What the folder is now (its `fstat`), which also gives [`Dir::id`] from then on.
    pub fn metadata(&self) -> Result<Metadata, RootError> {
        let m = fstat(self.fd.as_fd()).map_err(|e| self.root.io_err(&self.path, "stat", e))?;
        self.fd.id.get_or_init(|| (m.dev, m.ino));
        Ok(m)
    }

    /// The target of symlink entry `name`, not followed; `None` when it does not exist or is
    /// not a symlink (any more).
    pub fn read_link(&self, name: &str) -> Result<Option<OsString>, RootError> {
        Ok(match self.look_link(name)? {
            LinkLook::Target(t) => Some(t),
            LinkLook::Absent | LinkLook::NotLink => None,
        })
    }

    /// [`Dir::read_link`] telling apart why there is no target: one `readlinkat`, which is all
    /// a link or a missing name costs.
    pub fn look_link(&self, name: &str) -> Result<LinkLook, RootError> {
        match readlinkat(self.fd.as_fd(), OsStr::new(name)) {
            Ok(t) => Ok(LinkLook::Target(t)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(LinkLook::Absent),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(LinkLook::NotLink),
            Err(e) => Err(self.root.io_err(&self.child(name), "readlink", e)),
        }
    }

    /// `lstat` of entry `name`; `None` when it does not exist.
    pub fn lstat(&self, name: &str) -> Result<Option<Metadata>, RootError> {
        match fstatat_nofollow(self.fd.as_fd(), OsStr::new(name)) {
            Ok(m) => Ok(Some(m)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(self.root.io_err(&self.child(name), "lstat", e)),
        }
    }

    /// [`Root::symlink_force`] of entry `name`: the folder is open already, nothing is walked.
    pub fn symlink_force(&self, target: &str, name: &str) -> Result<LinkOutcome, RootError> {
        let ctarget = symlink_target(target)?;
        let link = self.child(name);
        // One name in this folder: `symlinkat` must not resolve anything.
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(RootError::InvalidPath {
                path: link,
                reason:
                    "a link in a folder must be a file name (not empty, `.`, `..` or with a `/`)",
            });
        }
        let listed = self
            .fd
            .kept_listing(self.root.changes.load(Ordering::SeqCst))
            .is_some_and(|l| l.iter().any(|(n, _)| n == name.as_bytes()));
        let linked =
            self.root
                .symlink_force_at(self.fd.as_fd(), OsStr::new(name), &ctarget, &link, listed);
        match linked {
            Ok(LinkOutcome::Unchanged) => {}
            Ok(LinkOutcome::Created | LinkOutcome::Replaced) => {
                self.changed(name, Some(rustix::fs::FileType::Symlink))
            }
            Err(_) => self.changed(name, None),
        }
        linked
    }

    /// After a change made through this folder's descriptor: entry `name` is now of kind `now`
    /// (`None`: not known, a change that failed part way), and the listing kept on the
    /// descriptor, where it was current, is updated to say so (or dropped). Every other listing
    /// of the root is stale ([`Root::changes`]): another descriptor of this same folder may
    /// hold one.
    fn changed(&self, name: &str, now: Option<rustix::fs::FileType>) {
        self.root.changed_in(&self.fd, name, now);
    }

    /// A single name of this folder, checked to be one: `*at` calls on it must resolve nothing.
    fn single_name(&self, name: &str) -> Result<CString, RootError> {
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(RootError::InvalidPath {
                path: self.child(name),
                reason:
                    "a name in a folder must be a file name (not empty, `.`, `..` or with a `/`)",
            });
        }
        name_cstring(OsStr::new(name), &self.child(name))
    }

    /// [`Root::write_file_atomic`] of entry `name`: the folder is open already, nothing is
    /// walked.
    pub fn write_file_atomic(&self, name: &str, bytes: &[u8], mode: u32) -> Result<(), RootError> {
        self.single_name(name)?;
        let path = self.child(name);
        let dfd = self.fd.as_fd();
        self.root.refuse_directory(dfd, OsStr::new(name), &path)?;
        let replaced = self
            .root
            .replace_at(dfd, OsStr::new(name), &path, bytes, mode);
        self.replaced(name, &replaced);
        replaced
    }

    /// [`Dir::changed`] after a file `name` was written over by [`Root::replace_at`] (or not:
    /// its temporary name may be left behind).
    fn replaced(&self, name: &str, outcome: &Result<(), RootError>) {
        let now = outcome.is_ok().then_some(rustix::fs::FileType::RegularFile);
        self.changed(name, now);
    }

    /// [`Dir::write_file_atomic`], unless entry `name` is a regular file holding `bytes` with
    /// permission bits `mode` already: a container started again on the same root writes the
    /// same files again, and a rename over a file costs the file system far more than reading
    /// it (a writeback and the old inode's eviction). Returns whether it wrote.
    ///
    /// `current` is the entry as the caller read it moments before ([`Dir::read_file`]: what
    /// `lstat` said, and its bytes): when those are `bytes` with `mode`, nothing is looked at
    /// again; when the name is still that inode, its bytes are not read again.
    pub fn write_file_if_changed(
        &self,
        name: &str,
        bytes: &[u8],
        mode: u32,
        current: Option<(&Metadata, &[u8])>,
    ) -> Result<bool, RootError> {
        self.single_name(name)?;
        let path = self.child(name);
        if let Some((seen, old)) = current {
            if seen.kind == FileKind::File && seen.mode == mode && old == bytes {
                return Ok(false);
            }
            // A file read moments ago, and not these bytes: replaced with no second look (a
            // folder put there meanwhile fails the rename, `EISDIR`).
            if seen.kind == FileKind::File {
                let replaced =
                    self.root
                        .replace_at(self.fd.as_fd(), OsStr::new(name), &path, bytes, mode);
                self.replaced(name, &replaced);
                return replaced.map(|()| true);
            }
        }
        self.write_file_if_changed_as(name, bytes, mode, current, self.lstat(name)?)
    }

    /// [`Dir::write_file_if_changed`] with the entry's `lstat` taken already (`there`).
    pub fn write_file_if_changed_as(
        &self,
        name: &str,
        bytes: &[u8],
        mode: u32,
        current: Option<(&Metadata, &[u8])>,
        there: Option<Metadata>,
    ) -> Result<bool, RootError> {
        self.single_name(name)?;
        let path = self.child(name);
        if there.as_ref().is_some_and(|m| m.kind == FileKind::Dir) {
            return Err(RootError::IsDirectory {
                root: self.root.path.clone(),
                path,
            });
        }
        if let Some(m) = there.filter(|m| m.may_hold(bytes.len(), mode)) {
            let same = match current {
                // Read moments ago, and not these bytes (above).
                Some((seen, _)) if seen.same_inode(&m) => false,
                _ => match self.open_file(name, &m)? {
                    Some(f) => {
                        same_bytes(&f, bytes).map_err(|e| self.root.io_err(&path, "read", e))?
                    }
                    None => false,
                },
            };
            if same {
                return Ok(false);
            }
        }
        let replaced = self
            .root
            .replace_at(self.fd.as_fd(), OsStr::new(name), &path, bytes, mode);
        self.replaced(name, &replaced);
        replaced.map(|()| true)
    }

    /// Opens sub-folder `name` (the kernel resolving it in the root when it is a symlink) for
    /// listing and lookups: one name from this folder, not a resolution from the root.
    pub fn open_dir(&self, name: &str) -> Result<Dir<'r>, RootError> {
        let c = self.single_name(name)?;
        let path = self.child(name);
        if let Some(fd) = self.root.kept_dir(&path, true) {
            return Ok(Dir {
                root: self.root,
                fd,
                path,
            });
        }
        match openat2(
            self.fd.as_fd(),
            &c,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
        ) {
            Ok(fd) => Ok(Dir {
                root: self.root,
                fd: DirFd::new(fd, true),
                path,
            }),
            // A symlink: resolved as any container path is.
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => self.root.open_dir(&path),
            Err(e) => Err(self.root.io_err(&path, "open directory", e)),
        }
    }

    /// Reads entry `name`, at most `cap` bytes ([`RootError::TooLarge`] past them), when it is a
    /// regular file right here, and returns it with what `lstat` said of it. `None` for
    /// anything else (missing, a symlink, a FIFO, changed meanwhile): the caller then reads the
    /// full path with [`Root::read_to_vec`], which says what it is.
    pub fn read_file(
        &self,
        name: &str,
        cap: u64,
    ) -> Result<Option<(Vec<u8>, Metadata)>, RootError> {
        self.read_file_as(name, self.lstat(name)?, cap)
    }

    /// [`Dir::read_file`] with the entry's `lstat` taken already (`there`).
    pub fn read_file_as(
        &self,
        name: &str,
        there: Option<Metadata>,
        cap: u64,
    ) -> Result<Option<(Vec<u8>, Metadata)>, RootError> {
        let Some(seen) = there else {
            return Ok(None);
        };
        let Some(file) = self.open_file(name, &seen)? else {
            return Ok(None);
        };
        self.read_opened(name, &file, seen, cap).map(Some)
    }

    /// [`Dir::read_file`] of a name a listing of this folder called a regular file: opened with
    /// no `lstat` first ([`Dir::open_regular`], which checks the kind of what it opened).
    pub fn read_listed_file(
        &self,
        name: &str,
        cap: u64,
    ) -> Result<Option<(Vec<u8>, Metadata)>, RootError> {
        match self.open_regular(name)? {
            Some((file, md)) => self.read_opened(name, &file, md, cap).map(Some),
            None => Ok(None),
        }
    }

    /// The bytes of `file`, entry `name` opened, whose `md` says its size, capped at `cap`.
    fn read_opened(
        &self,
        name: &str,
        file: &File,
        md: Metadata,
        cap: u64,
    ) -> Result<(Vec<u8>, Metadata), RootError> {
        let path = self.child(name);
        let mut reader = file;
        let bytes = self.root.read_capped(&mut reader, md.size, &path, cap)?;
        Ok((bytes, md))
    }

    /// Opens entry `name` for reading if it is a regular file when opened (not through a
    /// symlink; `None` for anything else or nothing): for a name a listing called a regular
    /// file, with no `lstat` first. One path component, `O_NONBLOCK` (a FIFO swapped in is not
    /// waited on), and the kind checked on the open file.
    pub fn open_regular(&self, name: &str) -> Result<Option<(File, Metadata)>, RootError> {
        let path = self.child(name);
        let c = name_cstring(OsStr::new(name), &path)?;
        let fd = match openat2(
            self.fd.as_fd(),
            &c,
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_NOFOLLOW,
            libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
        ) {
            Ok(fd) => fd,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ELOOP)) => {
                return Ok(None)
            }
            Err(e) => return Err(self.root.io_err(&path, "open", e)),
        };
        let now = fstat(fd.as_fd()).map_err(|e| self.root.io_err(&path, "stat", e))?;
        Ok((now.kind == FileKind::File).then(|| (File::from(fd), now)))
    }

    /// Opens entry `name` for reading if it is a regular file (not through
    /// a symlink: use [`Root::open_read`] on the full path for those), and
    /// only if it is still the inode `seen` (from [`Dir::lstat`]). `None`
    /// when it changed kind or identity meanwhile. One path component,
    /// `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, `O_NONBLOCK`.
    pub fn open_file(&self, name: &str, seen: &Metadata) -> Result<Option<File>, RootError> {
        if seen.kind != FileKind::File {
            return Ok(None);
        }
        Ok(self
            .open_regular(name)?
            .filter(|(_, now)| now.same_inode(seen))
            .map(|(f, _)| f))
    }
}

/// Host directories that are never a container's root (besides `/`): the system directories a
/// confused or hostile engine (or a wrong `--container-spec`) could hand us. Compared by device
/// and inode, so `/bin` and `/usr/bin` on a merged-/usr host, or a bind mount of one, are caught.
const HOST_DIRS: &[&str] = &[
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/media",
    "/mnt",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/srv",
    "/sys",
    "/tmp",
    "/usr",
    "/usr/bin",
    "/usr/include",
    "/usr/lib",
    "/usr/lib32",
    "/usr/lib64",
    "/usr/libexec",
    "/usr/libx32",
    "/usr/local",
    "/usr/local/bin",
    "/usr/local/lib",
    "/usr/local/sbin",
    "/usr/sbin",
    "/usr/share",
    "/var",
    "/var/lib",
    "/var/run",
    "/var/tmp",
];

/// Refuses a "container root" that is the host's own root, one of its system directories
/// ([`HOST_DIRS`]) or the directory holding the running binary: work done there would land on
/// the host (issue 8: hooks rewrote `/etc/ld.so.cache` and chmodded system folders when an
/// OCI state named `/`).
fn check_not_host_dir(path: &Path, md: &Metadata) -> Result<(), RootError> {
    use std::os::unix::fs::MetadataExt;
    let same = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.dev() == md.dev && m.ino() == md.ino)
            .unwrap_or(false)
    };
    // Our own root, as this process sees it (a chroot included): `/` is resolved from the
    // process's root, so `/proc/self/root` would name the same folder or not be there.
    if same(Path::new("/")) {
        return Err(RootError::not_container_root(
            path,
            "it is this process's own root directory (/)".into(),
        ));
    }
    let arch = std::env::consts::ARCH;
    let multiarch = [
        format!("/usr/lib/{arch}-linux-gnu"),
        format!("/lib/{arch}-linux-gnu"),
    ];
    for d in HOST_DIRS
        .iter()
        .copied()
        .chain(multiarch.iter().map(String::as_str))
    {
        if same(Path::new(d)) {
            return Err(RootError::not_container_root(
                path,
                format!("it is the host directory {d}"),
            ));
        }
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .as_deref()
        .and_then(Path::parent)
    {
        if same(dir) {
            return Err(RootError::not_container_root(
                path,
                format!("it holds this program ({})", dir.display()),
            ));
        }
    }
    Ok(())
}

/// Checks, without keeping it open, that `path` may be used as a container root (see
/// [`Root::open_container`]); for callers that reach the root by other means (mount namespaces).
pub fn check_container_root(path: &Path) -> Result<(), RootError> {
    Root::open_container(path).map(drop)
}

mod opath;
mod walk;
pub use walk::{LexicalResolver, MAX_WALK_COMPONENTS};

#[cfg(test)]
mod tests;
