//! Turning a [`Plan`] into a CDI spec, the way `nvidia-ctk cdi generate` names devices: one
//! device per GPU and naming strategy, plus `all`, with the common edits at the top level.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use gpuctk_cdi::spec::{ContainerEdits, Device, Spec};
use gpuctk_host::Inventory;

use crate::plan::Plan;

/// The annotation recording the driver version a spec was generated for, so a runtime can tell
/// a stale spec (driver upgraded since) from a current one.
pub const DRIVER_VERSION_ANNOTATION: &str = "gpuctk/driver-version";

/// How devices are named (`--device-name-strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameStrategy {
    /// `0`, `1`, ...
    Index,
    /// `GPU-...`
    Uuid,
    /// `gpu0`, `gpu1`, ...
    TypeIndex,
}

/// An unknown `--device-name-strategy`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--device-name-strategy: unknown strategy {0:?} (use index, uuid or type-index)")]
pub struct UnknownStrategy(pub String);

impl FromStr for NameStrategy {
    type Err = UnknownStrategy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "index" => Ok(NameStrategy::Index),
            "uuid" => Ok(NameStrategy::Uuid),
            "type-index" => Ok(NameStrategy::TypeIndex),
            _ => Err(UnknownStrategy(s.to_string())),
        }
    }
}

impl fmt::Display for NameStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameStrategy::Index => "index",
            NameStrategy::Uuid => "uuid",
            NameStrategy::TypeIndex => "type-index",
        })
    }
}

/// What the spec should contain.
#[derive(Debug, Clone)]
pub struct SpecOptions {
    /// `--vendor`, default `nvidia.com`.
    pub vendor: String,
    /// `--class`, default `gpu`.
    pub class: String,
    /// Naming strategies; each GPU appears once per strategy.
    pub strategies: Vec<NameStrategy>,
    /// Add the `all` device.
    pub all_device: bool,
    /// `--device-id` values: `all`, `none`, indices or UUIDs. Empty means all.
    pub device_ids: Vec<String>,
    /// Record the driver version in the [`DRIVER_VERSION_ANNOTATION`] annotation. Off by
    /// default: annotations need cdiVersion 0.6.0, which consumers vendoring an older CDI library
    /// (Podman 4.3) reject; the version is in the `enable-cuda-compat` hook's arguments anyway.
    pub annotate_driver_version: bool,
}

impl Default for SpecOptions {
    fn default() -> Self {
        SpecOptions {
            vendor: "nvidia.com".to_string(),
            class: "gpu".to_string(),
            strategies: vec![NameStrategy::Index, NameStrategy::Uuid],
            all_device: true,
            device_ids: Vec::new(),
            annotate_driver_version: false,
        }
    }
}

/// Why a spec could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// A `--device-id` names no GPU.
    #[error("--device-id {id}: no such GPU (this host has {available})")]
    UnknownDevice {
        /// The id given.
        id: String,
        /// The GPUs that exist.
        available: String,
    },
    /// Nothing would be in the spec.
    #[error("no devices to put in the spec: {0}")]
    Empty(String),
    /// The vendor or class is not a valid CDI name part.
    #[error("{0}")]
    BadKind(String),
    /// A `--device-id` MIG id that names no MIG device.
    #[error(transparent)]
    Mig(#[from] crate::mig::MigSelectError),
}

/// Describe the GPUs of `inv` for error messages: `0-7` or `none`.
pub fn available_gpus(inv: &Inventory) -> String {
    match inv.gpus.len() {
        0 => "no GPUs".to_string(),
        1 => "only GPU 0".to_string(),
        n => format!("GPUs 0-{}", n - 1),
    }
}

/// Build the CDI spec for `plan`.
pub fn build_spec(inv: &Inventory, plan: &Plan, opts: &SpecOptions) -> Result<Spec, SpecError> {
    let kind = spec_kind(&opts.vendor, &opts.class)?;

    let mut selected: Vec<usize> = Vec::new();
    let mut selected_mig: Vec<usize> = Vec::new();
    let ids: Vec<&str> = opts.device_ids.iter().map(String::as_str).collect();
    let only_none = !ids.is_empty() && ids.iter().all(|i| *i == "none");
    let mig_id = |id: &str| {
        crate::request::parse_device_id(id, "--device-id")
            .ok()
            .filter(crate::mig::is_mig_id)
    };
    if ids.is_empty() || ids.contains(&"all") {
        // NVIDIA's rule: a GPU in MIG mode is there as its MIG devices, not as a whole.
        selected
            .extend((0..plan.gpus.len()).filter(|p| !plan.mig_gpus.contains(&plan.gpus[*p].index)));
        selected_mig.extend(0..plan.mig.len());
    } else if !only_none {
        for id in ids.iter().filter(|i| **i != "none") {
            if let Some(m) = mig_id(id) {
                let found = crate::mig::select_mig(inv, &plan.mig, &m, "--device-id")?;
                let pos = plan
                    .mig
                    .iter()
                    .position(|x| std::ptr::eq(x, found))
                    .unwrap_or_default();
                if !selected_mig.contains(&pos) {
                    selected_mig.push(pos);
                }
                continue;
            }
            let Some(g) = inv.gpu(id) else {
                return Err(SpecError::UnknownDevice {
                    id: id.to_string(),
                    available: available_gpus(inv),
                });
            };
            match plan.gpus.iter().position(|p| p.index == g.index) {
                Some(pos) if !selected.contains(&pos) => selected.push(pos),
                Some(_) => {}
                None => {
                    return Err(SpecError::Empty(format!(
                        "GPU {id} has no device node under the dev root"
                    )))
                }
            }
        }
    }
    selected.sort();

    let mut devices: Vec<Device> = Vec::new();
    for &pos in &selected {
        let g = &plan.gpus[pos];
        for s in &opts.strategies {
            let name = match s {
                NameStrategy::Index => g.index.to_string(),
                NameStrategy::Uuid => g.uuid.clone(),
                NameStrategy::TypeIndex => format!("gpu{}", g.index),
            };
            if devices.iter().any(|d| d.name == name) {
                continue;
            }
            devices.push(Device {
                name,
                annotations: BTreeMap::new(),
                container_edits: g.edits.clone(),
            });
        }
    }
    selected_mig.sort();
    for &pos in &selected_mig {
        let m = &plan.mig[pos];
        for s in &opts.strategies {
            let name = match s {
                NameStrategy::Index => m.index_name(),
                NameStrategy::Uuid => match &m.uuid {
                    Some(u) => u.clone(),
                    None => continue,
                },
                NameStrategy::TypeIndex => format!("mig{}", m.index_name()),
            };
            if devices.iter().any(|d| d.name == name) {
                continue;
            }
            let mut container_edits = m.edits.clone();
            container_edits.append(&m.graphics);
            devices.push(Device {
                name,
                annotations: BTreeMap::new(),
                container_edits,
            });
        }
    }
    devices.sort_by(|a, b| a.name.cmp(&b.name));
    // `--device-id none`, as NVIDIA's v1.20 writes it (its `emptyDeviceSpecGenerator`): one
    // device `none` with no GPU, so that `nvidia.com/gpu=none` gives a container the driver
    // (the spec's common edits) and no GPU.
    if only_none {
        devices.push(Device {
            name: "none".to_string(),
            annotations: BTreeMap::new(),
            container_edits: ContainerEdits {
                env: vec!["NVCT_EMPTY_DEVICE=".to_string()],
                ..ContainerEdits::default()
            },
        });
    }
    if opts.all_device
        && !(selected.is_empty() && selected_mig.is_empty())
        && !devices.iter().any(|d| d.name == "all")
    {
        let mut all = ContainerEdits::default();
        for &pos in &selected {
            all.append(&plan.gpus[pos].edits);
        }
        for &pos in &selected_mig {
            all.append(&plan.mig[pos].edits);
            all.append(&plan.mig[pos].graphics);
        }
        // A parent node shared by several MIG devices, and every card node's group, once.
        crate::plan::dedup_edits(&mut all);
        devices.push(Device {
            name: "all".to_string(),
            annotations: BTreeMap::new(),
            container_edits: all,
        });
    }
    if devices.is_empty() {
        let without_node: Vec<String> = inv
            .gpus
            .iter()
            .filter(|g| g.node.is_none())
            .map(|g| format!("/dev/nvidia{}", g.minor))
            .collect();
        return Err(SpecError::Empty(if inv.gpus.is_empty() {
            "the driver reports no GPUs".to_string()
        } else if plan.gpus.is_empty() && !without_node.is_empty() {
            format!(
                "the driver reports {} GPU(s) but their device nodes are missing under {}: {} (create them with nvidia-modprobe -c MINOR, or check --dev-root)",
                inv.gpus.len(),
                inv.roots.dev_root.display(),
                without_node.join(", ")
            )
        } else {
            "no GPU selected (a CDI spec needs at least one device)".to_string()
        }));
    }

    let mut annotations = BTreeMap::new();
    if opts.annotate_driver_version {
        annotations.insert(
            DRIVER_VERSION_ANNOTATION.to_string(),
            inv.driver_version.to_string(),
        );
    }
    Ok(finish_spec(kind, annotations, devices, plan.common.clone()))
}

/// The spec for management containers (monitoring agents, device plugins: NVIDIA's
/// `cdi generate --mode management`, whose installer writes it as `management.nvidia.com/gpu`):
/// one device, `all`, with every NVIDIA device node in `nodes` (the host's, as listed, not the
/// GPUs' alone), and a `chmod 755` of `/dev/nvidia-caps` when a node lies in it (a runtime may
/// create the folder with a narrower mode); the common edits are the plan's driver files, env
/// and hooks, without its device nodes, which are all in `all`.
///
/// Except the MIG config capability's node (`mig_config_minor`): it lets a container repartition
/// every MIG GPU of the host, which the gate gives privileged containers only
/// (`NVIDIA_MIG_CONFIG_DEVICES`); a management device, which a container may ask for by name in
/// its env, must not be a way around that (NVIDIA's spec includes it). The monitor capability
/// stays: monitoring agents need it.
pub fn build_management_spec(
    plan: &Plan,
    nodes: &[gpuctk_host::DeviceNode],
    mig_config_minor: Option<u32>,
    vendor: &str,
    class: &str,
    hook_path: &str,
    dev_root: &std::path::Path,
) -> Result<Spec, SpecError> {
    let kind = spec_kind(vendor, class)?;
    if nodes.is_empty() {
        return Err(SpecError::Empty(format!(
            "no NVIDIA device node under {}/dev (load the driver, create the nodes with nvidia-ctk system create-device-nodes, or check --dev-root)",
            dev_root.display()
        )));
    }
    let config_node = mig_config_minor.map(|m| format!("/dev/nvidia-caps/nvidia-cap{m}"));
    let nodes: Vec<&gpuctk_host::DeviceNode> = nodes
        .iter()
        .filter(|n| Some(&n.path) != config_node.as_ref())
        .collect();
    let mut all = ContainerEdits::default();
    for n in &nodes {
        crate::plan::push_node(&mut all, n);
    }
    if nodes
        .iter()
        .any(|n| n.path.starts_with("/dev/nvidia-caps/"))
    {
        all.hooks.push(
            crate::ops::InRootOp::Chmod {
                mode: 0o755,
                paths: vec!["/dev/nvidia-caps".to_string()],
            }
            .to_hook(hook_path),
        );
    }
    let mut common = plan.common.clone();
    common.device_nodes.clear();
    // Management containers (monitoring agents, the driver's own tools) may make device nodes,
    // as NVIDIA's management mode lets them.
    common.hooks = plan
        .ops
        .iter()
        .filter(|o| {
            !matches!(
                o,
                crate::ops::InRootOp::DisableDeviceNodeModification { .. }
            )
        })
        .map(|o| o.to_hook(hook_path))
        .collect();
    Ok(finish_spec(
        kind,
        BTreeMap::new(),
        vec![Device {
            name: "all".to_string(),
            annotations: BTreeMap::new(),
            container_edits: all,
        }],
        common,
    ))
}

/// `vendor/class` as a spec's kind, checked to be a valid CDI kind.
pub(crate) fn spec_kind(vendor: &str, class: &str) -> Result<String, SpecError> {
    let kind = format!("{vendor}/{class}");
    gpuctk_cdi::names::parse_qualified_name(&format!("{kind}=all"))
        .map_err(|e| SpecError::BadKind(format!("--vendor/--class {kind:?}: {e}")))?;
    Ok(kind)
}

/// The spec of these parts, with the lowest `cdiVersion` that can hold them.
pub(crate) fn finish_spec(
    kind: String,
    annotations: BTreeMap<String, String>,
    devices: Vec<Device>,
    container_edits: ContainerEdits,
) -> Spec {
    let mut spec = Spec {
        cdi_version: String::new(),
        kind,
        annotations,
        devices,
        container_edits,
    };
    spec.cdi_version = gpuctk_cdi::version::minimum_version(&spec).to_string();
    spec
}

/// The driver version a spec was generated for: the annotation when present, else the
/// `--host-driver-version` of its `enable-cuda-compat` hook (what NVIDIA's generator writes too).
pub fn spec_driver_version(spec: &gpuctk_cdi::spec::Spec) -> Option<String> {
    if let Some(v) = spec.annotations.get(DRIVER_VERSION_ANNOTATION) {
        return Some(v.clone());
    }
    spec.container_edits
        .hooks
        .iter()
        .filter(|h| h.args.get(1).is_some_and(|a| a == "enable-cuda-compat"))
        .flat_map(|h| h.args.iter())
        .find_map(|a| a.strip_prefix("--host-driver-version=").map(str::to_string))
}
