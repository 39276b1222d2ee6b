//! The crate's system calls, as safe functions: descriptors in as `BorrowedFd`, names as `&CStr`,
//! results as `io::Result`. They are `rustix` calls where rustix has the call; the few it lacks
//! (`fchmodat2`, `mount_setattr`, `bpf`) are made here with `libc::syscall`, each with a SAFETY
//! note, and this is the only module of the crate allowed `unsafe`. Flags stay the kernel's
//! numbers (`libc::O_*`, `MS_*`), passed through unchanged, so the callers read as the man pages.

use std::ffi::{CStr, OsString};
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};

pub(crate) mod bpf;

pub(crate) use rustix::fs::{Stat, Statx};

/// Syscall numbers that libc does not name everywhere, for the calls rustix lacks: the same on
/// both architectures we build for (the unified table, 424 and up).
pub(crate) mod nr {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    pub const FCHMODAT2: libc::c_long = 452;
}

fn oflags(flags: i32) -> OFlags {
    OFlags::from_bits_retain(flags as u32 | libc::O_CLOEXEC as u32)
}

fn mode(m: u32) -> Mode {
    Mode::from_raw_mode(m)
}

/// `open(path, flags | O_CLOEXEC)`, never creating.
pub(crate) fn open(path: &CStr, flags: i32) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(path, oflags(flags), Mode::empty())?)
}

/// `openat(dirfd, name, flags | O_CLOEXEC, mode)`.
pub(crate) fn openat(
    dirfd: BorrowedFd<'_>,
    name: &CStr,
    flags: i32,
    m: u32,
) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(dirfd, name, oflags(flags), mode(m))?)
}

/// One `openat2(dirfd, path, {flags | O_CLOEXEC, 0, resolve})` (no retry: see `root::openat2`).
pub(crate) fn openat2(
    dirfd: BorrowedFd<'_>,
    path: &CStr,
    flags: i32,
    resolve: u64,
) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat2(
        dirfd,
        path,
        oflags(flags),
        Mode::empty(),
        ResolveFlags::from_bits_retain(resolve),
    )?)
}

pub(crate) fn mkdirat(dirfd: BorrowedFd<'_>, name: &CStr, m: u32) -> io::Result<()> {
    Ok(rustix::fs::mkdirat(dirfd, name, mode(m))?)
}

/// `mknodat(dirfd, name, kind | mode, rdev)`, `kind` one of `libc::S_IF*`.
pub(crate) fn mknodat(
    dirfd: BorrowedFd<'_>,
    name: &CStr,
    kind: u32,
    m: u32,
    rdev: u64,
) -> io::Result<()> {
    Ok(rustix::fs::mknodat(
        dirfd,
        name,
        FileType::from_raw_mode(kind),
        mode(m),
        rdev,
    )?)
}

pub(crate) fn fchmod(fd: BorrowedFd<'_>, m: u32) -> io::Result<()> {
    Ok(rustix::fs::fchmod(fd, mode(m))?)
}

/// `fchmodat(dirfd, name, mode, 0)`: follows a symlink at `name`, so callers pass names they
/// checked.
pub(crate) fn fchmodat(dirfd: BorrowedFd<'_>, name: &CStr, m: u32) -> io::Result<()> {
    Ok(rustix::fs::chmodat(dirfd, name, mode(m), AtFlags::empty())?)
}

/// `fchmodat2(fd, "", mode, AT_EMPTY_PATH)` (Linux 6.6): chmod of the inode an `O_PATH`
/// descriptor refers to. `ENOSYS` on older kernels and other architectures.
pub(crate) fn fchmodat2_empty(fd: BorrowedFd<'_>, m: u32) -> io::Result<()> {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid descriptor and a NUL-terminated empty path, both alive for the call;
        // the kernel reads nothing else.
        let rc = unsafe {
            libc::syscall(
                nr::FCHMODAT2,
                fd.as_raw_fd(),
                c"".as_ptr(),
                m as libc::c_uint,
                libc::AT_EMPTY_PATH,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = (fd, m);
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }
}

/// `fchownat(dirfd, name, uid, gid, AT_SYMLINK_NOFOLLOW)`; `None` keeps an id.
pub(crate) fn fchownat_nofollow(
    dirfd: BorrowedFd<'_>,
    name: &CStr,
    uid: Option<u32>,
    gid: Option<u32>,
) -> io::Result<()> {
    let uid = uid.map(rustix::fs::Uid::from_raw);
    let gid = gid.map(rustix::fs::Gid::from_raw);
    Ok(rustix::fs::chownat(
        dirfd,
        name,
        uid,
        gid,
        AtFlags::SYMLINK_NOFOLLOW,
    )?)
}

/// `unlinkat(dirfd, name, 0)`, or with `AT_REMOVEDIR`.
pub(crate) fn unlinkat(dirfd: BorrowedFd<'_>, name: &CStr, dir: bool) -> io::Result<()> {
    let flags = if dir {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    Ok(rustix::fs::unlinkat(dirfd, name, flags)?)
}

pub(crate) fn symlinkat(target: &CStr, dirfd: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    Ok(rustix::fs::symlinkat(target, dirfd, name)?)
}

/// `renameat(dirfd, from, dirfd, to)`.
pub(crate) fn renameat(dirfd: BorrowedFd<'_>, from: &CStr, to: &CStr) -> io::Result<()> {
    Ok(rustix::fs::renameat(dirfd, from, dirfd, to)?)
}

pub(crate) fn fstat(fd: BorrowedFd<'_>) -> io::Result<Stat> {
    Ok(rustix::fs::fstat(fd)?)
}

/// `fstatat(dirfd, name, AT_SYMLINK_NOFOLLOW)`.
pub(crate) fn fstatat_nofollow(dirfd: BorrowedFd<'_>, name: &CStr) -> io::Result<Stat> {
    Ok(rustix::fs::statat(dirfd, name, AtFlags::SYMLINK_NOFOLLOW)?)
}

/// `statx(dirfd, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_TYPE)`: the type, and the
/// attributes (`STATX_ATTR_MOUNT_ROOT`) the kernel reports.
pub(crate) fn statx_type_nofollow(dirfd: BorrowedFd<'_>, name: &CStr) -> io::Result<Statx> {
    Ok(rustix::fs::statx(
        dirfd,
        name,
        AtFlags::SYMLINK_NOFOLLOW | AtFlags::NO_AUTOMOUNT,
        rustix::fs::StatxFlags::TYPE,
    )?)
}

/// The target of symlink `name` in `dirfd` (`""`: the `O_PATH` descriptor's own link), at most
/// `cap` bytes: a longer one is `ENAMETOOLONG`.
pub(crate) fn readlinkat(dirfd: BorrowedFd<'_>, name: &CStr, cap: usize) -> io::Result<OsString> {
    // Read into spare capacity: zeroing PATH_MAX bytes first cost more than the call (most
    // calls find a file, EINVAL, or nothing, and read no byte).
    let mut buf = Vec::with_capacity(cap + 1);
    let n = rustix::fs::readlinkat_raw(dirfd, name, rustix::buffer::spare_capacity(&mut buf))?;
    if n > cap {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    Ok(OsString::from_vec(buf))
}

/// Whether `fd` lies on procfs (`fstatfs`).
pub(crate) fn on_procfs(fd: BorrowedFd<'_>) -> io::Result<bool> {
    Ok(rustix::fs::fstatfs(fd)?.f_type == rustix::fs::PROC_SUPER_MAGIC)
}

/// The `ST_*` bits (`f_flag` of `fstatvfs`) of the mount `fd` lies on.
pub(crate) fn mount_flags(fd: BorrowedFd<'_>) -> io::Result<u64> {
    Ok(rustix::fs::fstatvfs(fd)?.f_flag.bits())
}

/// Calls `f` with each entry (name, `d_type`) of `fd` (a directory opened for reading) until it
/// says stop, read by `getdents64` on `fd` itself: no copy of the descriptor to make and close.
/// From the first entry when `rewind` (an `lseek`: a read before moved the offset); the
/// offset is left where the reading stopped.
pub(crate) fn for_each_entry<B>(
    fd: BorrowedFd<'_>,
    rewind: bool,
    mut f: impl FnMut(&CStr, FileType) -> std::ops::ControlFlow<B>,
) -> io::Result<Option<B>> {
    if rewind {
        rustix::fs::seek(fd, rustix::fs::SeekFrom::Start(0))?;
    }
    // About 400 names of a library folder a call, on the stack: no allocation to grow the heap.
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 16 << 10];
    let mut dir = rustix::fs::RawDir::new(fd, &mut buf);
    while let Some(ent) = dir.next() {
        let ent = ent?;
        if let std::ops::ControlFlow::Break(b) = f(ent.file_name(), ent.file_type()) {
            return Ok(Some(b));
        }
    }
    Ok(None)
}

pub(crate) fn makedev(major: u32, minor: u32) -> u64 {
    rustix::fs::makedev(major, minor)
}

/// `mount(source, target, NULL, MS_BIND [| MS_REC], NULL)`.
pub(crate) fn bind(source: &CStr, target: &CStr, recursive: bool) -> io::Result<()> {
    if recursive {
        Ok(rustix::mount::mount_bind_recursive(source, target)?)
    } else {
        Ok(rustix::mount::mount_bind(source, target)?)
    }
}

/// `mount(NULL, target, NULL, MS_REMOUNT | flags, "")`, `flags` the `MS_*` bits.
pub(crate) fn remount(target: &CStr, flags: libc::c_ulong) -> io::Result<()> {
    let flags = MountFlags::from_bits_retain(flags as u32);
    Ok(rustix::mount::mount_remount(target, flags, c"")?)
}

/// `mount(NULL, target, NULL, flags, NULL)`: a propagation change (`MS_SHARED`, ... `| MS_REC`).
pub(crate) fn set_propagation(target: &CStr, flags: libc::c_ulong) -> io::Result<()> {
    let flags = MountPropagationFlags::from_bits_retain(flags as u32);
    Ok(rustix::mount::mount_change(target, flags)?)
}

/// `fchdir(dirfd)` then `umount2(name, MNT_DETACH | UMOUNT_NOFOLLOW)`: detaches the mount at a
/// single name in `dirfd`. Changes this thread's cwd: callers have unshared `CLONE_FS`.
pub(crate) fn detach_at(dirfd: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    rustix::process::fchdir(dirfd)?;
    Ok(rustix::mount::unmount(
        name,
        UnmountFlags::DETACH | UnmountFlags::NOFOLLOW,
    )?)
}

/// `open_tree(src, "", OPEN_TREE_CLONE | AT_EMPTY_PATH [| AT_RECURSIVE])` (Linux 5.2).
pub(crate) fn open_tree_clone(src: BorrowedFd<'_>, recursive: bool) -> io::Result<OwnedFd> {
    use rustix::mount::OpenTreeFlags;
    let mut flags = OpenTreeFlags::OPEN_TREE_CLONE
        | OpenTreeFlags::OPEN_TREE_CLOEXEC
        | OpenTreeFlags::AT_EMPTY_PATH;
    if recursive {
        flags |= OpenTreeFlags::AT_RECURSIVE;
    }
    Ok(rustix::mount::open_tree(src, c"", flags)?)
}

/// `move_mount(tree, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH)`.
pub(crate) fn move_mount(tree: BorrowedFd<'_>, target: BorrowedFd<'_>) -> io::Result<()> {
    use rustix::mount::MoveMountFlags;
    Ok(rustix::mount::move_mount(
        tree,
        c"",
        target,
        c"",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )?)
}

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct MountAttr {
    pub attr_set: u64,
    pub attr_clr: u64,
    pub propagation: u64,
    pub userns_fd: u64,
}

/// `mount_setattr(fd, "", AT_EMPTY_PATH [| AT_RECURSIVE], attr)` (Linux 5.12; rustix has no
/// wrapper).
pub(crate) fn mount_setattr(
    fd: BorrowedFd<'_>,
    recursive: bool,
    attr: &MountAttr,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    mount_setattr_raw(fd.as_raw_fd(), recursive, attr)
}

/// Whether the kernel has `mount_setattr` (Linux 5.12): asked with a descriptor that cannot be
/// valid, so only `ENOSYS` says no.
pub(crate) fn has_mount_setattr() -> bool {
    let r = mount_setattr_raw(-1, false, &MountAttr::default());
    r.err().and_then(|e| e.raw_os_error()) != Some(libc::ENOSYS)
}

fn mount_setattr_raw(fd: libc::c_int, recursive: bool, attr: &MountAttr) -> io::Result<()> {
    const AT_RECURSIVE: u32 = 0x8000;
    let flags = libc::AT_EMPTY_PATH as u32 | if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: a NUL-terminated empty path and a `mount_attr` of the size passed, both alive for
    // the call, which only reads them; `fd` is a descriptor or -1 (EBADF).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd,
            c"".as_ptr(),
            flags,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `unshare(CLONE_FS)`: this thread's cwd and root become its own.
pub(crate) fn unshare_fs() -> io::Result<()> {
    // SAFETY: CLONE_FS unshares the cwd, root and umask only; descriptors stay shared, which is
    // what rustix's `unshare_unsafe` asks callers to keep in mind (CLONE_FILES).
    unsafe {
        Ok(rustix::thread::unshare_unsafe(
            rustix::thread::UnshareFlags::FS,
        )?)
    }
}

/// `setns(ns, CLONE_NEWNS)`: this thread enters the mount namespace `ns`.
pub(crate) fn enter_mount_ns(ns: BorrowedFd<'_>) -> io::Result<()> {
    Ok(rustix::thread::move_into_link_name_space(
        ns,
        Some(rustix::thread::LinkNameSpaceType::Mount),
    )?)
}

/// Whether this thread has `CAP_MKNOD` in its effective set.
pub(crate) fn has_cap_mknod() -> io::Result<bool> {
    let caps = rustix::thread::capabilities(None)?;
    Ok(caps
        .effective
        .contains(rustix::thread::CapabilitySet::MKNOD))
}

/// `setrlimit(RLIMIT_MEMLOCK, unlimited)`; a failure leaves the limit as it was.
pub(crate) fn raise_memlock() -> io::Result<()> {
    use rustix::process::{Resource, Rlimit};
    Ok(rustix::process::setrlimit(
        Resource::Memlock,
        Rlimit {
            current: None,
            maximum: None,
        },
    )?)
}
