//! The userspace walk of a container path ([`Root::canonicalize`], [`Root::mkdir_all`],
//! [`Root::resolve_lexically`]): symlinks followed one component at a time, as the kernel
//! would inside the root, to *name* where a path leads.
//!
//! The walk keeps one directory descriptor and moves it along: a name is looked up relative to
//! it (`fstatat(AT_SYMLINK_NOFOLLOW)`, then, for a directory, a single-name `openat2` that
//! follows nothing), and `..` opens the parent of it and checks that this is the directory the
//! walk came down through (device and inode). So every component costs a few system calls of
//! one name each, never a resolution of the prefix from the root, and the whole walk is
//! linear. Its work is capped as the kernel's is: at most [`MAX_SYMLINKS`] symlinks, and at
//! most [`MAX_WALK_COMPONENTS`] components in all, those of the path and of every link target
//! followed; past either it stops with an error naming the path.
//!
//! The walk only computes names: what a caller then does, it does through descriptors opened
//! from the root by those names with `RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS`, so a walk misled
//! by a concurrent change cannot reach outside the root.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use super::{
    components, cstring, fstat, fstatat_nofollow, openat2, readlinkat, FileKind, Root, RootError,
    MAX_SYMLINKS,
};

/// Most path components one walk takes in, the path's own and those of every symlink target it
/// follows together. A path of `PATH_MAX` bytes has at most 2048, and real images need a few
/// dozen; past this the walk stops ([`RootError::TooManyComponents`]), so no image can make
/// one resolution cost more than a few thousand single-name lookups.
pub const MAX_WALK_COMPONENTS: usize = 4096;

/// What a walk found.
pub(super) struct Walk {
    /// The existing, symlink-free components, in order.
    pub(super) existing: Vec<OsString>,
    /// The components after the first one that does not exist (only when missing ones are
    /// allowed).
    pub(super) missing: Vec<OsString>,
}

/// One walk in progress.
struct Walker<'a> {
    root: &'a Root,
    /// The path as given, for messages.
    path: &'a str,
    /// The directory `existing` names; `None` for the root itself.
    cur: Option<OwnedFd>,
    existing: Vec<OsString>,
    /// Device and inode of each directory in `existing`, to check a step up.
    ids: Vec<(u64, u64)>,
    links: usize,
    /// Components taken in so far (the path's and the link targets').
    taken: usize,
}

impl Walker<'_> {
    fn dirfd(&self) -> BorrowedFd<'_> {
        self.cur.as_ref().map_or(self.root.fd.as_fd(), AsFd::as_fd)
    }

    /// Counts `n` more components against [`MAX_WALK_COMPONENTS`].
    fn take(&mut self, n: usize) -> Result<(), RootError> {
        self.taken += n;
        if self.taken > MAX_WALK_COMPONENTS {
            return Err(RootError::TooManyComponents {
                root: self.root.path.clone(),
                path: self.path.to_string(),
                cap: MAX_WALK_COMPONENTS,
            });
        }
        Ok(())
    }

    /// `lstat` of `name` in the current directory; `None` when it does not exist.
    fn lookup(&self, name: &OsStr) -> Result<Option<super::Metadata>, RootError> {
        match fstatat_nofollow(self.dirfd(), name) {
            Ok(m) => Ok(Some(m)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(self.root.io_err(self.path, "lstat", e)),
        }
    }

    /// Makes the directory `name` of the current one the current one: one name, no symlink
    /// followed (one swapped in since the lookup fails with `ELOOP`).
    fn descend(&mut self, name: OsString) -> Result<(), RootError> {
        let fd = open_child_dir(self.dirfd(), &name)
            .map_err(|e| self.root.io_err(self.path, "open directory", e))?;
        let md = fstat(fd.as_fd()).map_err(|e| self.root.io_err(self.path, "stat", e))?;
        self.cur = Some(fd);
        self.existing.push(name);
        self.ids.push((md.dev, md.ino));
        Ok(())
    }

    /// `..`: the parent of the current directory, which must be the one the walk came down
    /// through (a directory moved meanwhile is [`RootError::Raced`]); at the root, the root.
    fn ascend(&mut self) -> Result<(), RootError> {
        if self.existing.pop().is_none() {
            return Ok(());
        }
        self.ids.pop();
        let Some(&(dev, ino)) = self.ids.last() else {
            self.cur = None;
            return Ok(());
        };
        let fd = openat2(
            self.dirfd(),
            c"..",
            libc::O_PATH | libc::O_DIRECTORY,
            libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
        )
        .map_err(|e| self.root.io_err(self.path, "open directory", e))?;
        let md = fstat(fd.as_fd()).map_err(|e| self.root.io_err(self.path, "stat", e))?;
        if (md.dev, md.ino) != (dev, ino) {
            return Err(RootError::Raced {
                root: self.root.path.clone(),
                path: self.path.to_string(),
                resolved: format!("/{}", super::join_components(&self.existing)),
            });
        }
        self.cur = Some(fd);
        Ok(())
    }
}

/// A single-name `openat2` of directory `name` in `dirfd`, following nothing.
pub(super) fn open_child_dir(dirfd: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    openat2(
        dirfd,
        &cstring(name)?,
        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    )
}

impl Root {
    /// Walks `path` component by component as the kernel would inside the root (see the module
    /// header). Returns the existing, symlink-free components and (when `allow_missing`) the
    /// components that do not exist yet.
    pub(super) fn walk(&self, path: &str, allow_missing: bool) -> Result<Walk, RootError> {
        super::check_path(path)?;
        let mut w = Walker {
            root: self,
            path,
            cur: None,
            existing: Vec::new(),
            ids: Vec::new(),
            links: 0,
            taken: 0,
        };
        let mut todo: VecDeque<OsString> = VecDeque::new();
        for c in components(path.as_bytes()) {
            w.take(1)?;
            todo.push_back(c);
        }
        let mut missing: Vec<OsString> = Vec::new();
        while let Some(c) = todo.pop_front() {
            if !missing.is_empty() {
                if c == ".." {
                    return Err(RootError::InvalidPath {
                        path: path.to_string(),
                        reason: "`..` after a component that does not exist",
                    });
                }
                missing.push(c);
                continue;
            }
            if c == ".." {
                w.ascend()?;
                continue;
            }
            let meta = match w.lookup(&c)? {
                Some(m) => m,
                None if allow_missing => {
                    missing.push(c);
                    continue;
                }
                None => {
                    return Err(self.io_err(
                        path,
                        "lstat",
                        io::Error::from_raw_os_error(libc::ENOENT),
                    ))
                }
            };
            match meta.kind {
                FileKind::Symlink => {
                    w.links += 1;
                    if w.links > MAX_SYMLINKS {
                        return Err(RootError::Loop {
                            root: self.path.clone(),
                            path: path.to_string(),
                        });
                    }
                    let target =
                        readlinkat(w.dirfd(), &c).map_err(|e| self.io_err(path, "readlink", e))?;
                    let bytes = target.as_bytes();
                    let parts: Vec<OsString> = components(bytes).collect();
                    w.take(parts.len())?;
                    if bytes.starts_with(b"/") {
                        w.cur = None;
                        w.existing.clear();
                        w.ids.clear();
                    }
                    for t in parts.into_iter().rev() {
                        todo.push_front(t);
                    }
                }
                FileKind::Dir => w.descend(c)?,
                _ if todo.is_empty() => w.existing.push(c),
                _ => {
                    return Err(self.io_err(
                        path,
                        "resolve",
                        io::Error::from_raw_os_error(libc::ENOTDIR),
                    ))
                }
            }
        }
        Ok(Walk {
            existing: w.existing,
            missing,
        })
    }
}
