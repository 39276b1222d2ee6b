//! Register (and unregister) the gpuctk runtime in container-engine configuration files: the
//! library behind `gpuctk runtime configure` / `unconfigure`, flag-compatible with
//! `nvidia-ctk runtime configure`.
//!
//! The work is split in two so that `--dry-run` and tests never touch the filesystem:
//! [`configure`] / [`unconfigure`] turn the current bytes of a config file into a list of
//! [`Edit`]s (whole new file contents, plus a diff for display), and [`apply`] writes them
//! atomically, keeping a `.bak` of the user's original file (see [`apply`] for the rule).
//!
//! Several `runtime configure` runs on one file at once (a configuration-management tool
//! registering several runtimes in parallel) must not lose each other's changes: the caller takes
//! [`lock::ConfigLock`] on the config file's directory, reads the files, computes the edits and
//! applies them while holding it. Drop-ins we own (CRI-O's `99-nvidia.toml`, containerd's imported
//! one) are edited in place like the main file, so each run adds its runtime next to the others'.
//!
//! Settings configure changes besides its runtime entry (a default runtime, CDI on) are recorded
//! in a ledger beside the config ([`added`]), from which unconfigure puts back what was there.
//!
//! Unlike NVIDIA, which decodes the whole file into a map and re-encodes it (dropping comments
//! and reordering keys, pain point 11 in the facts), every edit here touches only the keys it
//! owns: TOML goes through `toml_edit`, so everything else stays byte-for-byte; JSON keeps key
//! order.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

pub mod added;
pub mod apply;
pub mod containerd;
pub mod crio;
pub mod diff;
pub mod docker;
pub mod lock;
pub mod ocihook;
mod tomlutil;

pub use apply::{apply, Applied, Backup};
pub use lock::ConfigLock;
pub use tomlutil::TomlError;

/// A container engine whose configuration we know how to edit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Engine {
    /// dockerd, configured through `daemon.json`.
    Docker,
    /// containerd's CRI plugin, configured through `config.toml` (versions 1, 2 and 3).
    Containerd,
    /// CRI-O, configured through a drop-in in `crio.conf.d`.
    Crio,
}

impl Engine {
    /// The name used on the command line (`--runtime`).
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Docker => "docker",
            Engine::Containerd => "containerd",
            Engine::Crio => "crio",
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Engine {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "docker" => Ok(Engine::Docker),
            "containerd" => Ok(Engine::Containerd),
            "crio" => Ok(Engine::Crio),
            other => Err(EngineError::UnknownEngine(other.to_string())),
        }
    }
}

/// What to register, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The runtime's name in the engine (`--nvidia-runtime-name`), default `nvidia`.
    pub runtime_name: String,
    /// The runtime executable (`--nvidia-runtime-path`). The CLI makes it absolute for containerd
    /// and CRI-O; docker accepts a bare name looked up in `PATH`, so it is written as given.
    pub runtime_path: String,
    /// Also make it the engine's default runtime (`--set-as-default`).
    pub set_as_default: bool,
    /// Turn on the engine's CDI support (`--cdi.enabled`): docker and containerd only.
    pub enable_cdi: bool,
    /// `--drop-in-config`: the file the runtime goes to (containerd: imported by the main
    /// config, the import added when missing; CRI-O: instead of `crio.conf.d/99-nvidia.toml`).
    /// `None`: containerd edits the main config (or the drop-in its imports already load).
    pub drop_in: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            runtime_name: "nvidia".to_string(),
            runtime_path: "/usr/bin/nvidia-container-runtime".to_string(),
            set_as_default: false,
            enable_cdi: false,
            drop_in: None,
        }
    }
}

/// One file to write (a main config or a drop-in), or to delete.
///
/// `before` is what the file held when the edit was computed (`None`: it did not exist); `apply`
/// refuses to write when the file has changed since, so a concurrent edit is never clobbered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// The file to write.
    pub path: PathBuf,
    /// Its current bytes, `None` when it does not exist.
    pub before: Option<Vec<u8>>,
    /// Its new bytes (empty when `delete` is set).
    pub after: Vec<u8>,
    /// Remove the file instead of writing `after` (unconfigure of a drop-in we own).
    pub delete: bool,
    /// Where `apply` keeps the previous bytes: `<path>.bak`, except for a drop-in in a directory
    /// the engine loads whole (CRI-O's `crio.conf.d`, or a containerd import glob that would
    /// match the `.bak`), where a backup would itself be loaded; it then goes next to the
    /// directory as `<dir>.<file>.bak`.
    pub backup: PathBuf,
    /// Where `apply` may give the new content a temp name before renaming it over `path`:
    /// `None` is `path`'s own directory, where no loader reads our temp names. Set, outside the
    /// directory, for a drop-in directory the engine loads whole (CRI-O loads every file of
    /// `crio.conf.d`, whatever its name).
    pub staging: Option<PathBuf>,
    /// `before` is a file gpuctk created (a drop-in starting with [`OURS_HEADER`]): it has no
    /// user original, so `apply` writes no backup of it.
    pub ours: bool,
}

/// How every drop-in we create starts, so that a later run knows the file is ours.
pub const OURS_HEADER: &str = "# Written by `gpuctk runtime configure`";

/// True when `before` is a file we created (see [`OURS_HEADER`]).
pub(crate) fn written_by_us(before: Option<&[u8]>) -> bool {
    before.is_some_and(|b| b.starts_with(OURS_HEADER.as_bytes()))
}

impl Edit {
    /// An edit writing `after` to `path`, backed up to `<path>.bak`.
    pub fn write(path: PathBuf, before: Option<Vec<u8>>, after: Vec<u8>) -> Edit {
        let backup = default_backup_path(&path);
        Edit {
            path,
            before,
            after,
            delete: false,
            backup,
            staging: None,
            ours: false,
        }
    }

    /// An edit removing `path`, backed up to `<path>.bak`.
    pub fn remove(path: PathBuf, before: Option<Vec<u8>>) -> Edit {
        let backup = default_backup_path(&path);
        Edit {
            path,
            before,
            after: Vec::new(),
            delete: true,
            backup,
            staging: None,
            ours: false,
        }
    }

    /// True when applying it would change nothing on disk.
    pub fn is_noop(&self) -> bool {
        if self.delete {
            self.before.is_none()
        } else {
            self.before.as_deref() == Some(self.after.as_slice())
        }
    }

    /// A unified diff (`diff -u` format, 3 lines of context) from `before` to the new content;
    /// empty when nothing changes. A missing side is `/dev/null`.
    pub fn unified_diff(&self) -> String {
        let rel = self.path.to_string_lossy();
        let rel = rel.trim_start_matches('/');
        let old_name = if self.before.is_some() {
            format!("a/{rel}")
        } else {
            "/dev/null".to_string()
        };
        let new_name = if self.delete {
            "/dev/null".to_string()
        } else {
            format!("b/{rel}")
        };
        let before = self.before.as_deref().unwrap_or(b"");
        let after: &[u8] = if self.delete { b"" } else { &self.after };
        diff::unified(before, after, &old_name, &new_name, 3)
    }
}

/// `<path>.bak`.
pub fn default_backup_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(".bak");
    PathBuf::from(s)
}

/// Reads a file that an operation needs besides the main config (a drop-in): `Ok(None)` when it
/// does not exist. [`configure`] uses the real filesystem; tests pass their own.
pub type ReadFile<'a> = &'a dyn Fn(&Path) -> io::Result<Option<Vec<u8>>>;

/// Reads `path` from the filesystem, `None` when it does not exist.
pub fn read_optional(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Errors of this crate; the engine modules' errors name the file (and line) at fault.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// `--runtime` named an engine we do not support.
    #[error("unknown container engine {0:?} (expected docker, containerd or crio)")]
    UnknownEngine(String),
    /// A drop-in file was asked for docker, whose only config is `daemon.json`.
    #[error("docker reads no drop-in files: register the runtime in daemon.json (leave out --drop-in-config)")]
    NoDropIn,
    /// Editing `daemon.json` failed.
    #[error(transparent)]
    Docker(#[from] docker::DockerError),
    /// Editing containerd's config failed.
    #[error(transparent)]
    Containerd(#[from] containerd::ContainerdError),
    /// Editing CRI-O's config failed.
    #[error(transparent)]
    Crio(#[from] crio::CrioError),
    /// The ledger of settings configure changed is not readable.
    #[error(transparent)]
    Ledger(#[from] added::LedgerError),
    /// The OCI hook file cannot be written or removed.
    #[error(transparent)]
    OciHook(#[from] ocihook::OciHookError),
    /// Writing the edits failed.
    #[error(transparent)]
    Apply(#[from] apply::ApplyError),
    /// The config file's directory could not be locked.
    #[error(transparent)]
    Lock(#[from] lock::LockError),
    /// A drop-in's current content could not be read.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// The config file each engine reads by default (`--config`).
pub fn default_config_path(engine: Engine) -> PathBuf {
    PathBuf::from(match engine {
        Engine::Docker => "/etc/docker/daemon.json",
        Engine::Containerd => "/etc/containerd/config.toml",
        Engine::Crio => "/etc/crio/crio.conf",
    })
}

/// Register the runtime: `current` is the content of `config_path` (`None`: the file is absent).
///
/// Pure apart from reading the current content of a drop-in it would replace (containerd with
/// `imports`, CRI-O), which becomes that edit's `before`; see [`configure_with`].
pub fn configure(
    engine: Engine,
    config_path: &Path,
    current: Option<&[u8]>,
    opts: &Options,
) -> Result<Vec<Edit>, EngineError> {
    configure_with(engine, config_path, current, opts, &read_optional)
}

/// [`configure`], reading drop-ins through `read`.
pub fn configure_with(
    engine: Engine,
    config_path: &Path,
    current: Option<&[u8]>,
    opts: &Options,
    read: ReadFile<'_>,
) -> Result<Vec<Edit>, EngineError> {
    let edits = match engine {
        Engine::Docker if opts.drop_in.is_some() => return Err(EngineError::NoDropIn),
        Engine::Docker => vec![docker::configure(config_path, current, opts)?],
        Engine::Containerd => containerd::configure(config_path, current, opts, read)?,
        Engine::Crio => return crio::configure(config_path, current, opts, read),
    };
    added::on_configure(engine, config_path, current, opts, read, edits)
}

/// Remove what [`configure`] added. `opts.runtime_name` names the runtime to remove.
pub fn unconfigure(
    engine: Engine,
    config_path: &Path,
    current: Option<&[u8]>,
    opts: &Options,
) -> Result<Vec<Edit>, EngineError> {
    unconfigure_with(engine, config_path, current, opts, &read_optional)
}

/// [`unconfigure`], reading drop-ins through `read`.
pub fn unconfigure_with(
    engine: Engine,
    config_path: &Path,
    current: Option<&[u8]>,
    opts: &Options,
    read: ReadFile<'_>,
) -> Result<Vec<Edit>, EngineError> {
    if engine == Engine::Docker && opts.drop_in.is_some() {
        return Err(EngineError::NoDropIn);
    }
    let engine_unconfigure = |cur: Option<&[u8]>, read: ReadFile<'_>| match engine {
        Engine::Docker => Ok(docker::unconfigure(config_path, cur, opts)?
            .into_iter()
            .collect()),
        Engine::Containerd => containerd::unconfigure(config_path, cur, opts, read),
        Engine::Crio => crio::unconfigure(config_path, cur, opts, read),
    };
    added::unconfigure(
        engine,
        config_path,
        current,
        opts,
        read,
        &engine_unconfigure,
    )
}

/// Read a drop-in through `read`, naming it on error.
pub(crate) fn read_drop_in(
    read: ReadFile<'_>,
    path: &Path,
) -> Result<Option<Vec<u8>>, EngineError> {
    read(path).map_err(|source| EngineError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The directory holding `dir`: where temp names of a drop-in in `dir`, a directory the engine
/// loads whole, are staged (same file system in practice, and never loaded).
pub(crate) fn outside_dir(drop_in: &Path) -> Option<PathBuf> {
    drop_in
        .parent()
        .and_then(Path::parent)
        .filter(|d| !d.as_os_str().is_empty())
        .map(Path::to_path_buf)
}

/// Where to back up a drop-in living in `dir`, a directory the engine may load whole: outside
/// it, as `<dir>.<file>.bak`, so the backup is never loaded as configuration.
pub(crate) fn backup_outside_dir(drop_in: &Path) -> PathBuf {
    let (Some(dir), Some(file)) = (drop_in.parent(), drop_in.file_name()) else {
        return default_backup_path(drop_in);
    };
    let mut s = dir.as_os_str().to_os_string();
    s.push(".");
    s.push(file);
    s.push(".bak");
    PathBuf::from(s)
}
