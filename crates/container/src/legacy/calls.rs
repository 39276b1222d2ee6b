//! Small helpers of legacy injection over the crate's system calls (`crate::sys`).

use super::*;

pub(super) fn cstring(s: &OsStr, what: &str) -> Result<CString, LegacyError> {
    CString::new(s.as_bytes()).map_err(|_| LegacyError::Io {
        what: what.to_string(),
        op: "path",
        source: io::Error::from_raw_os_error(libc::EINVAL),
    })
}

pub(super) use crate::sys::{fstat, fstatat_nofollow, has_mount_setattr};

/// A kernel file, at most `cap` bytes.
pub(super) fn read_proc(path: impl AsRef<Path>, cap: u64) -> io::Result<String> {
    use std::io::Read;
    let path = path.as_ref();
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(cap + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > cap {
        return Err(io::Error::other(format!(
            "{}: more than {cap} bytes",
            path.display()
        )));
    }
    Ok(text)
}

pub(super) fn open_path_dir(path: &CStr) -> io::Result<OwnedFd> {
    sys::open(path, libc::O_PATH | libc::O_DIRECTORY)
}

pub(super) const IN_ROOT: u64 = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;

/// `openat2(2)` with `O_CLOEXEC`, retried on `EAGAIN`/`EINTR`: the root module's, the one wrapper.
pub(super) use crate::root::openat2;

/// The error of a mount API call, where the kernel lacks the call (`ENOSYS`) one that names the
/// kernel it needs. `attach` falls back to classic binds where a call is missing; this is for a
/// kernel that answers otherwise than its version says.
pub(super) fn new_call(call: &'static str) -> impl Fn(io::Error) -> io::Error {
    move |e| {
        if e.raw_os_error() != Some(libc::ENOSYS) {
            return e;
        }
        let version = linux_with(call);
        io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "this kernel has no {call}(2) (Linux {version} or newer has it), which legacy injection (Docker --gpus, nvidia-container-cli configure) needs; use CDI instead (--device nvidia.com/gpu=all, or NVIDIA_VISIBLE_DEVICES through the runtime in cdi mode)"
            ),
        )
    }
}

/// The Linux release that brought mount API call `call`: 5.12 for `mount_setattr`, 5.2 for the
/// others (`open_tree`, `move_mount`).
pub(super) fn linux_with(call: &str) -> &'static str {
    if call == "mount_setattr" {
        "5.12"
    } else {
        "5.2"
    }
}
