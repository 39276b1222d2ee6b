//! The crate's system calls, as safe functions (`BorrowedFd`/`&CStr` in, `io::Result` out): on
//! `rustix` where it has the call; the signal mask, `signalfd` and the `readdir` loop that checks
//! `closedir`'s answer on libc here, each with a SAFETY note. The only module of the crate
//! allowed `unsafe`, besides `nvml` (calls into the NVML library it loads).

use std::ffi::{CStr, OsStr, OsString};
use std::io;
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// Blocks SIGINT and SIGTERM in the calling thread; the blocked set and the mask before.
pub(crate) fn block_stop_signals() -> io::Result<(libc::sigset_t, libc::sigset_t)> {
    // SAFETY: both sets are initialised (zeroed, then sigemptyset) before use; pthread_sigmask
    // only changes this thread's mask.
    unsafe {
        let mut mask: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut mask);
        libc::sigaddset(&mut mask, libc::SIGINT);
        libc::sigaddset(&mut mask, libc::SIGTERM);
        let mut old_mask: libc::sigset_t = std::mem::zeroed();
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &mask, &mut old_mask);
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok((mask, old_mask))
    }
}

/// Puts back a signal mask saved by [`block_stop_signals`] in this thread.
pub(crate) fn set_signal_mask(mask: &libc::sigset_t) {
    // SAFETY: `mask` is an initialised set; only this thread's mask changes.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, mask, std::ptr::null_mut());
    }
}

/// `sigwait(set)`: the number of a signal of `set` (blocked) once one is pending.
pub(crate) fn sigwait(set: &libc::sigset_t) -> io::Result<i32> {
    let mut sig: libc::c_int = 0;
    // SAFETY: `set` is an initialised signal set and `sig` a valid out-pointer.
    let rc = unsafe { libc::sigwait(set, &mut sig) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(sig)
}

/// `signalfd(-1, mask, SFD_CLOEXEC)`: the signals of `mask` (blocked) become readable.
pub(crate) fn signalfd(mask: &libc::sigset_t) -> io::Result<OwnedFd> {
    // SAFETY: `mask` is an initialised set.
    let fd = unsafe { libc::signalfd(-1, mask, libc::SFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads one `signalfd_siginfo` from `fd`: the signal's number.
pub(crate) fn read_signal(fd: BorrowedFd<'_>) -> io::Result<i32> {
    let mut buf = [0u8; std::mem::size_of::<libc::signalfd_siginfo>()];
    let n = rustix::io::read(fd, &mut buf)?;
    if n < 4 {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
    }
    // `ssi_signo`, the first field.
    Ok(u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as i32)
}

/// An entry of a directory: its name, and whether it is a regular file (not followed).
pub(crate) struct Entry {
    pub(crate) name: OsString,
    pub(crate) is_file: bool,
}

/// The entries of directory `dir` (without `.` and `..`), at most `max`. `closedir`'s error is
/// one too (EIO: the folder's filesystem is failing), which rustix's directory stream does not
/// report, hence libc here.
pub(crate) fn read_dir(dir: &CStr, max: usize) -> io::Result<Vec<Entry>> {
    let fd = rustix::fs::open(
        dir,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let fd = std::os::fd::IntoRawFd::into_raw_fd(fd);
    // SAFETY: `fd` is an open directory descriptor we own; on success the DIR stream owns it.
    let stream = unsafe { libc::fdopendir(fd) };
    if stream.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so `fd` is still ours to close, exactly once.
        unsafe { libc::close(fd) };
        return Err(e);
    }
    let mut entries = Vec::new();
    let listed = loop {
        if entries.len() >= max {
            break Ok(());
        }
        // SAFETY: errno is thread-local; cleared so that a NULL from readdir tells the end of
        // the directory (errno still 0) from an error.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: `stream` is a valid DIR stream until the closedir below.
        let ent = unsafe { libc::readdir(stream) };
        if ent.is_null() {
            let e = io::Error::last_os_error();
            break if e.raw_os_error().unwrap_or(0) == 0 {
                Ok(())
            } else {
                Err(e)
            };
        }
        // SAFETY: readdir returned a valid dirent whose d_name is NUL-terminated; it stays
        // valid until the next readdir on this stream.
        let (name, d_type) = unsafe { (CStr::from_ptr((*ent).d_name.as_ptr()), (*ent).d_type) };
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        let is_file = match d_type {
            libc::DT_REG => true,
            // The filesystem does not say: ask, without following a symlink.
            libc::DT_UNKNOWN => {
                // SAFETY: `stream` is valid, so dirfd gives its descriptor, which it keeps
                // owning past this borrow.
                let dirfd = unsafe { BorrowedFd::borrow_raw(libc::dirfd(stream)) };
                rustix::fs::statat(dirfd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG)
            }
            _ => false,
        };
        entries.push(Entry {
            name: OsStr::from_bytes(name.to_bytes()).to_os_string(),
            is_file,
        });
    };
    // SAFETY: `stream` is valid and closed exactly once; it closes `fd` too.
    let closed = unsafe { libc::closedir(stream) };
    let close_error = (closed != 0).then(io::Error::last_os_error);
    listed?;
    match close_error {
        // On Linux the descriptor is gone even then, and nothing was left unread (std's rule).
        Some(e) if e.kind() == io::ErrorKind::Interrupted => Ok(entries),
        Some(e) => Err(e),
        None => Ok(entries),
    }
}
