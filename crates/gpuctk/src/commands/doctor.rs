//! `gpuctk doctor`: walks the chain on this host, driver to image, and says per link what it
//! found and how to fix it. The facts come from `gpuctk_host` (discovery and `checks`), the
//! CDI registry and the config as the runtime loads it; the decisions are the ones the
//! deliveries take (`core::stale_reason`, `core::require::check`, the compat rule of
//! `container::hooks::judge_cuda_compat`), and what is left is the verdict (`judge_image`, pure).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Serialize;

use gpuctk_cdi::registry::Registry;
use gpuctk_cdi::spec::{ContainerEdits, Spec};
use gpuctk_container::hooks::{judge_cuda_compat, CompatJudgement};
use gpuctk_container::Root;
use gpuctk_core::request::Delivery;
use gpuctk_core::{
    judge_cuda_start, parse_request, spec_driver_version, stale_reason, CompatLibrary, Request,
};
use gpuctk_host::checks::{self, CharLink, NodeState};
use gpuctk_host::{cuda_version_for_branch, CudaVersion, DiscoverOptions, DriverVersion, Roots};

use crate::cli::DoctorArgs;
use crate::config::{self, Config};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Fine.
    Ok,
    /// Works, but something is missing or odd.
    Warn,
    /// Broken: containers will not get their GPUs (or will not start).
    Fail,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// `driver`, `devices`, `toolkit`, `engines` or `image`.
    pub group: &'static str,
    /// A short, stable name within the group, e.g. `kernel-module`.
    pub name: String,
    /// How it came out.
    pub status: Status,
    /// What was found.
    pub found: String,
    /// What to do about it (every `warn` and `fail` has one).
    pub fix: Option<String>,
}

/// Will CUDA start in the image, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// `ok`, `warn` or `fail`.
    pub status: Status,
    /// Whether a CUDA program in the image is expected to start.
    pub cuda_starts: bool,
    /// Why.
    pub reason: String,
    /// What to do when it will not.
    pub fix: Option<String>,
}

/// Everything `doctor --json` prints.
#[derive(Debug, Serialize)]
pub struct Report {
    /// `fail` when any check failed (or the verdict did), else `warn` when any warned, else `ok`.
    pub status: Status,
    /// The roots the checks read (flags, else the config, else the defaults).
    pub roots: Roots,
    /// The checks in the order run.
    pub checks: Vec<Check>,
    /// The image's verdict, when an image was given.
    pub verdict: Option<Verdict>,
}

struct Checks(Vec<Check>);

impl Checks {
    fn push(&mut self, group: &'static str, name: &str, status: Status, found: String) {
        self.0.push(Check {
            group,
            name: name.to_string(),
            status,
            found,
            fix: None,
        });
    }
    fn ok(&mut self, group: &'static str, name: &str, found: impl Into<String>) {
        self.push(group, name, Status::Ok, found.into());
    }
    fn bad(
        &mut self,
        group: &'static str,
        name: &str,
        status: Status,
        found: impl Into<String>,
        fix: impl Into<String>,
    ) {
        self.0.push(Check {
            group,
            name: name.to_string(),
            status,
            found: found.into(),
            fix: Some(fix.into()),
        });
    }
    fn fail(&mut self, g: &'static str, n: &str, found: impl Into<String>, fix: impl Into<String>) {
        self.bad(g, n, Status::Fail, found, fix);
    }
    fn warn(&mut self, g: &'static str, n: &str, found: impl Into<String>, fix: impl Into<String>) {
        self.bad(g, n, Status::Warn, found, fix);
    }
}

pub fn run(a: DoctorArgs) -> anyhow::Result<ExitCode> {
    let report = diagnose(&a);
    let text = if a.json {
        let mut s = serde_json::to_string_pretty(&report)?;
        s.push('\n');
        s
    } else {
        render(&report)
    };
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(if report.status == Status::Fail {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The human-readable report: one line per check, the fix after it, then the verdict.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    for c in &r.checks {
        let _ = write!(
            s,
            "{:<4} {}/{}: {}",
            c.status.as_str(),
            c.group,
            c.name,
            c.found
        );
        if let Some(fix) = &c.fix {
            let _ = write!(s, "; fix: {fix}");
        }
        s.push('\n');
    }
    if let Some(v) = &r.verdict {
        let _ = write!(
            s,
            "{:<4} verdict: CUDA {} start in this image: {}",
            v.status.as_str(),
            if v.cuda_starts { "will" } else { "will not" },
            v.reason
        );
        if let Some(fix) = &v.fix {
            let _ = write!(s, "; fix: {fix}");
        }
        s.push('\n');
    }
    let count = |st| r.checks.iter().filter(|c| c.status == st).count();
    let _ = writeln!(
        s,
        "{}: {} ok, {} warn, {} fail",
        r.status.as_str(),
        count(Status::Ok),
        count(Status::Warn),
        count(Status::Fail)
    );
    s
}

/// Run every check the arguments ask for.
pub fn diagnose(a: &DoctorArgs) -> Report {
    let mut c = Checks(Vec::new());
    let cfg = check_config(a, &mut c);
    let driver_root = a
        .driver_root
        .clone()
        .unwrap_or_else(|| cfg.driver_root.clone());
    let roots = Roots {
        dev_root: a
            .dev_root
            .clone()
            .or_else(|| cfg.dev_root.clone())
            .unwrap_or_else(|| driver_root.clone()),
        proc_root: a.proc_root.clone().unwrap_or_else(|| cfg.proc_root.clone()),
        driver_root,
    };
    let path_env = std::env::var_os("PATH");

    // The config check ran first (the roots come from it) but is shown with the toolkit's.
    let config_checks = std::mem::take(&mut c.0);
    let host = check_driver(&roots, &mut c);
    if host.driver.is_none() && !roots.proc_root.join("driver/nvidia").exists() {
        // Without the module every node check fails for the same reason: say it once.
        c.fail(
            "devices",
            "nodes",
            "not checked: the NVIDIA kernel module is not loaded (see driver/kernel-module)",
            "load the driver first, then run gpuctk doctor again",
        );
    } else {
        check_devices(&roots, &mut c);
        check_nvml_and_mig(&roots, &cfg, &mut c);
    }
    c.0.extend(config_checks);
    check_low_level_runtime(&cfg, path_env.as_deref(), &mut c);
    let spec_dirs = if a.spec_dirs.is_empty() {
        cfg.spec_dirs.clone()
    } else {
        a.spec_dirs.clone()
    };
    check_cdi_specs(&spec_dirs, host.driver.as_ref().map(|d| d.as_str()), &mut c);
    check_docker(&a.docker_config, path_env.as_deref(), &mut c);
    check_containerd(&a.containerd_config, path_env.as_deref(), &mut c);
    check_crio(&a.crio_config, path_env.as_deref(), &mut c);
    let verdict = if a.rootfs.is_some() || a.bundle.is_some() || a.image_env.is_some() {
        Some(check_image(a, &cfg, &host, &mut c))
    } else {
        None
    };
    let mut status = c.0.iter().map(|c| c.status).max().unwrap_or(Status::Ok);
    if let Some(v) = &verdict {
        status = status.max(v.status);
    }
    Report {
        status,
        roots,
        checks: c.0,
        verdict,
    }
}

// ---------------------------------------------------------------- NVML and MIG

/// NVML (loaded here, as `info` does), the MIG devices procfs shows, and whether the runtime has a
/// current record of NVML's answers for them (without one, `MIG-<uuid>` requests fail).
fn check_nvml_and_mig(roots: &Roots, cfg: &Config, c: &mut Checks) {
    const G: &str = "devices";
    // Discovery's own failures are the driver checks'; nothing to add here then.
    let Ok(inv) = gpuctk_host::discover(roots, &gpuctk_host::DiscoverOptions::default()) else {
        return;
    };
    let nvml = match crate::mig::ask_nvml(&inv, &cfg.nvml_helper) {
        Ok(info) => {
            let mig_mode: Vec<String> = info
                .gpus
                .iter()
                .filter(|g| g.mig_enabled)
                .map(|g| g.index.to_string())
                .collect();
            c.ok(
                G,
                "nvml",
                format!(
                    "{}: {} GPU(s){}",
                    gpuctk_host::nvml::library(&inv)
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                    info.gpus.len(),
                    if mig_mode.is_empty() {
                        String::new()
                    } else {
                        format!(", MIG mode on GPU {}", mig_mode.join(", "))
                    }
                ),
            );
            Some(info)
        }
        Err(why) => {
            c.warn(
                G,
                "nvml",
                why,
                "install the driver's libnvidia-ml (its utility libraries) in the driver root; only MIG UUIDs and the arch and brand requirements need it",
            );
            None
        }
    };
    let devices = match crate::mig::mig_devices(&inv, nvml.as_ref()) {
        Ok(d) => d,
        Err(e) => {
            c.fail(
                G,
                "mig-devices",
                format!("{e:#}"),
                "create the capability node as the line says (nvidia-modprobe makes them)",
            );
            return;
        }
    };
    if devices.is_empty() {
        return;
    }
    let names: Vec<String> = devices.iter().map(|d| d.index_name()).collect();
    c.ok(
        G,
        "mig-devices",
        format!("{} MIG device(s): {}", devices.len(), names.join(", ")),
    );
    let record = cfg.nvml_cache.display();
    match crate::mig::recorded(&cfg.nvml_cache, &inv) {
        Ok(Some(info)) if !gpuctk_host::mig::same_layout(&devices, &info) => c.warn(
            G,
            "nvml-record",
            format!("{record}: lists other MIG instances than procfs shows (repartitioned since): not used, and MIG-<uuid> requests fail"),
            "run `gpuctk info` (or `gpuctk cdi generate`) as root",
        ),
        Ok(Some(_)) => c.ok(G, "nvml-record", format!("{record}: current")),
        Ok(None) => c.warn(
            G,
            "nvml-record",
            format!("{record}: no record of NVML's answers for this driver: containers asking for a MIG device by MIG-<uuid> fail"),
            "run `gpuctk info` (or `gpuctk cdi generate`) as root, again after repartitioning",
        ),
        Err(e) => c.warn(
            G,
            "nvml-record",
            e,
            "run `gpuctk info` as root to rewrite it",
        ),
    }
}

// ---------------------------------------------------------------- driver

/// What the driver checks learned, for the later ones.
struct HostFacts {
    driver: Option<DriverVersion>,
    cuda: Option<CudaVersion>,
}

fn check_driver(roots: &Roots, c: &mut Checks) -> HostFacts {
    const G: &str = "driver";
    let file = roots.proc_root.join("driver/nvidia/version");
    let mut facts = HostFacts {
        driver: None,
        cuda: None,
    };
    let version = match std::fs::read_to_string(&file) {
        Err(e) => {
            c.fail(
                G,
                "kernel-module",
                format!("{}: {e}: the NVIDIA kernel module is not loaded", file.display()),
                "load it (modprobe nvidia, or install the driver and reboot); with a driver container or a procfs elsewhere, point --proc-root at it",
            );
            return facts;
        }
        Ok(text) => match gpuctk_host::procfs::parse_version(&text) {
            Ok(v) => v,
            Err(e) => {
                c.fail(
                    G,
                    "kernel-module",
                    format!("{}: {e}", file.display()),
                    "this is not the NVIDIA module's file: check --proc-root",
                );
                return facts;
            }
        },
    };
    // The branch table until discovery reads libcuda (whose note may say more).
    facts.cuda = cuda_version_for_branch(version.major());
    c.ok(G, "kernel-module", format!("NVIDIA {version} loaded"));
    facts.driver = Some(version.clone());

    let inv = match gpuctk_host::discover(roots, &DiscoverOptions::default()) {
        Ok(inv) => inv,
        Err(e) => {
            c.fail(
                G,
                "libraries",
                format!("discovery failed: {e}"),
                "fix what the message names, then run gpuctk info to see the driver files",
            );
            return facts;
        }
    };
    facts.cuda = inv.cuda_version.or(facts.cuda);
    let mut found = Vec::new();
    let mut problems = Vec::new();
    for name in ["libcuda.so", "libnvidia-ml.so"] {
        if let Some(l) = inv.libraries.iter().find(|l| !l.is_32bit && l.name == name) {
            found.push(l.path.clone());
            continue;
        }
        let installed = checks::installed_library_versions(&roots.driver_root, name);
        if installed.is_empty() {
            problems.push(format!("no {name} of any version"));
        } else {
            let list: Vec<String> = installed
                .iter()
                .map(|l| match &l.version {
                    Some(v) => format!("{v} ({})", l.path),
                    None => l.path.clone(),
                })
                .collect();
            problems.push(format!("{name} is {}, not {version}", list.join(", ")));
        }
    }
    if problems.is_empty() {
        c.ok(
            G,
            "libraries",
            format!(
                "{} match the module (found through {}); CUDA {}",
                found.join(", "),
                inv.library_source,
                facts
                    .cuda
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "version unknown".into())
            ),
        );
    } else {
        c.fail(
            G,
            "libraries",
            format!(
                "kernel module {version}, but {}: CUDA and nvidia-smi would fail with \"Failed to initialize NVML: Driver/library version mismatch\"",
                problems.join("; ")
            ),
            format!(
                "install the user-space driver of the running module ({version}), or reboot so that the module of the installed libraries is loaded; with a driver container, check --driver-root"
            ),
        );
    }
    if inv.firmware.is_empty() {
        c.warn(
            G,
            "gsp-firmware",
            format!("no gsp*.bin under /lib/firmware/nvidia/{version} in the driver root"),
            format!("install the firmware of driver {version} (the nvidia-firmware package of this branch): GPUs that run GSP firmware (Turing and later with the open module) fail to initialise without it"),
        );
    } else {
        let dir = inv.firmware[0]
            .path
            .rsplit_once('/')
            .map(|(d, _)| d.to_string())
            .unwrap_or_default();
        c.ok(
            G,
            "gsp-firmware",
            format!("{} file(s) in {dir}", inv.firmware.len()),
        );
    }
    facts
}

// ---------------------------------------------------------------- device nodes

/// One node to check: name under /dev, the (major, minor) it must have.
fn check_node(
    c: &mut Checks,
    roots: &Roots,
    name: &str,
    expected: (u32, u32),
    what: &str,
    create: &str,
    good: &mut Vec<(String, u32, u32)>,
) {
    const G: &str = "devices";
    let (host, state) = checks::char_node(&roots.dev_root, name);
    let (maj, min) = expected;
    let mknod = format!("mknod -m 666 {} c {maj} {min}", host.display());
    match state {
        NodeState::Char { major, minor } if (major, minor) == expected => {
            c.ok(G, name, format!("{} is {major}:{minor} ({what})", host.display()));
            good.push((name.to_string(), major, minor));
        }
        NodeState::Char { major, minor } => c.fail(
            G,
            name,
            format!(
                "{} is {major}:{minor}, but {what} is {maj}:{min} (per {}): a stale node, containers get the wrong device",
                host.display(),
                roots.proc_root.join("devices").display()
            ),
            format!("recreate it: rm {} && {mknod}", host.display()),
        ),
        NodeState::NotCharDevice => c.fail(
            G,
            name,
            format!("{} is not a character device ({what})", host.display()),
            format!("replace it: rm -rf {} && {mknod}", host.display()),
        ),
        NodeState::Missing(e) => c.fail(
            G,
            name,
            format!("{}: {e} ({what})", host.display()),
            format!("{create}, or by hand: {mknod}"),
        ),
    }
}

fn check_devices(roots: &Roots, c: &mut Checks) {
    const G: &str = "devices";
    let majors = match checks::char_majors(&roots.proc_root) {
        Ok(m) => m,
        Err(e) => {
            c.fail(
                G,
                "proc-devices",
                format!("{}: {e}", roots.proc_root.join("devices").display()),
                "check --proc-root",
            );
            Vec::new()
        }
    };
    let nvidia_major = majors
        .iter()
        .find(|(_, n)| n == "nvidia" || n == "nvidia-frontend")
        .map(|(m, _)| *m)
        .unwrap_or(195);
    let uvm_major = majors
        .iter()
        .find(|(_, n)| n == "nvidia-uvm")
        .map(|(m, _)| *m);
    let mut good = Vec::new();

    match checks::gpu_informations(&roots.proc_root) {
        Err(e) => c.fail(
            G,
            "gpus",
            format!(
                "{}: {e}: the driver reports no GPUs",
                roots.proc_root.join("driver/nvidia/gpus").display()
            ),
            "check that the GPUs are bound to the nvidia driver (lspci -k) and that the module loaded without errors (dmesg)",
        ),
        Ok(infos) => {
            let mut index = 0;
            for info in infos {
                match info {
                    Err(e) => c.fail(
                        G,
                        "gpus",
                        e.to_string(),
                        "this file is not the NVIDIA module's: check --proc-root",
                    ),
                    Ok(info) => {
                        let what = format!("GPU {index}, {} at {}", info.uuid, info.bus_id);
                        check_node(
                            c,
                            roots,
                            &format!("nvidia{}", info.minor),
                            (nvidia_major, info.minor),
                            &what,
                            &format!("create it: nvidia-modprobe -c {}", info.minor),
                            &mut good,
                        );
                        index += 1;
                    }
                }
            }
        }
    }
    check_node(
        c,
        roots,
        "nvidiactl",
        (nvidia_major, 255),
        "the control node",
        "create it: nvidia-modprobe",
        &mut good,
    );
    if !matches!(
        checks::char_node(&roots.dev_root, "nvidia-modeset").1,
        NodeState::Missing(_)
    ) {
        check_node(
            c,
            roots,
            "nvidia-modeset",
            (nvidia_major, 254),
            "the modeset node",
            "create it: nvidia-modprobe -m",
            &mut good,
        );
    }
    match uvm_major {
        None => c.fail(
            G,
            "nvidia-uvm",
            format!(
                "no nvidia-uvm in {}: the nvidia-uvm module is not loaded, and CUDA needs it",
                roots.proc_root.join("devices").display()
            ),
            "load it: modprobe nvidia-uvm (or nvidia-modprobe -u -c 0)",
        ),
        Some(m) => {
            check_node(
                c,
                roots,
                "nvidia-uvm",
                (m, 0),
                "the nvidia-uvm node",
                "create it: nvidia-modprobe -u -c 0",
                &mut good,
            );
            if !matches!(
                checks::char_node(&roots.dev_root, "nvidia-uvm-tools").1,
                NodeState::Missing(_)
            ) {
                check_node(
                    c,
                    roots,
                    "nvidia-uvm-tools",
                    (m, 1),
                    "the nvidia-uvm-tools node",
                    "create it: nvidia-modprobe -u -c 0",
                    &mut good,
                );
            }
        }
    }

    // /dev/char links, for the nodes that are right.
    let mut bad = Vec::new();
    let mut fixes = Vec::new();
    for (name, major, minor) in &good {
        let (host, state) = checks::dev_char_link(&roots.dev_root, *major, *minor);
        match state {
            CharLink::Ok { .. } => {}
            CharLink::Missing => {
                bad.push(format!("{} missing", host.display()));
                fixes.push(format!("ln -s ../{name} {}", host.display()));
            }
            CharLink::Wrong(why) => {
                bad.push(format!("{} {why}", host.display()));
                fixes.push(format!("ln -sfn ../{name} {}", host.display()));
            }
        }
    }
    if good.is_empty() {
        // Nothing to link; the node checks said why.
    } else if bad.is_empty() {
        c.ok(
            G,
            "char-links",
            format!("{} /dev/char/M:m links lead to their nodes", good.len()),
        );
    } else {
        c.fail(
            G,
            "char-links",
            format!(
                "{}: without them a systemd daemon-reload takes the GPUs away from running containers (systemd finds devices by /dev/char/M:m to re-apply cgroup rules)",
                bad.join(", ")
            ),
            format!(
                "for now: mkdir -p {dir} && {}; to keep them across reboots and driver reloads, install a udev rule, e.g. /lib/udev/rules.d/71-nvidia-dev-char.rules with ACTION==\"add\", DEVPATH==\"/bus/pci/drivers/nvidia\", RUN+=\"/usr/bin/nvidia-ctk system create-dev-char-symlinks --create-all\" (gpuctk answers to nvidia-ctk; `gpuctk system create-dev-char-symlinks` makes them now)",
                fixes.join(" && "),
                dir = roots.dev_root.join("dev/char").display()
            ),
        );
    }

    let socket = [
        "run/nvidia-persistenced/socket",
        "var/run/nvidia-persistenced/socket",
    ]
    .iter()
    .map(|p| roots.driver_root.join(p))
    .find(|p| {
        use std::os::unix::fs::FileTypeExt;
        std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket())
    });
    match socket {
        Some(p) => c.ok(G, "persistenced", format!("{} is a socket", p.display())),
        None => c.warn(
            G,
            "persistenced",
            format!(
                "no socket at {}: nvidia-persistenced is not running",
                roots
                    .driver_root
                    .join("run/nvidia-persistenced/socket")
                    .display()
            ),
            "start it (systemctl enable --now nvidia-persistenced): without it the driver tears GPU state down when the last client exits, so every container start pays the initialisation again",
        ),
    }
}

// ---------------------------------------------------------------- toolkit

/// Load the config as the runtime does (or the file `--config` names); its check is pushed.
fn check_config(a: &DoctorArgs, c: &mut Checks) -> Config {
    const G: &str = "toolkit";
    let (path, required) = match &a.config {
        Some(p) => (p.clone(), false),
        None => config::config_path(&|k| std::env::var(k).ok()),
    };
    let exists = path.exists();
    match config::load(&path, required) {
        Err(e) => {
            c.fail(
                G,
                "config",
                e.to_string(),
                "fix the file as the message says; until then the runtime refuses to start containers",
            );
            Config::default()
        }
        Ok(cfg) if !exists => {
            c.ok(
                G,
                "config",
                format!("{} absent: the defaults apply", path.display()),
            );
            cfg
        }
        Ok(cfg) if !cfg.unknown_keys.is_empty() => {
            c.warn(
                G,
                "config",
                format!(
                    "{}: unknown key(s) {}, ignored",
                    path.display(),
                    cfg.unknown_keys.join(", ")
                ),
                "correct the spelling or remove the key(s): a misspelt setting silently keeps its default",
            );
            cfg
        }
        Ok(cfg) if !cfg.not_applied.is_empty() => {
            c.warn(
                G,
                "config",
                format!(
                    "{}: NVIDIA key(s) gpuctk does not apply: {}{}",
                    path.display(),
                    cfg.not_applied.join(", "),
                    at_defaults(&cfg)
                ),
                "remove them, or see docs/compat.md for what gpuctk does instead: they have no effect here",
            );
            cfg
        }
        Ok(cfg) if !cfg.at_default.is_empty() => {
            c.ok(
                G,
                "config",
                format!(
                    "{} parses, every key applied but those at NVIDIA's defaults, which change nothing (gpuctk injects natively): {}",
                    path.display(),
                    cfg.at_default.join(", ")
                ),
            );
            cfg
        }
        Ok(cfg) => {
            c.ok(
                G,
                "config",
                format!("{} parses, every key applied", path.display()),
            );
            cfg
        }
    }
}

/// The keys at NVIDIA's defaults that gpuctk does not apply, for the config line: the runtime
/// never names them (they change nothing), so doctor says it, once.
fn at_defaults(cfg: &Config) -> String {
    if cfg.at_default.is_empty() {
        return String::new();
    }
    format!(
        "; at NVIDIA's defaults, so changing nothing: {}",
        cfg.at_default.join(", ")
    )
}

fn check_low_level_runtime(cfg: &Config, path_env: Option<&OsStr>, c: &mut Checks) {
    match crate::runtime::find_runtime(&cfg.runtimes, path_env) {
        Ok(p) => c.ok(
            "toolkit",
            "low-level-runtime",
            format!("{} (of {:?})", p.display(), cfg.runtimes),
        ),
        Err(e) => c.fail(
            "toolkit",
            "low-level-runtime",
            e.to_string(),
            "install runc or crun, or set [nvidia-container-runtime] runtimes in config.toml to its path",
        ),
    }
}

/// Every edit of `spec`: the top-level ones and each device's.
fn all_edits(spec: &Spec) -> Vec<&ContainerEdits> {
    std::iter::once(&spec.container_edits)
        .chain(spec.devices.iter().map(|d| &d.container_edits))
        .collect()
}

fn check_cdi_specs(dirs: &[PathBuf], running: Option<&str>, c: &mut Checks) {
    const G: &str = "toolkit";
    let reg = Registry::load(dirs);
    let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    for (path, err) in reg.errors() {
        c.fail(
            G,
            "cdi-spec",
            format!("{}: {err}", path.display()),
            format!(
                "regenerate it (nvidia-ctk cdi generate --output {}) or remove it; engines skip an invalid spec",
                path.display()
            ),
        );
    }
    if reg.specs().is_empty() {
        if reg.errors().is_empty() {
            c.ok(
                G,
                "cdi-spec",
                format!(
                    "no CDI spec in {}: containers get their edits just in time",
                    shown.join(", ")
                ),
            );
        }
        return;
    }
    for loaded in reg.specs() {
        let path = loaded.path.display().to_string();
        let spec = &loaded.spec;
        let regenerate = format!("regenerate it: nvidia-ctk cdi generate --output {path}");
        let edits = all_edits(spec);
        let paths: Vec<(&str, &str)> = edits
            .iter()
            .flat_map(|e| {
                e.mounts
                    .iter()
                    .filter(|m| m.host_path.starts_with('/'))
                    .map(|m| ("mount source", m.host_path.as_str()))
                    .chain(
                        e.device_nodes
                            .iter()
                            .map(|n| ("device node", n.host_path.as_deref().unwrap_or(&n.path))),
                    )
            })
            .collect();
        let missing = gpuctk_host::first_missing(paths.iter().copied());
        let made_for = spec_driver_version(spec);
        if let Some(why) = stale_reason(
            &[(path.clone(), made_for.clone())],
            running,
            missing.as_deref(),
        ) {
            c.fail(
                G,
                "cdi-spec",
                format!("{path}: stale: {why}"),
                format!("{regenerate} (cdi mode refuses it; auto mode falls back to just-in-time edits with a warning)"),
            );
            continue;
        }
        let bad_hooks: Vec<String> = edits
            .iter()
            .flat_map(|e| e.hooks.iter())
            .map(|h| h.path.clone())
            .filter(|p| !checks::is_executable(Path::new(p)))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if !bad_hooks.is_empty() {
            c.fail(
                G,
                "cdi-spec",
                format!(
                    "{path}: hook {} does not exist or is not executable: every container using the spec fails to start",
                    bad_hooks.join(", ")
                ),
                format!("install the hook there, or {regenerate} --nvidia-cdi-hook-path <the installed nvidia-cdi-hook>"),
            );
            continue;
        }
        c.ok(
            G,
            "cdi-spec",
            format!(
                "{path}: valid, {} device(s), for driver {}, every host path present",
                spec.devices.len(),
                made_for.as_deref().unwrap_or("(not recorded)")
            ),
        );
    }
}

// ---------------------------------------------------------------- engines

fn engine_registration(
    c: &mut Checks,
    engine: &'static str,
    source: &Path,
    key: &str,
    binary: Option<&str>,
    path_env: Option<&OsStr>,
    configure: &str,
) {
    let name = engine;
    match binary.filter(|b| !b.is_empty()) {
        None => c.fail(
            "engines",
            name,
            format!("{}: {key} is not set", source.display()),
            configure.to_string(),
        ),
        Some(b) => match checks::which(b, path_env) {
            Some(p) => c.ok(
                "engines",
                name,
                format!("{}: {key} = {b} ({})", source.display(), p.display()),
            ),
            None => c.fail(
                "engines",
                name,
                format!(
                    "{}: {key} = {b}, which {}: containers of this runtime fail to start",
                    source.display(),
                    if b.contains('/') {
                        "does not exist or is not executable"
                    } else {
                        "is not an executable in PATH"
                    }
                ),
                format!("install nvidia-container-runtime there, or re-register it: {configure}"),
            ),
        },
    }
}

/// The bytes of an engine's config, `None` when absent (pushing the skip line).
fn read_engine_config(c: &mut Checks, engine: &'static str, path: &Path) -> Option<String> {
    match super::read_capped(path, 16 << 20, "engine config") {
        Ok(b) => Some(String::from_utf8_lossy(&b).into_owned()),
        Err(_) if !path.exists() => {
            c.ok(
                "engines",
                engine,
                format!(
                    "{} absent: {engine} not configured here, skipped",
                    path.display()
                ),
            );
            None
        }
        Err(e) => {
            c.fail(
                "engines",
                engine,
                format!("{e:#}"),
                "make the file readable",
            );
            None
        }
    }
}

fn check_docker(path: &Path, path_env: Option<&OsStr>, c: &mut Checks) {
    let Some(text) = read_engine_config(c, "docker", path) else {
        return;
    };
    let configure = format!(
        "nvidia-ctk runtime configure --runtime docker --config {} && systemctl restart docker",
        path.display()
    );
    let v: serde_json::Value = if text.trim().is_empty() {
        serde_json::json!({})
    } else {
        match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                c.fail(
                    "engines",
                    "docker",
                    format!("{}: invalid JSON: {e}", path.display()),
                    "fix the JSON: dockerd does not start with it",
                );
                return;
            }
        }
    };
    let runtimes: Vec<(String, Option<String>)> = v
        .get("runtimes")
        .and_then(|r| r.as_object())
        .map(|m| {
            m.iter()
                .filter(|(k, _)| k.starts_with("nvidia"))
                .map(|(k, r)| {
                    (
                        k.clone(),
                        r.get("path").and_then(|p| p.as_str()).map(str::to_string),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if runtimes.is_empty() {
        c.warn(
            "engines",
            "docker",
            format!("{}: no nvidia runtime registered", path.display()),
            format!("{configure} (docker run --gpus works without it, --runtime nvidia does not)"),
        );
    }
    for (name, bin) in runtimes {
        engine_registration(
            c,
            "docker",
            path,
            &format!("runtimes.{name}.path"),
            bin.as_deref(),
            path_env,
            &configure,
        );
    }
}

/// `*` and `?` glob match on a file name.
fn glob(pat: &[u8], name: &[u8]) -> bool {
    match (pat.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => glob(&pat[1..], name) || (!name.is_empty() && glob(pat, &name[1..])),
        (Some(b'?'), Some(_)) => glob(&pat[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => glob(&pat[1..], &name[1..]),
        _ => false,
    }
}

/// The files an `imports` entry names, in name order.
fn import_files(base: &Path, imp: &str) -> Vec<PathBuf> {
    let full = if Path::new(imp).is_absolute() {
        PathBuf::from(imp)
    } else {
        base.join(imp)
    };
    let (Some(dir), Some(pat)) = (full.parent(), full.file_name().and_then(|f| f.to_str())) else {
        return Vec::new();
    };
    if !pat.contains(['*', '?']) {
        return vec![full];
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter(|e| glob(pat.as_bytes(), e.file_name().as_encoded_bytes()))
                .map(|e| e.path())
                .take(1000)
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

fn check_containerd(path: &Path, path_env: Option<&OsStr>, c: &mut Checks) {
    let Some(text) = read_engine_config(c, "containerd", path) else {
        return;
    };
    let configure = format!(
        "nvidia-ctk runtime configure --runtime containerd --config {} && systemctl restart containerd",
        path.display()
    );
    let parse =
        |file: &Path, text: &str, c: &mut Checks| match text.parse::<toml_edit::DocumentMut>() {
            Ok(d) => Some(d),
            Err(e) => {
                c.fail(
                    "engines",
                    "containerd",
                    format!("{}: invalid TOML: {}", file.display(), e.message()),
                    "fix the TOML: containerd does not start with it",
                );
                None
            }
        };
    let Some(main) = parse(path, &text, c) else {
        return;
    };
    let mut docs = vec![(path.to_path_buf(), main.clone())];
    let base = path.parent().unwrap_or(Path::new("/"));
    if let Some(imports) = main.get("imports").and_then(|i| i.as_array()) {
        for imp in imports.iter().filter_map(|v| v.as_str()) {
            for f in import_files(base, imp) {
                if let Ok(b) = super::read_capped(&f, 16 << 20, "containerd drop-in") {
                    if let Some(d) = parse(&f, &String::from_utf8_lossy(&b), c) {
                        docs.push((f, d));
                    }
                }
            }
        }
    }
    // Later files override earlier ones, per runtime name.
    let mut found: BTreeMap<String, (PathBuf, String, Option<String>)> = BTreeMap::new();
    for (file, doc) in &docs {
        for plugin in [
            "cri",
            "io.containerd.grpc.v1.cri",
            "io.containerd.cri.v1.runtime",
        ] {
            let Some(runtimes) = doc
                .get("plugins")
                .and_then(|p| p.get(plugin))
                .and_then(|p| p.get("containerd"))
                .and_then(|p| p.get("runtimes"))
                .and_then(|r| r.as_table_like())
            else {
                continue;
            };
            for (name, rt) in runtimes.iter().filter(|(k, _)| k.starts_with("nvidia")) {
                let bin = rt
                    .get("options")
                    .and_then(|o| o.get("BinaryName"))
                    .and_then(|b| b.as_str())
                    .map(str::to_string);
                found.insert(
                    name.to_string(),
                    (
                        file.clone(),
                        format!(
                            "plugins.\"{plugin}\".containerd.runtimes.{name}.options.BinaryName"
                        ),
                        bin,
                    ),
                );
            }
        }
    }
    if found.is_empty() {
        c.warn(
            "engines",
            "containerd",
            format!("{}: no nvidia runtime registered", path.display()),
            configure,
        );
        return;
    }
    for (_, (file, key, bin)) in found {
        engine_registration(
            c,
            "containerd",
            &file,
            &key,
            bin.as_deref(),
            path_env,
            &configure,
        );
    }
}

fn check_crio(path: &Path, path_env: Option<&OsStr>, c: &mut Checks) {
    let drop_dir = path.parent().unwrap_or(Path::new("/")).join("crio.conf.d");
    let mut files = Vec::new();
    if path.exists() {
        files.push(path.to_path_buf());
    }
    if let Ok(rd) = std::fs::read_dir(&drop_dir) {
        let mut d: Vec<PathBuf> = rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .take(1000)
            .collect();
        d.sort();
        files.extend(d);
    }
    if files.is_empty() {
        c.ok(
            "engines",
            "crio",
            format!(
                "{} and {} absent: CRI-O not configured here, skipped",
                path.display(),
                drop_dir.display()
            ),
        );
        return;
    }
    let configure = format!(
        "nvidia-ctk runtime configure --runtime crio --config {} && systemctl restart crio",
        path.display()
    );
    let mut found: BTreeMap<String, (PathBuf, Option<String>)> = BTreeMap::new();
    for f in &files {
        let Some(text) = read_engine_config(c, "crio", f) else {
            continue;
        };
        let doc = match text.parse::<toml_edit::DocumentMut>() {
            Ok(d) => d,
            Err(e) => {
                c.fail(
                    "engines",
                    "crio",
                    format!("{}: invalid TOML: {}", f.display(), e.message()),
                    "fix the TOML: CRI-O does not start with it",
                );
                continue;
            }
        };
        let Some(runtimes) = doc
            .get("crio")
            .and_then(|p| p.get("runtime"))
            .and_then(|p| p.get("runtimes"))
            .and_then(|r| r.as_table_like())
        else {
            continue;
        };
        for (name, rt) in runtimes.iter().filter(|(k, _)| k.starts_with("nvidia")) {
            let bin = rt
                .get("runtime_path")
                .and_then(|b| b.as_str())
                .map(str::to_string);
            found.insert(name.to_string(), (f.clone(), bin));
        }
    }
    if found.is_empty() {
        c.warn(
            "engines",
            "crio",
            "no nvidia runtime registered in CRI-O's config or drop-ins".to_string(),
            configure,
        );
        return;
    }
    for (name, (file, bin)) in found {
        // CRI-O looks an empty runtime_path up by the runtime's name in PATH.
        let bin = bin.filter(|b| !b.is_empty()).unwrap_or(name.clone());
        engine_registration(
            c,
            "crio",
            &file,
            &format!("crio.runtime.runtimes.{name}.runtime_path"),
            Some(&bin),
            path_env,
            &configure,
        );
    }
}

// ---------------------------------------------------------------- image

/// The image as given: its root filesystem (if any) and environment.
struct Image {
    rootfs: Option<PathBuf>,
    env: Vec<String>,
}

fn load_image(a: &DoctorArgs) -> Result<Image, String> {
    if let Some(bundle) = &a.bundle {
        let file = bundle.join("config.json");
        let bytes =
            super::read_capped(&file, 64 << 20, "OCI config").map_err(|e| format!("{e:#}"))?;
        let v: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{}: invalid JSON: {e}", file.display()))?;
        let rootfs = v
            .pointer("/root/path")
            .and_then(|p| p.as_str())
            .map(|p| bundle.join(p));
        let env = v
            .pointer("/process/env")
            .and_then(|e| e.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        return Ok(Image { rootfs, env });
    }
    let env = match &a.image_env {
        None => Vec::new(),
        Some(f) => {
            let bytes =
                super::read_capped(f, 16 << 20, "image env").map_err(|e| format!("{e:#}"))?;
            String::from_utf8_lossy(&bytes)
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#') && l.contains('='))
                .map(str::to_string)
                .collect()
        }
    };
    Ok(Image {
        rootfs: a.rootfs.clone(),
        env,
    })
}

/// `X.Y` at the start of `s` (`12.9.1` → 12.9).
fn major_minor(s: &str) -> Option<CudaVersion> {
    let mut it = s.trim().split('.');
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some(CudaVersion { major, minor })
}

/// The newest `libcudart.so.X.Y*` in the image's library directories, with its path.
fn find_cudart(root: &Root) -> Option<(CudaVersion, String)> {
    let mut dirs: Vec<String> = [
        "/usr/local/cuda/lib64",
        "/usr/local/cuda/targets/x86_64-linux/lib",
        "/usr/local/cuda/targets/sbsa-linux/lib",
        "/usr/lib64",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib",
        "/lib64",
        "/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Ok(names) = root.read_dir_names_limited("/usr/local", 4096) {
        let mut cudas: Vec<String> = names
            .into_iter()
            .filter(|n| n.starts_with("cuda-") || n == "cuda")
            .collect();
        cudas.sort();
        for d in cudas {
            dirs.push(format!("/usr/local/{d}/lib64"));
            dirs.push(format!("/usr/local/{d}/targets/x86_64-linux/lib"));
        }
    }
    let mut best: Option<(CudaVersion, String)> = None;
    for d in dirs {
        let Ok(names) = root.read_dir_names_limited(&d, 100_000) else {
            continue;
        };
        for n in names {
            let Some(v) = n.strip_prefix("libcudart.so.").and_then(major_minor) else {
                continue;
            };
            if best.as_ref().is_none_or(|(b, _)| v > *b) {
                best = Some((v, format!("{d}/{n}")));
            }
        }
    }
    best
}

fn check_image(a: &DoctorArgs, cfg: &Config, host: &HostFacts, c: &mut Checks) -> Verdict {
    const G: &str = "image";
    let image = match load_image(a) {
        Ok(i) => i,
        Err(e) => {
            c.fail(G, "image", e.clone(), "check the path given");
            return Verdict {
                status: Status::Fail,
                cuda_starts: false,
                reason: format!("the image could not be read: {e}"),
                fix: Some("check the path given".into()),
            };
        }
    };
    let root = match &image.rootfs {
        None => None,
        Some(p) => match Root::open(p) {
            Ok(r) => Some(r),
            Err(e) => {
                c.fail(
                    G,
                    "rootfs",
                    format!("{}: {e}", p.display()),
                    "give the container's root filesystem (a directory)",
                );
                None
            }
        },
    };
    let env_value = |k: &str| {
        image
            .env
            .iter()
            .rev()
            .find_map(|e| e.strip_prefix(k).and_then(|r| r.strip_prefix('=')))
    };

    // Its CUDA runtime.
    let cudart = root.as_ref().and_then(find_cudart);
    let env_cuda = env_value("CUDA_VERSION").and_then(major_minor);
    let image_cuda = match (&cudart, env_cuda) {
        (Some((v, path)), _) => {
            c.ok(G, "cuda-runtime", format!("CUDA {v} ({path})"));
            Some(*v)
        }
        (None, Some(v)) => {
            c.ok(G, "cuda-runtime", format!("CUDA {v} (CUDA_VERSION)"));
            Some(v)
        }
        (None, None) => {
            c.ok(
                G,
                "cuda-runtime",
                "no libcudart.so.X.Y and no CUDA_VERSION: not a CUDA image, or CUDA linked statically",
            );
            None
        }
    };

    // Its requirements, as the runtime reads them.
    let config = serde_json::json!({"process": {"env": image.env}});
    let request = match parse_request(&config, &cfg.policy, Delivery::Shim) {
        Ok(r) => Some(r),
        Err(e) => {
            c.fail(
                G,
                "request",
                e.to_string(),
                "fix the image's NVIDIA_* variables: the runtime refuses the container",
            );
            None
        }
    };

    // The host's CUDA.
    match (&host.driver, host.cuda) {
        (Some(d), Some(v)) => c.ok(G, "host-cuda", format!("driver {d} supports CUDA {v}")),
        (Some(d), None) => c.warn(
            G,
            "host-cuda",
            format!("driver {d}: CUDA version unknown (branch before 418?)"),
            "upgrade the driver",
        ),
        (None, _) => {}
    }

    // The compat decision, judged without writing into the image.
    let mut compat = None;
    if let (Some(root), Some(driver)) = (&root, &host.driver) {
        if !cfg.cuda_compat() {
            c.ok(
                G,
                "compat",
                "disabled by config.toml (cuda-compat-mode / disable-cuda-compat-lib-hook)",
            );
        } else {
            match judge_cuda_compat(
                root,
                Some(driver.as_str()),
                None,
                gpuctk_container::hooks::DEFAULT_COMPAT_ROOT,
            ) {
                Ok(CompatJudgement::Use(u)) => {
                    let cuda = u
                        .note_cuda_version
                        .as_deref()
                        .and_then(major_minor)
                        .or_else(|| {
                            DriverVersion::parse(&u.compat_version)
                                .and_then(|v| cuda_version_for_branch(v.major()))
                        });
                    c.ok(
                        G,
                        "compat",
                        format!(
                            "{} ({}{}) is used: {}",
                            u.library,
                            u.compat_version,
                            cuda.map(|v| format!(", CUDA {v}")).unwrap_or_default(),
                            u.reason
                        ),
                    );
                    compat = Some(CompatLibrary {
                        library: u.library,
                        version: u.compat_version,
                        cuda,
                    });
                }
                Ok(CompatJudgement::Skip(o)) => c.ok(G, "compat", format!("not used: {o}")),
                Err(e) => c.warn(
                    G,
                    "compat",
                    format!("cannot judge: {e}"),
                    "check the image's /usr/local/cuda/compat",
                ),
            }
        }
    }

    judge_image(
        host.driver.as_ref().map(|d| d.as_str()),
        host.cuda,
        image_cuda,
        request.as_ref(),
        compat.as_ref(),
    )
}

// ---------------------------------------------------------------- judgements (pure)

/// The verdict of [`gpuctk_core::judge_cuda_start`] as doctor reports it.
fn judge_image(
    driver: Option<&str>,
    host_cuda: Option<CudaVersion>,
    image_cuda: Option<CudaVersion>,
    request: Option<&Request>,
    compat: Option<&CompatLibrary>,
) -> Verdict {
    let v = judge_cuda_start(driver, host_cuda, image_cuda, request, compat);
    Verdict {
        status: if v.starts { Status::Ok } else { Status::Fail },
        cuda_starts: v.starts,
        reason: v.reason,
        fix: v.fix,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u32, minor: u32) -> Option<CudaVersion> {
        Some(CudaVersion { major, minor })
    }

    #[test]
    fn verdict_status_follows_core() {
        let config = serde_json::json!({"process": {"env": ["CUDA_VERSION=12.9.1"]}});
        let legacy = parse_request(&config, &Default::default(), Delivery::Shim).unwrap();
        let r = judge_image(Some("570.124.06"), v(12, 8), v(12, 9), Some(&legacy), None);
        assert!(!r.cuda_starts && r.status == Status::Fail, "{}", r.reason);
        let r = judge_image(Some("570.124.06"), v(12, 9), v(12, 9), Some(&legacy), None);
        assert!(r.cuda_starts && r.status == Status::Ok, "{}", r.reason);
    }

    #[test]
    fn globs() {
        assert!(glob(b"*.toml", b"99-nvidia.toml"));
        assert!(!glob(b"*.toml", b"99-nvidia.toml.bak"));
        assert!(glob(b"9?-*", b"99-x"));
    }
}
