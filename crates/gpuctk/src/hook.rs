//! `nvidia-cdi-hook` (also `gpuctk hook`): the OCI createContainer hooks our CDI specs and
//! just-in-time edits declare, flag-compatible with NVIDIA's. Each reads the container state from
//! stdin, finds the container root and works inside it only through `openat2(RESOLVE_IN_ROOT)`.
//! An unknown hook or flag is a warning and exit 0, as NVIDIA does, so specs written by a newer
//! toolkit never break container creation.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, Context};
use clap::{Parser, Subcommand};
use gpuctk_container::hooks::{self, Link};
use gpuctk_container::root::Root;
use gpuctk_container::state::{container_root, State};

/// The OCI hooks gpuctk's CDI specs use.
#[derive(Debug, Parser)]
#[command(name = "nvidia-cdi-hook", version, max_term_width = 100)]
struct HookCli {
    /// Debug logging
    #[arg(short = 'd', long, global = true)]
    debug: bool,
    /// Only errors
    #[arg(long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    hook: Hook,
}

#[derive(Debug, clap::Args)]
struct Target {
    /// The container's config.json, instead of the OCI state on stdin (for tests)
    #[arg(long, hide = true, value_name = "FILE")]
    container_spec: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Hook {
    /// Add the injected library folders to the container's ld.so.cache, written natively
    UpdateLdcache {
        /// A library folder inside the container (repeatable)
        #[arg(long = "folder", value_name = "DIR")]
        folders: Vec<String>,
        /// Accepted for compatibility and ignored: no ldconfig is ever run
        #[arg(long, value_name = "PATH")]
        ldconfig_path: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Create symlinks inside the container
    CreateSymlinks {
        /// TARGET::LINK (repeatable)
        #[arg(long = "link", value_name = "TARGET::LINK")]
        links: Vec<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Use the image's CUDA forward-compat libcuda when it is newer and supported on this driver
    EnableCudaCompat {
        /// The host's driver version
        #[arg(long, value_name = "VERSION")]
        host_driver_version: Option<String>,
        /// The host's CUDA version (Tegra)
        #[arg(long, value_name = "VERSION")]
        host_cuda_version: Option<String>,
        /// Where the image keeps its compat libraries
        #[arg(long, default_value = "/usr/local/cuda/compat", value_name = "DIR")]
        cuda_compat_container_root: String,
        #[command(flatten)]
        target: Target,
    },
    /// Change the mode of paths inside the container
    Chmod {
        /// Octal mode, e.g. 755
        #[arg(long, value_name = "MODE")]
        mode: String,
        /// A path inside the container (repeatable)
        #[arg(long = "path", value_name = "PATH")]
        paths: Vec<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Do nothing
    #[command(hide = true)]
    Noop,
}

fn open_root(target: &Target) -> anyhow::Result<Root> {
    let root_path = match &target.container_spec {
        Some(spec) => {
            let bundle = spec
                .parent()
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("."));
            let state = State {
                oci_version: String::new(),
                id: String::new(),
                status: String::new(),
                pid: None,
                bundle,
                root: None,
                annotations: Default::default(),
            };
            container_root(&state)?
        }
        None => {
            let state = State::from_reader(std::io::stdin().lock())
                .context("reading the OCI state from stdin")?;
            container_root(&state)?
        }
    };
    Root::open_container(&root_path)
        .with_context(|| format!("container root {}", root_path.display()))
}

/// One of our createContainer hooks, typed from its spec arguments, for the shim to perform
/// itself before it execs the runtime (no hook process on its path).
#[derive(Debug)]
pub struct InRootOp(Hook);

impl InRootOp {
    /// Parses a hook entry's `args` (`args[0]` is the program name); `None` for anything that
    /// is not one of our hooks with arguments we understand, which then stays a hook.
    pub fn parse(args: &[String]) -> Option<InRootOp> {
        let cli = HookCli::try_parse_from(args).ok()?;
        match &cli.hook {
            Hook::Noop => None,
            Hook::UpdateLdcache { target, .. }
            | Hook::CreateSymlinks { target, .. }
            | Hook::EnableCudaCompat { target, .. }
            | Hook::Chmod { target, .. }
                if target.container_spec.is_some() =>
            {
                None
            }
            _ => Some(InRootOp(cli.hook)),
        }
    }

    /// The container paths this operation reads or writes through, so the shim can tell
    /// whether a spec mount would hide them from it; with each, whether the operation follows
    /// a symlink at the last component (it reads a directory) or replaces the name itself (a
    /// link or file it writes).
    pub fn paths(&self) -> Vec<(String, bool)> {
        let name = |p: &str| (p.to_string(), false);
        let dir = |p: &str| (p.to_string(), true);
        match &self.0 {
            Hook::UpdateLdcache { folders, .. } => {
                let mut v = vec![
                    name(hooks::LD_SO_CACHE),
                    name(hooks::LD_SO_CONF),
                    dir(hooks::LD_SO_CONF_D),
                ];
                v.extend(folders.iter().map(|f| dir(f)));
                v
            }
            Hook::CreateSymlinks { links, .. } => links
                .iter()
                .filter_map(|l| l.split_once("::").map(|(_, link)| name(link)))
                .collect(),
            Hook::EnableCudaCompat {
                cuda_compat_container_root,
                ..
            } => vec![dir(cuda_compat_container_root), dir(hooks::LD_SO_CONF_D)],
            Hook::Chmod { paths, .. } => paths.iter().map(|p| dir(p)).collect(),
            Hook::Noop => Vec::new(),
        }
    }

    /// Does the work on `root`, with `pending` the library mounts the runtime will add.
    pub fn run(&self, root: &Root, pending: &hooks::Pending) -> anyhow::Result<()> {
        match &self.0 {
            Hook::UpdateLdcache { folders, .. } => {
                hooks::update_ldcache_pending(root, folders, pending)?;
            }
            Hook::CreateSymlinks { links, .. } => {
                let links = links
                    .iter()
                    .map(|l| Link::parse(l))
                    .collect::<Result<Vec<_>, _>>()?;
                hooks::create_symlinks(root, &links)?;
            }
            Hook::EnableCudaCompat {
                host_driver_version,
                host_cuda_version,
                cuda_compat_container_root,
                ..
            } => {
                hooks::enable_cuda_compat(
                    root,
                    host_driver_version.as_deref(),
                    host_cuda_version.as_deref(),
                    cuda_compat_container_root,
                )?;
            }
            Hook::Chmod { mode, paths, .. } => {
                let m = u32::from_str_radix(mode.trim_start_matches("0o"), 8)
                    .map_err(|_| anyhow!("--mode {mode:?}: expected an octal mode such as 755"))?;
                hooks::chmod(root, m, paths)?;
            }
            Hook::Noop => {}
        }
        Ok(())
    }
}

fn run(cli: HookCli) -> anyhow::Result<()> {
    match cli.hook {
        Hook::UpdateLdcache {
            folders, target, ..
        } => {
            let root = open_root(&target)?;
            let report = hooks::update_ldcache(&root, &folders)?;
            tracing::debug!(
                "update-ldcache: {} entries ({} replaced), {} links",
                report.entries.len(),
                report.replaced,
                report.links.len()
            );
            for n in &report.notes {
                tracing::debug!("update-ldcache: {n}");
            }
        }
        Hook::CreateSymlinks { links, target } => {
            let links = links
                .iter()
                .map(|l| Link::parse(l))
                .collect::<Result<Vec<_>, _>>()?;
            let root = open_root(&target)?;
            hooks::create_symlinks(&root, &links)?;
        }
        Hook::EnableCudaCompat {
            host_driver_version,
            host_cuda_version,
            cuda_compat_container_root,
            target,
        } => {
            let root = open_root(&target)?;
            let outcome = hooks::enable_cuda_compat(
                &root,
                host_driver_version.as_deref(),
                host_cuda_version.as_deref(),
                &cuda_compat_container_root,
            )?;
            tracing::debug!("enable-cuda-compat: {outcome}");
        }
        Hook::Chmod {
            mode,
            paths,
            target,
        } => {
            let m = u32::from_str_radix(mode.trim_start_matches("0o"), 8)
                .ok()
                .filter(|m| *m <= 0o7777)
                .ok_or_else(|| anyhow!("--mode {mode:?}: expected an octal mode such as 755"))?;
            let root = open_root(&target)?;
            hooks::chmod(&root, m, &paths)?;
        }
        Hook::Noop => {}
    }
    Ok(())
}

/// `nvidia-cdi-hook ARGS` (`args` with argv[0]).
pub fn main(args: &[OsString]) -> ExitCode {
    use clap::error::ErrorKind;
    let cli = match HookCli::try_parse_from(args) {
        Ok(c) => c,
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            e.exit()
        }
        Err(e) => {
            // A spec from a newer toolkit may name hooks or flags we do not know; creating
            // the container matters more than this hook.
            let first = e.render().to_string();
            let first = first
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("error: ")
                .to_string();
            let _ = writeln!(
                std::io::stderr(),
                "nvidia-cdi-hook: warning: ignored: {first}"
            );
            return ExitCode::SUCCESS;
        }
    };
    crate::logging::init(if cli.quiet {
        tracing::Level::ERROR
    } else if cli.debug {
        tracing::Level::DEBUG
    } else {
        tracing::Level::WARN
    });
    let name = args
        .get(1)
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_default();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut msg = e.to_string();
            for c in e.chain().skip(1) {
                let c = c.to_string();
                if !msg.contains(&c) {
                    msg.push_str(": ");
                    msg.push_str(&c);
                }
            }
            let _ = writeln!(std::io::stderr(), "nvidia-cdi-hook {name}: error: {msg}");
            ExitCode::FAILURE
        }
    }
}
