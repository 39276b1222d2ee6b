//! The edits and specs of NVIDIA's gated modes (`gds`, `mofed`, `gdrcopy`, `nvswitch`) and of
//! IMEX channels (`cdi generate --mode imex`): device nodes other modules make, given only when
//! asked for by name or by `NVIDIA_<MODE>=enabled`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gpuctk_cdi::spec::{ContainerEdits, Device, Spec};
use gpuctk_host::{DeviceNode, GatedMode};

use crate::plan::{mount, push_node, FILE_MOUNT_OPTIONS};
use crate::spec::{finish_spec, spec_kind, SpecError};

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
            edits
                .mounts
                .push(mount(host, container, FILE_MOUNT_OPTIONS));
        }
    }
    edits
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
    let kind = spec_kind(vendor, class)?;
    if edits.device_nodes.is_empty() {
        return Err(SpecError::Empty(format!(
            "--mode {mode}: no {} under {}",
            mode.what(),
            dev_root.join("dev").display()
        )));
    }
    Ok(finish_spec(
        kind,
        BTreeMap::new(),
        vec![Device {
            name: "all".to_string(),
            annotations: BTreeMap::new(),
            container_edits: edits,
        }],
        ContainerEdits::default(),
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
    let kind = spec_kind(vendor, class)?;
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
        push_node(&mut all, node);
        devices.push(Device {
            name: id.to_string(),
            annotations: BTreeMap::new(),
            container_edits: edits,
        });
    }
    devices.push(Device {
        name: "all".to_string(),
        annotations: BTreeMap::new(),
        container_edits: all,
    });
    Ok(finish_spec(
        kind,
        BTreeMap::new(),
        devices,
        ContainerEdits::default(),
    ))
}
