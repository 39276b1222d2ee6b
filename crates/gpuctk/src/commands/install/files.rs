//! What install puts on the host: the binary and its names, config.toml, the CDI specs, and
//! the runtimes it registers.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use gpuctk_cdi::spec::Format;
use gpuctk_cdi::transform::{transform_root, RelativeTo};
use gpuctk_core::{build_spec, plan, CapabilitySet, PlanOptions, SpecOptions};
use gpuctk_host::{DiscoverOptions, Roots};

use crate::cli::InstallArgs;

use super::host::*;

/// The binary's name in the toolkit dir.
pub(super) const BINARY: &str = "gpuctk";

/// The names the binary answers to, each a symlink to [`BINARY`] in the toolkit dir.
pub(super) const PERSONALITIES: &[&str] = &[
    "nvidia-container-runtime",
    "nvidia-container-runtime.cdi",
    "nvidia-container-runtime.legacy",
    "nvidia-container-runtime-hook",
    "nvidia-container-toolkit",
    "nvidia-container-cli",
    "nvidia-cdi-hook",
    "nvidia-ctk",
];

/// Where the config goes, relative to the toolkit dir: where NVIDIA's toolkit container puts
/// it, and where the installed binary looks first (see `config::config_path`).
pub(super) const CONFIG: &str = crate::config::INSTALLED_CONFIG;

/// The CDI spec's file name in the spec dir.
pub(super) const SPEC: &str = "nvidia.yaml";

/// The management spec's file name (kind `management.nvidia.com/gpu`), as NVIDIA's installer
/// names it: monitoring agents and NVIDIA's NRI plugin ask for `management.nvidia.com/gpu=all`.
pub(super) const MANAGEMENT_SPEC: &str = "management.nvidia.com-gpu.yaml";

/// One runtime registered with the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Runtime {
    /// Its name in the engine (and the RuntimeClass handler).
    pub name: String,
    /// The executable, as the host sees it.
    pub binary: PathBuf,
    /// Made the engine's default runtime.
    pub default: bool,
}

/// The runtimes install registers, as the GPU Operator does: `NAME` (the mode config.toml
/// says), `NAME-cdi` and `NAME-legacy` (that mode whatever the config says).
pub(super) fn runtimes(toolkit: &Path, name: &str, set_as_default: bool) -> Vec<Runtime> {
    [("", ""), ("-cdi", ".cdi"), ("-legacy", ".legacy")]
        .into_iter()
        .map(|(suffix, ext)| Runtime {
            name: format!("{name}{suffix}"),
            binary: toolkit.join(format!("nvidia-container-runtime{ext}")),
            default: set_as_default && suffix.is_empty(),
        })
        .collect()
}

/// config.toml for the toolkit dir: `config default`, with the hooks in the toolkit dir, the
/// driver root when it is not `/` and the dev root when it is not the driver root.
pub(super) fn config_text(
    toolkit: &Path,
    driver_root: &Path,
    dev_root: Option<&Path>,
) -> anyhow::Result<String> {
    let mut doc: toml_edit::DocumentMut = crate::commands::config_cmd::default_text()
        .parse()
        .context("the default config.toml does not parse")?;
    let hook = toolkit.join("nvidia-cdi-hook");
    crate::commands::config_cmd::set(
        &mut doc,
        "gpuctk.hook-path",
        toml_edit::Value::from(hook.to_string_lossy().as_ref()),
    )?;
    if driver_root != Path::new("/") {
        crate::commands::config_cmd::set(
            &mut doc,
            "nvidia-container-cli.root",
            toml_edit::Value::from(driver_root.to_string_lossy().as_ref()),
        )?;
    }
    if let Some(d) = dev_root.filter(|d| *d != driver_root) {
        crate::commands::config_cmd::set(
            &mut doc,
            "gpuctk.dev-root",
            toml_edit::Value::from(d.to_string_lossy().as_ref()),
        )?;
    }
    Ok(doc.to_string())
}

/// The CDI spec, the management spec, and NVML's answers to record for the runtime (`None`
/// without NVML).
pub(super) type SpecTexts = (String, String, Option<Vec<u8>>);

/// The CDI spec of the host's GPUs and the management spec, with host paths as the host sees
/// them and the toolkit's hook, and NVML's answers as the runtime's record holds them.
pub(super) fn spec_texts(
    host: &Host,
    a: &InstallArgs,
    toolkit: &Path,
) -> anyhow::Result<SpecTexts> {
    let driver_root = resolve_in_root(&host.root, &a.driver_root);
    let dev_root = a.dev_root.as_ref().map(|d| resolve_in_root(&host.root, d));
    let roots = Roots::new(driver_root, dev_root, a.proc_root.clone());
    let inv = crate::discover::discover(&roots, &DiscoverOptions::default()).with_context(|| {
        format!(
            "--driver-root {} (NVIDIA_DRIVER_ROOT), under --host-root: no driver found there yet; nothing was written",
            a.driver_root.display()
        )
    })?;
    if !inv.libraries.iter().any(|l| l.name == "libcuda.so") {
        bail!(
            "no libcuda.so under driver root {} (here {}): is the driver installed yet? Set --driver-root (NVIDIA_DRIVER_ROOT; /run/nvidia/driver with a containerized driver)",
            a.driver_root.display(),
            roots.driver_root.display()
        );
    }
    let hook = toolkit
        .join("nvidia-cdi-hook")
        .to_string_lossy()
        .into_owned();
    let mut p = plan(
        &inv,
        &PlanOptions {
            hook_path: hook.clone(),
            capabilities: CapabilitySet::all(),
        },
    );
    p.hooks_read_proc(&hook);
    // MIG devices as `cdi generate` gives them, and NVML's answers recorded for the runtime
    // (keyed inside the driver root, they hold for the host's view too), so that `MIG-<uuid>`
    // requests work as soon as install is done. The static build asks through the NVML helper config.toml names; the installer image
    // (FROM scratch, no libc) has none, so MIG devices get no UUIDs there and one line says so.
    let helper = crate::config::load_from_env()
        .map(|c| c.nvml_helper)
        .unwrap_or_else(|_| crate::config::DEFAULT_NVML_HELPER.into());
    let nvml = crate::mig::ask_nvml(&inv, &helper);
    let record = match nvml.as_ref().map(|i| crate::mig::record_text(&inv, i)) {
        Ok(Ok(r)) => Some(r),
        Ok(Err(e)) => {
            tracing::warn!("NVML's answers not recorded for the runtime: {e}");
            None
        }
        Err(_) => None,
    };
    let migs = crate::mig::mig_devices(&inv, nvml.as_ref().ok())?;
    if let (Err(why), false) = (&nvml, migs.is_empty()) {
        tracing::warn!("{why}");
    }
    (p.mig, p.mig_gpus) = crate::mig::mig_plan(&inv, &migs, nvml.as_ref().ok(), &hook);
    // As `cdi generate` by default: `additionalGids` would need cdiVersion 0.7.0, which older
    // CDI clients refuse for the whole spec; the runtime's own edits carry the groups.
    p.without_additional_gids();
    let spec = build_spec(&inv, &p, &SpecOptions::default())?;
    let management =
        crate::commands::cdi::management_spec(&roots, &p, "management.nvidia.com", "gpu", &hook)?;
    let text = |mut spec: gpuctk_cdi::spec::Spec| -> anyhow::Result<String> {
        if host.root != Path::new("/") {
            // Discovery saw the host under the host root; the host sees it at /.
            transform_root(
                &mut spec,
                &host.root.to_string_lossy(),
                "/",
                RelativeTo::Host,
            );
        }
        Ok(crate::commands::cdi::validated(spec)?.to_format(Format::Yaml))
    };
    Ok((text(spec)?, text(management)?, record))
}
