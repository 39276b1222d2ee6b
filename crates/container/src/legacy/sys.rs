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

/// `openat2(2)` with `O_CLOEXEC`, retried on `EAGAIN`/`EINTR`: the root module's, the one wrapper.
pub(super) use crate::root::openat2;

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

/// The error of a mount API call, where the kernel lacks the call (`ENOSYS`) one that names the
/// kernel it needs. `attach` falls back to classic binds where a call is missing; this is for a
/// kernel that answers otherwise than its version says.
pub(super) fn new_call(call: &'static str) -> impl Fn(io::Error) -> io::Error {
    move |e| {
        if e.raw_os_error() != Some(libc::ENOSYS) {
            return e;
        }
        let version = match call {
            "mount_setattr" => "5.12",
            _ => "5.2",
        };
        io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "this kernel has no {call}(2) (Linux {version} or newer has it), which legacy injection (Docker --gpus, nvidia-container-cli configure) needs; use CDI instead (--device nvidia.com/gpu=all, or NVIDIA_VISIBLE_DEVICES through the runtime in cdi mode)"
            ),
        )
    }
}
