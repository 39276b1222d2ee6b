//! Putting a host file (a mount source, a device node) onto an in-root target.
//!
//! Where the kernel has the mount API (Linux 5.2; `mount_setattr`, 5.12), the source is cloned
//! on the host into a detached mount (`open_tree(OPEN_TREE_CLONE)`), its flags set there, and
//! moved onto the target's descriptor (`move_mount`). Before 5.2 (`ENOSYS`) there is no detached
//! mount, nor before 5.12 a way to set a detached mount's flags: the source is then remembered
//! by its canonical host path and its device and inode, and in the container's mount namespace
//! (before `pivot_root` it still shows the host's tree, which is when runtimes run prestart
//! hooks) it is opened again by that path, checked to be the same inode, and bound with the
//! classic `mount(MS_BIND)` from descriptor to descriptor through `/proc/thread-self/fd` (as runc
//! does), so neither side's path is resolved by name. The flags are then set by a bind remount
//! of the new mount, opened again by its single name and checked to be the source. Where the
//! host path is not visible there (the runtime has pivoted already), or a recursive bind of a
//! folder that holds mounts must be made read-only (the classic remount changes one mount), one
//! line says that this needs Linux 5.2 (or 5.12).

use super::*;
use std::ffi::CStr;
use std::os::fd::AsRawFd;

/// A host file ready to be attached in the container.
#[derive(Debug)]
pub(super) enum Detached {
    /// A detached clone made on the host, its flags set.
    Tree(OwnedFd),
    /// Before Linux 5.2: the host file by canonical path and identity.
    Path {
        path: CString,
        id: (u64, u64),
        recursive: bool,
    },
}

/// [`Detached::Path`] for `src`, opened on the host from `path`.
pub(super) fn by_path(src: &OwnedFd, path: &CStr, recursive: bool) -> io::Result<Detached> {
    let st = fstat(src.as_fd())?;
    Ok(Detached::Path {
        path: path.to_owned(),
        id: (st.st_dev, st.st_ino),
        recursive,
    })
}

/// Clones `src` (opened on the host from `path`, its canonical path) for [`attach`]:
/// `open_tree`, or where the kernel has none, the path and identity for a classic bind.
pub(super) fn detach(src: &OwnedFd, path: &CStr, recursive: bool) -> io::Result<Detached> {
    match sys::open_tree_clone(src.as_fd(), recursive) {
        Ok(tree) => Ok(Detached::Tree(tree)),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => by_path(src, path, recursive),
        Err(e) => Err(e),
    }
}

fn thread_fd_path(fd: BorrowedFd<'_>) -> CString {
    CString::new(format!("/proc/thread-self/fd/{}", fd.as_raw_fd())).expect("no NUL")
}

/// The one-line refusal where the classic bind cannot do what the mount API would.
fn needs(call: &'static str, why: &str) -> io::Error {
    let version = linux_with(call);
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{why}; this needs {call}(2), which this kernel lacks (Linux {version} has it)"),
    )
}

/// Attaches `d` onto `target` (opened without following it as `name` in `dfd`), with `flags`
/// set (only for [`Detached::Path`]: a tree has its flags already) and its propagation applied.
pub(super) fn attach(
    d: &Detached,
    dfd: BorrowedFd<'_>,
    name: &CStr,
    target: &OwnedFd,
    flags: &MountFlags,
) -> io::Result<()> {
    let (path, id, recursive) = match d {
        Detached::Tree(tree) => {
            sys::move_mount(tree.as_fd(), target.as_fd()).map_err(new_call("move_mount"))?;
            if let Some(p) = flags.propagation {
                let attr = MountAttr {
                    attr_set: 0,
                    attr_clr: 0,
                    propagation: p,
                    userns_fd: 0,
                };
                mount_setattr(tree.as_fd(), flags.recursive, &attr)
                    .map_err(new_call("mount_setattr"))?;
            }
            return Ok(());
        }
        Detached::Path {
            path,
            id,
            recursive,
        } => (path, *id, *recursive),
    };
    let src = sys::open(path, libc::O_PATH | libc::O_NOFOLLOW);
    let same = match &src {
        Ok(fd) => fstat(fd.as_fd()).map(|st| (st.st_dev, st.st_ino) == id)?,
        Err(_) => false,
    };
    let src = match (src, same) {
        (Ok(fd), true) => fd,
        _ => {
            return Err(needs(
                "open_tree",
                &format!(
                    "{} is not the host's file in the container's mount namespace (the runtime has pivoted into the container already)",
                    path.to_string_lossy()
                ),
            ))
        }
    };
    let is_dir = fstat(src.as_fd())?.st_mode & libc::S_IFMT == libc::S_IFDIR;
    sys::bind(
        &thread_fd_path(src.as_fd()),
        &thread_fd_path(target.as_fd()),
        recursive,
    )?;
    if (flags.set | flags.clear) == 0 && flags.propagation.is_none() {
        return Ok(());
    }
    let set = set_flags(dfd, name, id, recursive && is_dir, flags);
    if set.is_err() {
        // Not attached half-way: the caller's undo list only hears of a mount that is done.
        // This thread's cwd is its own (unshare(CLONE_FS)); the name is a single component.
        let _ = sys::detach_at(dfd, name);
    }
    set
}

/// Whether the mount whose root `fd` is has mounts on top of anything below it, in this
/// thread's mount namespace (`mnt_id` from fdinfo, then a line of mountinfo naming it parent).
fn has_submounts(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let info = read_proc(
        format!("/proc/thread-self/fdinfo/{}", fd.as_raw_fd()),
        64 << 10,
    )?;
    let id = info
        .lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .ok_or_else(|| io::Error::other("no mnt_id in /proc/thread-self/fdinfo"))?;
    let table = super::cgroup::read_mountinfo(Path::new("/proc/thread-self/mountinfo"))?;
    Ok(table.iter().any(|m| m.parent == id))
}

/// The flags and propagation of the classic bind just made as `name` in `dfd` (see [`attach`]).
fn set_flags(
    dfd: BorrowedFd<'_>,
    name: &CStr,
    id: (u64, u64),
    recursive_dir: bool,
    flags: &MountFlags,
) -> io::Result<()> {
    let recursive = flags.recursive;
    // The new mount, by its single name, never followed: it must show the source.
    let top = sys::openat(dfd, name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
    let st = fstat(top.as_fd())?;
    if (st.st_dev, st.st_ino) != id {
        return Err(io::Error::other(
            "the new mount changed while it was being opened",
        ));
    }
    let at = thread_fd_path(top.as_fd());
    // A folder's submounts would keep their own flags: the classic remount changes one mount.
    if recursive_dir && (flags.set | flags.clear) != 0 && has_submounts(top.as_fd())? {
        return Err(needs(
            "mount_setattr",
            "the folder has mounts inside it, which a bind remount would leave writable (or suid, dev, exec)",
        ));
    }
    if (flags.set | flags.clear) != 0 {
        // The flags the source's mount has (some may be locked in a user namespace) with ours.
        let f_flag = sys::mount_flags(top.as_fd())?;
        let pairs = [
            (MOUNT_ATTR_RDONLY, libc::ST_RDONLY, libc::MS_RDONLY),
            (MOUNT_ATTR_NOSUID, libc::ST_NOSUID, libc::MS_NOSUID),
            (MOUNT_ATTR_NODEV, libc::ST_NODEV, libc::MS_NODEV),
            (MOUNT_ATTR_NOEXEC, libc::ST_NOEXEC, libc::MS_NOEXEC),
        ];
        let mut ms = libc::MS_REMOUNT | libc::MS_BIND;
        for (attr, st_flag, ms_flag) in pairs {
            let on = (f_flag & st_flag != 0 || flags.set & attr != 0) && flags.clear & attr == 0;
            if on {
                ms |= ms_flag;
            }
        }
        sys::remount(&at, ms)?;
    }
    if let Some(p) = flags.propagation {
        let rec = if recursive { libc::MS_REC } else { 0 };
        sys::set_propagation(&at, p | rec)?;
    }
    Ok(())
}
