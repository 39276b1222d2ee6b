//! `config.toml`: NVIDIA's `/etc/nvidia-container-runtime/config.toml` with its keys, plus ours
//! under `[gpuctk]`. A missing file means defaults; an unknown key is a warning; a syntax error
//! or a key of the wrong type is one line naming the file and line.

use std::path::{Path, PathBuf};

use gpuctk_core::Policy;
use toml_edit::{Document, Item, Table};

/// The config of a binary installed by `gpuctk install`, relative to the binary's directory.
pub const INSTALLED_CONFIG: &str = ".config/nvidia-container-runtime/config.toml";

/// Where the config is looked for when no variable names it.
pub const DEFAULT_CONFIG: &str = "/etc/nvidia-container-runtime/config.toml";

pub use gpuctk_core::Mode;

/// The settings gpuctk uses.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file read, if any.
    pub path: Option<PathBuf>,
    /// Request policy.
    pub policy: Policy,
    /// `[nvidia-container-runtime] mode`.
    pub mode: Mode,
    /// `[nvidia-container-runtime] runtimes`.
    pub runtimes: Vec<String>,
    /// `[nvidia-container-runtime] log-level`.
    pub log_level: String,
    /// `[nvidia-container-runtime] debug`: the runtime's log file.
    pub debug_log: Option<PathBuf>,
    /// `[nvidia-container-runtime.modes.cdi] spec-dirs`.
    pub spec_dirs: Vec<PathBuf>,
    /// `[nvidia-container-runtime.modes.cdi] default-kind`.
    pub default_kind: String,
    /// `[nvidia-container-cli] root`.
    pub driver_root: PathBuf,
    /// `[gpuctk] dev-root` (default: the driver root).
    pub dev_root: Option<PathBuf>,
    /// `[gpuctk] proc-root`.
    pub proc_root: PathBuf,
    /// `[gpuctk] hook-path`: the hook binary written into just-in-time hooks (default: this binary).
    pub hook_path: Option<String>,
    /// Keys we do not know, as `table.key` with their line, for a warning.
    pub unknown_keys: Vec<String>,
    /// `[nvidia-container-runtime.modes.csv] mount-spec-path`: the CSV folder of `mode = "csv"`
    /// (a host path).
    pub csv_mount_spec_path: PathBuf,
    /// `[gpuctk] hooks-in-shim` (default true): the shim does our createContainer hooks'
    /// work itself before it execs the runtime, instead of leaving three hook processes to it.
    pub hooks_in_shim: bool,
    /// `[gpuctk] nvml-cache`: where `cdi generate` and `info` record what NVML said (MIG
    /// UUIDs), for the runtime, which never initialises NVML.
    pub nvml_cache: PathBuf,
    /// `[gpuctk] nvml-helper`: the dynamically linked program a build without in-process NVML
    /// (the static one that ships) runs for NVML's answers.
    pub nvml_helper: PathBuf,
    /// `[gpuctk] snapshot-dir`: where the discovery snapshot (`crate::snapshot`) and the CDI
    /// spec cache (`crate::spec_cache`) are kept; `""` turns both off; unset,
    /// [`Config::snapshot_dir`] picks it.
    pub snapshot_dir: Option<PathBuf>,
    /// `[nvidia-container-runtime.modes.legacy] cuda-compat-mode`.
    pub cuda_compat_mode: CompatMode,
    /// `[features] disable-cuda-compat-lib-hook`.
    pub disable_compat_hook: bool,
    /// `[features] no-additional-gids-for-device-nodes`: planned edits leave the device nodes'
    /// groups out of `process.user.additionalGids`.
    pub no_additional_gids: bool,
    /// `[nvidia-container-cli] no-cgroups`: legacy injection leaves the device cgroup alone
    /// (rootless engines).
    pub no_cgroups: bool,
    /// Keys NVIDIA's toolkit reads that gpuctk accepts but does not apply, set to something other
    /// than NVIDIA's default, as `key (line N)`, for one warning each.
    pub not_applied: Vec<String>,
    /// Keys gpuctk does not apply that hold NVIDIA's default value (NVIDIA's stock config.toml
    /// sets six): no news for every container, so only `config` and `doctor` name them.
    pub at_default: Vec<String>,
}

/// NVIDIA's `cuda-compat-mode`: how an image's CUDA forward-compat `libcuda` is brought in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompatMode {
    /// Put the compat folder first in the loader's search (NVIDIA's default; ours always).
    Ldconfig,
    /// libnvidia-container bind-mounts the compat libraries next to the driver's; the loader
    /// then takes the newest `libcuda.so.1`. Served the `ldconfig` way, which loads the same
    /// library.
    Mount,
    /// NVIDIA's toolkit uses the `enable-cuda-compat` hook: ours always does that work.
    Hook,
    /// The image's compat libraries are never used.
    Disabled,
}

/// Where NVML's answers are recorded by default.
pub const DEFAULT_NVML_CACHE: &str = "/run/gpuctk/nvml-cache.json";

/// Where the packages install the NVML helper.
pub const DEFAULT_NVML_HELPER: &str = "/usr/libexec/gpuctk/gpuctk-nvml";

impl Config {
    /// Where the discovery snapshot and the spec cache are kept: `[gpuctk] snapshot-dir` (`""`:
    /// nowhere); unset, `/run/gpuctk` for root and `$XDG_RUNTIME_DIR/gpuctk` for a user, but
    /// only on the host's own procfs (`proc-root = "/proc"`), so a test's or a mock host's roots
    /// leave nothing in the host's `/run` unless their config asks for it.
    pub fn snapshot_dir(&self) -> Option<PathBuf> {
        match &self.snapshot_dir {
            Some(d) if d.as_os_str().is_empty() => None,
            Some(d) => Some(d.clone()),
            None if self.proc_root != std::path::Path::new("/proc") => None,
            None if crate::capped::euid() == 0 => Some(PathBuf::from("/run/gpuctk")),
            None => std::env::var_os("XDG_RUNTIME_DIR")
                .map(PathBuf::from)
                .filter(|d| d.is_absolute())
                .map(|d| d.join("gpuctk")),
        }
    }

    /// Whether the `enable-cuda-compat` operation is planned.
    pub fn cuda_compat(&self) -> bool {
        self.cuda_compat_mode != CompatMode::Disabled && !self.disable_compat_hook
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            path: None,
            policy: Policy::default(),
            mode: Mode::Auto,
            runtimes: vec!["runc".into(), "crun".into()],
            log_level: "info".into(),
            debug_log: None,
            spec_dirs: gpuctk_cdi::registry::default_spec_dirs(),
            default_kind: "nvidia.com/gpu".into(),
            driver_root: PathBuf::from("/"),
            dev_root: None,
            proc_root: PathBuf::from("/proc"),
            hook_path: None,
            unknown_keys: Vec::new(),
            csv_mount_spec_path: PathBuf::from(gpuctk_host::csv::DEFAULT_MOUNT_SPEC_PATH),
            hooks_in_shim: true,
            nvml_cache: PathBuf::from(DEFAULT_NVML_CACHE),
            nvml_helper: PathBuf::from(DEFAULT_NVML_HELPER),
            snapshot_dir: None,
            cuda_compat_mode: CompatMode::Ldconfig,
            disable_compat_hook: false,
            no_additional_gids: false,
            no_cgroups: false,
            not_applied: Vec::new(),
            at_default: Vec::new(),
        }
    }
}

/// A config file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but cannot be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A FIFO, device, socket or directory: not read.
    #[error(
        "{path}: not a regular file (a FIFO or device is not read); make it a regular config.toml"
    )]
    NotRegular {
        /// The file.
        path: PathBuf,
    },
    /// Larger than [`MAX_CONFIG`]: not read.
    #[error(
        "{path}: {size} bytes, more than the {MAX_CONFIG} a config.toml may hold; replace it with a real one (`nvidia-ctk config default` prints the default)"
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// It grew past [`MAX_CONFIG`] while read.
    #[error(
        "{path}: grew past the {MAX_CONFIG} bytes a config.toml may hold while read; replace it with a real one (`nvidia-ctk config default` prints the default)"
    )]
    Grew {
        /// The file.
        path: PathBuf,
    },
    /// A per-user config exists, and whether it applies (it does not for root of the host) is
    /// unknown: the process's uid map cannot be read.
    #[error(
        "{path}: cannot read it ({reason}), so whether this process is root of the host (which decides whether $HOME/.config/nvidia-container-runtime/config.toml applies) is unknown; check that /proc is mounted, or name the config with GPUCTK_CONFIG"
    )]
    UidMap {
        /// The uid map.
        path: PathBuf,
        /// Why it was not read.
        reason: String,
    },
    /// TOML syntax error.
    #[error(
        "{path}:{line}: {message}; fix the TOML syntax (gpuctk reads NVIDIA's config.toml keys)"
    )]
    Syntax {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// The parser's message.
        message: String,
    },
    /// A known key with a value of the wrong type or an unknown value.
    #[error("{path}:{line}: {key}: {message}")]
    Value {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// `table.key`.
        key: String,
        /// What is wrong.
        message: String,
    },
}

/// The config path: `GPUCTK_CONFIG`, else `NVIDIA_CTK_CONFIG_FILE_PATH`, else
/// `$XDG_CONFIG_HOME/nvidia-container-runtime/config.toml` when it exists, else [`INSTALLED_CONFIG`]
/// next to the running binary (a `gpuctk install` toolkit dir), else the default. The flag given
/// says whether the file must exist (a path named by a variable must).
///
/// For a user other than root, `XDG_CONFIG_HOME` unset means `$HOME/.config`, as the XDG
/// base-directory spec says (NVIDIA goes straight to `/etc` then). That is what lets a rootless
/// podman user choose a config: podman runs its runtime's `create` with `HOME` but without
/// `XDG_CONFIG_HOME` (docs/engines.md). Root keeps NVIDIA's order, so a file in root's home
/// never silently overrides the system config for every engine that runs as root.
///
/// An error only where that file exists and `/proc/self/uid_map` cannot be read: whether it
/// applies is then unknown ([`ConfigError::UidMap`]).
pub fn config_path(env: &dyn Fn(&str) -> Option<String>) -> Result<(PathBuf, bool), ConfigError> {
    config_path_for(env, &|| {
        host_root(crate::capped::euid(), Path::new(UID_MAP))
    })
}

/// This process's uid map, which says whether it runs in the initial user namespace.
const UID_MAP: &str = "/proc/self/uid_map";

/// The most [`UID_MAP`] is read to: a kernel's map holds at most 340 lines (Linux 4.15 and
/// later) of three `%10u` fields, about 11 KiB; the legacy hook reads it to the same cap.
const MAX_UID_MAP: u64 = 16 * 1024;

/// Whether a process of effective uid `euid` (as its own user namespace sees it) is root of the
/// host: uid 0 outside any user namespace, which `uid_map` (`/proc/self/uid_map`) says by mapping
/// every uid to itself, `0 0 4294967295`. A rootless engine's runtime runs as uid 0 of the user's
/// namespace, and is the user, not root. A map that cannot be read, or one over
/// [`MAX_UID_MAP`], is an error naming it, never "not root".
fn host_root(euid: u32, uid_map: &Path) -> Result<bool, ConfigError> {
    if euid != 0 {
        return Ok(false);
    }
    use crate::capped::CappedError;
    let reason = match crate::capped::read_regular(uid_map, MAX_UID_MAP) {
        // The file's text judged whole, as libnvidia-container and the legacy hook judge it.
        Ok((map, _)) => {
            return Ok(map
                .split(u8::is_ascii_whitespace)
                .filter(|f| !f.is_empty())
                .eq([&b"0"[..], b"0", b"4294967295"]))
        }
        Err(CappedError::Io(e)) => e.to_string(),
        Err(e @ CappedError::NotRegular) => e.to_string(),
        Err(CappedError::TooLarge(_) | CappedError::Grew) => format!(
            "more than {MAX_UID_MAP} bytes, where a kernel's map is at most 340 lines (about 11 KiB)"
        ),
    };
    Err(ConfigError::UidMap {
        path: uid_map.to_path_buf(),
        reason,
    })
}

/// [`config_path`], asking `root` whether this process is root of the host only when that
/// matters (it costs a procfs read, and the pass-through path comes here on every call).
fn config_path_for(
    env: &dyn Fn(&str) -> Option<String>,
    root: &dyn Fn() -> Result<bool, ConfigError>,
) -> Result<(PathBuf, bool), ConfigError> {
    if let Some(p) = env("GPUCTK_CONFIG").filter(|p| !p.is_empty()) {
        return Ok((PathBuf::from(p), true));
    }
    if let Some(p) = env("NVIDIA_CTK_CONFIG_FILE_PATH").filter(|p| !p.is_empty()) {
        return Ok((PathBuf::from(p), true));
    }
    const PER_USER: &str = "nvidia-container-runtime/config.toml";
    match env("XDG_CONFIG_HOME").filter(|p| Path::new(p).is_absolute()) {
        Some(x) => {
            let p = Path::new(&x).join(PER_USER);
            if p.exists() {
                return Ok((p, false));
            }
        }
        None => {
            if let Some(h) = env("HOME").filter(|h| Path::new(h).is_absolute()) {
                // Asked only when the file is there: the usual answer is one stat.
                let p = Path::new(&h).join(".config").join(PER_USER);
                if p.exists() && !root()? {
                    return Ok((p, false));
                }
            }
        }
    }
    // Installed by `gpuctk install` into a toolkit dir: the config next to the binary, where
    // NVIDIA's toolkit container puts it (its wrappers point XDG_CONFIG_HOME there; our
    // personalities are plain links, so the binary looks itself).
    if let Some(p) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join(INSTALLED_CONFIG)))
        .filter(|p| p.is_file())
    {
        return Ok((p, false));
    }
    Ok((PathBuf::from(DEFAULT_CONFIG), false))
}

/// Load the config the environment points at.
pub fn load_from_env() -> Result<Config, ConfigError> {
    let (path, required) = config_path(&|k| std::env::var(k).ok())?;
    load(&path, required)
}

/// The most a config.toml may hold: NVIDIA's default one, every key set, is under 2 KiB.
pub const MAX_CONFIG: u64 = 1 << 20;

/// Load `path`; a missing file gives the defaults unless `required`.
pub fn load(path: &Path, required: bool) -> Result<Config, ConfigError> {
    let text = match read_text(path) {
        Ok(t) => t,
        Err(ConfigError::Read { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound && !required =>
        {
            return Ok(Config::default())
        }
        Err(e) => return Err(e),
    };
    parse(&text, path)
}

/// The text of config.toml `path`: only a regular file of at most [`MAX_CONFIG`] bytes (a FIFO
/// is refused, not waited on), read in one read (`capped::read_regular`).
pub fn read_text(path: &Path) -> Result<String, ConfigError> {
    use crate::capped::CappedError;
    let read_err = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    let bytes = crate::capped::read_regular(path, MAX_CONFIG)
        .map_err(|e| {
            let path = path.to_path_buf();
            match e {
                CappedError::Io(e) => read_err(e),
                CappedError::NotRegular => ConfigError::NotRegular { path },
                CappedError::TooLarge(size) => ConfigError::TooLarge { path, size },
                CappedError::Grew => ConfigError::Grew { path },
            }
        })?
        .0;
    String::from_utf8(bytes).map_err(|_| {
        read_err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ))
    })
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

struct Reader<'a> {
    text: &'a str,
    path: &'a Path,
}

impl Reader<'_> {
    fn err(&self, item: &Item, key: &str, message: &str) -> ConfigError {
        let line = item
            .span()
            .map(|s| line_of(self.text, s.start))
            .unwrap_or(0);
        ConfigError::Value {
            path: self.path.to_path_buf(),
            line,
            key: key.to_string(),
            message: message.to_string(),
        }
    }
    fn bool(&self, i: &Item, key: &str) -> Result<bool, ConfigError> {
        i.as_bool()
            .ok_or_else(|| self.err(i, key, "expected true or false"))
    }
    fn string(&self, i: &Item, key: &str) -> Result<String, ConfigError> {
        i.as_str()
            .map(str::to_string)
            .ok_or_else(|| self.err(i, key, "expected a quoted string"))
    }
    fn strings(&self, i: &Item, key: &str) -> Result<Vec<String>, ConfigError> {
        let bad = || self.err(i, key, "expected a list of strings, like [\"a\", \"b\"]");
        let arr = i.as_array().ok_or_else(bad)?;
        arr.iter()
            .map(|v| v.as_str().map(str::to_string).ok_or_else(bad))
            .collect()
    }
}

/// The item at dotted `key`, when every table on the way is one.
fn lookup<'a>(root: &'a Table, key: &str) -> Option<&'a Item> {
    let (tables, last) = match key.rsplit_once('.') {
        Some((tables, last)) => (Some(tables), last),
        None => (None, key),
    };
    let mut t = root;
    for name in tables.into_iter().flat_map(|p| p.split('.')) {
        t = t.get(name)?.as_table()?;
    }
    t.get(last)
}

/// A value read from config.toml, as its key's [`Kind`] says.
enum Value {
    Bool(bool),
    Text(String),
    List(Vec<String>),
}

/// Set what `key` (a row of [`KEYS`] that gpuctk applies) says in `c`; the message when the
/// value is not one the key takes.
fn set(c: &mut Config, key: &str, value: Value) -> Result<(), String> {
    use Value::{Bool, List, Text};
    match (key, value) {
        ("disable-require", Bool(v)) => c.policy.disable_require = v,
        ("swarm-resource", Text(v)) => {
            c.policy.swarm_resource = v
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
        }
        ("accept-nvidia-visible-devices-envvar-when-unprivileged", Bool(v)) => {
            c.policy.accept_envvar_unprivileged = v;
        }
        ("accept-nvidia-visible-devices-as-volume-mounts", Bool(v)) => {
            c.policy.accept_volume_mounts = v;
        }
        ("supported-driver-capabilities", Text(v)) => {
            c.policy.supported_driver_capabilities =
                gpuctk_core::CapabilitySet::parse_supported(&v).map_err(|e| e.to_string())?;
        }
        ("nvidia-container-cli.root", Text(v)) => {
            if !v.is_empty() {
                c.driver_root = PathBuf::from(v);
            }
        }
        ("nvidia-container-cli.no-cgroups", Bool(v)) => c.no_cgroups = v,
        ("nvidia-container-runtime.mode", Text(v)) => {
            c.mode = match v.as_str() {
                "auto" => Mode::Auto,
                "cdi" => Mode::Cdi,
                "jit-cdi" => Mode::JitCdi,
                "legacy" => Mode::Legacy,
                "csv" => Mode::Csv,
                other => {
                    return Err(format!(
                        "unknown mode {other:?} (use auto, cdi, jit-cdi, legacy or csv)"
                    ))
                }
            };
        }
        ("nvidia-container-runtime.runtimes", List(v)) => c.runtimes = v,
        ("nvidia-container-runtime.modes.legacy.cuda-compat-mode", Text(v)) => {
            c.cuda_compat_mode = match v.as_str() {
                "ldconfig" => CompatMode::Ldconfig,
                "mount" => CompatMode::Mount,
                "hook" => CompatMode::Hook,
                "disabled" => CompatMode::Disabled,
                other => {
                    return Err(format!(
                        "unknown mode {other:?} (use ldconfig, mount, hook or disabled)"
                    ))
                }
            };
        }
        ("nvidia-container-runtime.log-level", Text(v)) => c.log_level = v,
        ("nvidia-container-runtime.debug", Text(v)) => {
            if !v.is_empty() && v != "/dev/null" {
                c.debug_log = Some(PathBuf::from(v));
            }
        }
        ("nvidia-container-runtime.modes.csv.mount-spec-path", Text(v)) => {
            if !v.is_empty() {
                c.csv_mount_spec_path = PathBuf::from(v);
            }
        }
        ("nvidia-container-runtime.modes.cdi.spec-dirs", List(v)) => {
            c.spec_dirs = v.into_iter().map(PathBuf::from).collect();
        }
        ("nvidia-container-runtime.modes.cdi.default-kind", Text(v)) => c.default_kind = v,
        ("nvidia-container-runtime.modes.cdi.annotation-prefixes", List(v)) => {
            c.policy.annotation_prefixes = v;
        }
        ("features.disable-cuda-compat-lib-hook", Bool(v)) => c.disable_compat_hook = v,
        ("features.ignore-imex-channel-requests", Bool(v)) => {
            c.policy.ignore_imex_channel_requests = v;
        }
        ("features.no-additional-gids-for-device-nodes", Bool(v)) => c.no_additional_gids = v,
        ("gpuctk.dev-root", Text(v)) => c.dev_root = Some(PathBuf::from(v)),
        ("gpuctk.proc-root", Text(v)) => c.proc_root = PathBuf::from(v),
        ("gpuctk.hook-path", Text(v)) => c.hook_path = Some(v),
        ("gpuctk.accept-cdi-annotations-when-unprivileged", Bool(v)) => {
            c.policy.accept_annotations_unprivileged = v;
        }
        ("gpuctk.hooks-in-shim", Bool(v)) => c.hooks_in_shim = v,
        ("gpuctk.nvml-cache", Text(v)) => c.nvml_cache = PathBuf::from(v),
        ("gpuctk.nvml-helper", Text(v)) => c.nvml_helper = PathBuf::from(v),
        ("gpuctk.snapshot-dir", Text(v)) => c.snapshot_dir = Some(PathBuf::from(v)),
        // A row of KEYS marked applied that nothing here sets: the unit test
        // `every_applied_key_is_set` fails on it.
        (key, _) => {
            return Err(format!(
                "{key}: gpuctk marks this key applied but does not read it"
            ))
        }
    }
    Ok(())
}

/// What a config.toml key holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `true` or `false`.
    Bool,
    /// An array of strings.
    List,
    /// A string.
    Text,
    /// A table whose keys are rows of [`KEYS`].
    Table,
    /// A table whose every key is accepted, each holding a `Bool` or a `Text` (NVIDIA's
    /// `features`, the modes gpuctk does not run): its own rows say which are applied.
    Open(&'static Kind),
}

/// Every key config.toml may hold, NVIDIA's and gpuctk's, with what it holds and whether gpuctk
/// applies it: the one list that the parser (which reads the applied keys in this order, the
/// first bad value being the one reported), its warnings ("not known", "not applied", "did you
/// mean") and `config --set` read, so a key is added in one place.
pub const KEYS: &[(&str, Kind, bool)] = &[
    ("disable-require", Kind::Bool, true),
    ("swarm-resource", Kind::Text, true),
    (
        "accept-nvidia-visible-devices-envvar-when-unprivileged",
        Kind::Bool,
        true,
    ),
    (
        "accept-nvidia-visible-devices-as-volume-mounts",
        Kind::Bool,
        true,
    ),
    ("supported-driver-capabilities", Kind::Text, true),
    ("nvidia-container-cli", Kind::Table, true),
    ("nvidia-container-cli.root", Kind::Text, true),
    ("nvidia-container-cli.no-cgroups", Kind::Bool, true),
    // libnvidia-container's own settings: gpuctk injects natively.
    ("nvidia-container-cli.path", Kind::Text, false),
    ("nvidia-container-cli.environment", Kind::List, false),
    ("nvidia-container-cli.debug", Kind::Text, false),
    ("nvidia-container-cli.ldcache", Kind::Text, false),
    ("nvidia-container-cli.load-kmods", Kind::Bool, false),
    ("nvidia-container-cli.no-pivot", Kind::Bool, false),
    ("nvidia-container-cli.user", Kind::Text, false),
    ("nvidia-container-cli.ldconfig", Kind::Text, false),
    ("nvidia-container-runtime", Kind::Table, true),
    ("nvidia-container-runtime.mode", Kind::Text, true),
    ("nvidia-container-runtime.runtimes", Kind::List, true),
    ("nvidia-container-runtime.modes", Kind::Table, true),
    ("nvidia-container-runtime.modes.legacy", Kind::Table, true),
    (
        "nvidia-container-runtime.modes.legacy.cuda-compat-mode",
        Kind::Text,
        true,
    ),
    ("nvidia-container-runtime.log-level", Kind::Text, true),
    ("nvidia-container-runtime.debug", Kind::Text, true),
    (
        "nvidia-container-runtime.modes.csv",
        Kind::Open(&Kind::Text),
        false,
    ),
    (
        "nvidia-container-runtime.modes.csv.mount-spec-path",
        Kind::Text,
        true,
    ),
    ("nvidia-container-runtime.modes.cdi", Kind::Table, true),
    (
        "nvidia-container-runtime.modes.cdi.spec-dirs",
        Kind::List,
        true,
    ),
    (
        "nvidia-container-runtime.modes.cdi.default-kind",
        Kind::Text,
        true,
    ),
    (
        "nvidia-container-runtime.modes.cdi.annotation-prefixes",
        Kind::List,
        true,
    ),
    (
        "nvidia-container-runtime.modes.jit-cdi",
        Kind::Open(&Kind::Text),
        false,
    ),
    (
        "nvidia-container-runtime.modes.jit-cdi.nvcdi-feature-flags",
        Kind::List,
        false,
    ),
    (
        "nvidia-container-runtime.modes.jit-cdi.nvcdi-disable-hooks",
        Kind::List,
        false,
    ),
    ("nvidia-container-runtime-hook", Kind::Table, true),
    ("nvidia-container-runtime-hook.path", Kind::Text, false),
    (
        "nvidia-container-runtime-hook.skip-mode-detection",
        Kind::Bool,
        false,
    ),
    ("nvidia-ctk", Kind::Table, true),
    ("nvidia-ctk.path", Kind::Text, false),
    ("features", Kind::Open(&Kind::Bool), false),
    ("features.disable-cuda-compat-lib-hook", Kind::Bool, true),
    ("features.ignore-imex-channel-requests", Kind::Bool, true),
    (
        "features.no-additional-gids-for-device-nodes",
        Kind::Bool,
        true,
    ),
    ("gpuctk", Kind::Table, true),
    ("gpuctk.dev-root", Kind::Text, true),
    ("gpuctk.proc-root", Kind::Text, true),
    ("gpuctk.hook-path", Kind::Text, true),
    (
        "gpuctk.accept-cdi-annotations-when-unprivileged",
        Kind::Bool,
        true,
    ),
    ("gpuctk.hooks-in-shim", Kind::Bool, true),
    ("gpuctk.nvml-cache", Kind::Text, true),
    ("gpuctk.nvml-helper", Kind::Text, true),
    ("gpuctk.snapshot-dir", Kind::Text, true),
];

/// NVIDIA's default value of a key gpuctk does not apply.
enum NvidiaDefault {
    /// One of these strings (some defaults depend on the platform).
    Text(&'static [&'static str]),
    Bool(bool),
    /// An empty list.
    NoItems,
}

/// NVIDIA's v1.20 defaults (`api/config/v1`) of the keys gpuctk does not apply. Of these, its
/// `nvidia-ctk config default` writes `environment`, `ldconfig`, `load-kmods`, both
/// runtime-hook keys and `[nvidia-ctk] path` uncommented (the CSV `mount-spec-path` it also
/// writes is applied, so it is not listed here); a key that
/// holds its default changes nothing NVIDIA's toolkit would do either, so it is not worth a
/// warning on every container. Every `[features]` flag defaults to false.
const NVIDIA_DEFAULTS: &[(&str, NvidiaDefault)] = &[
    ("nvidia-container-cli.path", NvidiaDefault::Text(&[""])),
    ("nvidia-container-cli.environment", NvidiaDefault::NoItems),
    ("nvidia-container-cli.debug", NvidiaDefault::Text(&[""])),
    ("nvidia-container-cli.ldcache", NvidiaDefault::Text(&[""])),
    ("nvidia-container-cli.load-kmods", NvidiaDefault::Bool(true)),
    ("nvidia-container-cli.no-pivot", NvidiaDefault::Bool(false)),
    // `root:video` is the default on SUSE.
    (
        "nvidia-container-cli.user",
        NvidiaDefault::Text(&["", "root:video"]),
    ),
    // `.real` where it exists (Debian, Ubuntu).
    (
        "nvidia-container-cli.ldconfig",
        NvidiaDefault::Text(&["@/sbin/ldconfig", "@/sbin/ldconfig.real"]),
    ),
    (
        "nvidia-container-runtime.modes.csv.compat-container-root",
        NvidiaDefault::Text(&[""]),
    ),
    (
        "nvidia-container-runtime.modes.jit-cdi.nvcdi-feature-flags",
        NvidiaDefault::NoItems,
    ),
    (
        "nvidia-container-runtime.modes.jit-cdi.nvcdi-disable-hooks",
        NvidiaDefault::NoItems,
    ),
    (
        "nvidia-container-runtime-hook.path",
        NvidiaDefault::Text(&["nvidia-container-runtime-hook"]),
    ),
    (
        "nvidia-container-runtime-hook.skip-mode-detection",
        NvidiaDefault::Bool(false),
    ),
    ("nvidia-ctk.path", NvidiaDefault::Text(&["nvidia-ctk"])),
];

/// Whether `item` at dotted `path` holds NVIDIA's default value for it.
fn at_nvidia_default(path: &str, item: &Item) -> bool {
    if path.starts_with("features.") {
        return item.as_bool() == Some(false);
    }
    match NVIDIA_DEFAULTS.iter().find(|(p, _)| *p == path) {
        Some((_, NvidiaDefault::Text(values))) => {
            item.as_str().is_some_and(|v| values.contains(&v))
        }
        Some((_, NvidiaDefault::Bool(b))) => item.as_bool() == Some(*b),
        Some((_, NvidiaDefault::NoItems)) => item.as_array().is_some_and(|a| a.is_empty()),
        None => false,
    }
}

/// What [`collect_keys`] finds beyond the keys gpuctk applies.
struct Found<'a> {
    unknown: Vec<String>,
    not_applied: Vec<String>,
    at_default: Vec<String>,
    text: &'a str,
    /// Where `text`'s lines end, found on the first key a message names: a line number is a
    /// search in it, so that a config of many such keys costs linear time, not a count of
    /// newlines from the start per key; and a config of keys gpuctk applies counts none.
    newlines: Option<Vec<usize>>,
}

impl<'a> Found<'a> {
    fn new(text: &'a str) -> Self {
        Found {
            unknown: Vec::new(),
            not_applied: Vec::new(),
            at_default: Vec::new(),
            text,
            newlines: None,
        }
    }

    /// The line of `item` in the text (1-based; 0 for an item without a place).
    fn line(&mut self, item: &Item) -> usize {
        let Some(span) = item.span() else {
            return 0;
        };
        let text = self.text;
        let newlines = self
            .newlines
            .get_or_insert_with(|| text.match_indices('\n').map(|(i, _)| i).collect());
        newlines.partition_point(|&i| i < span.start) + 1
    }

    /// A key gpuctk does not apply: news only when it is not at NVIDIA's default.
    fn not_applied(&mut self, full: &str, item: &Item) {
        if at_nvidia_default(full, item) {
            self.at_default.push(full.to_string());
        } else {
            let line = self.line(item);
            self.not_applied.push(format!("{full} (line {line})"));
        }
    }
}

fn row(path: &str) -> Option<(Kind, bool)> {
    KEYS.iter()
        .find(|(p, _, _)| *p == path)
        .map(|&(_, k, a)| (k, a))
}

/// What dotted `path` holds, `None` for a key config.toml does not have.
pub fn key_kind(path: &str) -> Option<Kind> {
    if let Some((kind, _)) = row(path) {
        return Some(kind);
    }
    let (parent, _) = path.rsplit_once('.')?;
    match row(parent) {
        Some((Kind::Open(item), _)) => Some(*item),
        _ => None,
    }
}

/// The keys of the table at `prefix` (`""` or `"a.b."`) that [`KEYS`] names.
fn keys_of(prefix: &str) -> Vec<&'static str> {
    KEYS.iter()
        .filter_map(|(p, _, _)| p.strip_prefix(prefix))
        .filter(|k| !k.contains('.'))
        .collect()
}

/// Walks the table at `prefix`: a key [`KEYS`] does not name is unknown (with the closest
/// name of its table, if one is close), a key it marks as not applied (or any key of a table
/// that is not applied and does not name it as applied) is collected as such, or as at
/// NVIDIA's default when it holds that.
fn collect_keys(t: &Table, prefix: &str, open: bool, found: &mut Found) {
    for (k, item) in t.iter() {
        let full = format!("{prefix}{k}");
        match row(&full) {
            None if open => found.not_applied(&full, item),
            None => {
                let line = found.line(item);
                found.unknown.push(match did_you_mean(k, &keys_of(prefix)) {
                    Some(m) => format!("{full} (line {line}; did you mean {prefix}{m}?)"),
                    None => format!("{full} (line {line})"),
                })
            }
            Some((Kind::Table, _)) => {
                if let Some(sub) = item.as_table() {
                    collect_keys(sub, &format!("{full}."), false, found);
                }
            }
            Some((Kind::Open(_), applied)) => {
                if let Some(sub) = item.as_table() {
                    collect_keys(sub, &format!("{full}."), !applied, found);
                }
            }
            Some((_, false)) => found.not_applied(&full, item),
            Some((_, true)) => {}
        }
    }
}

/// Edit distance, for "did you mean": linear in memory, keys are short.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The known key of the same table closest to a misspelt one, if close enough.
fn did_you_mean(k: &str, keys: &[&str]) -> Option<String> {
    if k.len() > 64 {
        return None;
    }
    keys.iter()
        .map(|c| (distance(k, c), *c))
        .filter(|(d, c)| *d > 0 && *d <= 2.max(c.len() / 4))
        .min()
        .map(|(_, c)| c.to_string())
}

/// Parse config text; `path` is only for messages.
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    // The immutable document keeps spans, so messages can give line numbers.
    let doc = Document::parse(text).map_err(|e: toml_edit::TomlError| ConfigError::Syntax {
        path: path.to_path_buf(),
        line: e.span().map(|s| line_of(text, s.start)).unwrap_or(0),
        message: e.message().trim().to_string(),
    })?;
    let r = Reader { text, path };
    let mut c = Config {
        path: Some(path.to_path_buf()),
        ..Config::default()
    };
    let root = doc.as_table();
    // Every key gpuctk applies, in the table's order: read as its kind says, then set.
    for &(key, kind, applied) in KEYS {
        if !applied {
            continue;
        }
        let Some(item) = lookup(root, key) else {
            continue;
        };
        let value = match kind {
            Kind::Bool => Value::Bool(r.bool(item, key)?),
            Kind::Text => Value::Text(r.string(item, key)?),
            Kind::List => Value::List(r.strings(item, key)?),
            Kind::Table | Kind::Open(_) => continue,
        };
        set(&mut c, key, value).map_err(|m| r.err(item, key, &m))?;
    }
    let mut found = Found::new(text);
    collect_keys(root, "", false, &mut found);
    c.unknown_keys = found.unknown;
    c.not_applied = found.not_applied;
    c.at_default = found.at_default;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_over_the_cap_is_refused_in_one_line_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.toml");
        // A comment of exactly the cap: read and parsed.
        let mut text = vec![b'#'; MAX_CONFIG as usize];
        std::fs::write(&p, &text).unwrap();
        load(&p, true).unwrap();
        text.push(b'#');
        std::fs::write(&p, &text).unwrap();
        let e = load(&p, true).unwrap_err();
        assert!(matches!(e, ConfigError::TooLarge { size, .. } if size == MAX_CONFIG + 1));
        let m = e.to_string();
        assert!(!m.contains('\n'), "{m}");
        for want in [
            &p.display().to_string(),
            "1048577 bytes",
            "1048576",
            "config default",
        ] {
            assert!(m.contains(want), "{want}: {m}");
        }
    }

    #[test]
    fn a_config_that_is_a_fifo_or_a_directory_is_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("config.toml");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        // A read of a FIFO without a writer would wait for one forever: the load runs aside,
        // and a load still waiting after a minute is that.
        let (tx, rx) = std::sync::mpsc::channel();
        let p = fifo.clone();
        std::thread::spawn(move || tx.send(load(&p, false).map(|_| ())));
        let r = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("load blocked on a FIFO");
        let e = r.unwrap_err();
        assert!(matches!(e, ConfigError::NotRegular { .. }), "{e}");
        let m = e.to_string();
        assert!(
            m.contains(&fifo.display().to_string()) && !m.contains('\n'),
            "{m}"
        );
        let e = load(d.path(), false).unwrap_err();
        assert!(matches!(e, ConfigError::NotRegular { .. }), "{e}");
    }

    #[test]
    fn a_missing_config_is_the_defaults_unless_required() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.toml");
        assert!(load(&p, false).unwrap().path.is_none());
        let e = load(&p, true).unwrap_err();
        assert!(
            matches!(&e, ConfigError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
            "{e}"
        );
        std::fs::write(&p, b"\xff").unwrap();
        assert!(load(&p, false).unwrap_err().to_string().contains("UTF-8"));
    }

    #[test]
    fn every_applied_key_is_set() {
        for &(key, kind, applied) in KEYS {
            let value = match kind {
                Kind::Bool => Value::Bool(true),
                Kind::Text => Value::Text("x".into()),
                Kind::List => Value::List(Vec::new()),
                Kind::Table | Kind::Open(_) => continue,
            };
            let result = set(&mut Config::default(), key, value);
            if applied {
                assert!(
                    !result.is_err_and(|m| m.contains("does not read it")),
                    "{key}: applied, not set"
                );
            }
        }
    }

    #[test]
    fn nvidia_keys() {
        let c = parse(
            r#"
accept-nvidia-visible-devices-envvar-when-unprivileged = false
accept-nvidia-visible-devices-as-volume-mounts = true
made-up-key = 1

[nvidia-container-cli]
root = "/run/nvidia/driver"
ldconfig = "@/sbin/ldconfig"

[nvidia-container-runtime]
mode = "cdi"
runtimes = ["crun", "runc"]
log-level = "debug"

[nvidia-container-runtime.modes.cdi]
spec-dirs = ["/etc/cdi"]
default-kind = "example.com/gpu"
annotation-prefixes = ["cdi.k8s.io/", "nvidia.cdi.k8s.io/"]
typo = true

[gpuctk]
dev-root = "/host"
"#,
            Path::new("/x/config.toml"),
        )
        .unwrap();
        assert!(!c.policy.accept_envvar_unprivileged);
        assert!(c.policy.accept_volume_mounts);
        assert_eq!(c.driver_root, Path::new("/run/nvidia/driver"));
        assert_eq!(c.mode, Mode::Cdi);
        assert_eq!(c.runtimes, ["crun", "runc"]);
        assert_eq!(c.default_kind, "example.com/gpu");
        assert_eq!(c.policy.annotation_prefixes.len(), 2);
        assert_eq!(c.dev_root.as_deref(), Some(Path::new("/host")));
        assert_eq!(
            c.unknown_keys,
            [
                "made-up-key (line 4)",
                "nvidia-container-runtime.modes.cdi.typo (line 19)"
            ]
        );
    }

    #[test]
    fn supported_driver_capabilities_limit_what_a_container_gets() {
        let p = Path::new("/c.toml");
        let c = parse("supported-driver-capabilities = \"utility,compute\"\n", p).unwrap();
        let set = &c.policy.supported_driver_capabilities;
        assert!(set.requested(gpuctk_host::Capability::Compute));
        assert!(!set.requested(gpuctk_host::Capability::Graphics));
        assert!(c.unknown_keys.is_empty());
        let e = parse("\nsupported-driver-capabilities = \"compute,warp\"\n", p)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("/c.toml:2: supported-driver-capabilities") && e.contains("warp"),
            "{e}"
        );
    }

    #[test]
    fn every_key_row_sits_in_a_table_row() {
        for (path, kind, _) in KEYS {
            assert_eq!(
                KEYS.iter().filter(|r| r.0 == *path).count(),
                1,
                "{path} twice"
            );
            if let Some((parent, _)) = path.rsplit_once('.') {
                assert!(
                    matches!(row(parent), Some((Kind::Table | Kind::Open(_), _))),
                    "{path}: its table {parent} is not a table row"
                );
            }
            assert_eq!(key_kind(path), Some(*kind));
        }
        assert_eq!(key_kind("features.anything"), Some(Kind::Bool));
        assert_eq!(key_kind("nvidia-container-cli.anything"), None);
    }

    #[test]
    fn keys_not_applied_and_misspelt_are_named() {
        let c = parse(
            r#"
accept-nvidia-visible-devices-as-volume-mount = true

[nvidia-container-cli]
ldconfig = "@/usr/local/sbin/ldconfig"
no-cgroups = true

[nvidia-container-runtime]
runtime = ["crun"]

[nvidia-container-runtime.modes.jit-cdi]
nvcdi-feature-flags = ["x"]

[features]
disable-cuda-compat-lib-hook = true
allow-gdrcopy = true
"#,
            Path::new("/c.toml"),
        )
        .unwrap();
        assert!(c.no_cgroups && c.disable_compat_hook);
        assert_eq!(
            c.not_applied,
            [
                "nvidia-container-cli.ldconfig (line 5)",
                "nvidia-container-runtime.modes.jit-cdi.nvcdi-feature-flags (line 12)",
                "features.allow-gdrcopy (line 16)",
            ]
        );
        assert_eq!(
            c.unknown_keys,
            [
                "accept-nvidia-visible-devices-as-volume-mount (line 2; did you mean accept-nvidia-visible-devices-as-volume-mounts?)",
                "nvidia-container-runtime.runtime (line 9; did you mean nvidia-container-runtime.runtimes?)",
            ]
        );
    }

    /// Each named key's line came from counting the newlines before it: a config of many
    /// unknown keys took time quadratic in its size. Now one index of its lines, searched.
    #[test]
    fn the_lines_of_many_unknown_keys_are_found_in_one_pass() {
        let n = 5_000;
        let mut text = String::from("first = 1\n");
        for i in 0..n {
            text.push_str(&format!("k{i} = 1\n"));
        }
        text.push_str("last = 1");
        let c = parse(&text, Path::new("/c.toml")).unwrap();
        assert_eq!(c.unknown_keys.len(), n + 2);
        assert_eq!(c.unknown_keys[0], "first (line 1)");
        assert_eq!(c.unknown_keys[1], "k0 (line 2)");
        assert_eq!(c.unknown_keys[n], format!("k{} (line {})", n - 1, n + 1));
        assert_eq!(c.unknown_keys[n + 1], format!("last (line {})", n + 2));
    }

    /// A key gpuctk does not apply is news only away from NVIDIA's default: at it (as NVIDIA's
    /// stock file sets six), it is set aside for `config` and `doctor` to name once.
    #[test]
    fn keys_at_nvidias_defaults_are_not_news() {
        let p = Path::new("/c.toml");
        let c = parse(
            r#"
[nvidia-container-cli]
environment = []
ldconfig = "@/sbin/ldconfig"
load-kmods = true
user = "root:video"

[nvidia-container-runtime.modes.csv]
mount-spec-path = "/etc/nvidia-container-runtime/host-files-for-container.d"

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false

[nvidia-ctk]
path = "nvidia-ctk"

[features]
allow-gdrcopy = false
"#,
            p,
        )
        .unwrap();
        assert!(c.not_applied.is_empty(), "{:?}", c.not_applied);
        assert_eq!(c.at_default.len(), 8, "{:?}", c.at_default);
        for (line, want) in [
            (
                "[nvidia-container-cli]\nenvironment = [\"A=1\"]\n",
                "environment",
            ),
            ("[nvidia-container-cli]\nload-kmods = false\n", "load-kmods"),
            (
                "[nvidia-container-cli]\nldconfig = \"/sbin/ldconfig\"\n",
                "ldconfig",
            ),
            (
                "[nvidia-ctk]\npath = \"/usr/bin/nvidia-ctk\"\n",
                "nvidia-ctk.path",
            ),
            ("[features]\nallow-gdrcopy = true\n", "allow-gdrcopy"),
            // The wrong type is not the default either.
            (
                "[nvidia-container-runtime-hook]\nskip-mode-detection = \"false\"\n",
                "skip",
            ),
        ] {
            let c = parse(line, p).unwrap();
            assert!(c.at_default.is_empty(), "{line}: {:?}", c.at_default);
            assert!(
                c.not_applied.len() == 1 && c.not_applied[0].contains(want),
                "{line}: {:?}",
                c.not_applied
            );
        }
    }

    #[test]
    fn cuda_compat_mode_and_feature() {
        let p = Path::new("/c.toml");
        let c = parse("", p).unwrap();
        assert_eq!(c.cuda_compat_mode, CompatMode::Ldconfig);
        assert!(c.cuda_compat());
        for (mode, want, on) in [
            ("ldconfig", CompatMode::Ldconfig, true),
            ("mount", CompatMode::Mount, true),
            ("hook", CompatMode::Hook, true),
            ("disabled", CompatMode::Disabled, false),
        ] {
            let c = parse(
                &format!(
                    "[nvidia-container-runtime.modes.legacy]\ncuda-compat-mode = \"{mode}\"\n"
                ),
                p,
            )
            .unwrap();
            assert_eq!((c.cuda_compat_mode, c.cuda_compat()), (want, on));
            assert!(c.unknown_keys.is_empty(), "{:?}", c.unknown_keys);
        }
        let c = parse("[features]\ndisable-cuda-compat-lib-hook = true\n", p).unwrap();
        assert!(!c.cuda_compat());
        let e = parse(
            "[nvidia-container-runtime.modes.legacy]\ncuda-compat-mode = \"copy\"\n",
            p,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("/c.toml:2: nvidia-container-runtime.modes.legacy.cuda-compat-mode")
                && e.contains("ldconfig, mount, hook or disabled"),
            "{e}"
        );
    }

    #[test]
    fn syntax_and_type_errors_name_the_line() {
        let e = parse(
            "[nvidia-container-runtime]\nmode = \"auto\nx=1\n",
            Path::new("/c.toml"),
        )
        .unwrap_err();
        let m = e.to_string();
        assert!(m.starts_with("/c.toml:2: "), "{m}");
        assert!(!m.contains('\n'), "one line: {m}");
        let e = parse(
            "[nvidia-container-runtime]\n\nruntimes = \"runc\"\n",
            Path::new("/c.toml"),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "/c.toml:3: nvidia-container-runtime.runtimes: expected a list of strings, like [\"a\", \"b\"]"
        );
        let e = parse(
            "[nvidia-container-runtime]\nmode = \"fast\"\n",
            Path::new("/c.toml"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("unknown mode \"fast\""));
    }

    #[test]
    fn path_precedence() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            config_path(&env(&[])).unwrap(),
            (PathBuf::from(DEFAULT_CONFIG), false)
        );
        assert_eq!(
            config_path(&env(&[
                ("NVIDIA_CTK_CONFIG_FILE_PATH", "/a"),
                ("GPUCTK_CONFIG", "/b")
            ]))
            .unwrap(),
            (PathBuf::from("/b"), true)
        );
        assert_eq!(
            config_path(&env(&[("NVIDIA_CTK_CONFIG_FILE_PATH", "/a")])).unwrap(),
            (PathBuf::from("/a"), true)
        );
        // The per-user file: $XDG_CONFIG_HOME, else $HOME/.config; only when it exists.
        let d = std::env::temp_dir().join(format!("gpuctk-config-home-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let home: &'static str = Box::leak(d.to_str().unwrap().to_string().into_boxed_str());
        let xdg: &'static str = Box::leak(format!("{home}/.config").into_boxed_str());
        let vars: &'static [(&'static str, &'static str)] = Box::leak(Box::new([("HOME", home)]));
        assert_eq!(
            config_path_for(&env(vars), &|| Ok(false)).unwrap(),
            (PathBuf::from(DEFAULT_CONFIG), false)
        );
        let file = d.join(".config/nvidia-container-runtime/config.toml");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "").unwrap();
        assert_eq!(
            config_path_for(&env(vars), &|| Ok(false)).unwrap(),
            (file.clone(), false)
        );
        // Root reads $HOME/.config only when XDG_CONFIG_HOME names it, as NVIDIA.
        assert_eq!(
            config_path_for(&env(vars), &|| Ok(true)).unwrap(),
            (PathBuf::from(DEFAULT_CONFIG), false)
        );
        let xvars: &'static [(&'static str, &'static str)] = Box::leak(Box::new([
            ("XDG_CONFIG_HOME", xdg),
            ("HOME", "/nonexistent"),
        ]));
        assert_eq!(
            config_path_for(&env(xvars), &|| Ok(false)).unwrap(),
            (file.clone(), false)
        );
        assert_eq!(
            config_path_for(&env(xvars), &|| Ok(true)).unwrap(),
            (file, false)
        );
        // A relative XDG_CONFIG_HOME is ignored, as the spec says.
        let rel: &'static [(&'static str, &'static str)] = Box::leak(Box::new([
            ("XDG_CONFIG_HOME", "rel"),
            ("HOME", "/nonexistent"),
        ]));
        assert_eq!(
            config_path(&env(rel)).unwrap(),
            (PathBuf::from(DEFAULT_CONFIG), false)
        );
        // Whether the file in $HOME/.config applies is unknown when the uid map cannot be
        // read: an error, not the file (as "not root" would give); asked only then.
        let missing = d.join("no-uid_map");
        let unreadable = || host_root(0, &missing);
        let e = config_path_for(&env(vars), &unreadable).unwrap_err();
        assert!(matches!(e, ConfigError::UidMap { .. }), "{e}");
        let named = format!("{}: cannot read it (", missing.display());
        assert!(e.to_string().starts_with(&named), "{e}");
        assert!(config_path_for(&env(xvars), &unreadable).is_ok());
        assert!(config_path_for(&env(&[]), &unreadable).is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Review finding: the uid map was read uncapped and a read error meant "not root"; it is
    /// read to [`MAX_UID_MAP`] and judged whole, and a read error or a longer map names the file.
    #[test]
    fn host_root_reads_the_uid_map_capped_and_names_it_when_it_cannot() {
        let t = tempfile::tempdir().unwrap();
        let map = t.path().join("uid_map");
        let judge = |text: &[u8]| {
            std::fs::write(&map, text).unwrap();
            host_root(0, &map).unwrap()
        };
        // As the kernel writes it (`%10u %10u %10u`).
        assert!(judge(b"         0          0 4294967295\n"));
        assert!(!judge(b"         0       1000          1\n"));
        assert!(!judge(
            b"         0          0 4294967295\n      1000       1000          1\n"
        ));
        assert!(!judge(b""));
        // The kernel's most, 340 lines, is within the cap; a line more than the cap is not.
        let line = b"4294967294 4294967294          1\n";
        assert!(!judge(&line.repeat(340)));
        std::fs::write(&map, line.repeat(500)).unwrap();
        let e = host_root(0, &map).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "{}: cannot read it (more than 16384 bytes",
                map.display()
            )),
            "{e}"
        );
        // Missing, or a directory: an error naming it, never "not root".
        for bad in [t.path().join("missing"), t.path().to_path_buf()] {
            let e = host_root(0, &bad).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("{}: cannot read it (", bad.display()))
                    && e.contains("GPUCTK_CONFIG"),
                "{e}"
            );
        }
        // Not uid 0: nothing to read.
        assert!(!host_root(1000, &t.path().join("missing")).unwrap());
        // This process's own map reads.
        host_root(0, Path::new(UID_MAP)).unwrap();
    }
}
