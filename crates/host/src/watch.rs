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
use std::os::fd::{AsFd, OwnedFd};
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

/// Block SIGINT and SIGTERM in the calling thread, so a stop request is read (from a signalfd,
/// or with `sigwait`) instead of killing the process mid-write. Returns the blocked set and the
/// mask before.
pub fn block_stop_signals() -> io::Result<(libc::sigset_t, libc::sigset_t)> {
    crate::sys::block_stop_signals()
}

/// Waits for one of the signals of `set` (blocked, as [`block_stop_signals`] leaves them):
/// its number.
pub fn wait_for_signal(set: &libc::sigset_t) -> io::Result<i32> {
    crate::sys::sigwait(set)
}

impl DirWatch {
    /// Block SIGINT and SIGTERM in this thread and start watching no directory yet.
    pub fn new() -> Result<DirWatch, WatchError> {
        let (mask, old_mask) = block_stop_signals().map_err(|source| WatchError::Setup {
            what: "blocking SIGINT and SIGTERM",
            source,
        })?;
        let setup = |what| {
            move |source| {
                crate::sys::set_signal_mask(&old_mask);
                WatchError::Setup { what, source }
            }
        };
        let signals = crate::sys::signalfd(&mask).map_err(setup("signalfd"))?;
        let inotify = rustix::fs::inotify::init(rustix::fs::inotify::CreateFlags::CLOEXEC)
            .map_err(|e| setup("inotify_init1")(e.into()))?;
        Ok(DirWatch {
            inotify,
            signals,
            old_mask,
            dirs: Vec::new(),
        })
    }

    /// Watch `dir` for entries created in it or moved into it.
    pub fn add(&mut self, dir: &Path) -> Result<(), WatchError> {
        let add_err = |source| WatchError::Add {
            path: dir.to_path_buf(),
            source,
        };
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| add_err(io::Error::from(io::ErrorKind::InvalidInput)))?;
        use rustix::fs::inotify::WatchFlags;
        let wd = rustix::fs::inotify::add_watch(
            &self.inotify,
            c.as_c_str(),
            WatchFlags::CREATE | WatchFlags::MOVED_TO | WatchFlags::ONLYDIR,
        )
        .map_err(|e| add_err(e.into()))?;
        if !self.dirs.iter().any(|(w, _)| *w == wd) {
            self.dirs.push((wd, dir.to_path_buf()));
        }
        Ok(())
    }

    /// Block until entries appear in a watched directory or a stop signal arrives. A signal
    /// wins over events that arrived with it.
    pub fn wait(&mut self) -> Result<Woken, WatchError> {
        loop {
            use rustix::event::{PollFd, PollFlags};
            let mut fds = [
                PollFd::new(&self.signals, PollFlags::IN),
                PollFd::new(&self.inotify, PollFlags::IN),
            ];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(WatchError::Wait(e.into())),
            }
            let (signal, event) = (
                fds[0].revents().contains(PollFlags::IN),
                fds[1].revents().contains(PollFlags::IN),
            );
            if signal {
                let signo =
                    crate::sys::read_signal(self.signals.as_fd()).map_err(WatchError::Wait)?;
                return Ok(Woken::Stopped(signo));
            }
            if event {
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
        let n = match rustix::io::read(&self.inotify, &mut buf[..]) {
            Ok(n) => n,
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => return Ok(Vec::new()),
            Err(e) => return Err(WatchError::Wait(e.into())),
        };
        let header = std::mem::size_of::<libc::inotify_event>();
        let mut out = Vec::new();
        let mut at = 0usize;
        let end = n;
        while at + header <= end {
            // `struct inotify_event`: wd, mask, cookie, len, in native order.
            let word = |i: usize| {
                let b = &buf[at + 4 * i..at + 4 * i + 4];
                [b[0], b[1], b[2], b[3]]
            };
            let (wd, mask, len) = (
                i32::from_ne_bytes(word(0)),
                u32::from_ne_bytes(word(1)),
                u32::from_ne_bytes(word(3)),
            );
            let name_start = at + header;
            let name_end = (name_start + len as usize).min(end);
            let raw = &buf[name_start..name_end];
            let name = &raw[..raw.iter().position(|&b| b == 0).unwrap_or(raw.len())];
            at = name_end;
            if mask & libc::IN_Q_OVERFLOW != 0 {
                // Events were lost: report the directories themselves, so the caller rescans.
                out.extend(self.dirs.iter().map(|(_, d)| (d.clone(), OsString::new())));
                continue;
            }
            if name.is_empty() {
                continue;
            }
            if let Some((_, dir)) = self.dirs.iter().find(|(w, _)| *w == wd) {
                out.push((dir.clone(), OsString::from_vec(name.to_vec())));
            }
        }
        Ok(out)
    }
}

impl Drop for DirWatch {
    fn drop(&mut self) {
        // A signal still pending is delivered now, as it would have been without the watch.
        crate::sys::set_signal_mask(&self.old_mask);
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
