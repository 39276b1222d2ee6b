//! The host under `--host-root`, reached with its symlinks resolved inside it, and the manifest
//! that records each path before install touches it.

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use serde::{Deserialize, Serialize};

use crate::cli::HostArgs;

/// The manifest's name in the toolkit dir.
pub(super) const MANIFEST: &str = ".gpuctk-install.json";

/// What install did, so that uninstall undoes exactly that. Paths are as the host sees them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Manifest {
    /// The engine registered with.
    pub engine: String,
    /// Its config file.
    pub config: PathBuf,
    /// The drop-in the runtimes are in (none for docker).
    pub drop_in: Option<PathBuf>,
    /// The runtime names registered.
    pub runtimes: Vec<String>,
    /// Files and links install created (nothing was there).
    pub created: BTreeSet<PathBuf>,
    /// Directories install created.
    pub dirs: BTreeSet<PathBuf>,
    /// Files install replaced; each original is kept in `<file>.bak` until uninstall puts it back.
    pub replaced: BTreeSet<PathBuf>,
    /// Backups of the engine's config that install's registration wrote.
    pub backups: BTreeSet<PathBuf>,
    /// The engine's config changed but telling the engine failed: the next install tries again
    /// even though nothing changes then.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reload_pending: bool,
}

/// Resolve `host` (absolute, as the host sees it) under `root` as the host would: symlinks are
/// followed inside `root` (an absolute target starts again at `root`), `..` stops at it. Every
/// component is resolved, the last one too.
pub(super) fn resolve_in_root(root: &Path, host: &Path) -> PathBuf {
    let mut cur = PathBuf::new();
    let mut pending: Vec<std::ffi::OsString> = host
        .components()
        .rev()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    let mut links = 0;
    while let Some(c) = pending.pop() {
        if c == ".." {
            cur.pop();
            continue;
        }
        let next = cur.join(&c);
        let full = root.join(&next);
        match std::fs::symlink_metadata(&full) {
            Ok(m) if m.file_type().is_symlink() && links < 40 => {
                links += 1;
                let Ok(target) = std::fs::read_link(&full) else {
                    cur = next;
                    continue;
                };
                if target.is_absolute() {
                    cur = PathBuf::new();
                }
                for c in target.components().rev() {
                    match c {
                        Component::Normal(n) => pending.push(n.to_os_string()),
                        Component::ParentDir => pending.push("..".into()),
                        _ => {}
                    }
                }
            }
            _ => cur = next,
        }
    }
    root.join(cur)
}

/// The host, seen from this container.
pub(super) struct Host {
    pub(super) root: PathBuf,
}

impl Host {
    /// Where this container reaches `host` (absolute, as the host sees it): its directory
    /// resolved under the host root, its own name kept (a link of ours is replaced, not
    /// followed).
    pub(super) fn here(&self, host: &Path) -> PathBuf {
        match (host.parent(), host.file_name()) {
            (Some(dir), Some(name)) => resolve_in_root(&self.root, dir).join(name),
            _ => resolve_in_root(&self.root, host),
        }
    }

    /// Create `dir` (as the host sees it) and the missing directories above it, recording each
    /// one before it is created. A failure removes the ones this call created, so that none is
    /// left unrecorded before the toolkit dir (where the manifest goes) exists.
    pub(super) fn make_dirs(&self, dir: &Path, b: &mut Book) -> anyhow::Result<()> {
        let mut missing = Vec::new();
        let mut d = Some(dir);
        while let Some(cur) = d {
            if self.here(cur).is_dir() {
                break;
            }
            missing.push(cur.to_path_buf());
            d = cur.parent();
        }
        let mut made: Vec<PathBuf> = Vec::new();
        let mut step = |cur: &Path, b: &mut Book| -> anyhow::Result<()> {
            b.record(self, |m| m.dirs.insert(cur.to_path_buf()))?;
            let here = self.here(cur);
            std::fs::create_dir(&here)
                .with_context(|| format!("{}: cannot create directory", here.display()))?;
            made.push(cur.to_path_buf());
            std::fs::set_permissions(&here, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("{}: cannot set its mode", here.display()))
        };
        for cur in missing.into_iter().rev() {
            if let Err(e) = step(&cur, b) {
                for d in made.iter().rev() {
                    if std::fs::remove_dir(self.here(d)).is_ok() {
                        b.m.dirs.remove(d);
                    }
                }
                let _ = b.save(self);
                return Err(e);
            }
        }
        Ok(())
    }
}

/// The manifest being built, and where it goes: every change to it is on disk before the path
/// it names is touched (once the toolkit dir, which holds it, exists).
pub(super) struct Book {
    pub(super) toolkit: PathBuf,
    pub(super) m: Manifest,
}

impl Book {
    /// Apply `change` to the manifest and, when it changed something, write it.
    pub(super) fn record(
        &mut self,
        host: &Host,
        change: impl FnOnce(&mut Manifest) -> bool,
    ) -> anyhow::Result<()> {
        if change(&mut self.m) {
            self.save(host)?;
        }
        Ok(())
    }

    /// Write the manifest, if its directory is there yet.
    pub(super) fn save(&self, host: &Host) -> anyhow::Result<()> {
        if host.here(&self.toolkit).is_dir() {
            write_manifest(host, &self.toolkit, &self.m)?;
        }
        Ok(())
    }
}

/// What a step did, for the report.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    Unchanged,
    Created,
    Replaced,
}

pub(super) fn report(out: &mut impl Write, o: Outcome, host: &Path) -> std::io::Result<()> {
    let what = match o {
        Outcome::Unchanged => "unchanged",
        Outcome::Created => "created",
        Outcome::Replaced => "updated",
    };
    writeln!(out, "{what} {}", host.display())
}

/// `<path>.bak`.
pub(super) fn bak(path: &Path) -> PathBuf {
    gpuctk_engines::default_backup_path(path)
}

/// Keep the original of a file we are about to replace for the first time in `<file>.bak`
/// (a file we created, or whose original is already kept, has none to keep). It is recorded
/// first; a record whose `.bak` is missing (the move failed) is moved again.
pub(super) fn keep_original(host: &Host, path: &Path, b: &mut Book) -> anyhow::Result<()> {
    let here = host.here(path);
    let backup = bak(&here);
    if b.m.created.contains(path)
        || (b.m.replaced.contains(path) && std::fs::symlink_metadata(&backup).is_ok())
    {
        return Ok(());
    }
    if std::fs::symlink_metadata(&backup).is_ok() {
        bail!(
            "{}: install would replace it, but {} exists already; move one of them away and run install again",
            here.display(),
            backup.display()
        );
    }
    b.record(host, |m| m.replaced.insert(path.to_path_buf()))?;
    std::fs::rename(&here, &backup).with_context(|| {
        format!(
            "{}: cannot keep the original as {}",
            here.display(),
            backup.display()
        )
    })?;
    Ok(())
}

/// Put `bytes` at `path` (as the host sees it) with `mode`, atomically; nothing is written when
/// the file already holds them.
pub(super) fn put_file(
    host: &Host,
    path: &Path,
    bytes: &[u8],
    mode: u32,
    b: &mut Book,
) -> anyhow::Result<Outcome> {
    let here = host.here(path);
    let outcome = match std::fs::symlink_metadata(&here) {
        Ok(md) if md.is_file() => {
            if md.mode() & 0o7777 == mode && std::fs::read(&here).ok().as_deref() == Some(bytes) {
                return Ok(Outcome::Unchanged);
            }
            Outcome::Replaced
        }
        Ok(_) => Outcome::Replaced,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Outcome::Created,
        Err(e) => return Err(anyhow!("{}: {e}", here.display())),
    };
    if outcome == Outcome::Replaced {
        keep_original(host, path, b)?;
    } else {
        b.record(host, |m| m.created.insert(path.to_path_buf()))?;
    }
    gpuctk_atomicfile::write(&here, bytes, Some(mode))
        .with_context(|| format!("{}: cannot write it; it is unchanged", here.display()))?;
    Ok(outcome)
}

/// Make `path` (as the host sees it) a symlink to `target`; replaced atomically (a link at a
/// temp name renamed over it) when it is anything else.
pub(super) fn put_link(
    host: &Host,
    path: &Path,
    target: &Path,
    b: &mut Book,
) -> anyhow::Result<Outcome> {
    let here = host.here(path);
    let outcome = match std::fs::symlink_metadata(&here) {
        Ok(md) if md.file_type().is_symlink() => {
            if std::fs::read_link(&here).ok().as_deref() == Some(target) {
                return Ok(Outcome::Unchanged);
            }
            Outcome::Replaced
        }
        Ok(_) => Outcome::Replaced,
        Err(_) => Outcome::Created,
    };
    if outcome == Outcome::Replaced {
        keep_original(host, path, b)?;
    }
    if outcome == Outcome::Created {
        b.record(host, |m| m.created.insert(path.to_path_buf()))?;
    }
    let name = here
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = here.with_file_name(format!(".{name}.gpuctk-{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)
        .with_context(|| format!("{}: cannot create the link", tmp.display()))?;
    std::fs::rename(&tmp, &here).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow!("{}: cannot put the link in place: {e}", here.display())
    })?;
    Ok(outcome)
}

/// Check `--host-root` and `--toolkit-dir`.
pub(super) fn host_of(h: &HostArgs) -> anyhow::Result<Host> {
    if !h.toolkit_dir.is_absolute() {
        bail!(
            "--toolkit-dir {}: give it as the host sees it, absolute",
            h.toolkit_dir.display()
        );
    }
    let root = std::path::absolute(&h.host_root)
        .with_context(|| format!("--host-root {}", h.host_root.display()))?;
    if !root.is_dir() {
        bail!(
            "--host-root {}: not a directory; mount the host's / there (hostPath /)",
            root.display()
        );
    }
    Ok(Host { root })
}

/// Read the manifest of an earlier install; `None` when there is none.
pub(super) fn read_manifest(host: &Host, toolkit: &Path) -> anyhow::Result<Option<Manifest>> {
    let here = host.here(&toolkit.join(MANIFEST));
    match std::fs::symlink_metadata(&here) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(anyhow!("{}: {e}", here.display())),
        Ok(_) => {}
    }
    // Capped like every file we parse; a manifest lists a few dozen paths.
    let b = crate::capped::read_capped(&here, 4 << 20, "the install manifest")?;
    serde_json::from_slice(&b).map(Some).with_context(|| {
        format!(
            "{}: not a manifest gpuctk install wrote; remove it if nothing is installed",
            here.display()
        )
    })
}

/// The host-view path of `here`, a path under the host root.
pub(super) fn host_view(host: &Host, here: &Path) -> PathBuf {
    match here.strip_prefix(&host.root) {
        Ok(rel) => Path::new("/").join(rel),
        Err(_) => here.to_path_buf(),
    }
}

/// Write the manifest (not in its own lists: uninstall removes it last, whatever it says);
/// nothing is written when it holds these bytes already.
pub(super) fn write_manifest(host: &Host, toolkit: &Path, m: &Manifest) -> anyhow::Result<()> {
    let here = host.here(&toolkit.join(MANIFEST));
    let mut text = serde_json::to_string_pretty(m)?;
    text.push('\n');
    if std::fs::read(&here).ok().as_deref() != Some(text.as_bytes()) {
        gpuctk_atomicfile::write(&here, text.as_bytes(), Some(0o644)).with_context(|| {
            format!(
                "{}: cannot record what was installed; run install again",
                here.display()
            )
        })?;
    }
    Ok(())
}
