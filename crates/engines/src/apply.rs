//! Write a set of [`Edit`]s to disk: keep a backup of each file's original bytes, then replace
//! it atomically (`gpuctk_atomicfile`: unnamed temp file, fsync, rename, keeping its mode; 0644
//! for a new file), or remove it for a delete.
//!
//! Every edit is checked before anything is written: a file whose content is no longer the
//! edit's `before` (someone changed it since it was read) fails the whole apply untouched, as
//! does any error while writing backups, which are all written before the first file is
//! replaced. Edits that change nothing are skipped, so a second apply rewrites no file and no
//! backup.
//!
//! The backup rule: `<file>.bak` keeps the user's original file, the content it had before
//! gpuctk first changed it. A backup is written only when none exists, and it is created
//! exclusively (it never has another name, and an existing one is never replaced), so a second
//! `configure` (or a `configure` of another runtime name, or an `unconfigure`) keeps the
//! original rather than our previous edit. Existing means a regular file: whoever wrote it, it is
//! the user's, and we do not overwrite a user's file. To take a fresh backup, remove the old one.
//! A file we create has no original, so it gets no backup, then or later: the drop-ins we create
//! start with [`crate::OURS_HEADER`], by which a later run knows them (a main config we created
//! from nothing, such as a new `daemon.json`, cannot carry such a mark; its first backup holds our
//! first version). [`Applied::backup`] says which case happened, so a caller never reports a
//! backup that was not written.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::{read_optional, Edit};

/// What happened to a file's backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backup {
    /// The file's previous content was saved here by this apply.
    Written(PathBuf),
    /// A backup was already there (from an earlier run, holding the original); left as it was.
    Kept(PathBuf),
    /// The file did not exist before: nothing to back up.
    None,
    /// The file is one gpuctk created (a drop-in of ours): it has no user original.
    Ours,
}

/// One file written or removed by [`apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The file.
    pub path: PathBuf,
    /// It was removed (rather than written).
    pub removed: bool,
    /// What became of its backup.
    pub backup: Backup,
}

/// ", after <files> were already written" when some were.
fn earlier(done: &[PathBuf]) -> String {
    if done.is_empty() {
        return String::new();
    }
    let names: Vec<String> = done.iter().map(|p| p.display().to_string()).collect();
    format!(" (already written in this run: {})", names.join(", "))
}

/// Why writing the edits failed; each names the file and what state it is in.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The file could not be read to check it.
    #[error("reading {}: {source}; nothing was written", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The file changed after the edit was computed.
    #[error("{} changed since it was read; nothing was written; run the command again", path.display())]
    Changed {
        /// The file.
        path: PathBuf,
    },
    /// Something that is not a regular file sits where the backup goes.
    #[error("{}: its backup {} exists but is not a regular file; nothing was written (move it away)", file.display(), path.display())]
    BackupNotAFile {
        /// The file to back up.
        file: PathBuf,
        /// The backup path.
        path: PathBuf,
    },
    /// Writing the backup failed (nothing was written to the file itself).
    #[error("{}: cannot keep its original content in {}: {}; nothing was written", file.display(), path.display(), source.cause())]
    Backup {
        /// The file to back up.
        file: PathBuf,
        /// The backup file.
        path: PathBuf,
        /// Why, and the backup's state.
        source: gpuctk_atomicfile::Error,
    },
    /// The backup was written but its directory could not be synced: it may vanish in a power
    /// cut, so the file itself was not touched (a later run keeps this backup).
    #[error("{}: its original content was copied to {}, but syncing directory {} failed: {source}, so the copy may not survive a power cut; {} is unchanged", file.display(), path.display(), dir.display(), file.display())]
    BackupNotDurable {
        /// The file to back up.
        file: PathBuf,
        /// The backup file.
        path: PathBuf,
        /// The directory that could not be synced.
        dir: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Creating the directory of a new file failed.
    #[error("{}: cannot create directory {}: {source}; the file was not written{}", file.display(), path.display(), earlier(done))]
    CreateDir {
        /// The file.
        file: PathBuf,
        /// The directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
        /// Files this apply had already written.
        done: Vec<PathBuf>,
    },
    /// Writing the file failed; the message says whether it holds its previous content or the
    /// new one (written but maybe not durable).
    #[error("{source}{}", earlier(done))]
    Write {
        /// The file.
        path: PathBuf,
        /// Why, and the file's state.
        source: gpuctk_atomicfile::Error,
        /// Files this apply had already written.
        done: Vec<PathBuf>,
    },
    /// Removing the file failed; it is still there.
    #[error("{}: cannot remove: {source}; the file is still there{}", path.display(), earlier(done))]
    Remove {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
        /// Files this apply had already written.
        done: Vec<PathBuf>,
    },
}

/// Keep `prev`, the current bytes of `file`, in `backup` unless a backup already exists (see
/// the module docs), with `file`'s mode (a config may hold credentials).
fn write_backup(file: &Path, backup: &Path, prev: &[u8]) -> Result<Backup, ApplyError> {
    match fs::symlink_metadata(backup) {
        Ok(m) if m.file_type().is_file() => return Ok(Backup::Kept(backup.to_path_buf())),
        Ok(_) => {
            return Err(ApplyError::BackupNotAFile {
                file: file.to_path_buf(),
                path: backup.to_path_buf(),
            })
        }
        Err(_) => {}
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(file)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o644);
    let opts = gpuctk_atomicfile::Options {
        mode: Some(mode),
        create_new: true,
        ..Default::default()
    };
    match gpuctk_atomicfile::replace(backup, prev, &opts) {
        Ok(()) => Ok(Backup::Written(backup.to_path_buf())),
        // Created between our look and our link: someone else's backup, which we keep (once we
        // have seen it is there: we never report a backup that does not exist).
        Err(gpuctk_atomicfile::Error::Exists { .. })
            if fs::symlink_metadata(backup).is_ok_and(|m| m.file_type().is_file()) =>
        {
            Ok(Backup::Kept(backup.to_path_buf()))
        }
        Err(gpuctk_atomicfile::Error::NotDurable { dir, source, .. }) => {
            Err(ApplyError::BackupNotDurable {
                file: file.to_path_buf(),
                path: backup.to_path_buf(),
                dir,
                source,
            })
        }
        Err(source) => Err(ApplyError::Backup {
            file: file.to_path_buf(),
            path: backup.to_path_buf(),
            source,
        }),
    }
}

/// Write `edits`; see the module docs. Returns what was done, one entry per file changed.
pub fn apply(edits: &[Edit]) -> Result<Vec<Applied>, crate::EngineError> {
    apply_edits(edits).map_err(Into::into)
}

fn apply_edits(edits: &[Edit]) -> Result<Vec<Applied>, ApplyError> {
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
    let mut backups = Vec::new();
    for (e, now) in &todo {
        backups.push(match now {
            Some(_) if e.ours => Backup::Ours,
            Some(prev) => write_backup(&e.path, &e.backup, prev)?,
            None => Backup::None,
        });
    }
    let mut done: Vec<Applied> = Vec::new();
    let paths = |done: &[Applied]| done.iter().map(|a| a.path.clone()).collect::<Vec<_>>();
    for ((e, now), backup) in todo.into_iter().zip(backups) {
        if e.delete {
            match fs::remove_file(&e.path) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(ApplyError::Remove {
                        path: e.path.clone(),
                        source,
                        done: paths(&done),
                    })
                }
            }
            done.push(Applied {
                path: e.path.clone(),
                removed: true,
                backup,
            });
            continue;
        }
        if now.is_none() {
            // A new file, typically a drop-in whose directory the engine's package did not
            // create.
            if let Some(dir) = e.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                fs::create_dir_all(dir).map_err(|source| ApplyError::CreateDir {
                    file: e.path.clone(),
                    path: dir.to_path_buf(),
                    source,
                    done: paths(&done),
                })?;
            }
        }
        let opts = gpuctk_atomicfile::Options {
            staging_dir: e.staging.as_deref(),
            ..Default::default()
        };
        gpuctk_atomicfile::replace(&e.path, &e.after, &opts).map_err(|source| {
            ApplyError::Write {
                path: e.path.clone(),
                source,
                done: paths(&done),
            }
        })?;
        done.push(Applied {
            path: e.path.clone(),
            removed: false,
            backup,
        });
    }
    Ok(done)
}
