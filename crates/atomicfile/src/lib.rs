//! Atomic file replacement: every file gpuctk writes (CDI specs, `config.json`, engine configs and
//! their backups) is written so that a crash, a kill or an error at any point leaves either the
//! old content or the new one under the file's name, never a mix, and leaves no temp file where a
//! loader would pick it up.
//!
//! How ([`replace`]):
//! 1. The new content goes to an unnamed `O_TMPFILE` in the target's directory, is fsynced and
//!    given its mode. A writer killed or failing here leaves nothing behind: the kernel frees an
//!    unnamed file when its last descriptor closes.
//! 2. A file that does not exist yet is linked straight to its name (`linkat`), so it never has
//!    another name.
//! 3. An existing file cannot be replaced by `linkat` (it refuses an existing name), so the new
//!    content is linked to a temp name `.<name>.gpuctk-<pid>-<n>.tmp` and renamed over the target.
//!    Between those two calls (a few microseconds) the temp name exists. The name ends in `.tmp`,
//!    which no CDI registry (`*.json`, `*.yaml`), docker (`daemon.json` only) or containerd import
//!    glob of ours matches; for a directory whose every file is loaded (CRI-O's `crio.conf.d`) the
//!    caller passes [`Options::staging_dir`], a directory outside it on the same filesystem, and
//!    the temp name lives there.
//! 4. The directory is fsynced so the rename survives a power cut. When that fails the new content
//!    is already in place: [`Error::NotDurable`] says so, distinct from a failure that left the
//!    file unchanged.
//!
//! A writer killed between the link and the rename leaves its temp name behind (whole, never
//! loaded). Each writer holds an exclusive `flock` on its temp file from creation to rename (taken
//! on the unnamed file, so before any name exists); the next [`replace`] of the same file removes
//! every temp name of that file that nobody holds locked, i.e. whose writer is gone.
//!
//! Where `O_TMPFILE` is not supported (some network and FUSE file systems), the temp file is
//! created under its temp name from the start: a kill while writing then leaves a partial temp
//! file, still under a name no loader reads, removed the same way by the next write.
//!
//! [`Options::lazy_cleanup`] skips the listing where it costs more than it saves (a bundle's
//! `config.json`, written at every container start in a folder that goes with the container):
//! the temp name is one fixed name, and the listing and cleanup happen only when that name is
//! found taken. [`replace_symlink`] does the same for a symbolic link (a small record read back
//! with one `readlink`), which cannot be locked: one fixed temp name per link, removed and made
//! again when found.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;

use rustix::fs::{AtFlags, FlockOperation, OFlags, CWD};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

/// How to write a file.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options<'a> {
    /// Permission bits of the new file; `None` keeps the mode of the file being replaced (0644
    /// for a new file).
    pub mode: Option<u32>,
    /// Where the temp name of step 3 lives; `None` is the target's own directory. Give a
    /// directory outside the target's when a loader reads every file of the target's directory.
    /// It must be on the same file system; when it is not, the target's directory is used.
    pub staging_dir: Option<&'a Path>,
    /// Only create: fail with [`Error::Exists`] when the target exists, without touching it. The
    /// file never has any other name, even for an instant.
    pub create_new: bool,
    /// Skip the fsyncs: still atomic (a reader sees the old content or the new), but a power cut
    /// may lose the change. For files that are written again whenever they are needed, such as
    /// a bundle's `config.json`, where the fsyncs would cost every container start milliseconds.
    pub no_sync: bool,
    /// Skip listing the directory for stale temp names on every write: the temp name of step 3
    /// is then the one name `.<name>.gpuctk-lazy.tmp`, and only when that name is taken (by a
    /// writer at work, or one killed between link and rename) does the write list the
    /// directory, remove the temp names whose writers are gone (that one included) and use a
    /// temp name of its own, as without this option. A killed writer's temp name is still
    /// removed by the next write of the file; what is no longer removed at once are temp names
    /// left by earlier versions or by a killed writer of that fallback, until the next
    /// fallback. For a file in a directory that goes with its owner, such as a bundle's
    /// `config.json`, where the listing cost every container start several system calls.
    pub lazy_cleanup: bool,
    /// The target exists (the caller has just read it, and gives its `mode`): the new content
    /// goes straight to a temp name renamed over it, without first trying the target's own name
    /// (a link that would fail with `EEXIST`). Were it gone meanwhile, the rename creates it.
    pub replaces: bool,
}

/// The step that failed while the target was still untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Creating the temp file.
    CreateTemp,
    /// Writing the new content to it.
    Write,
    /// Setting its permission bits.
    SetMode,
    /// Flushing it to disk.
    Sync,
    /// Giving it a name (its final name, or the temp name).
    Link,
    /// Renaming it over the target.
    Rename,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Step::CreateTemp => "cannot create a temp file in",
            Step::Write => "cannot write the new content to a temp file in",
            Step::SetMode => "cannot set the mode of the new content in",
            Step::Sync => "cannot flush the new content to disk in",
            Step::Link => "cannot link the new content into",
            Step::Rename => "cannot rename the new content into place in",
        })
    }
}

/// Why a write failed, and what state it left the file in. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The path has no file name (`/`, `..`); nothing was written.
    #[error("{}: not a file path; nothing was written", path.display())]
    NotAFile {
        /// The path given.
        path: PathBuf,
    },
    /// A step before the new content was in place failed: the file holds what it held before
    /// (or is still absent) and no temp file is left.
    #[error("{}: {step} {}: {source}; the file is unchanged", path.display(), dir.display())]
    Unchanged {
        /// The file.
        path: PathBuf,
        /// What failed.
        step: Step,
        /// The directory the step worked in.
        dir: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The new content is in place, but flushing the directory entry to disk failed: a reader
    /// sees the new file now, but after a power cut the old one may be back.
    #[error(
        "{}: the new content is in place, but syncing directory {} failed: {source}; the change may not survive a power cut (run `sync` to make sure)",
        path.display(),
        dir.display()
    )]
    NotDurable {
        /// The file.
        path: PathBuf,
        /// The directory that could not be synced.
        dir: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// [`Options::create_new`] was set and the file exists; it was left as it was.
    #[error("{}: already exists; left as it was", path.display())]
    Exists {
        /// The file.
        path: PathBuf,
    },
}

impl Error {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            Error::NotAFile { path }
            | Error::Unchanged { path, .. }
            | Error::NotDurable { path, .. }
            | Error::Exists { path } => path,
        }
    }

    /// True when the new content is in place (only its durability is in doubt).
    pub fn content_in_place(&self) -> bool {
        matches!(self, Error::NotDurable { .. })
    }

    /// What went wrong, without the file's name or its state (for a caller that says both in
    /// its own words).
    pub fn cause(&self) -> String {
        match self {
            Error::NotAFile { .. } => "not a file path".to_string(),
            Error::Unchanged {
                step, dir, source, ..
            } => format!("{step} {}: {source}", dir.display()),
            Error::NotDurable { dir, source, .. } => {
                format!("syncing directory {} failed: {source}", dir.display())
            }
            Error::Exists { .. } => "it already exists".to_string(),
        }
    }

    /// The message without the leading `<path>: `, for callers that name the file themselves.
    pub fn state(&self) -> String {
        let full = self.to_string();
        let prefix = format!("{}: ", self.path().display());
        full.strip_prefix(&prefix)
            .map(str::to_string)
            .unwrap_or(full)
    }

    fn io_kind(&self) -> io::ErrorKind {
        match self {
            Error::NotAFile { .. } => io::ErrorKind::InvalidInput,
            Error::Exists { .. } => io::ErrorKind::AlreadyExists,
            Error::Unchanged { source, .. } | Error::NotDurable { source, .. } => source.kind(),
        }
    }
}

/// An [`Error`] carried inside an `io::Error` by [`write`], shown without the path (the callers
/// of [`write`] put the path in front themselves).
#[derive(Debug)]
struct Detail(Error);

impl fmt::Display for Detail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.state())
    }
}

impl std::error::Error for Detail {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.0)
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        io::Error::new(e.io_kind(), Detail(e))
    }
}

/// The [`Error`] inside an `io::Error` returned by [`write`], if it is one.
pub fn error_of(e: &io::Error) -> Option<&Error> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<Detail>())
        .map(|d| &d.0)
}

/// Replace `path` with `contents` atomically; see the crate docs.
///
/// `mode` is the permission of the new file; `None` keeps the mode of the file being replaced
/// (or 0644 for a new file). The directory must exist: we never create parents silently, since a
/// missing output dir is usually a typo the user wants to hear about. The error's message says
/// what state the file is in, without naming it (callers do); [`error_of`] gives the typed error.
pub fn write(path: &Path, contents: &[u8], mode: Option<u32>) -> io::Result<()> {
    let opts = Options {
        mode,
        ..Options::default()
    };
    replace(path, contents, &opts).map_err(io::Error::from)
}

/// Replace (or create) `path` with `contents`; see the crate docs.
pub fn replace(path: &Path, contents: &[u8], opts: &Options<'_>) -> Result<(), Error> {
    let (dir, name) = split(path)?;
    let staging = opts.staging_dir.unwrap_or(&dir).to_path_buf();
    // The file's mode is only needed when the caller gives none; whether it exists is learnt
    // from the link to its name otherwise (one system call either way).
    let existing = match opts.mode {
        Some(_) => None,
        None => fs::metadata(path).ok(),
    };
    let mode = opts.mode.unwrap_or_else(|| {
        existing
            .as_ref()
            .map(|m| m.permissions().mode() & 0o7777)
            .unwrap_or(0o644)
    });
    if opts.create_new && fs::symlink_metadata(path).is_ok() {
        return Err(Error::Exists {
            path: path.to_path_buf(),
        });
    }
    let cleanup = || {
        // Temp names left by writers that were killed between link and rename.
        remove_stale_temps(&staging, name);
        if staging != dir {
            remove_stale_temps(&dir, name);
        }
    };
    if !opts.lazy_cleanup {
        cleanup();
    }
    let unchanged = |step, dir: &Path, source| Error::Unchanged {
        path: path.to_path_buf(),
        step,
        dir: dir.to_path_buf(),
        source,
    };

    let mut temp = Temp::create(
        &dir,
        &staging,
        name,
        mode,
        opts.lazy_cleanup.then_some(&cleanup),
    )
    .map_err(|(d, e)| {
        let d = d.to_path_buf();
        unchanged(Step::CreateTemp, &d, e)
    })?;
    let temp_dir = temp.dir().to_path_buf();
    temp.file
        .write_all(contents)
        .map_err(|e| unchanged(Step::Write, &temp_dir, e))?;
    // The umask may have narrowed the mode given to open(2).
    temp.file
        .set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|e| unchanged(Step::SetMode, &temp_dir, e))?;
    if !opts.no_sync {
        temp.file
            .sync_all()
            .map_err(|e| unchanged(Step::Sync, &temp_dir, e))?;
    }

    let synced = if opts.create_new {
        temp.link_as(path).map_err(|e| match e.raw_os_error() {
            Some(libc::EEXIST) => Error::Exists {
                path: path.to_path_buf(),
            },
            _ => unchanged(Step::Link, &dir, e),
        })?;
        vec![dir.clone()]
    } else {
        let mut linked = false;
        if temp.name.is_none() && existing.is_none() && !opts.replaces {
            // Maybe a new file: its final name is then its only name.
            match temp.link_as(path) {
                Ok(()) => linked = true,
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                Err(e) => return Err(unchanged(Step::Link, &dir, e)),
            }
        }
        if !linked {
            let named = match temp.name_it(&staging, &dir, name, opts.lazy_cleanup) {
                Err((_, e)) if opts.lazy_cleanup && e.raw_os_error() == Some(libc::EEXIST) => {
                    // Taken: a writer at work, or one that was killed.
                    cleanup();
                    temp.name_it(&staging, &dir, name, false)
                }
                r => r,
            };
            named.map_err(|(d, e)| unchanged(Step::Link, &d, e))?;
            let tmp = temp.name.clone().expect("named above");
            fs::rename(&tmp, path).map_err(|e| unchanged(Step::Rename, &dir, e))?;
            // Renamed: the temp name is gone, nothing to clean up.
            temp.name = None;
            let tmp_dir = tmp.parent().map(Path::to_path_buf).unwrap_or_default();
            if tmp_dir != dir {
                vec![dir.clone(), tmp_dir]
            } else {
                vec![dir.clone()]
            }
        } else {
            vec![dir.clone()]
        }
    };
    // Release the lock only once no temp name is left.
    drop(temp);
    if opts.no_sync {
        return Ok(());
    }
    for d in synced {
        File::open(&d)
            .and_then(|f| f.sync_all())
            .map_err(|source| Error::NotDurable {
                path: path.to_path_buf(),
                dir: d.clone(),
                source,
            })?;
    }
    Ok(())
}

/// Make `path` a symbolic link to `target` (a small value kept in the link itself, read back
/// with one `readlink`), replacing what is there atomically: a reader sees the old entry or the
/// new link, never no entry. A new name is created straight by `symlink`; an existing one is
/// replaced by a link made under [`symlink_temp`] and renamed over it. That temp name is the
/// same for every writer of `path`: a link found there (a writer killed between the two calls,
/// or one at work) is removed and made again, and a writer whose temp link was taken by another
/// tries again, so concurrent writers end with one whole link and at most one temp link, which
/// the next write removes. A link cannot be locked, which is why it is not [`replace`]'s
/// protocol. The directory must exist (`ENOENT` otherwise, nothing written); no fsync: for
/// records that live in `/run`.
pub fn replace_symlink(path: &Path, target: &Path) -> Result<(), Error> {
    let (dir, _) = split(path)?;
    let unchanged = |step, source| Error::Unchanged {
        path: path.to_path_buf(),
        step,
        dir: dir.clone(),
        source,
    };
    match rustix::fs::symlink(target, path) {
        Ok(()) => return Ok(()),
        Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(unchanged(Step::Link, e.into())),
    }
    let tmp = symlink_temp(path)?;
    // Each pass either makes progress for some writer or meets another writer's step; a few
    // are plenty, and giving up leaves the old entry whole.
    let mut last = io::Error::from_raw_os_error(libc::EEXIST);
    for _ in 0..8 {
        match rustix::fs::symlink(target, &tmp) {
            Ok(()) => {}
            Err(rustix::io::Errno::EXIST) => {
                // Left by a killed writer, or another's at work (whose rename then finds it
                // gone and tries again).
                last = io::Error::from_raw_os_error(libc::EEXIST);
                let _ = fs::remove_file(&tmp);
                continue;
            }
            Err(e) => return Err(unchanged(Step::Link, e.into())),
        }
        match fs::rename(&tmp, path) {
            Ok(()) => return Ok(()),
            // Another writer removed our temp link, and may have put its own there.
            Err(e) if e.kind() == io::ErrorKind::NotFound => last = e,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(unchanged(Step::Rename, e));
            }
        }
    }
    Err(unchanged(Step::Link, last))
}

/// The temp name [`replace_symlink`] makes its link under before renaming it over `path`,
/// `.<name>.gpuctk-link.tmp` in the same directory; a caller removing `path` for good removes
/// this too (left only by a writer killed between its two calls).
pub fn symlink_temp(path: &Path) -> Result<PathBuf, Error> {
    let (dir, name) = split(path)?;
    Ok(fixed_temp_name(&dir, name, "link"))
}

/// True for a temp file name [`replace`] may leave behind (for any target).
pub fn is_temp_name(file_name: &OsStr) -> bool {
    let b = file_name.as_bytes();
    b.starts_with(b".") && b.ends_with(b".tmp") && contains(b, TEMP_TAG.as_bytes())
}

const TEMP_TAG: &str = ".gpuctk-";

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// `.<name>.gpuctk-`: what every temp name of `name` starts with.
fn temp_prefix(name: &OsStr) -> OsString {
    let mut p = OsString::from(".");
    p.push(name);
    p.push(TEMP_TAG);
    p
}

/// The directory and file name of `path`.
fn split(path: &Path) -> Result<(PathBuf, &OsStr), Error> {
    let name = path.file_name().ok_or_else(|| Error::NotAFile {
        path: path.to_path_buf(),
    })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((dir, name))
}

/// The new content's file: unnamed until [`Temp::link_as`] or [`Temp::name_it`]; a name it
/// still has when dropped is removed.
struct Temp {
    file: File,
    /// Its temp name, when it has one.
    name: Option<PathBuf>,
    /// Where the unnamed file was created (for messages).
    created_in: PathBuf,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A temp name of `name` in `dir` that this process has not used yet.
fn next_temp_name(dir: &Path, name: &OsStr) -> PathBuf {
    let mut n = temp_prefix(name);
    n.push(format!(
        "{}-{}.tmp",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    dir.join(n)
}

/// A temp name of `name` that is the same for every writer, `.<name>.gpuctk-<kind>.tmp`: the
/// lazy one of [`Options::lazy_cleanup`] (`lazy`) and [`symlink_temp`]'s (`link`).
fn fixed_temp_name(dir: &Path, name: &OsStr, kind: &str) -> PathBuf {
    let mut n = temp_prefix(name);
    n.push(kind);
    n.push(".tmp");
    dir.join(n)
}

impl Temp {
    /// `cleanup_first`: a [`Options::lazy_cleanup`] write's cleanup, run before a temp file is
    /// created under a temp name (no `O_TMPFILE`), since such a file is left half-written by a
    /// kill and has a name of its own that no later lazy write would find taken.
    fn create<'p>(
        dir: &'p Path,
        staging: &'p Path,
        name: &OsStr,
        mode: u32,
        cleanup_first: Option<&dyn Fn()>,
    ) -> Result<Temp, (&'p Path, io::Error)> {
        // One system call (std's `OpenOptions` under musl adds an `fcntl` to `O_CLOEXEC`).
        let unnamed = rustix::fs::openat(
            rustix::fs::CWD,
            dir,
            rustix::fs::OFlags::TMPFILE | rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::from_raw_mode(mode),
        )
        .map(File::from)
        .map_err(io::Error::from);
        match unnamed {
            Ok(file) => {
                // Held until the temp name is gone; see remove_stale_temps. Where the file system
                // has no flock, go on unlocked: another writer's cleanup could then remove our
                // temp name in its instant of life, which fails our rename cleanly.
                let _ = lock(&file, false);
                return Ok(Temp {
                    file,
                    name: None,
                    created_in: dir.to_path_buf(),
                });
            }
            Err(e)
                if !matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP) | Some(libc::EISDIR) | Some(libc::EINVAL)
                ) =>
            {
                return Err((dir, e));
            }
            Err(_) => {}
        }
        // No O_TMPFILE here: a named temp file from the start.
        if let Some(cleanup) = cleanup_first {
            cleanup();
        }
        loop {
            let tmp = next_temp_name(staging, name);
            match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_CLOEXEC)
                .mode(mode)
                .open(&tmp)
            {
                Ok(file) => {
                    let t = Temp {
                        file,
                        name: Some(tmp),
                        created_in: staging.to_path_buf(),
                    };
                    let _ = lock(&t.file, false);
                    return Ok(t);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err((staging, e)),
            }
        }
    }

    fn dir(&self) -> &Path {
        &self.created_in
    }

    /// Give the file the name `dest`, which must not exist. An unnamed file is linked from its
    /// descriptor; a named one is hard-linked and loses its temp name.
    fn link_as(&mut self, dest: &Path) -> io::Result<()> {
        match &self.name {
            None => link_fd(&self.file, dest),
            Some(tmp) => {
                fs::hard_link(tmp, dest)?;
                let _ = fs::remove_file(tmp);
                self.name = None;
                Ok(())
            }
        }
    }

    /// Give an unnamed file a temp name in `staging` (or in `dir` when `staging` is on another
    /// file system); a named one keeps its name. `lazy`: the one lazy temp name
    /// ([`Options::lazy_cleanup`]), `EEXIST` when it is taken; else a name of its own.
    fn name_it(
        &mut self,
        staging: &Path,
        dir: &Path,
        name: &OsStr,
        lazy: bool,
    ) -> Result<(), (PathBuf, io::Error)> {
        if self.name.is_some() {
            return Ok(());
        }
        let mut where_ = staging;
        loop {
            let tmp = if lazy {
                fixed_temp_name(where_, name, "lazy")
            } else {
                next_temp_name(where_, name)
            };
            match link_fd(&self.file, &tmp) {
                Ok(()) => {
                    self.name = Some(tmp);
                    return Ok(());
                }
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) && !lazy => continue,
                Err(e) if e.raw_os_error() == Some(libc::EXDEV) && where_ != dir => where_ = dir,
                Err(e) => return Err((where_.to_path_buf(), e)),
            }
        }
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if let Some(tmp) = self.name.take() {
            let _ = fs::remove_file(tmp);
        }
    }
}

/// `linkat` an `O_TMPFILE` descriptor to `dest`: through `/proc/self/fd` (no capability
/// needed), else with `AT_EMPTY_PATH` (needs CAP_DAC_READ_SEARCH) where /proc is not mounted.
fn link_fd(file: &File, dest: &Path) -> io::Result<()> {
    let proc = format!("/proc/self/fd/{}", file.as_raw_fd());
    let first = match rustix::fs::linkat(CWD, proc.as_str(), CWD, dest, AtFlags::SYMLINK_FOLLOW) {
        Ok(()) => return Ok(()),
        Err(e) => io::Error::from(e),
    };
    if first.raw_os_error() != Some(libc::ENOENT) || Path::new("/proc/self/fd").exists() {
        return Err(first);
    }
    // No /proc: AT_EMPTY_PATH, which needs CAP_DAC_READ_SEARCH.
    rustix::fs::linkat(file, c"", CWD, dest, AtFlags::EMPTY_PATH).map_err(|_| first)
}

/// `flock` exclusively; `try_only` returns `WouldBlock` instead of waiting.
fn lock(file: &File, try_only: bool) -> io::Result<()> {
    let op = if try_only {
        FlockOperation::NonBlockingLockExclusive
    } else {
        FlockOperation::LockExclusive
    };
    loop {
        match rustix::fs::flock(file, op) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// The names in `dir` (none when it cannot be read). Not `fs::read_dir`: std panics when
/// `closedir` fails (EIO on a failing disk), and a cleanup must never take the write down.
fn names_in(dir: &Path) -> Vec<OsString> {
    use std::os::unix::ffi::OsStringExt;
    let Ok(fd) = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) else {
        return Vec::new();
    };
    let Ok(mut d) = rustix::fs::Dir::new(fd) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    // An error ends the listing; closing (on drop) reports nothing, and its error says nothing
    // about the names.
    while let Some(Ok(ent)) = d.read() {
        let name = ent.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(OsString::from_vec(name.to_vec()));
        }
    }
    names
}

/// How old a temp file of gpuctk before 0.2 (`.<name>.<pid>.<n>.tmp`, never locked) must be
/// before we take it for abandoned.
const LEGACY_TEMP_AGE: Duration = Duration::from_secs(60);

/// `.<name>.<digits>.<digits>.tmp`: what earlier gpuctk versions left behind when killed.
fn is_legacy_temp(file_name: &OsStr, name: &OsStr) -> bool {
    let b = file_name.as_bytes();
    let mut prefix = b".".to_vec();
    prefix.extend_from_slice(name.as_bytes());
    prefix.push(b'.');
    let Some(rest) = b
        .strip_prefix(prefix.as_slice())
        .and_then(|r| r.strip_suffix(b".tmp"))
    else {
        return false;
    };
    let mut parts = rest.split(|&c| c == b'.');
    let digits =
        |p: Option<&[u8]>| p.is_some_and(|p| !p.is_empty() && p.iter().all(u8::is_ascii_digit));
    digits(parts.next()) && digits(parts.next()) && parts.next().is_none()
}

/// Remove the temp names of `name` in `dir` whose writers are gone: ours when nobody holds their
/// lock, an earlier version's when older than [`LEGACY_TEMP_AGE`]. Best effort: a temp file we
/// cannot remove is harmless (no loader reads its name) and is tried again next time.
pub fn remove_stale_temps(dir: &Path, name: &OsStr) {
    let prefix = temp_prefix(name);
    for file_name in names_in(dir) {
        let ours = file_name.as_bytes().starts_with(prefix.as_bytes())
            && file_name.as_bytes().ends_with(b".tmp");
        let legacy = !ours && is_legacy_temp(&file_name, name);
        if !ours && !legacy {
            continue;
        }
        let p = dir.join(&file_name);
        let Ok(f) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&p)
        else {
            continue;
        };
        let Ok(md) = f.metadata() else { continue };
        if !md.is_file() || lock(&f, true).is_err() {
            // Not a file of ours, or its writer is alive.
            continue;
        }
        if legacy {
            let age = md
                .modified()
                .ok()
                .and_then(|m| SystemTime::now().duration_since(m).ok());
            if age.is_none_or(|a| a < LEGACY_TEMP_AGE) {
                continue;
            }
        }
        // Still the same file under that name (names are never reused, but be sure).
        if let Ok(now) = fs::symlink_metadata(&p) {
            if now.dev() == md.dev() && now.ino() == md.ino() {
                let _ = fs::remove_file(&p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn replaces_and_keeps_mode() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("spec.yaml");
        fs::write(&p, b"old").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        write(&p, b"new", None).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // No temp file left behind.
        assert_eq!(names(d.path()), ["spec.yaml"]);
    }

    #[test]
    fn creates_a_new_file_with_the_given_mode() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("new.json");
        write(&p, b"{}", Some(0o640)).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"{}");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o640
        );
        assert_eq!(names(d.path()), ["new.json"]);
    }

    #[test]
    fn missing_dir_is_an_error_and_writes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("nope").join("spec.yaml");
        let e = replace(&p, b"x", &Options::default()).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Unchanged {
                    step: Step::CreateTemp,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().starts_with(&p.display().to_string()), "{e}");
        assert!(e.to_string().ends_with("the file is unchanged"), "{e}");
        assert!(!d.path().join("nope").exists());
    }

    #[test]
    fn failed_rename_keeps_old_file() {
        let d = tempfile::tempdir().unwrap();
        // A directory at the target path makes rename fail.
        let p = d.path().join("target");
        fs::create_dir(&p).unwrap();
        fs::write(p.join("inner"), b"keep").unwrap();
        let e = replace(&p, b"x", &Options::default()).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Unchanged {
                    step: Step::Rename,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(fs::read(p.join("inner")).unwrap(), b"keep");
        assert_eq!(names(d.path()), ["target"]);
    }

    #[test]
    fn io_error_names_the_state_not_the_path() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("nope").join("spec.yaml");
        let e = write(&p, b"x", None).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        let msg = e.to_string();
        assert!(msg.starts_with("cannot create a temp file in"), "{msg}");
        assert!(msg.ends_with("; the file is unchanged"), "{msg}");
        assert!(matches!(error_of(&e), Some(Error::Unchanged { .. })));
    }

    #[test]
    fn create_new_never_touches_an_existing_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.bak");
        let opts = Options {
            create_new: true,
            ..Options::default()
        };
        replace(&p, b"first", &opts).unwrap();
        let e = replace(&p, b"second", &opts).unwrap_err();
        assert!(matches!(e, Error::Exists { .. }), "{e}");
        assert_eq!(fs::read(&p).unwrap(), b"first");
        assert_eq!(names(d.path()), ["x.bak"]);
    }

    #[test]
    fn staging_dir_holds_the_temp_name_outside_the_target_dir() {
        let d = tempfile::tempdir().unwrap();
        let loaded = d.path().join("conf.d");
        fs::create_dir(&loaded).unwrap();
        let p = loaded.join("99-x.toml");
        fs::write(&p, b"old").unwrap();
        // A stale temp name in the staging dir whose writer is gone, and one in the loaded dir.
        fs::write(d.path().join(".99-x.toml.gpuctk-1-0.tmp"), b"stale").unwrap();
        fs::write(loaded.join(".99-x.toml.gpuctk-1-1.tmp"), b"stale").unwrap();
        let opts = Options {
            staging_dir: Some(d.path()),
            ..Options::default()
        };
        replace(&p, b"new", &opts).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        assert_eq!(names(&loaded), ["99-x.toml"]);
        assert_eq!(names(d.path()), ["conf.d"]);
    }

    #[test]
    fn a_locked_temp_name_belongs_to_a_live_writer_and_stays() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("daemon.json");
        fs::write(&p, b"old").unwrap();
        let live = d.path().join(".daemon.json.gpuctk-7-7.tmp");
        fs::write(&live, b"in flight").unwrap();
        let held = File::open(&live).unwrap();
        lock(&held, false).unwrap();
        write(&p, b"new", None).unwrap();
        assert!(live.exists(), "a live writer's temp file is left alone");
        drop(held);
        write(&p, b"newer", None).unwrap();
        assert_eq!(names(d.path()), ["daemon.json"]);
    }

    #[test]
    fn legacy_temp_names_are_removed_only_when_old() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("99-nvidia.toml");
        let fresh = d.path().join(".99-nvidia.toml.123.0.tmp");
        let old = d.path().join(".99-nvidia.toml.456.1.tmp");
        fs::write(&fresh, b"x").unwrap();
        fs::write(&old, b"x").unwrap();
        let past = SystemTime::now() - Duration::from_secs(3600);
        File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(past)
            .unwrap();
        // Not ours at all.
        fs::write(d.path().join(".99-nvidia.toml.a.b.tmp"), b"x").unwrap();
        write(&p, b"new", None).unwrap();
        assert_eq!(
            names(d.path()),
            [
                ".99-nvidia.toml.123.0.tmp",
                ".99-nvidia.toml.a.b.tmp",
                "99-nvidia.toml"
            ]
        );
    }

    #[test]
    fn temp_names_are_recognised() {
        assert!(is_temp_name(OsStr::new(".nvidia.yaml.gpuctk-12-0.tmp")));
        assert!(!is_temp_name(OsStr::new("nvidia.yaml")));
        assert!(!is_temp_name(OsStr::new(".nvidia.yaml.12.0.tmp")));
        assert!(is_legacy_temp(
            OsStr::new(".nvidia.yaml.12.0.tmp"),
            OsStr::new("nvidia.yaml")
        ));
    }

    #[test]
    fn concurrent_writers_leave_one_whole_version_and_no_temp() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("spec.json");
        fs::write(&p, b"0").unwrap();
        std::thread::scope(|s| {
            for i in 0..8u8 {
                let p = &p;
                s.spawn(move || {
                    for _ in 0..20 {
                        write(p, &[b'a' + i; 4096], None).unwrap();
                    }
                });
            }
        });
        let got = fs::read(&p).unwrap();
        assert_eq!(got.len(), 4096);
        assert!(got.iter().all(|&b| b == got[0]));
        assert_eq!(names(d.path()), ["spec.json"]);
    }

    fn lazy() -> Options<'static> {
        Options {
            lazy_cleanup: true,
            no_sync: true,
            ..Options::default()
        }
    }

    #[test]
    fn lazy_cleanup_leaves_other_temp_names_but_takes_a_killed_writers_own() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.json");
        fs::write(&p, b"old").unwrap();
        // Left by a killed writer of the full protocol: no listing finds it.
        fs::write(d.path().join(".config.json.gpuctk-9-9.tmp"), b"stale").unwrap();
        replace(&p, b"new", &lazy()).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        assert_eq!(
            names(d.path()),
            [".config.json.gpuctk-9-9.tmp", "config.json"]
        );
        // A lazy writer killed between link and rename: its temp name is taken, so the next
        // write cleans up (both) and still replaces the file.
        fs::write(d.path().join(".config.json.gpuctk-lazy.tmp"), b"killed").unwrap();
        replace(&p, b"newer", &lazy()).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"newer");
        assert_eq!(names(d.path()), ["config.json"]);
    }

    #[test]
    fn lazy_cleanup_keeps_the_mode_and_links_a_new_file_straight() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.json");
        fs::write(&p, b"old").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        replace(&p, b"new", &lazy()).unwrap();
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let fresh = d.path().join("fresh.json");
        replace(&fresh, b"{}", &lazy()).unwrap();
        assert_eq!(fs::read(&fresh).unwrap(), b"{}");
        assert_eq!(names(d.path()), ["config.json", "fresh.json"]);
    }

    #[test]
    fn a_given_mode_needs_no_look_at_the_target_first() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("spec.json");
        // An existing file: the link to its name fails, the rename replaces it.
        fs::write(&p, b"old").unwrap();
        write(&p, b"new", Some(0o640)).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o640
        );
        // A dangling link at the name is replaced, not followed.
        let l = d.path().join("link.json");
        std::os::unix::fs::symlink(d.path().join("nowhere"), &l).unwrap();
        write(&l, b"x", Some(0o644)).unwrap();
        assert!(fs::symlink_metadata(&l).unwrap().is_file());
        assert!(!d.path().join("nowhere").exists());
        assert_eq!(names(d.path()), ["link.json", "spec.json"]);
    }

    #[test]
    fn replaces_goes_by_a_temp_name_whether_the_target_is_there_or_not() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.json");
        let opts = Options {
            mode: Some(0o600),
            no_sync: true,
            lazy_cleanup: true,
            replaces: true,
            ..Default::default()
        };
        fs::write(&p, b"old").unwrap();
        replace(&p, b"new", &opts).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // Removed since the caller read it: the rename makes it again.
        fs::remove_file(&p).unwrap();
        replace(&p, b"again", &opts).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"again");
        assert_eq!(names(d.path()), ["config.json"]);
    }

    /// Many lazy writers of one file at once, and a reader: the reader only ever sees one
    /// writer's whole content, and no temp name is left.
    #[test]
    fn lazy_writers_and_a_reader_see_whole_versions_only() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.json");
        fs::write(&p, [b'0'; 65536]).unwrap();
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut reads = 0;
                while !done.load(Ordering::Relaxed) || reads == 0 {
                    let got = fs::read(&p).unwrap();
                    assert_eq!(got.len(), 65536, "a partial file was seen");
                    assert!(got.iter().all(|&b| b == got[0]), "a mixed file was seen");
                    reads += 1;
                }
            });
            let writers: Vec<_> = (0..6u8)
                .map(|i| {
                    let p = &p;
                    s.spawn(move || {
                        for _ in 0..30 {
                            replace(p, &[b'a' + i; 65536], &lazy()).unwrap();
                        }
                    })
                })
                .collect();
            let results: Vec<_> = writers.into_iter().map(|w| w.join()).collect();
            // Before any unwrap: the reader must stop even when a writer failed.
            done.store(true, Ordering::Relaxed);
            reader.join().unwrap();
            for r in results {
                r.unwrap();
            }
        });
        assert_eq!(names(d.path()), ["config.json"]);
    }

    #[test]
    fn symlink_is_created_then_replaced_whole() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c1");
        replace_symlink(&p, Path::new("/usr/bin/runc")).unwrap();
        assert_eq!(fs::read_link(&p).unwrap(), Path::new("/usr/bin/runc"));
        replace_symlink(&p, Path::new("/usr/bin/crun")).unwrap();
        assert_eq!(fs::read_link(&p).unwrap(), Path::new("/usr/bin/crun"));
        // A regular file there (what earlier versions wrote) is replaced too.
        fs::remove_file(&p).unwrap();
        fs::write(&p, b"/usr/bin/runc").unwrap();
        replace_symlink(&p, Path::new("/usr/bin/crun")).unwrap();
        assert_eq!(fs::read_link(&p).unwrap(), Path::new("/usr/bin/crun"));
        assert_eq!(names(d.path()), ["c1"]);
    }

    #[test]
    fn symlink_temp_left_by_a_killed_writer_goes_with_the_next_write() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c1");
        replace_symlink(&p, Path::new("/old")).unwrap();
        let tmp = symlink_temp(&p).unwrap();
        assert_eq!(tmp, d.path().join(".c1.gpuctk-link.tmp"));
        std::os::unix::fs::symlink("/killed", &tmp).unwrap();
        replace_symlink(&p, Path::new("/new")).unwrap();
        assert_eq!(fs::read_link(&p).unwrap(), Path::new("/new"));
        assert_eq!(names(d.path()), ["c1"]);
    }

    #[test]
    fn symlink_over_a_directory_fails_and_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c1");
        fs::create_dir(&p).unwrap();
        fs::write(p.join("inner"), b"keep").unwrap();
        let e = replace_symlink(&p, Path::new("/x")).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Unchanged {
                    step: Step::Rename,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(fs::read(p.join("inner")).unwrap(), b"keep");
        assert_eq!(names(d.path()), ["c1"]);
        // No folder: NotFound, nothing made.
        let missing = d.path().join("nope").join("c1");
        let e = io::Error::from(replace_symlink(&missing, Path::new("/x")).unwrap_err());
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(!d.path().join("nope").exists());
    }

    #[test]
    fn concurrent_symlink_writers_leave_one_whole_link_and_no_temp() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c1");
        replace_symlink(&p, Path::new("/start")).unwrap();
        let targets: Vec<String> = (0..6).map(|i| format!("/runtime-{i}")).collect();
        std::thread::scope(|s| {
            for t in &targets {
                let p = &p;
                s.spawn(move || {
                    for _ in 0..50 {
                        // Giving up under contention is allowed; the link stays whole.
                        if let Err(e) = replace_symlink(p, Path::new(t)) {
                            assert!(matches!(e, Error::Unchanged { .. }), "{e}");
                        }
                    }
                });
            }
        });
        let got = fs::read_link(&p).unwrap();
        assert!(
            got == Path::new("/start") || targets.iter().any(|t| got == Path::new(t)),
            "{got:?}"
        );
        assert_eq!(names(d.path()), ["c1"]);
    }
}
