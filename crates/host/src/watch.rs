//! Wait for entries to appear in directories (inotify) until SIGINT or SIGTERM arrives
//! (signalfd): the loop behind `nvidia-ctk system create-dev-char-symlinks --watch`, which links
//! each new `/dev/nvidia*` node as the driver creates it.
//!
//! Both signals are blocked in the calling thread and read from a signalfd, so a stop request
//! arriving at any moment (even between two waits) ends the loop cleanly instead of killing the
//! process half-way through a link; the previous signal mask is put back on drop. The process
//! must not have other threads that leave the signals unblocked (gpuctk's command line has none).

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// Why watching failed.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// inotify, signalfd or the signal mask could not be set up.
    #[error("setting up the watch: {what}: {source}")]
    Setup {
        /// The call that failed.
        what: &'static str,
        /// Why.
        source: io::Error,
    },
    /// A directory could not be watched.
    #[error("cannot watch {}: {source}", path.display())]
    Add {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Waiting or reading an event failed.
    #[error("waiting for new device nodes: {0}")]
    Wait(io::Error),
}

/// What ended a [`DirWatch::wait`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Woken {
    /// Entries appeared (created, or moved in): their directory and name.
    Appeared(Vec<(PathBuf, OsString)>),
    /// SIGINT or SIGTERM: the signal's number.
    Stopped(i32),
}

/// Directories watched for new entries, and the stop signals.
pub struct DirWatch {
    inotify: OwnedFd,
    signals: OwnedFd,
    old_mask: libc::sigset_t,
    dirs: Vec<(i32, PathBuf)>,
}

fn setup_err(what: &'static str) -> WatchError {
    WatchError::Setup {
        what,
        source: io::Error::last_os_error(),
    }
}

/// Block SIGINT and SIGTERM in the calling thread, so a stop request is read (from a signalfd,
/// or with `sigwait`) instead of killing the process mid-write. Returns the blocked set and the
/// mask before.
pub fn block_stop_signals() -> io::Result<(libc::sigset_t, libc::sigset_t)> {
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

impl DirWatch {
    /// Block SIGINT and SIGTERM in this thread and start watching no directory yet.
    pub fn new() -> Result<DirWatch, WatchError> {
        let (mask, old_mask) = block_stop_signals().map_err(|source| WatchError::Setup {
            what: "blocking SIGINT and SIGTERM",
            source,
        })?;
        // SAFETY: plain libc calls on values we own; every fd returned is checked and owned.
        unsafe {
            let restore = |e| {
                libc::pthread_sigmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut());
                e
            };
            let sfd = libc::signalfd(-1, &mask, libc::SFD_CLOEXEC);
            if sfd < 0 {
                return Err(restore(setup_err("signalfd")));
            }
            let signals = OwnedFd::from_raw_fd(sfd);
            let ifd = libc::inotify_init1(libc::IN_CLOEXEC);
            if ifd < 0 {
                return Err(restore(setup_err("inotify_init1")));
            }
            Ok(DirWatch {
                inotify: OwnedFd::from_raw_fd(ifd),
                signals,
                old_mask,
                dirs: Vec::new(),
            })
        }
    }

    /// Watch `dir` for entries created in it or moved into it.
    pub fn add(&mut self, dir: &Path) -> Result<(), WatchError> {
        let add_err = |source| WatchError::Add {
            path: dir.to_path_buf(),
            source,
        };
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| add_err(io::Error::from(io::ErrorKind::InvalidInput)))?;
        // SAFETY: a valid NUL-terminated path and our own inotify fd.
        let wd = unsafe {
            libc::inotify_add_watch(
                self.inotify.as_raw_fd(),
                c.as_ptr(),
                libc::IN_CREATE | libc::IN_MOVED_TO | libc::IN_ONLYDIR,
            )
        };
        if wd < 0 {
            return Err(add_err(io::Error::last_os_error()));
        }
        if !self.dirs.iter().any(|(w, _)| *w == wd) {
            self.dirs.push((wd, dir.to_path_buf()));
        }
        Ok(())
    }

    /// Block until entries appear in a watched directory or a stop signal arrives. A signal
    /// wins over events that arrived with it.
    pub fn wait(&mut self) -> Result<Woken, WatchError> {
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: self.signals.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.inotify.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two pollfds we own.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(WatchError::Wait(e));
            }
            if fds[0].revents & libc::POLLIN != 0 {
                // SAFETY: reading one siginfo into a buffer of its size.
                let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
                let n = unsafe {
                    libc::read(
                        self.signals.as_raw_fd(),
                        (&mut info as *mut libc::signalfd_siginfo).cast(),
                        std::mem::size_of::<libc::signalfd_siginfo>(),
                    )
                };
                if n < 0 {
                    return Err(WatchError::Wait(io::Error::last_os_error()));
                }
                return Ok(Woken::Stopped(info.ssi_signo as i32));
            }
            if fds[1].revents & libc::POLLIN != 0 {
                let appeared = self.read_events()?;
                if !appeared.is_empty() {
                    return Ok(Woken::Appeared(appeared));
                }
            }
        }
    }

    /// The entries of the pending inotify events.
    fn read_events(&mut self) -> Result<Vec<(PathBuf, OsString)>, WatchError> {
        // Large enough for many events with names up to NAME_MAX.
        let mut buf = vec![0u8; 64 * 1024];
        // SAFETY: reading into a buffer we own, of the length given.
        let n = unsafe { libc::read(self.inotify.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted || e.kind() == io::ErrorKind::WouldBlock {
                return Ok(Vec::new());
            }
            return Err(WatchError::Wait(e));
        }
        let header = std::mem::size_of::<libc::inotify_event>();
        let mut out = Vec::new();
        let mut at = 0usize;
        let end = n as usize;
        while at + header <= end {
            // SAFETY: the kernel wrote a whole event header at `at`; read it unaligned.
            let ev: libc::inotify_event =
                unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
            let name_start = at + header;
            let name_end = (name_start + ev.len as usize).min(end);
            let raw = &buf[name_start..name_end];
            let name = &raw[..raw.iter().position(|&b| b == 0).unwrap_or(raw.len())];
            at = name_end;
            if ev.mask & libc::IN_Q_OVERFLOW != 0 {
                // Events were lost: report the directories themselves, so the caller rescans.
                out.extend(self.dirs.iter().map(|(_, d)| (d.clone(), OsString::new())));
                continue;
            }
            if name.is_empty() {
                continue;
            }
            if let Some((_, dir)) = self.dirs.iter().find(|(w, _)| *w == ev.wd) {
                out.push((dir.clone(), OsString::from_vec(name.to_vec())));
            }
        }
        Ok(out)
    }
}

impl Drop for DirWatch {
    fn drop(&mut self) {
        // SAFETY: restoring the mask saved in `new`. A signal still pending is delivered now,
        // as it would have been without the watch.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old_mask, std::ptr::null_mut());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sees_a_new_entry() {
        let d = tempfile::tempdir().unwrap();
        let mut w = DirWatch::new().unwrap();
        w.add(d.path()).unwrap();
        std::fs::write(d.path().join("nvidia0"), "").unwrap();
        match w.wait().unwrap() {
            Woken::Appeared(v) => {
                assert_eq!(v, vec![(d.path().to_path_buf(), OsString::from("nvidia0"))])
            }
            other => panic!("{other:?}"),
        }
        let e = w.add(&d.path().join("missing")).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
    }
}
