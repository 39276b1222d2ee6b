//! `gpuctk cdi generate | list | validate`.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context};
use gpuctk_cdi::registry::Registry;
use gpuctk_cdi::spec::{write_spec, write_spec_text, Format, Spec};
use gpuctk_core::{
    build_spec, plan, CapabilitySet, InRootOp, NameStrategy, PlanOptions, SpecOptions,
};
use gpuctk_host::{Platform, RunningDriver};

use crate::cli::{GenerateArgs, ListArgs, SpecFormat, Strategy, ValidateArgs};

/// The spec a `cdi generate` with these arguments writes.
/// Our hooks, by the names `--disable-hook` takes.
const OUR_HOOKS: [&str; 5] = [
    "create-symlinks",
    "enable-cuda-compat",
    "update-ldcache",
    "disable-device-node-modification",
    "update-application-profile",
];

/// NVIDIA's feature flag that leaves the device nodes' groups out of `additionalGids`.
const NO_ADDITIONAL_GIDS: &str = "no-additional-gids-for-device-nodes";

/// NVIDIA's flags that have no meaning for gpuctk's spec: refused where they would change what
/// a user gets (another discovery mode), a warning where they would not.
fn check_nvidia_flags(a: &GenerateArgs) -> anyhow::Result<()> {
    match a.mode.as_str() {
        "auto" | "nvml" | "management" | "imex" | "csv" | "wsl" => {}
        m if m.parse::<gpuctk_host::GatedMode>().is_ok() => {}
        other => bail!(
            "--mode {other}: not supported by gpuctk on this platform (it generates the nvml mode's spec, from procfs, the management one, the gds, mofed, gdrcopy, nvswitch and imex ones, Jetson's csv one and WSL2's wsl one; use one of those)"
        ),
    }
    if a.mode != "csv"
        && a.mode != "auto"
        && (!a.csv_files.is_empty() || !a.csv_ignore_patterns.is_empty())
    {
        bail!("--csv.*: only for --mode csv (Jetson)");
    }
    if a.csv_compat_container_root.is_some() {
        tracing::warn!("--csv.compat-container-root: the CUDA compat hook of CSV mode needs NVML, which gpuctk does not use; ignored");
    }
    for h in &a.enable_hooks {
        if !OUR_HOOKS.contains(&h.as_str()) {
            tracing::warn!("--enable-hook {h}: gpuctk does not write this hook; ignored");
        }
    }
    for f in a.feature_flags.iter().filter(|f| *f != NO_ADDITIONAL_GIDS) {
        tracing::warn!("--feature-flag {f}: none of NVIDIA's nvcdi feature flags applies to gpuctk's spec; ignored");
    }
    if a.ldconfig_path.is_some() {
        tracing::info!(
            "--ldconfig-path: no ldconfig is run (the cache is written natively); ignored"
        );
    }
    Ok(())
}

/// The hook written into a spec when `--nvidia-cdi-hook-path` is not given, as NVIDIA chooses it:
/// `nvidia-cdi-hook` found in `PATH`, else `/usr/bin/nvidia-cdi-hook`. Not this binary's own
/// path: a spec outlives the build or checkout that wrote it, and the runtime that runs the hook
/// may be a user's who cannot reach that path.
pub fn default_hook_path() -> String {
    gpuctk_host::checks::which(HOOK, std::env::var_os("PATH").as_deref())
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| format!("/usr/bin/{HOOK}"))
}

const HOOK: &str = "nvidia-cdi-hook";

/// Why the spec's hook may fail containers: it is missing, or a user other than its owner
/// (rootless podman runs hooks as the user who started it) cannot run it.
fn hook_warning(hook: &str, defaulted: bool) -> Option<String> {
    let how = if defaulted {
        format!(" (the default: {HOOK} in PATH, else /usr/bin/{HOOK})")
    } else {
        String::new()
    };
    let path = Path::new(hook);
    if !gpuctk_host::checks::is_executable(path) {
        return Some(format!(
            "hook path {hook}{how}: no executable there; every container given a device from this spec will fail until it exists (pass --nvidia-cdi-hook-path)"
        ));
    }
    let why = gpuctk_host::checks::why_others_cannot_run(path)?;
    Some(format!(
        "hook path {hook}{how}: {why}; containers of other users (rootless podman) given a device from this spec will fail; install the hook where every user can run it, or pass --nvidia-cdi-hook-path"
    ))
}

/// The spec, and a warning about its hook path to print once it is written (so a failure stays
/// one line).
pub fn generated_spec(a: &GenerateArgs) -> anyhow::Result<(Spec, Option<String>)> {
    check_nvidia_flags(a)?;
    if let Some(spec) = devices_mode_spec(a)? {
        return validated(spec).map(|s| (s, None));
    }
    // The driver's version file, read once where a mode needs it: `--mode auto`'s probe,
    // discovery and the snapshots' keys take it from here.
    let driver = match a.mode.as_str() {
        "wsl" | "csv" => None,
        _ => crate::snapshot::running_driver(&a.roots.roots()?.proc_root)?,
    };
    let platform = match a.mode.as_str() {
        "auto" => auto_platform(a, driver.as_ref())?,
        _ => Platform::Other,
    };
    if a.mode == "wsl" || platform == Platform::Wsl {
        if !a.csv_files.is_empty() || !a.csv_ignore_patterns.is_empty() {
            bail!("--csv.*: only for --mode csv (Jetson); this is a WSL2 host");
        }
        return wsl_spec(a);
    }
    if a.mode == "csv" || platform == Platform::Tegra {
        return csv_spec(a);
    }
    if !a.csv_files.is_empty() || !a.csv_ignore_patterns.is_empty() {
        bail!("--csv.*: only for --mode csv (Jetson); --mode auto found no Jetson under the driver root");
    }
    let found = a
        .roots
        .discovery_with_configs(&a.config_search_paths, driver.as_ref())?;
    if let Some(driver) = &driver {
        a.roots
            .write_snapshots(&found, &a.config_search_paths, driver);
    }
    let inv = found.inventory;
    // A spec without the driver's libcuda gives containers GPUs that CUDA cannot use: almost
    // always a wrong driver root.
    if !a.allow_missing_libcuda && !inv.libraries.iter().any(|l| l.name == "libcuda.so") {
        bail!(
            "no libcuda.so.{} under driver root {} ({}): check --driver-root (or [nvidia-container-cli] root in config.toml; the GPU Operator's is /run/nvidia/driver), or pass --allow-missing-libcuda to write the spec anyway",
            inv.driver_version,
            inv.roots.driver_root.display(),
            inv.library_source
        );
    }
    let hook_path = a.hook_path.clone().unwrap_or_else(default_hook_path);
    let mut plan = plan(
        &inv,
        &PlanOptions {
            hook_path: hook_path.clone(),
            capabilities: CapabilitySet::all(),
        },
    );
    // Opt-in for a static spec: `additionalGids` needs cdiVersion 0.7.0, and Podman 4 (Debian
    // 12, Ubuntu 24.04) refuses the whole spec for it (NVIDIA's 1.19.1 broke them so). The
    // runtime's own edits carry them, having no version to meet.
    let gids = a.additional_gids && !a.feature_flags.iter().any(|f| f == NO_ADDITIONAL_GIDS);
    // MIG devices from procfs, their UUIDs from NVML; without NVML one line says what is missing
    // (only where there is something to miss: MIG devices or a GPU NVML would call MIG-enabled).
    let (nvml, not_recorded) = crate::mig::ask_and_record(
        &inv,
        &a.roots.nvml_helper(),
        a.roots.nvml_cache(&inv.roots).as_deref(),
    );
    let migs = crate::mig::mig_devices(&inv, nvml.as_ref().ok())?;
    (plan.mig, plan.mig_gpus) = crate::mig::mig_plan(&inv, &migs, nvml.as_ref().ok(), &hook_path);
    // `--disable-hook NAME` (or `all`) leaves those hooks out.
    if !a.disable_hooks.is_empty() {
        plan.retain_ops(|o| hook_kept(a, o), &hook_path);
    }
    let mut warning = ops_warning(a, &plan.ops, &hook_path);
    if !gids {
        plan.without_additional_gids();
    }
    let nvml_warning = match (&nvml, migs.is_empty()) {
        (Err(why), false) => Some(why.clone()),
        _ => not_recorded,
    };
    if let Some(why) = nvml_warning {
        warning = Some(match warning {
            Some(w) => format!("{w}; {why}"),
            None => why,
        });
    }
    if a.mode == "management" {
        let mut spec = management_spec(&inv.roots, &plan, &a.vendor, &a.class, &hook_path)?;
        if !gids {
            without_additional_gids(&mut spec);
        }
        return validated(spec).map(|s| (s, warning));
    }
    let strategies = a
        .strategies
        .iter()
        .map(|s| match s {
            Strategy::Index => NameStrategy::Index,
            Strategy::Uuid => NameStrategy::Uuid,
            Strategy::TypeIndex => NameStrategy::TypeIndex,
        })
        .collect();
    let spec = build_spec(
        &inv,
        &plan,
        &SpecOptions {
            vendor: a.vendor.clone(),
            class: a.class.clone(),
            strategies,
            all_device: !a.no_all_device && !a.device_ids.iter().any(|d| d == "none"),
            device_ids: a.device_ids.clone(),
            annotate_driver_version: a.driver_version_annotation,
        },
    )?;
    validated(spec).map(|s| (s, warning))
}

/// The spec of `--mode gds|mofed|gdrcopy|nvswitch|imex`: device nodes only, found under the
/// dev root (GDS's files under the driver root), no driver needed; `None` for other modes. The
/// class defaults to the mode's (`nvidia.com/gds`, `nvidia.com/imex-channel`), as NVIDIA's.
fn devices_mode_spec(a: &GenerateArgs) -> anyhow::Result<Option<Spec>> {
    let gated = a.mode.parse::<gpuctk_host::GatedMode>().ok();
    if gated.is_none() && a.mode != "imex" {
        return Ok(None);
    }
    let roots = a.roots.roots()?;
    let class = match (a.class.as_str(), gated) {
        ("gpu", Some(m)) => m.name(),
        ("gpu", None) => "imex-channel",
        (c, _) => c,
    };
    let mut spec = match gated {
        Some(mode) => {
            let nodes = gpuctk_host::gated::gated_nodes(&roots.dev_root, mode)
                .with_context(|| format!("--mode {mode}: cannot list the device nodes"))?;
            let mounts = if mode == gpuctk_host::GatedMode::Gds {
                gpuctk_host::gated::gds_mounts(&roots.driver_root)
                    .context("--mode gds: cannot look for /run/udev and /etc/cufile.json")?
            } else {
                Vec::new()
            };
            gpuctk_core::gated::build_gated_spec(
                mode,
                gpuctk_core::gated::gated_edits(&nodes, &mounts),
                &a.vendor,
                class,
                &roots.dev_root,
            )?
        }
        None => {
            let channels = gpuctk_host::gated::imex_channel_nodes(&roots.dev_root)
                .context("--mode imex: cannot list the IMEX channels")?;
            gpuctk_core::gated::build_imex_spec(&channels, &a.vendor, class, &roots.dev_root)?
        }
    };
    if !a.additional_gids || a.feature_flags.iter().any(|f| f == NO_ADDITIONAL_GIDS) {
        without_additional_gids(&mut spec);
    }
    Ok(Some(spec))
}

/// `spec` without `additionalGids`, at the version it then needs.
fn without_additional_gids(spec: &mut Spec) {
    spec.container_edits.additional_gids.clear();
    for d in &mut spec.devices {
        d.container_edits.additional_gids.clear();
    }
    spec.cdi_version = gpuctk_cdi::version::minimum_version(spec).to_string();
}

/// The kind of host `--mode auto` generates for, as the runtime tells it
/// ([`gpuctk_host::platform::probe`]): `driver` is the running driver, as read once.
fn auto_platform(a: &GenerateArgs, driver: Option<&RunningDriver>) -> anyhow::Result<Platform> {
    let roots = a.roots.roots()?;
    gpuctk_host::platform::probe(
        driver.map(|d| &d.version),
        &roots.driver_root,
        &roots.dev_root,
    )
    .map_err(|e| anyhow::anyhow!("{e} for --mode auto: fix it or pass --mode"))
}

/// `--mode wsl`: the spec of a WSL2 host's `/dev/dxg` and driver store.
fn wsl_spec(a: &GenerateArgs) -> anyhow::Result<(Spec, Option<String>)> {
    let roots = a.roots.roots()?;
    for id in &a.device_ids {
        if id != "all" {
            bail!("--device-id {id}: WSL mode has one device; use all");
        }
    }
    if a.no_all_device {
        bail!("--no-all-device: WSL mode's one device is `all`; leave the flag out");
    }
    let host = gpuctk_host::wsl::discover(&roots.driver_root, &roots.dev_root)
        .map_err(|e| anyhow::anyhow!("--mode wsl: {e}"))?;
    let hook_path = a.hook_path.clone().unwrap_or_else(default_hook_path);
    let mut edits = gpuctk_core::wsl::wsl_edits(&host, &hook_path);
    let warning = platform_hooks(a, &mut edits.ops, &mut edits.common.hooks, &hook_path);
    let spec = gpuctk_core::wsl::build_wsl_spec(&edits, &a.vendor, &a.class)?;
    validated(spec).map(|s| (s, warning))
}

/// `--mode csv`: the spec of the CSV files' entries on the host (Jetson).
fn csv_spec(a: &GenerateArgs) -> anyhow::Result<(Spec, Option<String>)> {
    let roots = a.roots.roots()?;
    let files: Vec<std::path::PathBuf> = if a.csv_files.is_empty() {
        gpuctk_host::csv::files_in(Path::new(gpuctk_host::csv::DEFAULT_MOUNT_SPEC_PATH), false)?
    } else {
        a.csv_files.iter().map(std::path::PathBuf::from).collect()
    };
    let specs = gpuctk_host::csv::read_files(&files)?;
    if specs.is_empty() {
        bail!(
            "--mode csv: no entries in the CSV files {}; give them with --csv.file",
            files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let host = gpuctk_host::csv::lookup(
        &specs,
        &roots.driver_root,
        &roots.dev_root,
        &a.csv_ignore_patterns,
    )?;
    let hook_path = a.hook_path.clone().unwrap_or_else(default_hook_path);
    let mut edits = gpuctk_core::platform::csv_edits(&host, &hook_path);
    let warning = platform_hooks(a, &mut edits.ops, &mut edits.common.hooks, &hook_path);
    let all_device = !a.no_all_device && !a.device_ids.iter().any(|d| d == "none");
    for id in &a.device_ids {
        if id != "all" && id != "0" && id != "none" {
            bail!("--device-id {id}: CSV mode (Jetson) has one device; use 0 or all");
        }
    }
    let spec = gpuctk_core::platform::build_csv_spec(&edits, &a.vendor, &a.class, all_device)?;
    validated(spec).map(|s| (s, warning))
}

/// Whether `op` stays: `--disable-hook NAME` (or `all`) leaves those hooks out.
fn hook_kept(a: &GenerateArgs, op: &InRootOp) -> bool {
    !a.disable_hooks.iter().any(|d| d == "all" || d == op.name())
}

/// The hook's warning when `ops` leaves any hook in the spec.
fn ops_warning(a: &GenerateArgs, ops: &[InRootOp], hook_path: &str) -> Option<String> {
    if ops.is_empty() {
        return None;
    }
    hook_warning(hook_path, a.hook_path.is_none())
}

/// A platform's (WSL2, CSV) `ops` and `hooks`, their encoding, less the `--disable-hook`s; the
/// hook's warning when any is left.
fn platform_hooks(
    a: &GenerateArgs,
    ops: &mut Vec<InRootOp>,
    hooks: &mut Vec<gpuctk_cdi::spec::Hook>,
    hook_path: &str,
) -> Option<String> {
    if !a.disable_hooks.is_empty() {
        ops.retain(|o| hook_kept(a, o));
        *hooks = ops.iter().map(|o| o.to_hook(hook_path)).collect();
    }
    ops_warning(a, ops, hook_path)
}

/// The management spec of the host under `roots` (`--mode management`, and `gpuctk install`'s
/// second spec): its nodes as listed under the dev root, less the MIG config capability's.
pub fn management_spec(
    roots: &gpuctk_host::Roots,
    plan: &gpuctk_core::Plan,
    vendor: &str,
    class: &str,
    hook_path: &str,
) -> anyhow::Result<Spec> {
    let nodes = gpuctk_host::nodes::management_nodes(&roots.dev_root).with_context(|| {
        format!(
            "management spec: cannot list the device nodes under {}/dev",
            roots.dev_root.display()
        )
    })?;
    let config_minor =
        gpuctk_host::caps::mig_capability_minor(roots, gpuctk_host::MigCapability::Config)?;
    Ok(gpuctk_core::build_management_spec(
        plan,
        &nodes,
        config_minor,
        vendor,
        class,
        hook_path,
        &roots.dev_root,
    )?)
}

/// What we write must pass our own validator; anything else is our bug, not the user's.
pub fn validated(spec: Spec) -> anyhow::Result<Spec> {
    let issues = gpuctk_cdi::validate::validate(&spec);
    if !issues.is_empty() {
        bail!(
            "internal error: the generated spec is invalid: {}",
            issues
                .iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    Ok(spec)
}

pub fn generate(a: GenerateArgs) -> anyhow::Result<ExitCode> {
    let output = a.output.clone().filter(|p| p.as_os_str() != "-");
    let format = match (a.format, output.as_deref().and_then(Format::from_path)) {
        (Some(SpecFormat::Json), _) => Format::Json,
        (Some(SpecFormat::Yaml), _) => Format::Yaml,
        (None, Some(f)) => f,
        (None, None) => Format::Yaml,
    };
    if let Some(out) = &output {
        check_output_dir(out)?;
    }
    let (spec, warning) = generated_spec(&a)?;
    match output {
        None => {
            std::io::stdout().write_all(spec.to_format(format).as_bytes())?;
        }
        Some(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).with_context(|| {
                    format!(
                        "--output {}: cannot create directory {}",
                        path.display(),
                        dir.display()
                    )
                })?;
            }
            let text = spec.to_format(format);
            // The same spec again (the refresh unit at every boot, a driver event that changed
            // nothing it says): the file is left as it is, so no fsync waits on the disk, a CDI
            // cache watching the folder (containerd's, CRI-O's) reloads nothing, and our
            // runtime's parsed-spec cache, keyed by the file's identity, stays good.
            if crate::capped::holds_exactly(&path, crate::capped::euid(), 0o644, text.as_bytes()) {
                tracing::info!(
                    "{} unchanged ({} devices, cdiVersion {}): not rewritten",
                    path.display(),
                    spec.devices.len(),
                    spec.cdi_version
                );
            } else {
                write_spec_text(&path, text.as_bytes())?;
                tracing::info!(
                    "wrote {} ({} devices, cdiVersion {})",
                    path.display(),
                    spec.devices.len(),
                    spec.cdi_version
                );
            }
        }
    }
    if let Some(w) = warning {
        tracing::warn!("{w}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Fail before discovery, with a message that names the flag, when the output can't be written.
fn check_output_dir(out: &Path) -> anyhow::Result<()> {
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    // A fresh host has no /var/run/cdi yet: it is created once the spec is ready.
    if !dir.exists() {
        return Ok(());
    }
    if !dir.is_dir() {
        bail!(
            "--output {}: {} is not a directory",
            out.display(),
            dir.display()
        );
    }
    if out.is_dir() {
        bail!(
            "--output {}: is a directory; give a file name such as {}/nvidia.yaml",
            out.display(),
            out.display()
        );
    }
    // access(2) answers for the real uid, which is what will write the file.
    if let Err(e) = rustix::fs::access(dir, rustix::fs::Access::WRITE_OK) {
        bail!(
            "--output {}: directory {} is not writable ({})",
            out.display(),
            dir.display(),
            std::io::Error::from(e)
        );
    }
    Ok(())
}

pub fn list(a: ListArgs) -> anyhow::Result<ExitCode> {
    let reg = Registry::load(&a.spec_dirs);
    if a.json {
        let v = serde_json::json!({
            "devices": reg.device_names(),
            "errors": reg
                .errors()
                .iter()
                .map(|(p, e)| serde_json::json!({"file": p.display().to_string(), "error": e}))
                .collect::<Vec<_>>(),
        });
        writeln!(std::io::stdout().lock(), "{v:#}")?;
        return Ok(ExitCode::SUCCESS);
    }
    for (path, err) in reg.errors() {
        tracing::warn!("{}: {err}", path.display());
    }
    let mut out = std::io::stdout().lock();
    for name in reg.device_names() {
        writeln!(out, "{name}")?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn validate(a: ValidateArgs) -> anyhow::Result<ExitCode> {
    if a.json {
        return validate_json(&a);
    }
    let mut failed = 0usize;
    let mut out = std::io::stdout().lock();
    for file in &a.files {
        let spec = match Spec::load(file) {
            Ok(s) => s,
            Err(e) => {
                failed += 1;
                eprintln!("{e}");
                continue;
            }
        };
        let issues = gpuctk_cdi::validate::validate(&spec);
        if issues.is_empty() {
            writeln!(
                out,
                "{}: valid (cdiVersion {}, kind {}, {} devices)",
                file.display(),
                spec.cdi_version,
                spec.kind,
                spec.devices.len()
            )?;
        } else {
            failed += 1;
            let err = gpuctk_cdi::validate::ValidationError {
                file: file.clone(),
                issues,
            };
            eprintln!("{err}");
        }
    }
    if failed > 0 {
        bail!("{failed} of {} spec files are invalid", a.files.len());
    }
    Ok(ExitCode::SUCCESS)
}

/// `cdi validate --json`: `{"files": [{"file", "valid", "cdiVersion"?, "kind"?, "devices"?,
/// "issues": [{"device", "field", "message"}]}]}`; non-zero exit when one is invalid.
fn validate_json(a: &ValidateArgs) -> anyhow::Result<ExitCode> {
    let mut files = Vec::new();
    let mut failed = false;
    for file in &a.files {
        let f = file.display().to_string();
        let entry = match Spec::load(file) {
            Err(e) => serde_json::json!({
                "file": f,
                "valid": false,
                "issues": [{"device": null, "field": "", "message": e.to_string()}],
            }),
            Ok(spec) => {
                let issues = gpuctk_cdi::validate::validate(&spec);
                serde_json::json!({
                    "file": f,
                    "valid": issues.is_empty(),
                    "cdiVersion": spec.cdi_version,
                    "kind": spec.kind,
                    "devices": spec.devices.len(),
                    "issues": issues
                        .iter()
                        .map(|i| serde_json::json!({"device": i.device, "field": i.field, "message": i.message}))
                        .collect::<Vec<_>>(),
                })
            }
        };
        failed |= entry["valid"] == serde_json::json!(false);
        files.push(entry);
    }
    writeln!(
        std::io::stdout().lock(),
        "{:#}",
        serde_json::json!({ "files": files })
    )?;
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `cdi transform root`: read a spec (file or stdin), move its paths, write it (file or stdout)
/// in the input's format unless the output's extension says otherwise.
pub fn transform_root(a: crate::cli::TransformRootArgs) -> anyhow::Result<ExitCode> {
    use gpuctk_cdi::transform::{transform_root, RelativeTo};
    use std::io::Read;
    let (bytes, in_format) = if a.input == "-" {
        let mut b = Vec::new();
        std::io::stdin()
            .take(gpuctk_cdi::limits::MAX_SPEC_SIZE + 1)
            .read_to_end(&mut b)?;
        if b.len() as u64 > gpuctk_cdi::limits::MAX_SPEC_SIZE {
            bail!(
                "--input -: more than {} bytes; not a CDI spec",
                gpuctk_cdi::limits::MAX_SPEC_SIZE
            );
        }
        (b, None)
    } else {
        let p = Path::new(&a.input);
        (gpuctk_cdi::limits::read_spec_file(p)?, Format::from_path(p))
    };
    let mut spec =
        Spec::from_bytes(&bytes, in_format).with_context(|| format!("--input {}", a.input))?;
    let rel = match a.relative_to {
        crate::cli::RelativeTo::Host => RelativeTo::Host,
        crate::cli::RelativeTo::Container => RelativeTo::Container,
    };
    transform_root(&mut spec, &a.from, &a.to, rel);
    let format = a
        .output
        .as_deref()
        .and_then(Format::from_path)
        .or(in_format)
        .unwrap_or(Format::Yaml);
    match &a.output {
        Some(p) => write_spec(p, &spec, format)?,
        None => std::io::stdout().write_all(spec.to_format(format).as_bytes())?,
    }
    Ok(ExitCode::SUCCESS)
}
