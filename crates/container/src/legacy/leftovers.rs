//! A reused container root (enroot's, started again by pyxis `--container-name`): the empty
//! library files and links an earlier start left are removed before this start mounts.

use foldhash::{HashMap, HashMapExt, HashSet};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::*;
use crate::hooks::{is_dso_name, MAX_DIR_ENTRIES};

/// Removes an earlier start's leftovers from the folders `mounts` put libraries in. Bind mounts
/// end with the container but their targets stay: the empty files the driver's libraries were
/// mounted onto and the links made to them (`libcuda.so.1 -> libcuda.so.<version>`). A start that
/// does not mount those (utility after compute) would leave `libcuda.so.1` naming an empty file,
/// which glibc's loader finds in its default folders even where the cache does not name it
/// ("file too short" instead of "not found"). libnvidia-container leaves the same, and the
/// ldconfig it runs never removes a link. Removed, in each folder this start mounts libraries
/// into:
/// - an empty regular file with a library's name (`lib*.so*`, as ldconfig looks at) that this
///   start does not mount onto: no loader can use an empty file, and none of ours is empty once
///   mounted;
/// - a link with a library's name whose target is a plain name in the same folder that is
///   removed (so chains such as `libcuda.so -> libcuda.so.1 -> libcuda.so.<version>` go).
///
/// What may not be removed (a folder this user may not write, a read-only root, a mount point)
/// stays, with a note: the start goes on, as libnvidia-container's would.
pub(super) fn clear_leftovers(
    root_fd: &OwnedFd,
    root: &Root,
    mounts: &[MountPlan],
    notes: &mut Vec<String>,
) -> Result<(), LegacyError> {
    // Folder -> the names this start mounts there.
    let mut folders: BTreeMap<String, HashSet<String>> = BTreeMap::new();
    for m in mounts.iter().filter(|m| !m.dir) {
        let (parent, name) = split_parent(&m.container_path)?;
        if let Some(name) = name.to_str().filter(|n| is_dso_name(n)) {
            folders.entry(parent).or_default().insert(name.to_string());
        }
    }
    for (folder, ours) in &folders {
        clear_folder(root_fd, root, folder, ours, notes)?;
    }
    Ok(())
}

pub(super) fn clear_folder(
    root_fd: &OwnedFd,
    root: &Root,
    folder: &str,
    ours: &HashSet<String>,
    notes: &mut Vec<String>,
) -> Result<(), LegacyError> {
    let names = match root.read_dir_names_limited(folder, MAX_DIR_ENTRIES) {
        Ok(n) => n,
        // Not there yet: the mounts will make it, and nothing was left in it.
        Err(e) if e.is_not_found() || e.errno() == Some(libc::ENOTDIR) => return Ok(()),
        Err(e @ RootError::TooManyEntries { .. }) => {
            notes.push(format!(
                "{e}; an earlier start's leftovers were not looked for"
            ));
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let io = |op: &'static str| {
        let what = format!("{folder} in the container");
        move |source| LegacyError::Io { what, op, source }
    };
    let rel = folder.trim_start_matches('/');
    let rel = cstring(OsStr::new(if rel.is_empty() { "." } else { rel }), folder)?;
    let dir = openat2(
        root_fd.as_fd(),
        &rel,
        libc::O_PATH | libc::O_DIRECTORY,
        IN_ROOT,
    )
    .map_err(io("open"))?;
    let dfd = dir.as_fd();

    let mut empty = BTreeSet::new();
    // Link target -> the links naming it.
    let mut linked: HashMap<String, Vec<String>> = HashMap::new();
    for name in names
        .into_iter()
        .filter(|n| is_dso_name(n) && !ours.contains(n))
    {
        let c = cstring(OsStr::new(&name), &name)?;
        let st = match fstatat_nofollow(dfd, &c) {
            Ok(st) => st,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => return Err(io("lstat")(e)),
        };
        match st.st_mode & libc::S_IFMT {
            libc::S_IFREG if st.st_size == 0 => {
                empty.insert(name);
            }
            libc::S_IFLNK => {
                if let Some(target) = read_link(dfd, &c).map_err(io("readlink"))? {
                    linked.entry(target).or_default().push(name);
                }
            }
            _ => {}
        }
    }
    // The links to those files, then the links to those links: each name once.
    let mut links = Vec::new();
    let mut seen: HashSet<&str> = empty.iter().map(String::as_str).collect();
    let mut queue: VecDeque<&str> = empty.iter().map(String::as_str).collect();
    while let Some(target) = queue.pop_front() {
        for l in linked.get(target).into_iter().flatten() {
            if seen.insert(l) {
                links.push(l.as_str());
                queue.push_back(l);
            }
        }
    }

    let mut removed = 0;
    let mut kept = Vec::new();
    for (name, is_link) in links
        .iter()
        .map(|l| (*l, true))
        .chain(empty.iter().map(|f| (f.as_str(), false)))
    {
        let c = cstring(OsStr::new(name), name)?;
        if !is_link {
            // Still an empty file: nothing was written to it since we looked.
            match fstatat_nofollow(dfd, &c) {
                Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_size == 0 => {}
                Ok(_) => continue,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                Err(e) => return Err(io("lstat")(e)),
            }
        }
        // A file or link, not followed.
        match sys::unlinkat(dfd, &c, false) {
            Ok(()) => removed += 1,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EACCES | libc::EPERM | libc::EROFS | libc::EBUSY)
                ) =>
            {
                kept.push(format!("{name} ({e})"));
            }
            Err(e) => return Err(io("unlink")(e)),
        }
    }
    if removed > 0 {
        notes.push(format!(
            "{folder}: removed {removed} empty library files and links an earlier start left"
        ));
    }
    if !kept.is_empty() {
        notes.push(format!(
            "{folder}: an earlier start's empty library files and links left as they are: {}",
            kept.join(", ")
        ));
    }
    Ok(())
}

/// The target of link `name` in `dfd` when it is a plain name in the same folder, else `None`.
fn read_link(dfd: BorrowedFd<'_>, name: &CString) -> io::Result<Option<String>> {
    let target = match sys::readlinkat(dfd, name, libc::PATH_MAX as usize) {
        Ok(t) => t,
        // Gone, or no longer a link: nothing to follow.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EINVAL)) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(std::str::from_utf8(target.as_bytes())
        .ok()
        .filter(|t| !t.is_empty() && *t != "." && *t != ".." && !t.contains('/'))
        .map(str::to_string))
}
