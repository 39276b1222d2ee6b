//! Atomic file replacement: every file gpuctk writes (CDI specs, `config.json`, engine configs)
//! goes to a temp file in the same directory, is fsynced, then renamed over the target, so a
//! crash or an error leaves either the old content or the new one, never a mix.
#![deny(missing_docs)]

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Replace `path` with `contents` atomically.
///
/// `mode` is the permission of the new file; `None` keeps the mode of the file being replaced
/// (or 0644 for a new file). The directory must exist: we never create parents silently, since a
/// missing output dir is usually a typo the user wants to hear about.
pub fn write(path: &Path, contents: &[u8], mode: Option<u32>) -> io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let mode = match mode {
        Some(m) => m,
        None => match fs::metadata(path) {
            Ok(md) => md.permissions().mode() & 0o7777,
            Err(_) => 0o644,
        },
    };
    let mut last_err = None;
    for attempt in 0..16u32 {
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".{}.{}.tmp", std::process::id(), attempt));
        let tmp = dir.join(&tmp_name);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp);
        let mut file = match file {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                last_err = Some(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        let result = (|| {
            file.write_all(contents)?;
            // The umask may have narrowed the mode given to open(2).
            file.set_permissions(fs::Permissions::from_mode(mode))?;
            file.sync_all()?;
            drop(file);
            fs::rename(&tmp, path)?;
            // Make the rename itself durable.
            File::open(&dir)?.sync_all()
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        return result;
    }
    Err(last_err.unwrap_or_else(|| io::Error::other("could not create a temp file")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_and_keeps_mode() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("spec.yaml");
        fs::write(&p, b"old").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        write(&p, b"new", None).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // No temp file left behind.
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn missing_dir_is_an_error_and_writes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("nope").join("spec.yaml");
        assert!(write(&p, b"x", Some(0o644)).is_err());
        assert!(!d.path().join("nope").exists());
    }

    #[test]
    fn failed_rename_keeps_old_file() {
        let d = tempfile::tempdir().unwrap();
        // A directory at the target path makes rename fail.
        let p = d.path().join("target");
        fs::create_dir(&p).unwrap();
        fs::write(p.join("inner"), b"keep").unwrap();
        assert!(write(&p, b"x", Some(0o644)).is_err());
        assert_eq!(fs::read(p.join("inner")).unwrap(), b"keep");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
    }
}
