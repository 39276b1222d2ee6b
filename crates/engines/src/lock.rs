//! The lock `runtime configure` and `unconfigure` hold from reading a config to writing it, so
//! that runs on the same file at once apply one after the other, each on what the previous one
//! wrote, instead of each writing its own edit of the same old content (the lost update).
//!
//! The lock is an exclusive `flock` on the config file's directory, opened read-only. It leaves
//! no file behind: a lock file would sit in `/etc/docker` or `/etc/crio`, and in a drop-in
//! directory an engine would load it. Locking the directory rather than the config file also
//! covers a config file that does not exist yet and the drop-ins next to it (`crio.conf.d/`), and
//! it survives the rename that replaces the file (a lock on the old file's inode would not
//! exclude a run that opens the new one).
//!
//! It is advisory: it orders gpuctk runs among themselves (and any tool that flocks the
//! directory); an editor or another tool writing the file meanwhile is caught by `apply`'s check
//! that the file still holds what was read.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long to wait for another run to finish before giving up.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The directory could not be created or opened.
    #[error("locking {}: cannot open directory {}: {source}; nothing was written", config.display(), dir.display())]
    Open {
        /// The config file.
        config: PathBuf,
        /// Its directory.
        dir: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Another run held the lock for longer than the timeout.
    #[error("locking {}: another `runtime configure` has held the lock on {} for {}s; nothing was written (try again once it is done)", config.display(), dir.display(), waited.as_secs())]
    Timeout {
        /// The config file.
        config: PathBuf,
        /// Its directory.
        dir: PathBuf,
        /// How long we waited.
        waited: Duration,
    },
}

/// A held lock; released on drop (and by the kernel if the process dies).
#[derive(Debug)]
pub struct ConfigLock {
    dir: PathBuf,
    _fd: Option<File>,
    unsupported: Option<io::Error>,
}

impl ConfigLock {
    /// Lock the directory of `config_path`, creating the directory when it is missing (the
    /// write that follows would create it anyway), waiting up to `timeout` for another holder.
    pub fn acquire(config_path: &Path, timeout: Duration) -> Result<ConfigLock, LockError> {
        let dir = match config_path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let open_err = |source| LockError::Open {
            config: config_path.to_path_buf(),
            dir: dir.clone(),
            source,
        };
        if !dir.is_dir() {
            fs::create_dir_all(&dir).map_err(open_err)?;
        }
        let fd = File::open(&dir).map_err(open_err)?;
        let start = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            let locked =
                rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive);
            if locked.is_ok() {
                return Ok(ConfigLock {
                    dir,
                    _fd: Some(fd),
                    unsupported: None,
                });
            }
            let e = io::Error::from(locked.unwrap_err());
            match e.raw_os_error() {
                Some(libc::EWOULDBLOCK) | Some(libc::EINTR) => {}
                // A file system without flock (some network mounts): go on unlocked, as every
                // version before this one did, and let the caller warn.
                Some(libc::ENOLCK) | Some(libc::EOPNOTSUPP) | Some(libc::EBADF) => {
                    return Ok(ConfigLock {
                        dir,
                        _fd: None,
                        unsupported: Some(e),
                    })
                }
                _ => return Err(open_err(e)),
            }
            if start.elapsed() >= timeout {
                return Err(LockError::Timeout {
                    config: config_path.to_path_buf(),
                    dir,
                    waited: start.elapsed(),
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// The locked directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Why the directory could not be locked, when its file system has no `flock`: the run goes
    /// on unlocked and the caller should say so.
    pub fn unsupported(&self) -> Option<&io::Error> {
        self.unsupported.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_waits_then_times_out() {
        let d = tempfile::tempdir().unwrap();
        let cfg = d.path().join("daemon.json");
        let held = ConfigLock::acquire(&cfg, DEFAULT_TIMEOUT).unwrap();
        assert!(held.unsupported().is_none());
        let e = ConfigLock::acquire(&cfg, Duration::from_millis(30)).unwrap_err();
        assert!(matches!(e, LockError::Timeout { .. }), "{e}");
        assert!(e.to_string().contains("nothing was written"), "{e}");
        drop(held);
        ConfigLock::acquire(&cfg, Duration::from_millis(30)).unwrap();
        // No lock file anywhere.
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 0);
    }

    #[test]
    fn missing_directory_is_created() {
        let d = tempfile::tempdir().unwrap();
        let cfg = d.path().join("etc/crio/crio.conf");
        let l = ConfigLock::acquire(&cfg, DEFAULT_TIMEOUT).unwrap();
        assert_eq!(l.dir(), d.path().join("etc/crio"));
        assert!(l.dir().is_dir());
    }
}
