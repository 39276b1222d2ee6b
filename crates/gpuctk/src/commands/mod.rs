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

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;

use gpuctk_host::{DiscoverOptions, Discovery, Inventory, Roots};

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
        let driver_root = match &self.driver_root {
            Some(r) => r.clone(),
            None => self.config()?.driver_root.clone(),
        };
        // Relative roots are taken from the working directory, once, here.
        let abs = |p: &Path, flag: &str| {
            std::path::absolute(p).with_context(|| format!("{flag} {}", p.display()))
        };
        let driver_root = abs(&driver_root, "--driver-root")?;
        let dev_root = self
            .dev_root
            .as_deref()
            .map(|d| abs(d, "--dev-root"))
            .transpose()?;
        Ok(Roots::new(
            driver_root,
            dev_root,
            abs(&self.proc_root, "--proc-root")?,
        ))
    }

    /// Where NVML's answers are recorded for the runtime: config.toml's `[gpuctk] nvml-cache`
    /// (`--config`, else the one the runtime reads), and only when these roots are the runtime's
    /// (it reads records for its own driver only): `None` otherwise, and nothing is written.
    pub fn nvml_cache(&self, roots: &Roots) -> Option<std::path::PathBuf> {
        self.runtime_config(roots).map(|cfg| cfg.nvml_cache.clone())
    }

    /// The runtime's config (as [`Self::nvml_cache`] finds it) when these roots are its roots.
    fn runtime_config(&self, roots: &Roots) -> Option<&crate::config::Config> {
        let cfg = self.config().ok()?;
        let runtime = crate::decision::roots(cfg);
        let same = |a: &Path, b: &Path| std::path::absolute(a).ok() == std::path::absolute(b).ok();
        (same(&runtime.driver_root, &roots.driver_root)
            && same(&runtime.dev_root, &roots.dev_root)
            && same(&runtime.proc_root, &roots.proc_root))
        .then_some(cfg)
    }

    /// Write the runtime's discovery snapshots (`crate::snapshot`) from `found`, discovered with
    /// `config_search_paths`, when these are the runtime's roots and the discovery is the one
    /// the runtime does (no search paths of our own): the one a graphics container reads, and
    /// the one without graphics, taken from the same discovery (which used to be done again).
    /// `driver` is the running driver as read before discovery: the snapshots' key.
    pub fn write_snapshots(
        &self,
        found: &Discovery,
        config_search_paths: &[String],
        driver: &gpuctk_host::RunningDriver,
    ) {
        if !config_search_paths.is_empty() || !self.library_search_paths.is_empty() {
            return;
        }
        let inv = &found.inventory;
        let Some(cfg) = self.runtime_config(&inv.roots) else {
            return;
        };
        // The runtime's roots spelt as it spells them: the host paths in `inv` are made of them.
        let roots = crate::decision::roots(cfg);
        let Some(dir) = cfg.snapshot_dir().filter(|_| roots == inv.roots) else {
            return;
        };
        let full = DiscoverOptions::default();
        crate::snapshot::Snapshot::new(&dir, &roots, &full).write(&roots, inv, driver);
        let compute = DiscoverOptions {
            skip_graphics: true,
            ..Default::default()
        };
        crate::snapshot::Snapshot::new(&dir, &roots, &compute).write(
            &roots,
            &found.without_graphics(),
            driver,
        );
    }

    /// The NVML helper config.toml names (`[gpuctk] nvml-helper`: `--config`, else the one the
    /// runtime reads); its default when that config cannot be read (discovery says why).
    pub fn nvml_helper(&self) -> std::path::PathBuf {
        self.config()
            .map(|c| c.nvml_helper.clone())
            .unwrap_or_else(|_| crate::config::DEFAULT_NVML_HELPER.into())
    }

    /// config.toml as these flags name it: `--config` (which must exist), else the one the
    /// runtime reads. Read once; an error is not kept, and says so again when asked again.
    fn config(&self) -> anyhow::Result<&crate::config::Config> {
        if let Some(c) = self.loaded_config.get() {
            return Ok(c);
        }
        let c = match &self.config {
            Some(c) => {
                crate::config::load(c, true).with_context(|| "--config (NVIDIA_CTK_CONFIG)")?
            }
            None => crate::config::load_from_env()?,
        };
        Ok(self.loaded_config.get_or_init(|| c))
    }

    /// Discover the host these flags point at, logging discovery's warnings.
    pub fn discover(&self) -> anyhow::Result<Inventory> {
        let driver = crate::snapshot::running_driver(&self.roots()?.proc_root)?;
        self.discovery_with_configs(&[], driver.as_ref())
            .map(|d| d.inventory)
    }

    /// [`Self::discover`], with the loaders' vendor files looked up in `config_search_paths`
    /// (inside the driver root) instead of the defaults when it is not empty, keeping what tells
    /// the graphics-only parts apart (for [`Self::write_snapshots`]); `driver` is the running
    /// driver as the caller read it (`None`: no version file), not read again.
    pub fn discovery_with_configs(
        &self,
        config_search_paths: &[String],
        driver: Option<&gpuctk_host::RunningDriver>,
    ) -> anyhow::Result<Discovery> {
        for d in config_search_paths {
            if !d.starts_with('/') {
                anyhow::bail!("--config-search-path {d:?}: not an absolute path; give the directory as it is inside the driver root, e.g. /usr/share");
            }
        }
        crate::discover::discovery_with_driver(
            driver.map(|d| &d.version),
            &self.roots()?,
            &DiscoverOptions {
                library_search_paths: self.library_search_paths.clone(),
                config_search_paths: config_search_paths.to_vec(),
                skip_graphics: false,
            },
        )
    }
}
