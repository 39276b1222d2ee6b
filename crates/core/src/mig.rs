//! MIG devices in requests and specs: which MIG device an id names (`N:M`, `MIG-<uuid>`, the
//! older `MIG-GPU-<uuid>/<gi>/<ci>`), and the edits one gets: its parent's node and exactly its
//! GPU instance's and compute instance's capability nodes, as NVIDIA's CDI generator gives them;
//! a device of a graphics profile (`+gfx`) its parent's DRM nodes too.

use gpuctk_cdi::spec::{ContainerEdits, Mount};
use gpuctk_host::mig::MigDevice;
use gpuctk_host::Inventory;

use crate::ops::{InRootOp, Link};
use crate::plan::push_node;
use crate::request::DeviceId;

/// The edits for one MIG device.
#[derive(Debug, Clone, PartialEq)]
pub struct MigEdits {
    /// The parent GPU's index.
    pub gpu: u32,
    /// Its index under the parent (`M` of `N:M`).
    pub index: u32,
    /// Its `MIG-...` UUID, where NVML told it.
    pub uuid: Option<String>,
    /// Its GPU instance id.
    pub gi: u32,
    /// Its compute instance id.
    pub ci: u32,
    /// The parent node and the two capability nodes.
    pub edits: ContainerEdits,
    /// For a device of a graphics GPU instance profile (`+gfx`): its parent's DRM nodes and the
    /// hook making their udev by-path links, as NVIDIA's generator gives them (since its PR
    /// #1818). Empty otherwise. A spec's device has them with `edits`; the shim gives them as a
    /// whole GPU's, for `graphics` or `display`.
    pub graphics: ContainerEdits,
    /// The by-path links the `graphics` hook makes.
    pub links: Vec<Link>,
    /// Its two capability files bound read-only where procfs has them, the
    /// `/proc/driver/nvidia/capabilities` view libnvidia-container gives (legacy delivery only:
    /// NVIDIA's CDI specs have none, and a runtime takes no bind mount inside `/proc`).
    pub proc_mounts: Vec<Mount>,
}

impl MigEdits {
    /// `N:M`.
    pub fn index_name(&self) -> String {
        format!("{}:{}", self.gpu, self.index)
    }
}

/// A MIG id that names no MIG device here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MigSelectError {
    /// No MIG device with that index, UUID or GPU/instance triple.
    #[error("{var}: no MIG device {item} (this host has {available})")]
    Unknown {
        /// The variable or annotation.
        var: String,
        /// The id.
        item: String,
        /// What exists.
        available: String,
    },
    /// A `MIG-<uuid>` when the UUIDs are not known (no NVML, or no cache of what it said).
    #[error("{var}: {item}: MIG UUIDs are known only from NVML; run `gpuctk info` or `gpuctk cdi generate` as root once to record them, or request the device as {hint}")]
    UuidUnknown {
        /// The variable or annotation.
        var: String,
        /// The id.
        item: String,
        /// The `N:M` forms that exist.
        hint: String,
    },
}

/// The edits of each MIG device in `devices` whose parent has a node, in their order; the
/// by-path links' hook runs `hook_path`.
pub fn plan_mig(inv: &Inventory, devices: &[MigDevice], hook_path: &str) -> Vec<MigEdits> {
    devices
        .iter()
        .filter_map(|d| {
            let gpu = inv.gpus.iter().find(|g| g.index == d.gpu)?;
            let parent = gpu.node.as_ref()?;
            let mut graphics = ContainerEdits::default();
            let mut links = Vec::new();
            if d.gfx {
                for n in &gpu.drm {
                    push_node(&mut graphics, n);
                }
                links.extend(gpu.drm_links.iter().map(|l| Link {
                    target: l.target.clone(),
                    link: l.link.clone(),
                }));
                if !links.is_empty() {
                    graphics.hooks.push(
                        InRootOp::CreateSymlinks {
                            links: links.clone(),
                        }
                        .to_hook(hook_path),
                    );
                }
            }
            let mut edits = ContainerEdits::default();
            // Each node's group in `additionalGids` as for a whole GPU's (NVIDIA's device edits).
            push_node(&mut edits, parent);
            for c in &d.caps {
                push_node(&mut edits, c);
            }
            let proc_mounts = d
                .proc_files
                .iter()
                .map(|f| Mount {
                    host_path: f.host_path.to_string_lossy().into_owned(),
                    container_path: f.path.clone(),
                    r#type: None,
                    options: crate::plan::CAPS_MOUNT_OPTIONS
                        .iter()
                        .map(|o| o.to_string())
                        .collect(),
                })
                .collect();
            Some(MigEdits {
                gpu: d.gpu,
                index: d.index,
                uuid: d.uuid.clone(),
                gi: d.gi,
                ci: d.ci,
                edits,
                graphics,
                links,
                proc_mounts,
            })
        })
        .collect()
}

/// Whether `id` is a MIG form.
pub fn is_mig_id(id: &DeviceId) -> bool {
    matches!(id, DeviceId::Mig(..) | DeviceId::MigUuid(_))
}

/// `<gpu>:<mig>` (`0:1`): a MIG device by its GPU's index and its own index on that GPU. The
/// one parser of this form, for requests, CDI names and the doctor.
pub fn parse_mig_index(item: &str) -> Option<(u32, u32)> {
    let (g, i) = item.split_once(':')?;
    Some((g.parse().ok()?, i.parse().ok()?))
}

/// `MIG-GPU-<uuid>/<gi>/<ci>`, the form drivers before R470 gave MIG devices: the parent's UUID
/// (`GPU-<uuid>`), GPU instance and compute instance. The one parser of this form.
pub fn parse_old_mig_uuid(item: &str) -> Option<(&str, u32, u32)> {
    let mut parts = item.strip_prefix("MIG-")?.split('/');
    let gpu = parts.next()?;
    if !gpu.strip_prefix("GPU-").is_some_and(is_uuid_body) {
        return None;
    }
    let gi = parts.next()?.parse().ok()?;
    let ci = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((gpu, gi, ci))
}

/// Whether `rest` (what follows `GPU-` or `MIG-`) can be a UUID: hex digits and dashes.
pub fn is_uuid_body(rest: &str) -> bool {
    !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// The MIG device `id` names among `migs`.
pub fn select_mig<'a>(
    inv: &Inventory,
    migs: &'a [MigEdits],
    id: &DeviceId,
    var: &str,
) -> Result<&'a MigEdits, MigSelectError> {
    let unknown = || MigSelectError::Unknown {
        var: var.to_string(),
        item: id.to_string(),
        available: available(migs),
    };
    match id {
        DeviceId::Mig(g, i) => migs
            .iter()
            .find(|m| m.gpu == *g && m.index == *i)
            .ok_or_else(unknown),
        DeviceId::MigUuid(u) => {
            if let Some((gpu_uuid, gi, ci)) = parse_old_mig_uuid(u) {
                let gpu = inv
                    .gpus
                    .iter()
                    .find(|g| g.uuid.eq_ignore_ascii_case(gpu_uuid))
                    .ok_or_else(unknown)?;
                return migs
                    .iter()
                    .find(|m| m.gpu == gpu.index && m.gi == gi && m.ci == ci)
                    .ok_or_else(unknown);
            }
            if let Some(m) = migs
                .iter()
                .find(|m| m.uuid.as_deref().is_some_and(|x| x.eq_ignore_ascii_case(u)))
            {
                return Ok(m);
            }
            if !migs.is_empty() && migs.iter().all(|m| m.uuid.is_none()) {
                return Err(MigSelectError::UuidUnknown {
                    var: var.to_string(),
                    item: u.clone(),
                    hint: available(migs),
                });
            }
            Err(unknown())
        }
        _ => Err(unknown()),
    }
}

/// `MIG devices 0:0, 0:1` or `no MIG devices`.
fn available(migs: &[MigEdits]) -> String {
    if migs.is_empty() {
        return "no MIG devices".to_string();
    }
    let names: Vec<String> = migs.iter().map(MigEdits::index_name).collect();
    format!("MIG devices {}", names.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuctk_host::{DeviceNode, DriverVersion, Gpu, Roots};
    use std::path::PathBuf;

    #[test]
    fn mig_id_forms() {
        assert_eq!(parse_mig_index("0:1"), Some((0, 1)));
        for bad in ["0:", ":1", "0:1:2", "a:1", "0:x", "01"] {
            assert_eq!(parse_mig_index(bad), None, "{bad}");
        }
        assert_eq!(
            parse_old_mig_uuid("MIG-GPU-0986a80f-9ded/7/0"),
            Some(("GPU-0986a80f-9ded", 7, 0))
        );
        for bad in [
            "MIG-GPU-abc/7",
            "MIG-GPU-abc/7/0/1",
            "MIG-GPU-abc/x/0",
            "MIG-GPU-xyz/7/0",
            "MIG-abc/7/0",
            "GPU-abc/7/0",
        ] {
            assert_eq!(parse_old_mig_uuid(bad), None, "{bad}");
        }
    }

    fn node(path: &str, major: u32, minor: u32, mode: u32, gid: u32) -> DeviceNode {
        DeviceNode {
            path: path.into(),
            host_path: PathBuf::from(path),
            major,
            minor,
            mode,
            gid,
        }
    }

    /// A MIG device's parent node that only its group may open puts the group in
    /// `additionalGids`, as a whole GPU's node does; the world-readable capability nodes none.
    #[test]
    fn mig_nodes_carry_their_group() {
        let inv = Inventory {
            roots: Roots::default(),
            driver_version: DriverVersion::parse("570.124.06").unwrap(),
            cuda_version: None,
            gpus: vec![Gpu {
                index: 0,
                minor: 0,
                uuid: "GPU-0".into(),
                bus_id: "0000:01:00.0".into(),
                model: "Mock".into(),
                node: Some(node("/dev/nvidia0", 195, 0, 0o660, 44)),
                drm: Vec::new(),
                drm_links: Vec::new(),
            }],
            control_nodes: Vec::new(),
            libraries: Vec::new(),
            binaries: Vec::new(),
            firmware: Vec::new(),
            ipc: Vec::new(),
            configs: Vec::new(),
            library_source: "test".into(),
            warnings: Vec::new(),
        };
        let dev = MigDevice {
            gpu: 0,
            gpu_minor: 0,
            index: 0,
            gi: 1,
            ci: 0,
            caps: vec![
                node("/dev/nvidia-caps/nvidia-cap12", 237, 12, 0o444, 0),
                node("/dev/nvidia-caps/nvidia-cap13", 237, 13, 0o444, 0),
            ],
            proc_files: Vec::new(),
            uuid: None,
            gfx: false,
        };
        let m = plan_mig(&inv, std::slice::from_ref(&dev), "/hook");
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].edits.device_nodes.len(), 3);
        assert_eq!(m[0].edits.additional_gids, vec![44]);
        assert_eq!(m[0].graphics, ContainerEdits::default());
        // A graphics profile's device has its parent's DRM nodes and their links, apart.
        let mut inv = inv;
        inv.gpus[0].drm = vec![node("/dev/dri/card1", 226, 1, 0o660, 44)];
        inv.gpus[0].drm_links = vec![gpuctk_host::inventory::DrmLink {
            target: "../card1".into(),
            link: "/dev/dri/by-path/pci-0000:01:00.0-card".into(),
        }];
        let m = plan_mig(&inv, &[MigDevice { gfx: true, ..dev }], "/hook");
        assert_eq!(m[0].edits.device_nodes.len(), 3);
        assert_eq!(m[0].graphics.device_nodes[0].path, "/dev/dri/card1");
        assert_eq!(m[0].graphics.hooks.len(), 1);
        assert_eq!(m[0].links.len(), 1);
    }
}
