//! Write a set of [`Edit`]s to disk: keep a backup of each file's previous bytes, then replace
//! it atomically (temp file + fsync + rename, keeping its mode; 0644 for a new file), or remove
//! it for a delete.
//!
//! Every edit is checked before anything is written: a file whose content is no longer the
//! edit's `before` (someone changed it since it was read) fails the whole apply untouched, as
//! does any error while writing backups, which are all written before the first file is
//! replaced. Edits that change nothing are skipped, so a second apply rewrites no file and no
//! backup.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::{read_optional, Edit};

/// Why writing the edits failed; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The file could not be read to check it.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The file changed after the edit was computed.
    #[error("{} changed since it was read; run the command again", path.display())]
    Changed {
        /// The file.
        path: PathBuf,
    },
    /// Writing the backup failed (nothing was written to the file itself).
    #[error("writing backup {}: {source}", path.display())]
    Backup {
        /// The backup file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Creating the directory of a new file failed.
    #[error("creating directory {}: {source}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Writing the file failed; it still holds its previous content.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Removing the file failed.
    #[error("removing {}: {source}", path.display())]
    Remove {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// Keep `prev` (the bytes of `file`) in `backup`, with `file`'s mode (a config may hold
/// credentials), unless the backup already holds exactly that.
fn write_backup(file: &Path, backup: &Path, prev: &[u8]) -> Result<(), ApplyError> {
    let err = |source| ApplyError::Backup {
        path: backup.to_path_buf(),
        source,
    };
    if read_optional(backup).ok().flatten().as_deref() == Some(prev) {
        return Ok(());
    }
    let mode = fs::metadata(file)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o644);
    gpuctk_atomicfile::write(backup, prev, Some(mode)).map_err(err)
}

/// Write `edits`; see the module docs.
pub fn apply(edits: &[Edit]) -> Result<(), crate::EngineError> {
    apply_edits(edits).map_err(Into::into)
}

fn apply_edits(edits: &[Edit]) -> Result<(), ApplyError> {
    let mut todo = Vec::new();
    for e in edits {
        let now = read_optional(&e.path).map_err(|source| ApplyError::Read {
            path: e.path.clone(),
            source,
        })?;
        if now != e.before {
            return Err(ApplyError::Changed {
                path: e.path.clone(),
            });
        }
        if !e.is_noop() {
            todo.push((e, now));
        }
    }
    for (e, now) in &todo {
        if let Some(prev) = now {
            write_backup(&e.path, &e.backup, prev)?;
        }
    }
    for (e, now) in todo {
        if e.delete {
            match fs::remove_file(&e.path) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(ApplyError::Remove {
                        path: e.path.clone(),
                        source,
                    })
                }
            }
            continue;
        }
        if now.is_none() {
            // A new file, typically a drop-in whose directory the engine's package did not
            // create.
            if let Some(dir) = e.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                fs::create_dir_all(dir).map_err(|source| ApplyError::CreateDir {
                    path: dir.to_path_buf(),
                    source,
                })?;
            }
        }
        gpuctk_atomicfile::write(&e.path, &e.after, None).map_err(|source| ApplyError::Write {
            path: e.path.clone(),
            source,
        })?;
    }
    Ok(())
}
