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
//! by a concurrent change cannot reach outside the root. The one exception is
//! [`LexicalResolver::keep_folders`]: its folders, each opened by one name from a folder of the
//! root following nothing, are what the root then works in.

use foldhash::{HashMap, HashMapExt, HashSet};
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use super::{
    components, cstring, dirent_kind, for_each_listed, fstat, fstatat_nofollow, openat2,
    readlinkat, DirFd, FileKind, Root, RootError, MAX_SYMLINKS,
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

/// Names a [`LexicalResolver`] expects to ask of one folder from which it lists the folder
/// instead of looking each name up: a listing is two or three calls (`getdents64`, the last
/// saying the end), and every name it answers costs none. But the kernel's work grows with the
/// folder: on ext4, 64 µs for an image's `/usr/bin` of 272 names against 1.1 µs a lookup, 22 µs
/// for a library folder of 91. So only a folder asked many names is listed: the driver's
/// library folder (8 to 40 libraries), not `/usr/bin` (5 programs).
const LIST_AT: usize = 8;

/// Most entries a [`LexicalResolver`] reads of one folder's listing; past them the folder's names
/// are looked up one by one, as without a listing, so an image's huge folder costs no more.
pub(super) const MAX_LISTED: usize = 4096;

/// What a [`LexicalResolver`]'s walks remember, shared between them.
#[derive(Default)]
struct Memo {
    /// What each name looked at is, by its symlink-free path (`a/b` for `b` in `/a`).
    seen: HashMap<OsString, Seen>,
    /// The names of each folder (by symlink-free path, `""` the root) that the paths handed to
    /// [`LexicalResolver::expect`] end in, as they are written.
    expected: HashMap<OsString, HashSet<OsString>>,
    /// Folders listed: each of its expected names there, with the kind its entry gives (`None`:
    /// not said); `None` for a folder that could not be listed whole (too many entries, or an
    /// error, which the lookups then report), whose names are looked up.
    listings: HashMap<OsString, Option<HashMap<OsString, Option<FileKind>>>>,
    /// Paths handed to [`LexicalResolver::expect_files`], as written: their last name is most
    /// likely a file, so it is read as a link first ([`Seen::Exists`]).
    files: HashSet<String>,
}

/// What one name of a folder was found to be by a walk: what [`LexicalResolver`] remembers.
#[derive(Clone)]
enum Seen {
    Missing,
    /// A symlink, and its target.
    Link(OsString),
    /// A directory, opened (one name, nothing followed), with its device and inode.
    Dir(Arc<DirFd>, (u64, u64)),
    /// Anything else.
    Other,
    /// There and no symlink (its `readlink` said so), of a kind not asked: a path's last name,
    /// where that is all a resolution needs. A walk through it looks it up again.
    Exists,
}

/// One walk in progress.
struct Walker<'a> {
    root: &'a Root,
    /// The path as given, for messages.
    path: &'a str,
    /// What was already looked at: a [`LexicalResolver`]'s, shared by its walks.
    memo: Option<&'a mut Memo>,
    /// The directory `existing` names; `None` for the root itself.
    cur: Option<Arc<DirFd>>,
    existing: Vec<OsString>,
    /// Device and inode of each directory in `existing`, to check a step up.
    ids: Vec<(u64, u64)>,
    links: usize,
    /// Components taken in so far (the path's and the link targets').
    taken: usize,
}

impl Walker<'_> {
    fn dirfd(&self) -> BorrowedFd<'_> {
        self.cur
            .as_ref()
            .map_or(self.root.fd.as_fd(), |fd| fd.as_fd())
    }

    /// The symlink-free path of the current directory (`""` for the root).
    fn folder(&self) -> OsString {
        join_raw(self.existing.iter().map(OsString::as_os_str))
    }

    /// The memo's key of `name` in the current directory.
    fn key(&self, name: &OsStr) -> OsString {
        join_raw(self.existing.iter().map(OsString::as_os_str).chain([name]))
    }

    /// What `name` of the current directory is: looked up (`lstat`, then `readlink` for a
    /// symlink or a single-name open for a directory), or taken from the memo, which holds each
    /// name once it has been looked up. `last`: the last name of a path expected to end in a
    /// file ([`LexicalResolver::expect_files`]), which one `readlink` settles: a link, missing,
    /// or [`Seen::Exists`] (where a folder's open would fail and a `readlink` follow).
    fn see(&mut self, name: &OsStr, last: bool) -> Result<Seen, RootError> {
        let key = self.memo.is_some().then(|| self.key(name));
        if let (Some(memo), Some(k)) = (self.memo.as_deref(), key.as_ref()) {
            match memo.seen.get(k) {
                // Not enough to walk through: looked up below (and remembered anew).
                Some(Seen::Exists) if !last => {}
                Some(seen) => return Ok(seen.clone()),
                None => {}
            }
        }
        if key.is_some() {
            if let Some(seen) = self.listed_as(name) {
                return Ok(self.remember(key, seen));
            }
            if last {
                match readlinkat(self.dirfd(), name) {
                    Ok(target) => return Ok(self.remember(key, Seen::Link(target))),
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        return Ok(self.remember(key, Seen::Exists))
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                        return Ok(self.remember(key, Seen::Missing))
                    }
                    // Another error is one the lookup below reports.
                    Err(_) => {}
                }
            }
            // For a resolver, a folder (most names) costs one call: opened first, following
            // nothing; only what does not open as one is looked at. Its device and inode are not
            // needed: a `..` goes back to the folder the memo holds, by name, no call. Opened
            // for reading where it may be, so that the resolver's root can keep it for listing
            // ([`LexicalResolver::keep_folders`]).
            match open_child_dir_listable(self.dirfd(), name) {
                Ok(fd) => return Ok(self.remember(key, Seen::Dir(fd, (0, 0)))),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    return Ok(self.remember(key, Seen::Missing))
                }
                // Not a folder: a symlink (most such names on a path: `lib` in a merged-/usr
                // image) is read at once, with no `lstat` first; what is no link (`EINVAL`)
                // is anything else. Another error is one the lookup below reports.
                Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                    match readlinkat(self.dirfd(), name) {
                        Ok(target) => return Ok(self.remember(key, Seen::Link(target))),
                        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                            return Ok(self.remember(key, Seen::Other))
                        }
                        Err(_) => {}
                    }
                }
                Err(_) => {}
            }
        }
        let seen = match self.lookup(name)? {
            None => Seen::Missing,
            Some(m) => match m.kind {
                FileKind::Symlink => Seen::Link(
                    readlinkat(self.dirfd(), name)
                        .map_err(|e| self.root.io_err(self.path, "readlink", e))?,
                ),
                FileKind::Dir => {
                    let fd = open_child_dir(self.dirfd(), name)
                        .map_err(|e| self.root.io_err(self.path, "open directory", e))?;
                    let md =
                        fstat(fd.as_fd()).map_err(|e| self.root.io_err(self.path, "stat", e))?;
                    Seen::Dir(DirFd::new(fd, false), (md.dev, md.ino))
                }
                _ => Seen::Other,
            },
        };
        Ok(self.remember(key, seen))
    }

    /// Puts what `key` is into the memo (when there is one).
    fn remember(&mut self, key: Option<OsString>, seen: Seen) -> Seen {
        if let (Some(memo), Some(k)) = (self.memo.as_deref_mut(), key) {
            memo.seen.insert(k, seen.clone());
        }
        seen
    }

    /// What `name` of the current folder is, as the folder's listing says, for a resolver that
    /// expects to ask [`LIST_AT`] names or more of it: missing, or a symlink (then read), or
    /// neither a folder nor a link, with no lookup. `None` where the listing does not settle
    /// it (a folder, which is opened as ever; a kind not given; no listing), and the name is
    /// looked up.
    fn listed_as(&mut self, name: &OsStr) -> Option<Seen> {
        if self.memo.as_ref()?.expected.is_empty() {
            return None;
        }
        let cur = self.cur.clone().filter(|fd| fd.readable)?;
        let folder = self.folder();
        let memo = self.memo.as_deref_mut()?;
        let expected = memo.expected.get(&folder)?;
        if expected.len() < LIST_AT || !expected.contains(name) {
            return None;
        }
        let listing = memo
            .listings
            .entry(folder)
            .or_insert_with(|| list(self.root, &cur, expected))
            .as_ref()?;
        match listing.get(name) {
            None => Some(Seen::Missing),
            Some(Some(FileKind::Symlink)) => readlinkat(cur.as_fd(), name).ok().map(Seen::Link),
            Some(Some(FileKind::Dir) | None) => None,
            Some(Some(_)) => Some(Seen::Other),
        }
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

    /// Makes the directory `name` of the current one, opened by [`Walker::see`], the current one.
    fn descend(&mut self, name: OsString, fd: Arc<DirFd>, id: (u64, u64)) {
        self.cur = Some(fd);
        self.existing.push(name);
        self.ids.push(id);
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
        // Walked down through it with the memo: it is in there, opened (a memo's walk records
        // no device and inode to check a `..` against).
        if let Some(memo) = self.memo.as_deref() {
            let name = self.existing.pop().expect("as many names as ids");
            let key = self.key(&name);
            self.existing.push(name);
            return match memo.seen.get(&key) {
                Some(Seen::Dir(fd, _)) => {
                    self.cur = Some(fd.clone());
                    Ok(())
                }
                _ => Err(RootError::Raced {
                    root: self.root.path.clone(),
                    path: self.path.to_string(),
                    resolved: super::absolute_path(&self.existing),
                }),
            };
        }
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
                resolved: super::absolute_path(&self.existing),
            });
        }
        self.cur = Some(DirFd::new(fd, false));
        Ok(())
    }
}

/// `comps` joined by `/`, bytes as they are (a memo key).
fn join_raw<'c>(comps: impl IntoIterator<Item = &'c OsStr>) -> OsString {
    let mut k = OsString::new();
    for (i, c) in comps.into_iter().enumerate() {
        if i > 0 {
            k.push("/");
        }
        k.push(c);
    }
    k
}

/// The names among `wanted` that folder `fd` holds, with the kinds their entries give; `None`
/// where it holds more than [`MAX_LISTED`] names or could not be read to its end. (Only the
/// wanted ones are kept here: a folder such as `/usr/bin` holds hundreds. The whole listing is
/// kept on the descriptor, for the work on the root that takes the folder next, such as
/// `update-ldcache`'s scan: see [`for_each_listed`].)
fn list(
    root: &Root,
    fd: &DirFd,
    wanted: &HashSet<OsString>,
) -> Option<HashMap<OsString, Option<FileKind>>> {
    use std::ops::ControlFlow;
    let mut names = HashMap::new();
    let mut count = 0usize;
    let stopped = for_each_listed(root, fd, |bytes, kind| {
        count += 1;
        if count > MAX_LISTED {
            return ControlFlow::Break(());
        }
        let name = OsStr::from_bytes(bytes);
        if wanted.contains(name) {
            names.insert(name.to_owned(), dirent_kind(kind));
        }
        ControlFlow::Continue(())
    });
    matches!(stopped, Ok(None)).then_some(names)
}

/// [`open_child_dir`] for reading (listable), or `O_PATH` where reading it is not allowed
/// (`EACCES`: a folder of an unmapped owner, say): the walk needs only to look up names in it.
/// `O_DIRECTORY` fails a non-folder before anything is opened (no FIFO or device is).
fn open_child_dir_listable(dirfd: BorrowedFd<'_>, name: &OsStr) -> io::Result<Arc<DirFd>> {
    let c = cstring(name)?;
    match openat2(
        dirfd,
        &c,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    ) {
        Ok(fd) => Ok(DirFd::new(fd, true)),
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            open_child_dir(dirfd, name).map(|fd| DirFd::new(fd, false))
        }
        Err(e) => Err(e),
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
        self.walk_memo(path, allow_missing, None)
    }

    /// [`Root::walk`], taking what it looks up from `memo` and adding to it.
    fn walk_memo(
        &self,
        path: &str,
        allow_missing: bool,
        memo: Option<&mut Memo>,
    ) -> Result<Walk, RootError> {
        super::check_path(path)?;
        let mut w = Walker {
            root: self,
            path,
            memo,
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
        let file = w.memo.as_ref().is_some_and(|m| m.files.contains(path));
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
            match w.see(&c, file && todo.is_empty())? {
                Seen::Missing if allow_missing => missing.push(c),
                Seen::Missing => {
                    return Err(self.io_err(
                        path,
                        "lstat",
                        io::Error::from_raw_os_error(libc::ENOENT),
                    ))
                }
                Seen::Link(target) => {
                    w.links += 1;
                    if w.links > MAX_SYMLINKS {
                        return Err(RootError::Loop {
                            root: self.path.clone(),
                            path: path.to_string(),
                        });
                    }
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
                Seen::Dir(fd, id) => w.descend(c, fd, id),
                Seen::Other | Seen::Exists if todo.is_empty() => w.existing.push(c),
                Seen::Other | Seen::Exists => {
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

/// [`Root::resolve_lexically`] for many paths of one root, each name of each folder looked up
/// once: the walks share what they looked up (a folder's descriptor, a symlink's target, that a
/// name is missing), so paths in the same folders, through the same symlinks, cost a lookup for
/// their new names only. Same answers as [`Root::resolve_lexically`], on a root nothing changes
/// meanwhile (what it remembers is not looked at again): for one decision over a root, such as
/// the shim's check that no mount covers the paths its hooks' work touches.
///
/// Like every walk it only computes names; the descriptors it holds are of folders inside the
/// root, each opened by one name from the one before, following nothing.
pub struct LexicalResolver<'r> {
    root: &'r mut Root,
    memo: Memo,
}

impl std::fmt::Debug for LexicalResolver<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LexicalResolver")
            .field("root", &self.root.path)
            .field("names", &self.memo.seen.len())
            .finish()
    }
}

impl<'r> LexicalResolver<'r> {
    /// A resolver of `root` that has looked up nothing yet. It borrows the root mutably to
    /// hand it the folders it opened ([`LexicalResolver::keep_folders`]).
    pub fn new(root: &'r mut Root) -> LexicalResolver<'r> {
        LexicalResolver {
            root,
            memo: Memo::default(),
        }
    }

    /// Tells the resolver the paths it is about to be asked (all of them, before the first):
    /// a folder that [`LIST_AT`] or more of them end in (different names, as written) is
    /// listed once when first walked through, and those names are answered from the listing.
    /// Without it, or for folders reached another way (through a symlink), each name is
    /// looked up.
    pub fn expect<'p>(&mut self, paths: impl IntoIterator<Item = &'p str>) {
        for p in paths {
            let parts: Vec<OsString> = components(p.as_bytes()).collect();
            if parts.iter().any(|c| c == "." || c == "..") {
                continue;
            }
            if let Some((name, folder)) = parts.split_last() {
                let folder = join_raw(folder.iter().map(OsString::as_os_str));
                let names = self.memo.expected.entry(folder).or_default();
                names.insert(name.clone());
            }
        }
    }

    /// Tells the resolver which of the paths it expects most likely end in a file (a file
    /// mount's destination): their last name is read as a link first, one call where a
    /// folder's open would fail first (two calls). Only a cost: the answers are the same, and a
    /// last name that is a folder is not kept ([`LexicalResolver::keep_folders`]).
    pub fn expect_files<'p>(&mut self, paths: impl IntoIterator<Item = &'p str>) {
        self.memo
            .files
            .extend(paths.into_iter().map(str::to_string));
    }

    /// [`Root::resolve_lexically`] of `path`.
    pub fn resolve(&mut self, path: &str) -> Result<String, RootError> {
        let walk = self.root.walk_memo(path, true, Some(&mut self.memo))?;
        let mut all = walk.existing;
        all.extend(walk.missing);
        Ok(super::absolute_path(&all))
    }

    /// Hands the folders the walks opened to the root, by their symlink-free paths, where
    /// [`Root::open_dir`], [`Root::mkdir_all_open`] and [`Dir::open_dir`](super::Dir::open_dir)
    /// take them instead of resolving those paths again: for work done on the root right after
    /// the decision the walks served (the shim's hooks). Each was opened by one name from the
    /// one before, following nothing, so it is a folder inside the root as a descriptor opened
    /// by an in-root resolution is; a folder moved meanwhile is used where it is now, as a
    /// [`Dir`](super::Dir) held open would be.
    ///
    /// The names it found missing go with them: [`Root::open_dir`] of a path through one says
    /// it is not there with no lookup, until something changes the root's names.
    pub fn keep_folders(self) {
        let at = self.root.changes.load(std::sync::atomic::Ordering::SeqCst);
        self.root.absent.1 = at;
        for (name, seen) in self.memo.seen {
            match (seen, name.into_string()) {
                (Seen::Dir(fd, _), Ok(name)) => {
                    self.root.kept.insert(name, fd);
                }
                (Seen::Missing, Ok(name)) => {
                    self.root.absent.0.insert(name);
                }
                _ => {}
            }
        }
    }
}
