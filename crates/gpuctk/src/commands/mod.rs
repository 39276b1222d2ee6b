//! The commands behind the CLI. Each takes its parsed arguments and returns an exit code;
//! errors go up as `anyhow` and `main` prints them as one line.

mod cdi;
mod config_cmd;
mod demo;
mod doctor;
mod engine;
mod info;
mod install;
mod manual;
#[cfg(feature = "mock")]
mod mock;
mod system;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use gpuctk_host::{DiscoverOptions, Inventory, Roots};

#[cfg(feature = "mock")]
use crate::cli::MockHostCommand;
use crate::cli::{CdiCommand, Cli, Command, RootArgs, RuntimeCommand, SystemCommand};

/// Run the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // `nvidia-ctk --config FILE` (or NVIDIA_CTK_CONFIG): the config the commands that read the
    // driver root from config.toml take it from; the subcommand's own `--config` wins.
    let config = cli.config;
    match cli.command {
        Command::Cdi(CdiCommand::Generate(mut a)) => {
            a.roots.config = a.roots.config.take().or(config);
            cdi::generate(*a)
        }
        Command::Cdi(CdiCommand::List(a)) => cdi::list(a),
        Command::Cdi(CdiCommand::Transform(crate::cli::TransformCommand::Root(a))) => {
            cdi::transform_root(a)
        }
        Command::Cdi(CdiCommand::Validate(a)) => cdi::validate(a),
        Command::Info(mut a) => {
            a.roots.config = a.roots.config.take().or(config);
            info::run(a)
        }
        Command::Doctor(a) => doctor::run(*a),
        Command::NvmlQuery(mut a) => {
            a.roots.config = a.roots.config.take().or(config);
            info::nvml_query(a)
        }
        #[cfg(feature = "mock")]
        Command::MockHost(MockHostCommand::Create(a)) => mock::create(a),
        #[cfg(feature = "mock")]
        Command::MockHost(MockHostCommand::Rootfs(a)) => mock::rootfs(a),
        Command::Demo(a) => demo::run(a),
        Command::Runtime(RuntimeCommand::Exec(a)) => Ok(crate::runtime::main(&a.args)),
        Command::Runtime(RuntimeCommand::Configure(a)) => engine::run(a, false),
        Command::Runtime(RuntimeCommand::Unconfigure(a)) => engine::run(a, true),
        Command::Config(a) => config_cmd::run(a),
        Command::System(SystemCommand::CreateDevCharSymlinks(a)) => system::dev_char(a),
        Command::System(SystemCommand::CreateDeviceNodes(a)) => system::device_nodes(a),
        Command::Completion(a) => manual::completion(a),
        Command::Man(a) => manual::man(a),
        Command::Install(a) => install::install(*a),
        Command::Uninstall(a) => install::uninstall(a),
        Command::Hook(a) => {
            let mut args = vec![std::ffi::OsString::from("nvidia-cdi-hook")];
            args.extend(a.args);
            Ok(crate::hook::main(&args))
        }
    }
}

impl RootArgs {
    /// The roots these flags name. The driver root is the flag, else config.toml's
    /// `[nvidia-container-cli] root` (GPU Operator nodes set `/run/nvidia/driver` there), else
    /// `/`, as NVIDIA's; the dev root defaults to the driver root. The config.toml is
    /// `--config` (which must exist), else the one the runtime reads.
    pub fn roots(&self) -> anyhow::Result<Roots> {
        let driver_root = match (&self.driver_root, &self.config) {
            (Some(r), _) => r.clone(),
            (None, Some(c)) => {
                crate::config::load(c, true)
                    .with_context(|| "--config (NVIDIA_CTK_CONFIG)")?
                    .driver_root
            }
            (None, None) => crate::config::load_from_env()?.driver_root,
        };
        // Relative roots are taken from the working directory, once, here.
        let abs = |p: &Path, flag: &str| {
            std::path::absolute(p).with_context(|| format!("{flag} {}", p.display()))
        };
        let driver_root = abs(&driver_root, "--driver-root")?;
        Ok(Roots {
            dev_root: match &self.dev_root {
                Some(d) => abs(d, "--dev-root")?,
                None => driver_root.clone(),
            },
            driver_root,
            proc_root: abs(&self.proc_root, "--proc-root")?,
        })
    }

    /// Where NVML's answers are recorded for the runtime: config.toml's `[gpuctk] nvml-cache`
    /// (`--config`, else the one the runtime reads), and only when these roots are the runtime's
    /// (it reads records for its own driver only): `None` otherwise, and nothing is written.
    pub fn nvml_cache(&self, roots: &Roots) -> Option<std::path::PathBuf> {
        let cfg = match &self.config {
            Some(c) => crate::config::load(c, true).ok()?,
            None => crate::config::load_from_env().ok()?,
        };
        let runtime = crate::decision::roots(&cfg);
        let same = |a: &Path, b: &Path| std::path::absolute(a).ok() == std::path::absolute(b).ok();
        (same(&runtime.driver_root, &roots.driver_root)
            && same(&runtime.dev_root, &roots.dev_root)
            && same(&runtime.proc_root, &roots.proc_root))
        .then_some(cfg.nvml_cache)
    }

    /// The NVML helper config.toml names (`[gpuctk] nvml-helper`: `--config`, else the one the
    /// runtime reads); its default when that config cannot be read (discovery says why).
    pub fn nvml_helper(&self) -> std::path::PathBuf {
        match &self.config {
            Some(c) => crate::config::load(c, true).ok(),
            None => crate::config::load_from_env().ok(),
        }
        .map(|c| c.nvml_helper)
        .unwrap_or_else(|| crate::config::DEFAULT_NVML_HELPER.into())
    }

    /// Discover the host these flags point at, logging discovery's warnings.
    pub fn discover(&self) -> anyhow::Result<Inventory> {
        self.discover_with_configs(&[])
    }

    /// [`Self::discover`], with the loaders' vendor files looked up in `config_search_paths`
    /// (inside the driver root) instead of the defaults when it is not empty.
    pub fn discover_with_configs(
        &self,
        config_search_paths: &[String],
    ) -> anyhow::Result<Inventory> {
        for d in config_search_paths {
            if !d.starts_with('/') {
                anyhow::bail!("--config-search-path {d:?}: not an absolute path; give the directory as it is inside the driver root, e.g. /usr/share");
            }
        }
        discover(
            &self.roots()?,
            &DiscoverOptions {
                library_search_paths: self.library_search_paths.clone(),
                config_search_paths: config_search_paths.to_vec(),
                skip_graphics: false,
            },
        )
    }
}

/// Discover `roots`, logging the warnings.
pub fn discover(roots: &Roots, opts: &DiscoverOptions) -> anyhow::Result<Inventory> {
    let inv = gpuctk_host::discover(roots, opts)?;
    for w in &inv.warnings {
        tracing::warn!("{w}");
    }
    Ok(inv)
}

/// The path of the running binary, written into hook entries so the runtime calls us back.
pub fn self_path() -> String {
    std::env::current_exe()
        .ok()
        .or_else(|| std::env::args_os().next().map(PathBuf::from))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| "/usr/bin/nvidia-cdi-hook".to_string())
}

/// Reads a regular file of at most `cap` bytes: the size is checked before reading (a huge file
/// fails at once, without being read), and a FIFO or device is refused rather than opened for
/// blocking reads.
pub fn read_capped(path: &Path, cap: u64, what: &str) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .with_context(|| format!("{}: cannot read {what}", path.display()))?;
    let md = file
        .metadata()
        .with_context(|| format!("{}: cannot read {what}", path.display()))?;
    if !md.is_file() {
        anyhow::bail!("{}: {what} is not a regular file", path.display());
    }
    if md.len() > cap {
        anyhow::bail!(
            "{}: {what} is {} bytes, more than the {} allowed; this is not a file an engine writes",
            path.display(),
            md.len(),
            cap
        );
    }
    let mut buf = Vec::with_capacity(md.len() as usize);
    file.take(cap + 1)
        .read_to_end(&mut buf)
        .with_context(|| format!("{}: cannot read {what}", path.display()))?;
    if buf.len() as u64 > cap {
        anyhow::bail!(
            "{}: {what} grew past the {cap} bytes allowed while being read",
            path.display()
        );
    }
    Ok(buf)
}
