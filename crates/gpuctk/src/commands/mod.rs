//! The commands behind the CLI. Each takes its parsed arguments and returns an exit code;
//! errors go up as `anyhow` and `main` prints them as one line.

mod cdi;
mod demo;
mod engine;
mod info;
mod mock;

use std::path::PathBuf;
use std::process::ExitCode;

use gpuctk_host::{DiscoverOptions, Inventory, Roots};

use crate::cli::{CdiCommand, Cli, Command, MockHostCommand, RootArgs, RuntimeCommand};

/// Run the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Cdi(CdiCommand::Generate(a)) => cdi::generate(*a),
        Command::Cdi(CdiCommand::List(a)) => cdi::list(a),
        Command::Cdi(CdiCommand::Validate(a)) => cdi::validate(a),
        Command::Info(a) => info::run(a),
        Command::MockHost(MockHostCommand::Create(a)) => mock::create(a),
        Command::MockHost(MockHostCommand::Rootfs(a)) => mock::rootfs(a),
        Command::Demo(a) => demo::run(a),
        Command::Runtime(RuntimeCommand::Exec(a)) => Ok(crate::runtime::main(&a.args)),
        Command::Runtime(RuntimeCommand::Configure(a)) => engine::run(a, false),
        Command::Runtime(RuntimeCommand::Unconfigure(a)) => engine::run(a, true),
        Command::Hook(a) => {
            let mut args = vec![std::ffi::OsString::from("nvidia-cdi-hook")];
            args.extend(a.args);
            Ok(crate::hook::main(&args))
        }
    }
}

impl RootArgs {
    /// The roots these flags name; the dev root defaults to the driver root, as NVIDIA's.
    pub fn roots(&self) -> Roots {
        Roots {
            driver_root: self.driver_root.clone(),
            dev_root: self
                .dev_root
                .clone()
                .unwrap_or_else(|| self.driver_root.clone()),
            proc_root: self.proc_root.clone(),
        }
    }

    /// Discover the host these flags point at, logging discovery's warnings.
    pub fn discover(&self) -> anyhow::Result<Inventory> {
        discover(
            &self.roots(),
            &DiscoverOptions {
                library_search_paths: self.library_search_paths.clone(),
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
