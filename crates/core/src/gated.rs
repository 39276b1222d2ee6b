//! The edits and specs of NVIDIA's gated modes (`gds`, `mofed`, `gdrcopy`, `nvswitch`) and of
//! IMEX channels (`cdi generate --mode imex`): device nodes other modules make, given only when
//! asked for by name or by `NVIDIA_<MODE>=enabled`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gpuctk_cdi::spec::{ContainerEdits, Device, Mount, Spec};
use gpuctk_host::{DeviceNode, GatedMode};

use crate::plan::{push_node, FILE_MOUNT_OPTIONS};
use crate::spec::SpecError;

/// The edits of a gated mode: its nodes, and the files it mounts (GDS's `/run/udev` and
/// `/etc/cufile.json`, as (host path, container path)) when it has a node at all, as NVIDIA's
/// GDS discoverer mounts them only then.
pub fn gated_edits(nodes: &[DeviceNode], mounts: &[(PathBuf, String)]) -> ContainerEdits {
    let mut edits = ContainerEdits::default();
    for n in nodes {
        push_node(&mut edits, n);
    }
    if !nodes.is_empty() {
        for (host, container) in mounts {
            edits.mounts.push(Mount {
                host_path: host.to_string_lossy().into_owned(),
                container_path: container.clone(),
                r#type: None,
                options: FILE_MOUNT_OPTIONS.iter().map(|s| s.to_string()).collect(),
            });
        }
    }
    edits
}

fn kind_of(vendor: &str, class: &str) -> Result<String, SpecError> {
    let kind = format!("{vendor}/{class}");
    gpuctk_cdi::names::parse_qualified_name(&format!("{kind}=all"))
        .map_err(|e| SpecError::BadKind(format!("--vendor/--class {kind:?}: {e}")))?;
    Ok(kind)
}

fn finish(kind: String, devices: Vec<Device>) -> Spec {
    let mut spec = Spec {
        cdi_version: String::new(),
        kind,
        annotations: BTreeMap::new(),
        devices,
        container_edits: ContainerEdits::default(),
    };
    spec.cdi_version = gpuctk_cdi::version::minimum_version(&spec).to_string();
    spec
}

/// The spec of gated `mode` (`cdi generate --mode gds` and so on): one device, `all`, with
/// `edits` ([`gated_edits`]); no common edits. No node is an error naming what to load.
pub fn build_gated_spec(
    mode: GatedMode,
    edits: ContainerEdits,
    vendor: &str,
    class: &str,
    dev_root: &std::path::Path,
) -> Result<Spec, SpecError> {
    let kind = kind_of(vendor, class)?;
    if edits.device_nodes.is_empty() {
        return Err(SpecError::Empty(format!(
            "--mode {mode}: no {} under {}",
            mode.what(),
            dev_root.join("dev").display()
        )));
    }
    Ok(finish(
        kind,
        vec![Device {
            name: "all".to_string(),
            annotations: BTreeMap::new(),
            container_edits: edits,
        }],
    ))
}

/// The IMEX channels' spec (`cdi generate --mode imex`): a device per channel, named by its id,
/// holding `/dev/nvidia-caps-imex-channels/channel<id>`, and `all` holding every channel, as
/// NVIDIA's generator merges them. `channels` are (id, node). None is an error.
pub fn build_imex_spec(
    channels: &[(u32, DeviceNode)],
    vendor: &str,
    class: &str,
    dev_root: &std::path::Path,
) -> Result<Spec, SpecError> {
    let kind = kind_of(vendor, class)?;
    if channels.is_empty() {
        return Err(SpecError::Empty(format!(
            "--mode imex: no IMEX channel under {} (create them with nvidia-modprobe -i ID, or set the driver's NVreg_CreateImexChannel0=1)",
            dev_root.join("dev/nvidia-caps-imex-channels").display()
        )));
    }
    let mut devices: Vec<Device> = Vec::new();
    let mut all = ContainerEdits::default();
    for (id, node) in channels {
        let mut edits = ContainerEdits::default();
        push_node(&mut edits, node);
        all.append(&edits);
        devices.push(Device {
            name: id.to_string(),
            annotations: BTreeMap::new(),
            container_edits: edits,
        });
    }
    let mut seen = Vec::new();
    all.additional_gids.retain(|g| {
        let new = !seen.contains(g);
        seen.push(*g);
        new
    });
    devices.push(Device {
        name: "all".to_string(),
        annotations: BTreeMap::new(),
        container_edits: all,
    });
    Ok(finish(kind, devices))
}
