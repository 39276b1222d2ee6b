//! The raw system calls legacy injection makes, with `io::Result` wrappers.

use super::*;

pub(super) fn cstring(s: &OsStr, what: &str) -> Result<CString, LegacyError> {
    CString::new(s.as_bytes()).map_err(|_| LegacyError::Io {
        what: what.to_string(),
        op: "path",
        source: io::Error::from_raw_os_error(libc::EINVAL),
    })
}

pub(super) fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: stat is plain old data.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor and pointer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

pub(super) fn owned_or_err(fd: libc::c_long) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

pub(super) fn open_path_dir(path: &CString) -> io::Result<OwnedFd> {
    // SAFETY: valid NUL-terminated path.
    owned_or_err(unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    } as libc::c_long)
}

pub(super) const IN_ROOT: u64 = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;

pub(super) fn openat2(
    dirfd: RawFd,
    path: &CString,
    flags: i32,
    resolve: u64,
) -> io::Result<OwnedFd> {
    // SAFETY: open_how is plain old data; zero is valid for every field.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.resolve = resolve;
    for _ in 0..64 {
        // SAFETY: valid pointers to a NUL-terminated path and an open_how
        // of the size passed.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dirfd,
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        match owned_or_err(rc) {
            Ok(fd) => return Ok(fd),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EINTR)) => {}
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::from_raw_os_error(libc::EAGAIN))
}

pub(super) fn fstatat_nofollow(dirfd: RawFd, name: &CString) -> io::Result<libc::stat> {
    // SAFETY: stat is plain old data.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor, NUL-terminated name and pointer.
    if unsafe { libc::fstatat(dirfd, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

pub(super) fn check(rc: libc::c_int) -> io::Result<()> {
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
