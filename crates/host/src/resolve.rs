//! Symlink resolution confined to a root directory, for reading a driver tree that is not
//! mounted at `/` (a driver container at `/run/nvidia/driver`, a test tree).
//!
//! Absolute links restart at the root and `..` stops at it, so a link in the tree can never lead
//! discovery outside it. This is for the trusted host driver root only; paths inside a container
//! root are opened with `openat2(RESOLVE_IN_ROOT)` instead.

use foldhash::{HashSet, HashSetExt};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs::Metadata;
use std::io;
use std::path::{Component, Path, PathBuf};

const MAX_LINKS: usize = 40;

/// Resolve `path` (absolute, as seen from inside `root`) to the path inside `root` of the file it
/// finally names, following every symlink. Returns the root-relative absolute path.
pub fn resolve_in_root(root: &Path, path: &Path) -> io::Result<PathBuf> {
    Resolver::new(root).resolve(path).map(|(p, _)| p)
}

/// [`resolve_in_root`] for many paths of one tree: it remembers the folders it found to be
/// folders (not links) and the paths it found absent, so the lookups of one discovery under
/// the same library directory `lstat` each of its parents once, not once per file, and the
/// candidates under a folder the host does not have cost one `lstat` in all. For one pass over
/// a tree (a discovery): a change meanwhile is seen by the next pass.
pub(crate) struct Resolver<'a> {
    root: &'a Path,
    /// Host paths whose `lstat` said "directory".
    dirs: HashSet<PathBuf>,
    /// Host paths whose `lstat` said ENOENT.
    absent: HashSet<PathBuf>,
}

impl<'a> Resolver<'a> {
    /// A resolver for `root` that knows no folder yet.
    pub(crate) fn new(root: &'a Path) -> Resolver<'a> {
        Resolver {
            root,
            dirs: HashSet::new(),
            absent: HashSet::new(),
        }
    }

    /// The root it resolves in.
    pub(crate) fn root(&self) -> &'a Path {
        self.root
    }

    /// [`resolve_in_root`], with the `lstat` of what the path finally names (not a link), or
    /// `None` when that is the root or a folder already known.
    pub(crate) fn resolve(&mut self, path: &Path) -> io::Result<(PathBuf, Option<Metadata>)> {
        let mut todo: VecDeque<OsString> = components(path);
        let mut done: Vec<OsString> = Vec::new();
        let mut links = 0;
        let mut last = None;
        while let Some(c) = todo.pop_front() {
            if c == ".." {
                done.pop();
                last = None;
                continue;
            }
            done.push(c);
            let host = join(self.root, &done);
            if self.dirs.contains(&host) {
                last = None;
                continue;
            }
            if self.absent.contains(&host) {
                return Err(io::Error::from_raw_os_error(libc::ENOENT));
            }
            let md = match std::fs::symlink_metadata(&host) {
                Ok(md) => md,
                Err(e) => {
                    if e.raw_os_error() == Some(libc::ENOENT) {
                        self.absent.insert(host);
                    }
                    return Err(e);
                }
            };
            if md.file_type().is_symlink() {
                links += 1;
                if links > MAX_LINKS {
                    return Err(io::Error::other(format!(
                        "too many levels of symbolic links at {}",
                        host.display()
                    )));
                }
                let target = std::fs::read_link(&host)?;
                done.pop();
                last = None;
                if target.is_absolute() {
                    done.clear();
                }
                for (i, t) in components(&target).into_iter().enumerate() {
                    todo.insert(i, t);
                }
            } else {
                if md.is_dir() {
                    self.dirs.insert(host);
                }
                last = Some(md);
            }
        }
        let mut out = PathBuf::from("/");
        out.extend(done);
        Ok((out, last))
    }

    /// The regular file `path` names, links followed inside the root: its path inside the
    /// root, or `None` when it is absent, not a regular file or cannot be looked up.
    pub(crate) fn regular_file(&mut self, path: &Path) -> Option<PathBuf> {
        match self.resolve(path) {
            Ok((p, Some(md))) if md.is_file() => Some(p),
            _ => None,
        }
    }
}

fn components(p: &Path) -> VecDeque<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect()
}

fn join(root: &Path, parts: &[OsString]) -> PathBuf {
    let mut p = root.to_path_buf();
    p.extend(parts);
    p
}

/// `root` + `inner` where `inner` is absolute inside the root (string-level, for building host
/// paths of already-resolved files).
pub fn host_path(root: &Path, inner: &Path) -> PathBuf {
    let mut p = root.to_path_buf();
    p.extend(
        inner
            .components()
            .filter(|c| matches!(c, Component::Normal(_))),
    );
    p
}

/// Whether a lookup error says the path is not there: absent, or a path through a file
/// (ENOTDIR). Anything else is an error the caller must see.
pub(crate) fn is_absent(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

/// `inner` (absolute inside `root`) followed through its links inside the root to a regular
/// file: its path inside the root, or `None` when absent or not a regular file.
pub(crate) fn regular_file_in_root(root: &Path, inner: &Path) -> io::Result<Option<PathBuf>> {
    let resolved = match resolve_in_root(root, inner) {
        Ok(r) => r,
        Err(e) if is_absent(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    match std::fs::metadata(host_path(root, &resolved)) {
        Ok(md) if md.is_file() => Ok(Some(resolved)),
        Ok(_) => Ok(None),
        Err(e) if is_absent(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn follows_chains_and_stays_inside() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("usr/lib/nvidia/current")).unwrap();
        std::fs::create_dir_all(r.join("etc/alternatives")).unwrap();
        std::fs::write(r.join("usr/lib/nvidia/current/libcuda.so.535.1"), b"x").unwrap();
        symlink(
            "libcuda.so.535.1",
            r.join("usr/lib/nvidia/current/libcuda.so.1"),
        )
        .unwrap();
        symlink(
            "/usr/lib/nvidia/current/libcuda.so.1",
            r.join("etc/alternatives/libcuda.so.1"),
        )
        .unwrap();
        symlink(
            "/etc/alternatives/libcuda.so.1",
            r.join("usr/lib/libcuda.so.1"),
        )
        .unwrap();
        assert_eq!(
            resolve_in_root(r, Path::new("/usr/lib/libcuda.so.1")).unwrap(),
            Path::new("/usr/lib/nvidia/current/libcuda.so.535.1")
        );
        // An escape attempt resolves inside the root, where the target does not exist.
        symlink("../../../../../../etc/passwd", r.join("usr/lib/evil")).unwrap();
        assert!(resolve_in_root(r, Path::new("/usr/lib/evil")).is_err());
        std::fs::write(r.join("etc/passwd"), b"inside").unwrap();
        assert_eq!(
            resolve_in_root(r, Path::new("/usr/lib/evil")).unwrap(),
            Path::new("/etc/passwd")
        );
    }

    /// One resolver for many paths answers as a fresh resolution does each time, for files,
    /// folders, links, `..` and absent paths (remembered folders and absences included).
    #[test]
    fn a_resolver_remembers_without_changing_answers() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("usr/lib/x86_64-linux-gnu")).unwrap();
        std::fs::write(r.join("usr/lib/x86_64-linux-gnu/libcuda.so.570"), b"x").unwrap();
        symlink(
            "libcuda.so.570",
            r.join("usr/lib/x86_64-linux-gnu/libcuda.so.1"),
        )
        .unwrap();
        symlink("/usr/lib", r.join("lib")).unwrap();
        symlink("nowhere", r.join("usr/lib/dangling")).unwrap();
        let paths = [
            "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
            "/lib/x86_64-linux-gnu/libcuda.so.1",
            "/usr/lib/x86_64-linux-gnu/../x86_64-linux-gnu/libcuda.so.570",
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib/x86_64-linux-gnu/..",
            "/usr/local/lib/libcuda.so.1",
            "/usr/local/lib/libcuda.so.1",
            "/usr/lib/dangling",
            "/usr/lib/x86_64-linux-gnu/libcuda.so.570/x",
        ];
        let mut res = Resolver::new(r);
        for _ in 0..2 {
            for p in paths {
                let fresh = resolve_in_root(r, Path::new(p));
                let got = res.resolve(Path::new(p));
                match (&fresh, &got) {
                    (Ok(a), Ok((b, _))) => assert_eq!(a, b, "{p}"),
                    (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{p}"),
                    _ => panic!("{p}: {fresh:?} vs {got:?}"),
                }
                let file = res.regular_file(Path::new(p));
                let want = fresh.ok().filter(|f| host_path(r, f).is_file());
                assert_eq!(file, want, "{p}");
            }
        }
    }

    #[test]
    fn loops_are_an_error() {
        let d = tempfile::tempdir().unwrap();
        symlink("b", d.path().join("a")).unwrap();
        symlink("a", d.path().join("b")).unwrap();
        assert!(resolve_in_root(d.path(), Path::new("/a")).is_err());
    }
}
