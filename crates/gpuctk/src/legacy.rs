//! The legacy entry points, for engines that call a prestart hook instead of a runtime:
//! `nvidia-container-runtime-hook prestart` (what `docker run --gpus` runs) and
//! `nvidia-container-cli configure` (what `ctr run --gpus` runs). runc has already read the spec
//! by then, so the edits are realized in the live container (bind mounts, device nodes, device
//! cgroup, ld.so.cache). The edits come from the same `Request` and `Plan` as the shim's.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use gpuctk_container::legacy::{inject, Target};
use gpuctk_container::state::{container_root, State};
use gpuctk_core::request::{parse_devices, parse_imex_channels, parse_mig, Delivery, Devices};
use gpuctk_core::{parse_request, CapabilitySet, Decision, Request};
use gpuctk_host::{Capability, MigCapability};

use crate::config::{self, Config};
use crate::one_line::one_line;

pub(crate) const HOOK_USAGE: &str =
    "usage: nvidia-container-runtime-hook [-debug] [-config FILE] prestart|poststart|poststop

The legacy OCI hook (what `docker run --gpus` runs): `prestart` reads the OCI state on stdin
and injects the GPUs the container asks for into it; poststart and poststop do nothing.

  -config FILE   the config.toml to read (default /etc/nvidia-container-runtime/config.toml)
  -debug         debug logging
  -version       print the version";

pub(crate) const CLI_USAGE: &str = "usage: nvidia-container-cli [GLOBAL OPTION...] info|list|configure [OPTION...] [ROOTFS]

Global options:
  -r, --root=DIR          the driver's root (default: config.toml's [nvidia-container-cli] root, else /)
  -d, --debug=FILE        accepted
  -l, --ldcache=FILE      accepted (the driver root's cache is read)
  -u, --user[=UID:GID]    accepted
  -k, --load-kmods        accepted (no module is loaded)
  -n, --no-pivot          accepted
  -V, --version           print the version

Commands:
  info [--csv]            the driver and GPUs
  list [-d, --device=LIST] [--libraries] [--binaries] [--ipcs] [--firmwares] [--compat32]
       [--mig-config=all] [--mig-monitor=all] [--imex-channel=LIST]
                          the driver files and device nodes a container gets
  configure [--pid=PID] [-d, --device=LIST] [--compute --utility --video --graphics --display
            --compat32 --ngx] [--require=EXPR]... [--no-cgroups] [--ldconfig=PATH]
            [--mig-config=all] [--mig-monitor=all] [--imex-channel=LIST] ROOTFS
                          inject into a created container; --mig-config and --mig-monitor give
                          /proc/driver/nvidia/capabilities and the MIG capability nodes (with a
                          GPU, not with MIG devices), --imex-channel the IMEX channel nodes";

/// What `nvidia-container-runtime-hook`'s arguments ask for.
#[derive(Debug, PartialEq)]
enum HookArgs {
    Help,
    Version,
    Run {
        config_path: Option<PathBuf>,
        debug: bool,
        /// The first argument that is not a flag (`prestart`, ...).
        command: Option<String>,
    },
}

/// The hook's grammar, Go `flag`-style as NVIDIA's: single or double dashes, `-config FILE` or
/// `-config=FILE`; an unknown flag is ignored (`args` with argv[0]).
fn parse_hook_args(args: &[OsString]) -> HookArgs {
    let mut config_path: Option<PathBuf> = None;
    let mut debug = false;
    let mut command = None;
    let mut i = 1;
    while i < args.len() {
        let a = args[i].to_string_lossy().into_owned();
        match a.as_str() {
            "-debug" | "--debug" => debug = true,
            "-config" | "--config" => {
                config_path = args.get(i + 1).map(PathBuf::from);
                i += 1;
            }
            "-h" | "-help" | "--help" => return HookArgs::Help,
            "-version" | "--version" => return HookArgs::Version,
            s if s.starts_with("-config=") || s.starts_with("--config=") => {
                config_path = s.split_once('=').map(|(_, v)| PathBuf::from(v));
            }
            s if command.is_none() && !s.starts_with('-') => command = Some(s.to_string()),
            _ => {}
        }
        i += 1;
    }
    HookArgs::Run {
        config_path,
        debug,
        command,
    }
}

/// `nvidia-container-runtime-hook [-debug] [-config FILE] prestart|poststart|poststop`.
pub fn hook_main(args: &[OsString]) -> ExitCode {
    let (config_path, debug, command) = match parse_hook_args(args) {
        HookArgs::Help => {
            println!("{HOOK_USAGE}");
            return ExitCode::SUCCESS;
        }
        HookArgs::Version => {
            println!(
                "gpuctk nvidia-container-runtime-hook version {}",
                env!("CARGO_PKG_VERSION")
            );
            return ExitCode::SUCCESS;
        }
        HookArgs::Run {
            config_path,
            debug,
            command,
        } => (config_path, debug, command),
    };
    crate::logging::init(if debug {
        tracing::Level::DEBUG
    } else {
        tracing::Level::WARN
    });
    match command.as_deref() {
        Some("prestart") => {}
        Some("poststart" | "poststop") => return ExitCode::SUCCESS,
        other => {
            eprintln!(
                "nvidia-container-runtime-hook: unknown command {:?}; usage: nvidia-container-runtime-hook [-debug] [-config FILE] prestart|poststart|poststop",
                other.unwrap_or("")
            );
            return ExitCode::from(2);
        }
    }
    match prestart(config_path.as_deref()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let line = format!("nvidia-container-runtime-hook: error: {}", one_line(&e));
            let _ = writeln!(std::io::stderr(), "{line}");
            crate::logging::pass_on_through_crun(&line);
            ExitCode::FAILURE
        }
    }
}

fn load_config(explicit: Option<&Path>) -> anyhow::Result<Config> {
    let cfg = match explicit {
        Some(p) => config::load(p, true)?,
        None => config::load_from_env()?,
    };
    crate::logging::warn_config_keys(&cfg);
    Ok(cfg)
}

fn prestart(config_path: Option<&Path>) -> anyhow::Result<()> {
    let cfg = load_config(config_path)?;
    let state =
        State::from_reader(std::io::stdin().lock()).context("reading the OCI state from stdin")?;
    let pid = state
        .pid
        .filter(|p| *p > 0)
        .ok_or_else(|| anyhow!("the OCI state on stdin has no container pid; nvidia-container-runtime-hook must run as a prestart hook"))?;
    let spec_path = state.bundle.join("config.json");
    let spec: serde_json::Value = serde_json::from_slice(&crate::capped::read_capped(
        &spec_path,
        crate::runtime::MAX_CONFIG_JSON,
        "the OCI spec",
    )?)
    .map_err(|e| anyhow!("{}: invalid JSON: {e}", spec_path.display()))?;
    let request = parse_request(&spec, &cfg.policy, Delivery::PrestartHook)?;
    for w in &request.ignored {
        tracing::warn!("{w}");
    }
    // Our shim already injected (it sets NVIDIA_VISIBLE_DEVICES=void): nothing left to do.
    if !request.wants_gpus() {
        return Ok(());
    }
    let rootfs = container_root(&state)?;
    realize_in(
        &cfg,
        &request,
        pid,
        &rootfs,
        cfg.no_cgroups,
        Some(&state.bundle),
        crate::runtime::jetpack_all_csv(&spec),
    )
}

fn realize(
    cfg: &Config,
    request: &Request,
    pid: i32,
    rootfs: &Path,
    no_cgroups: bool,
) -> anyhow::Result<()> {
    // CSV mode's base files only: `--require csv-mounts=all` is not read.
    realize_in(cfg, request, pid, rootfs, no_cgroups, None, false)
}

/// [`realize`] with the container's bundle, where the driver's rewritten params file goes
/// (see `crate::guard`); without one (`nvidia-container-cli configure`) that guard is left out.
/// `all_csv`: the container's `NVIDIA_REQUIRE_JETPACK=csv-mounts=all` (every CSV file).
fn realize_in(
    cfg: &Config,
    request: &Request,
    pid: i32,
    rootfs: &Path,
    no_cgroups: bool,
    bundle: Option<&Path>,
    all_csv: bool,
) -> anyhow::Result<()> {
    // The hook runs after runc read the spec: a legacy-mode request is served as `auto` would.
    // One view of the host for the platform check, the decision and the other GPUs' folders:
    // the version file and the GPUs' information files are read once.
    let mut host = crate::decision::LiveHost::new(cfg, Some(rootfs));
    let platform = crate::decision::platform_injection(
        request,
        cfg,
        Delivery::PrestartHook,
        &mut host,
        all_csv,
    )?;
    let injection = match platform {
        Some(None) => return Ok(()),
        Some(Some(i)) => i,
        None => {
            match crate::decision::decide_checked(request, cfg, Delivery::PrestartHook, &mut host)?
            {
                Decision::Inject(injection) => *injection,
                Decision::Untouched | Decision::PrestartHook => return Ok(()),
            }
        }
    };
    let mut ops = crate::decision::typed_ops(&injection);
    let mut edits = injection.edits;
    // The container's procfs, through its init's root: without the driver's folder there is
    // nothing to bind over (and procfs takes no new file). runc runs prestart hooks before
    // `pivot_root`, where the container's procfs is under the rootfs path; others after.
    let mut shows = false;
    for theirs in [
        PathBuf::from(format!("/proc/{pid}/root/proc/driver/nvidia")),
        PathBuf::from(format!("/proc/{pid}/root"))
            .join(rootfs.strip_prefix("/").unwrap_or(rootfs))
            .join("proc/driver/nvidia"),
    ] {
        match std::fs::metadata(&theirs) {
            Ok(_) => shows = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(anyhow!("{}: {e}", theirs.display())),
        }
    }
    match bundle.filter(|_| shows) {
        Some(b) => {
            crate::guard::params_as_mount(&mut edits, &mut ops, b)?;
            crate::guard::other_gpus_as_mounts(
                &mut edits,
                &cfg.proc_root,
                host.gpus.as_deref(),
                b,
            )?;
        }
        None => {
            if crate::guard::take_params_op(&mut edits, &mut ops).is_some() {
                tracing::debug!("no bundle or no driver procfs in the container: /proc/driver/nvidia/params left as it is");
            }
        }
    }
    let mut target = Target::new(pid, rootfs);
    target.no_cgroups = no_cgroups;
    let report = inject(&target, &edits, &ops)?;
    for note in &report.notes {
        tracing::info!("{note}");
    }
    tracing::info!(
        "injected {} mounts, {} device nodes into pid {pid} ({})",
        report.mounts.len(),
        report.device_nodes.len(),
        report.cgroup
    );
    Ok(())
}

/// `nvidia-container-cli [GLOBAL] configure|info|list [OPTIONS] [ROOTFS]`, libnvidia-container's
/// flags.
pub fn cli_main(args: &[OsString]) -> ExitCode {
    let args: Vec<String> = args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    match cli(&args) {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "nvidia-container-cli: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// Split `--flag=value` / `--flag value` / `-f value`. A flag last, without its value, is an
/// error (it used to step past the end and panic).
fn take_value(
    args: &[String],
    i: &mut usize,
    long: &str,
    short: Option<&str>,
) -> anyhow::Result<Option<String>> {
    let a = &args[*i];
    if let Some(v) = a.strip_prefix(&format!("{long}=")) {
        return Ok(Some(v.to_string()));
    }
    if a == long || short.is_some_and(|s| a == s) {
        let Some(v) = args.get(*i + 1) else {
            bail!("option '{a}' requires an argument");
        };
        *i += 1;
        return Ok(Some(v.clone()));
    }
    Ok(None)
}

/// What `nvidia-container-cli`'s global options ask for.
#[derive(Debug, PartialEq)]
enum Globals {
    Help,
    Version,
    /// Run the command at `args[command]` (missing when past the end).
    Run {
        root: Option<PathBuf>,
        debug: Option<PathBuf>,
        command: usize,
    },
}

/// The grammar of the global options, up to the first argument that is not one.
fn parse_globals(args: &[String]) -> anyhow::Result<Globals> {
    let mut root = None;
    let mut debug = None;
    let mut i = 0;
    while i < args.len() && args[i].starts_with('-') {
        if matches!(args[i].as_str(), "--help" | "-h" | "-?" | "--usage") {
            return Ok(Globals::Help);
        }
        if let Some(r) = take_value(args, &mut i, "--root", Some("-r"))? {
            root = Some(PathBuf::from(r));
        } else if args[i] == "--version" || args[i] == "-V" {
            return Ok(Globals::Version);
        } else if let Some(f) = take_value(args, &mut i, "--debug", Some("-d"))? {
            debug = Some(PathBuf::from(f));
        } else if take_value(args, &mut i, "--ldcache", Some("-l"))?.is_some() {
            // Accepted: the driver root's own cache is read.
        } else if args[i].starts_with("--user")
            || args[i] == "-u"
            || matches!(
                args[i].as_str(),
                "--load-kmods" | "-k" | "--no-pivot" | "-n" | "--no-create-imex-channels"
            )
        {
            // Accepted for compatibility: nothing to load or pivot here; the files made are
            // owned by whoever runs us (in enroot's user namespace, the container's user).
        } else {
            bail!("unrecognized option '{}'", args[i]);
        }
        i += 1;
    }
    Ok(Globals::Run {
        root,
        debug,
        command: i,
    })
}

fn cli(args: &[String]) -> anyhow::Result<ExitCode> {
    let (root, debug, i) = match parse_globals(args)? {
        Globals::Help => {
            println!("{CLI_USAGE}");
            return Ok(ExitCode::SUCCESS);
        }
        Globals::Version => {
            println!("cli-version: {} (gpuctk)", env!("CARGO_PKG_VERSION"));
            return Ok(ExitCode::SUCCESS);
        }
        Globals::Run {
            root,
            debug,
            command,
        } => (root, debug, command),
    };
    // `--debug FILE`: the log goes there, at debug level (enroot passes /dev/stderr).
    match &debug {
        Some(f) => crate::logging::init_file(f, tracing::Level::DEBUG),
        None => crate::logging::init(tracing::Level::WARN),
    }
    let mut cfg = config::load_from_env()?;
    crate::logging::warn_config_keys(&cfg);
    if let Some(r) = root {
        cfg.driver_root = r;
    }
    let Some(command) = args.get(i) else {
        bail!(
            "missing command; usage: nvidia-container-cli [OPTION...] info|list|configure [ARG...]"
        );
    };
    let rest = &args[i + 1..];
    match command.as_str() {
        _ if rest
            .iter()
            .any(|a| a == "--help" || a == "-?" || a == "--usage") =>
        {
            println!("{CLI_USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        "configure" => configure(&cfg, rest),
        "info" => info(&cfg, rest),
        "list" => list(&cfg, rest),
        other => bail!("unknown command {other:?}: use info, list or configure"),
    }
}

/// `nvidia-container-cli configure`'s arguments, as given (nothing checked on the host yet).
#[derive(Debug, Default, PartialEq)]
struct ConfigureArgs {
    /// `--device`, unparsed (enroot's `\,` escapes still in).
    devices: Option<String>,
    caps: Vec<Capability>,
    pid: Option<i32>,
    rootfs: PathBuf,
    no_cgroups: bool,
    requirements: Vec<(String, String)>,
    mig: Vec<(String, MigCapability)>,
    imex: Vec<u32>,
    /// What the IMEX channel list's parser noted, for a warning.
    remarks: Vec<String>,
}

/// The grammar of `configure`'s arguments: libnvidia-container's flags, `--flag=value`,
/// `--flag value` or `-f value`, and one absolute ROOTFS.
fn parse_configure(args: &[String]) -> anyhow::Result<ConfigureArgs> {
    let mut devices = None;
    let mut caps = Vec::new();
    let mut pid = None;
    let mut rootfs = None;
    let mut no_cgroups = false;
    let mut requirements = Vec::new();
    let mut mig = Vec::new();
    let mut imex = Vec::new();
    let mut remarks = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].clone();
        if let Some(v) = take_value(args, &mut i, "--device", Some("-d"))? {
            devices = Some(v);
        } else if let Some(v) = take_value(args, &mut i, "--mig-config", None)? {
            // Repeated, it is asked once.
            if parse_mig(&v, "--mig-config")?
                && !mig.iter().any(|(_, c)| *c == MigCapability::Config)
            {
                mig.push(("--mig-config".to_string(), MigCapability::Config));
            }
        } else if let Some(v) = take_value(args, &mut i, "--mig-monitor", None)? {
            // Repeated, it is asked once.
            if parse_mig(&v, "--mig-monitor")?
                && !mig.iter().any(|(_, c)| *c == MigCapability::Monitor)
            {
                mig.push(("--mig-monitor".to_string(), MigCapability::Monitor));
            }
        } else if let Some(v) = take_value(args, &mut i, "--imex-channel", None)? {
            // enroot escapes list commas as it does for --device.
            for id in parse_imex_channels(&v.replace("\\,", ","), "--imex-channel", &mut remarks)? {
                if !imex.contains(&id) {
                    imex.push(id);
                }
            }
        } else if let Some(v) = take_value(args, &mut i, "--pid", Some("-p"))? {
            pid = Some(
                v.parse::<i32>()
                    .map_err(|_| anyhow!("--pid {v:?}: expected a process id"))?,
            );
        } else if let Some(v) = take_value(args, &mut i, "--require", Some("-r"))? {
            // Repeatable; each must hold (libnvidia-container's rule).
            requirements.push(("--require".to_string(), v));
        } else if take_value(args, &mut i, "--ldconfig", Some("-l"))?.is_some()
            || take_value(args, &mut i, "--cuda-compat-mode", None)?.is_some()
        {
            // ldconfig is never run: the cache is written natively.
        } else {
            match a.as_str() {
                "--compute" | "-c" => caps.push(Capability::Compute),
                "--utility" | "-u" => caps.push(Capability::Utility),
                // The set implies compute for video and graphics for display, as
                // libnvidia-container's flags do.
                "--video" | "-v" => caps.push(Capability::Video),
                "--graphics" | "-g" => caps.push(Capability::Graphics),
                "--display" | "-D" => caps.push(Capability::Display),
                "--compat32" => caps.push(Capability::Compat32),
                "--ngx" | "-n" => caps.push(Capability::Ngx),
                "--no-cgroups" => no_cgroups = true,
                "--no-devbind" | "--no-persistenced" | "--no-fabricmanager"
                | "--no-gsp-firmware" => {}
                s if s.starts_with('-') => bail!("configure: unrecognized option '{s}'"),
                s => rootfs = Some(PathBuf::from(s)),
            }
        }
        i += 1;
    }
    let rootfs = rootfs.ok_or_else(|| anyhow!("configure: missing ROOTFS argument"))?;
    if !rootfs.is_absolute() {
        bail!(
            "configure: ROOTFS {} must be an absolute path",
            rootfs.display()
        );
    }
    Ok(ConfigureArgs {
        devices,
        caps,
        pid,
        rootfs,
        no_cgroups,
        requirements,
        mig,
        imex,
        remarks,
    })
}

fn configure(cfg: &Config, args: &[String]) -> anyhow::Result<ExitCode> {
    let ConfigureArgs {
        devices,
        caps,
        pid,
        rootfs,
        no_cgroups,
        requirements,
        mig,
        imex,
        remarks,
    } = parse_configure(args)?;
    // Not the host's `/` nor a system directory, whatever path names it (issue 8).
    gpuctk_container::root::check_container_root(&rootfs)?;
    // Without --pid (enroot, Apptainer): the container is ROOTFS in our own mount namespace,
    // which the caller has already entered, as libnvidia-container's standalone mode takes it.
    let pid = pid.unwrap_or_else(|| std::process::id() as i32);
    let devices = match devices.as_deref() {
        None | Some("") => Devices::NoGpus,
        // enroot and pyxis escape the commas of a list (`1\,3`), as libnvidia-container's
        // option parser expects.
        Some(v) => parse_devices(&v.replace("\\,", ","), "--device")?,
    };
    for r in &remarks {
        tracing::warn!("{r}");
    }
    // `--device`, `--mig-*` and `--imex-channel` are the engine's own arguments (containerd,
    // enroot, Apptainer), not the image's: they pass the gate as a privileged request, and no
    // other source is read on this path.
    let grant = gpuctk_core::gate(
        gpuctk_core::Sources {
            env: Some(("--device".into(), String::new(), devices)),
            imex_env: (!imex.is_empty()).then(|| ("--imex-channel".to_string(), imex)),
            mig,
            ..Default::default()
        },
        &cfg.policy,
        true,
        Delivery::PrestartHook,
    );
    let mut set =
        CapabilitySet::parse(&caps.iter().map(|c| c.name()).collect::<Vec<_>>().join(","))?;
    if caps.is_empty() {
        // libnvidia-container's default is utility only.
        set = CapabilitySet::parse("utility")?;
    }
    let request = Request {
        devices: grant.devices,
        source: grant.source,
        capabilities: set,
        requirements,
        disable_require: false,
        legacy_image: false,
        privileged: true,
        mig: grant.mig,
        imex_channels: grant.imex_channels,
        // libnvidia-container has no gated modes.
        gated: Vec::new(),
        ignored: Vec::new(),
    };
    realize(cfg, &request, pid, &rootfs, no_cgroups || cfg.no_cgroups)?;
    Ok(ExitCode::SUCCESS)
}

fn inventory(
    cfg: &Config,
    driver: Option<&gpuctk_host::RunningDriver>,
) -> anyhow::Result<gpuctk_host::Inventory> {
    crate::discover::discovery_with_driver(
        driver.map(|d| &d.version),
        &crate::decision::roots(cfg),
        &gpuctk_host::DiscoverOptions::default(),
    )
    .map(|d| d.inventory)
}

/// PCI bus id with the 32-bit domain, as NVML and libnvidia-container print it.
fn bus32(bus: &str) -> String {
    match bus.split_once(':') {
        Some((dom, rest)) if dom.len() == 4 => format!("0000{dom}:{rest}").to_ascii_uppercase(),
        _ => bus.to_ascii_uppercase(),
    }
}

fn info(cfg: &Config, args: &[String]) -> anyhow::Result<ExitCode> {
    let csv = args.iter().any(|a| a == "--csv");
    // The version file read once: the probe's answer is discovery's.
    let (platform, driver) = crate::decision::probe_host(cfg)?;
    if platform == gpuctk_host::Platform::Wsl {
        return wsl_info(cfg, csv);
    }
    let inv = inventory(cfg, driver.as_ref())?;
    let cuda = inv
        .cuda_version
        .map(|c| c.to_string())
        .unwrap_or_else(|| "N/A".into());
    // Brand and architecture (the compute capability, as libnvidia-container prints it) are
    // NVML's; without it they are left out and one line says so.
    let nvml = match crate::mig::ask_nvml(&inv, &cfg.nvml_helper) {
        Ok(i) => Some(i),
        Err(why) => {
            tracing::warn!("{why}");
            None
        }
    };
    let facts = |minor: u32| -> (String, String) {
        let g = nvml
            .as_ref()
            .and_then(|n| n.gpus.iter().find(|g| g.minor == minor));
        (
            g.and_then(|g| g.brand.clone())
                .unwrap_or_else(|| "N/A".into()),
            g.and_then(|g| g.compute_capability.clone())
                .unwrap_or_else(|| "N/A".into()),
        )
    };
    let mut out = String::new();
    if csv {
        let header = if nvml.is_some() {
            "Device Index,Device Minor,Model,Brand,GPU UUID,Bus Location,Architecture"
        } else {
            "Device Index,Device Minor,Model,GPU UUID,Bus Location"
        };
        out.push_str(&format!(
            "NVRM version,CUDA version\n{},{cuda}\n\n{header}\n",
            inv.driver_version
        ));
        for g in &inv.gpus {
            let (brand, arch) = facts(g.minor);
            if nvml.is_some() {
                out.push_str(&format!(
                    "{},{},{},{brand},{},{},{arch}\n",
                    g.index,
                    g.minor,
                    g.model,
                    g.uuid,
                    bus32(&g.bus_id)
                ));
            } else {
                out.push_str(&format!(
                    "{},{},{},{},{}\n",
                    g.index,
                    g.minor,
                    g.model,
                    g.uuid,
                    bus32(&g.bus_id)
                ));
            }
        }
    } else {
        out.push_str(&format!(
            "{:<15} {}\n{:<15} {cuda}\n",
            "NVRM version:", inv.driver_version, "CUDA version:"
        ));
        for g in &inv.gpus {
            let (brand, arch) = facts(g.minor);
            let line = |k: &str, v: &dyn std::fmt::Display| format!("{k:<15} {v}\n");
            out.push('\n');
            out.push_str(&line("Device Index:", &g.index));
            out.push_str(&line("Device Minor:", &g.minor));
            out.push_str(&line("Model:", &g.model));
            if nvml.is_some() {
                out.push_str(&line("Brand:", &brand));
            }
            out.push_str(&line("GPU UUID:", &g.uuid));
            out.push_str(&line("Bus Location:", &bus32(&g.bus_id)));
            if nvml.is_some() {
                out.push_str(&line("Architecture:", &arch));
            }
        }
    }
    std::io::stdout().write_all(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// `nvidia-container-cli list`'s arguments: the sections asked (all when none is), the devices
/// (unparsed), the MIG capabilities and the IMEX channels.
#[derive(Debug, PartialEq)]
struct ListArgs {
    device: String,
    libs: bool,
    bins: bool,
    ipcs: bool,
    fw: bool,
    compat32: bool,
    mig: Vec<MigCapability>,
    imex: Vec<u32>,
    /// What the IMEX channel list's parser noted, for a warning.
    remarks: Vec<String>,
}

/// The grammar of `list`'s arguments.
fn parse_list(args: &[String]) -> anyhow::Result<ListArgs> {
    let mut device = "all".to_string();
    let (mut libs, mut bins, mut ipcs, mut fw, mut compat32) = (false, false, false, false, false);
    let mut mig = Vec::new();
    let mut imex: Vec<u32> = Vec::new();
    let mut remarks = Vec::new();
    let mut i = 0;
    while i < args.len() {
        if let Some(v) = take_value(args, &mut i, "--device", Some("-d"))? {
            device = v;
        } else if let Some(v) = take_value(args, &mut i, "--mig-config", None)? {
            if parse_mig(&v, "--mig-config")? && !mig.contains(&MigCapability::Config) {
                mig.push(MigCapability::Config);
            }
        } else if let Some(v) = take_value(args, &mut i, "--mig-monitor", None)? {
            if parse_mig(&v, "--mig-monitor")? && !mig.contains(&MigCapability::Monitor) {
                mig.push(MigCapability::Monitor);
            }
        } else if let Some(v) = take_value(args, &mut i, "--imex-channel", None)? {
            imex.extend(parse_imex_channels(&v, "--imex-channel", &mut remarks)?);
        } else {
            match args[i].as_str() {
                "--libraries" | "-l" => libs = true,
                "--binaries" | "-b" => bins = true,
                "--ipcs" | "-i" => ipcs = true,
                "--firmwares" | "-f" => fw = true,
                "--compat32" => compat32 = true,
                "--no-persistenced" | "--no-fabricmanager" => {}
                s => bail!("list: unrecognized option '{s}'"),
            }
        }
        i += 1;
    }
    let sections = !(libs || bins || ipcs || fw);
    Ok(ListArgs {
        device,
        libs: libs || sections,
        bins: bins || sections,
        ipcs: ipcs || sections,
        fw: fw || sections,
        compat32: compat32 || sections,
        mig,
        imex,
        remarks,
    })
}

fn list(cfg: &Config, args: &[String]) -> anyhow::Result<ExitCode> {
    // The version file read once: the probe's answer is discovery's.
    let (platform, driver) = crate::decision::probe_host(cfg)?;
    if platform == gpuctk_host::Platform::Wsl {
        return wsl_list(cfg, args);
    }
    let inv = inventory(cfg, driver.as_ref())?;
    let ListArgs {
        device,
        libs,
        bins,
        ipcs,
        fw,
        compat32,
        mig,
        imex,
        remarks,
    } = parse_list(args)?;
    for r in remarks {
        tracing::warn!("{r}");
    }
    let ids = match parse_devices(&device, "--device")? {
        Devices::Ids(ids) => ids,
        _ => Vec::new(),
    };
    // MIG devices select their parents too; `all` is every GPU and MIG device
    // (libnvidia-container's `select_devices`).
    let (mig_ids, gpu_ids): (Vec<_>, Vec<_>) =
        ids.iter().cloned().partition(gpuctk_core::mig::is_mig_id);
    let mut selected = gpuctk_core::select_gpus(&inv, &gpu_ids, "--device")?;
    let mut mig_files: Vec<std::path::PathBuf> = Vec::new();
    if !mig_ids.is_empty() || ids.contains(&gpuctk_core::DeviceId::All) {
        let recorded = crate::mig::recorded(&cfg.nvml_cache, &inv).unwrap_or_else(|e| {
            tracing::warn!("{e}");
            None
        });
        let devices = crate::mig::mig_devices(&inv, recorded.as_ref())?;
        let plans = gpuctk_core::mig::plan_mig(&inv, &devices, &crate::decision::hook_path(cfg));
        let mut chosen: Vec<usize> = Vec::new();
        for id in &mig_ids {
            let m = gpuctk_core::mig::select_mig(&inv, &plans, id, "--device")?;
            chosen.extend(plans.iter().position(|p| std::ptr::eq(p, m)));
        }
        if ids.contains(&gpuctk_core::DeviceId::All) {
            chosen.extend(0..plans.len());
        }
        let mut seen = Vec::new();
        for pos in chosen {
            if seen.contains(&pos) {
                continue;
            }
            seen.push(pos);
            if !selected.contains(&plans[pos].gpu) {
                selected.push(plans[pos].gpu);
            }
            if let Some(d) = devices
                .iter()
                .find(|d| d.gpu == plans[pos].gpu && d.index == plans[pos].index)
            {
                mig_files.extend(d.proc_files.iter().map(|f| f.host_path.clone()));
            }
        }
    }
    let mut out = String::new();
    for n in &inv.control_nodes {
        out.push_str(&format!("{}\n", n.host_path.display()));
    }
    for idx in &selected {
        if let Some(n) = &inv.gpus[*idx as usize].node {
            out.push_str(&format!("{}\n", n.host_path.display()));
        }
    }
    // The MIG devices' capability files, unless the global MIG capabilities are listed.
    if mig.is_empty() {
        for f in &mig_files {
            out.push_str(&format!("{}\n", f.display()));
        }
    }
    // Then the IMEX channels and the MIG capabilities (their node and their file), in
    // libnvidia-container's order; the MIG ones with a GPU only, as `configure` gives them.
    let roots = crate::decision::roots(cfg);
    for id in imex {
        let n = gpuctk_host::caps::imex_channel(&roots, id)?;
        out.push_str(&format!("{}\n", n.host_path.display()));
    }
    if !selected.is_empty() {
        for cap in mig {
            let n = gpuctk_host::caps::mig_capability(&roots, cap)?;
            out.push_str(&format!(
                "{}\n{}\n",
                n.host_path.display(),
                gpuctk_host::caps::caps_proc_dir(&roots)
                    .join("mig")
                    .join(cap.name())
                    .display()
            ));
        }
    }
    if bins {
        for b in &inv.binaries {
            out.push_str(&format!("{}\n", b.host_path.display()));
        }
    }
    if libs {
        for l in inv.libraries.iter().filter(|l| !l.is_32bit || compat32) {
            out.push_str(&format!("{}\n", l.host_path.display()));
        }
    }
    if ipcs {
        for f in &inv.ipc {
            out.push_str(&format!("{}\n", f.host_path.display()));
        }
    }
    if fw {
        for f in &inv.firmware {
            out.push_str(&format!("{}\n", f.host_path.display()));
        }
    }
    std::io::stdout().write_all(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// The WSL2 host under the runtime's roots (`/dev/dxg`, the driver store), for `info`/`list`.
fn wsl_host(cfg: &Config) -> anyhow::Result<gpuctk_host::wsl::WslHost> {
    let r = crate::decision::roots(cfg);
    gpuctk_host::wsl::discover(&r.driver_root, &r.dev_root).map_err(|e| anyhow!("WSL2 host: {e}"))
}

/// `info` on WSL2, as libnvidia-container gives it there: every fact from NVML (the driver
/// store's `libnvidia-ml.so.1`; procfs has no NVIDIA driver), no device node (minor 0).
fn wsl_info(cfg: &Config, csv: bool) -> anyhow::Result<ExitCode> {
    let host = wsl_host(cfg)?;
    let lib = host
        .files()
        .find(|f| f.path.ends_with("/libnvidia-ml.so.1"))
        .ok_or_else(|| {
            anyhow!(
                "WSL2 host: no libnvidia-ml.so.1 in the driver store {}",
                host.store
            )
        })?;
    let nvml = crate::mig::ask_nvml_at(&lib.host_path, &cfg.nvml_helper).map_err(|e| {
        anyhow!(
            "{e}: on WSL2 every fact `info` prints comes from NVML ({})",
            lib.host_path.display()
        )
    })?;
    let na = |v: &Option<String>| v.clone().unwrap_or_else(|| "N/A".into());
    let (driver, cuda) = (na(&nvml.driver_version), na(&nvml.cuda_version));
    let mut out = String::new();
    if csv {
        out.push_str(&format!(
            "NVRM version,CUDA version\n{driver},{cuda}\n\nDevice Index,Device Minor,Model,Brand,GPU UUID,Bus Location,Architecture\n"
        ));
        for g in &nvml.gpus {
            out.push_str(&format!(
                "{},{},{},{},{},{},{}\n",
                g.index,
                g.minor,
                na(&g.name),
                na(&g.brand),
                g.uuid,
                bus32(&na(&g.bus_id)),
                na(&g.compute_capability)
            ));
        }
    } else {
        out.push_str(&format!(
            "{:<15} {driver}\n{:<15} {cuda}\n",
            "NVRM version:", "CUDA version:"
        ));
        for g in &nvml.gpus {
            let line = |k: &str, v: &dyn std::fmt::Display| format!("{k:<15} {v}\n");
            out.push('\n');
            out.push_str(&line("Device Index:", &g.index));
            out.push_str(&line("Device Minor:", &g.minor));
            out.push_str(&line("Model:", &na(&g.name)));
            out.push_str(&line("Brand:", &na(&g.brand)));
            out.push_str(&line("GPU UUID:", &g.uuid));
            out.push_str(&line("Bus Location:", &bus32(&na(&g.bus_id))));
            out.push_str(&line("Architecture:", &na(&g.compute_capability)));
        }
    }
    std::io::stdout().write_all(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// `list` on WSL2: `/dev/dxg` (with a device asked for), then what `configure` mounts there,
/// NVIDIA's WSL files: the driver store's `nvidia-smi` as the binary, `libdxcore.so` and the
/// store's libraries and data files as the libraries. No IPC sockets, firmware or MIG.
fn wsl_list(cfg: &Config, args: &[String]) -> anyhow::Result<ExitCode> {
    let ListArgs {
        device,
        libs,
        bins,
        mig,
        imex,
        ..
    } = parse_list(args)?;
    if !mig.is_empty() || !imex.is_empty() {
        bail!("list: --mig-config, --mig-monitor, --imex-channel: a WSL2 host has no MIG or IMEX channels");
    }
    let host = wsl_host(cfg)?;
    let ids = match parse_devices(&device, "--device")? {
        Devices::Ids(ids) => ids,
        _ => Vec::new(),
    };
    let kinds = [cfg.default_kind.as_str(), gpuctk_core::route::RUNTIME_KIND];
    if let Some(bad) = ids
        .iter()
        .find(|d| !gpuctk_core::platform::serves_one_device(d, &kinds))
    {
        bail!("--device: {bad}: a WSL2 host has one device; ask for all");
    }
    let mut out = String::new();
    if !ids.is_empty() {
        out.push_str(&format!("{}\n", host.dxg.host_path.display()));
    }
    let is_bin = |f: &&gpuctk_host::wsl::WslFile| f.path.ends_with("/nvidia-smi");
    if bins {
        for f in host.files().filter(is_bin) {
            out.push_str(&format!("{}\n", f.host_path.display()));
        }
    }
    if libs {
        for f in host.files().filter(|f| !is_bin(f)) {
            out.push_str(&format!("{}\n", f.host_path.display()));
        }
    }
    std::io::stdout().write_all(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
#[path = "legacy_tests.rs"]
mod tests;
