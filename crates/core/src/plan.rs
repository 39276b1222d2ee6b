//! Planning: the pure function from an [`Inventory`] to CDI container edits. No IO, no clock,
//! no environment: the same inputs always give the same edits, so `cdi generate` and the runtime
//! shim (which both call [`plan`]) cannot disagree.

use gpuctk_cdi::spec::{ContainerEdits, DeviceNode as CdiNode, Mount};
use gpuctk_host::{Capability, DeviceNode, Inventory, Library};

use crate::capabilities::CapabilitySet;
use crate::ops::{InRootOp, Link};
pub use crate::ops::{HOOK_ENV, HOOK_TIMEOUT_SECS};

/// Mount options for driver files: read-only and inert, as NVIDIA's generator writes them.
pub const FILE_MOUNT_OPTIONS: &[&str] = &["ro", "nosuid", "nodev", "rbind", "rprivate"];
/// Mount options for IPC sockets and directories: writable, but nothing executes from them.
pub const IPC_MOUNT_OPTIONS: &[&str] = &["nosuid", "nodev", "rbind", "rprivate", "noexec"];
/// Mount options for the driver's MIG capabilities directory: read-only and inert, as
/// libnvidia-container remounts it.
pub const CAPS_MOUNT_OPTIONS: &[&str] = &["ro", "nosuid", "nodev", "noexec", "rbind", "rprivate"];
/// Where the MIG capabilities directory goes in the container.
pub const CAPS_CONTAINER_DIR: &str = "/proc/driver/nvidia/capabilities";

/// What to plan for.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    /// The hook binary written into hook entries (`--nvidia-cdi-hook-path`).
    pub hook_path: String,
    /// Which parts of the driver to include; a CDI spec carries all of them.
    pub capabilities: CapabilitySet,
}

/// The edits for one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuEdits {
    /// The GPU's index.
    pub index: u32,
    /// Its UUID.
    pub uuid: String,
    /// Its device node(s), and the hook that makes its [`GpuEdits::links`].
    pub edits: ContainerEdits,
    /// Its `/dev/dri/by-path` links (with its DRM nodes), which `edits` makes by a
    /// `create-symlinks` hook; typed here for a delivery that performs them itself.
    pub links: Vec<Link>,
}

/// The planned edits: what every GPU container needs, and what each GPU adds.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Edits applied once whenever any GPU is injected. Its hooks are [`Plan::ops`] encoded,
    /// in the same order.
    pub common: ContainerEdits,
    /// The in-root operations every GPU container needs, typed.
    pub ops: Vec<InRootOp>,
    /// Per-GPU edits, in index order; GPUs without a device node are absent.
    pub gpus: Vec<GpuEdits>,
    /// Per-MIG-device edits ([`crate::mig::plan_mig`]); empty until the caller adds them.
    pub mig: Vec<crate::mig::MigEdits>,
    /// The indices of the GPUs in MIG mode, which a spec's `all` gives as their MIG devices.
    pub mig_gpus: Vec<u32>,
}

impl Plan {
    /// For a spec read on another machine's view than discovery's (the installer's, which sees
    /// the host under a host root): its hooks read the procfs at `/proc`, the host's own.
    pub fn hooks_read_proc(&mut self, hook_path: &str) {
        for o in &mut self.ops {
            if let InRootOp::DisableDeviceNodeModification { proc_root } = o {
                *proc_root = None;
            }
        }
        self.common.hooks = self.ops.iter().map(|o| o.to_hook(hook_path)).collect();
    }

    /// Keep only the operations `keep` accepts; the common hooks, their encoding, follow.
    pub fn retain_ops(&mut self, keep: impl Fn(&InRootOp) -> bool, hook_path: &str) {
        self.ops.retain(|o| keep(o));
        self.common.hooks = self.ops.iter().map(|o| o.to_hook(hook_path)).collect();
        for g in &mut self.gpus {
            let op = InRootOp::CreateSymlinks {
                links: g.links.clone(),
            };
            if !g.links.is_empty() && !keep(&op) {
                g.links.clear();
                g.edits.hooks.clear();
            }
        }
        for m in &mut self.mig {
            let op = InRootOp::CreateSymlinks {
                links: m.links.clone(),
            };
            if !m.links.is_empty() && !keep(&op) {
                m.links.clear();
                m.graphics.hooks.clear();
            }
        }
    }

    /// Drop the device nodes' groups from `additionalGids` (NVIDIA's feature flag
    /// `no-additional-gids-for-device-nodes`); the nodes keep their group.
    pub fn without_additional_gids(&mut self) {
        self.common.additional_gids.clear();
        for g in &mut self.gpus {
            g.edits.additional_gids.clear();
        }
        for m in &mut self.mig {
            m.edits.additional_gids.clear();
            m.graphics.additional_gids.clear();
        }
    }
}

/// The group a container process needs to open `n`: its group when that is not root and the
/// node is not readable and writable by all (a DRM card node, `root:video 0660`), as NVIDIA's
/// generator puts it in `additionalGids`.
pub fn node_group(n: &DeviceNode) -> Option<u32> {
    let world_rw = n.mode & 0o004 != 0 && n.mode & 0o002 != 0;
    (n.gid != 0 && !world_rw).then_some(n.gid)
}

/// `edits` without repeated device nodes (by container path) or `additionalGids`, the first of
/// each kept in its place: edits appended from several devices (a MIG parent shared by several
/// MIG devices, every card node's group) name each once.
pub fn dedup_edits(edits: &mut ContainerEdits) {
    let mut paths = foldhash::HashSet::default();
    edits.device_nodes.retain(|n| paths.insert(n.path.clone()));
    let mut gids = foldhash::HashSet::default();
    edits.additional_gids.retain(|g| gids.insert(*g));
}

/// Add `n` to `edits`: the node, and its group to `additionalGids` when [`node_group`] says it
/// needs one (once).
pub fn push_node(edits: &mut ContainerEdits, n: &DeviceNode) {
    edits.device_nodes.push(cdi_node(n));
    if let Some(g) = node_group(n) {
        if !edits.additional_gids.contains(&g) {
            edits.additional_gids.push(g);
        }
    }
}

/// A device node as a CDI edit, with everything the runtime needs so it never has to stat.
pub fn cdi_node(n: &DeviceNode) -> CdiNode {
    let host = n.host_path.to_string_lossy().into_owned();
    CdiNode {
        host_path: (host != n.path).then_some(host),
        path: n.path.clone(),
        r#type: Some("c".to_string()),
        major: Some(i64::from(n.major)),
        minor: Some(i64::from(n.minor)),
        file_mode: Some(n.mode & 0o777),
        permissions: Some("rwm".to_string()),
        uid: None,
        // The node keeps its group in the container (NVIDIA's generator writes it when not
        // root), or `additionalGids` would grant nothing.
        gid: (n.gid != 0).then_some(n.gid),
    }
}

/// A bind mount of `host` at `container` with `options`.
pub(crate) fn mount(host: &std::path::Path, container: &str, options: &[&str]) -> Mount {
    Mount {
        host_path: host.to_string_lossy().into_owned(),
        container_path: container.to_string(),
        r#type: None,
        options: options.iter().map(|s| s.to_string()).collect(),
    }
}

fn wants(caps: &CapabilitySet, c: Option<Capability>) -> bool {
    c.is_none_or(|c| caps.contains(c))
}

fn library_selected(caps: &CapabilitySet, l: &Library) -> bool {
    caps.contains(l.capability)
}

fn dir_and_file(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

/// The `create-symlinks` links the selected libraries need: the soname link next to each
/// versioned file, `libcuda.so -> libcuda.so.1` always (CUDA's runtime dlopens the unversioned
/// name in some tools), and other development links where the host has them. Sorted as their
/// `target::link` text.
pub fn library_links(libs: &[&Library]) -> Vec<Link> {
    let mut links = Vec::new();
    for l in libs {
        let (dir, file) = dir_and_file(&l.path);
        let Some(soname) = l.soname.as_deref() else {
            continue;
        };
        if soname != file {
            links.push((file.to_string(), format!("{dir}/{soname}")));
        }
        if (l.name == "libcuda.so" || l.has_dev_link) && soname != l.name {
            links.push((soname.to_string(), format!("{dir}/{}", l.name)));
        }
    }
    let mut links: Vec<Link> = links
        .into_iter()
        .map(|(target, link)| Link { target, link })
        .collect();
    links.sort_by_cached_key(|l| l.to_string());
    links.dedup();
    links
}

/// Whether `caps` asks for anything that only `graphics` or `display` selects: each GPU's DRM
/// nodes, the EGL, Vulkan and Xorg files (what discovery may leave out otherwise).
pub fn wants_graphics(caps: &CapabilitySet) -> bool {
    caps.contains(Capability::Graphics) || caps.contains(Capability::Display)
}

/// The links a graphics stack looks for by a name no library has (NVIDIA's generator makes the
/// same): GBM's backend `<libdir>/gbm/nvidia-drm_gbm.so -> ../libnvidia-allocator.so.1` with
/// `graphics` (when the allocator is mounted, which `compute` selects), and the Xorg GLX
/// module's unversioned `libglxserver_nvidia.so` with `display`.
fn graphics_links(inv: &Inventory, caps: &CapabilitySet, libs: &[&Library]) -> Vec<Link> {
    let mut out = Vec::new();
    if caps.contains(Capability::Graphics) {
        let allocator = libs
            .iter()
            .find(|l| l.name == "libnvidia-allocator.so" && !l.is_32bit);
        if let Some((l, soname)) = allocator.and_then(|l| Some((l, l.soname.as_deref()?))) {
            out.push(Link {
                target: format!("../{soname}"),
                link: format!("{}/gbm/nvidia-drm_gbm.so", dir_and_file(&l.path).0),
            });
        }
    }
    if caps.contains(Capability::Display) {
        for f in inv
            .configs
            .iter()
            .filter(|f| f.name.starts_with("libglxserver_nvidia.so."))
        {
            let (dir, file) = dir_and_file(&f.path);
            out.push(Link {
                target: file.to_string(),
                link: format!("{dir}/libglxserver_nvidia.so"),
            });
        }
    }
    out
}

/// Plan the edits for `inv`.
pub fn plan(inv: &Inventory, opts: &PlanOptions) -> Plan {
    let caps = &opts.capabilities;
    let mut common = ContainerEdits::default();

    let libs: Vec<&Library> = inv
        .libraries
        .iter()
        .filter(|l| library_selected(caps, l))
        .collect();

    if let Some(cuda) = libs.iter().find(|l| l.name == "libcuda.so") {
        common.env.push(format!(
            "NVIDIA_CTK_LIBCUDA_DIR={}",
            dir_and_file(&cuda.path).0
        ));
    }
    // The devices were injected here; a nested runtime must not inject them again.
    common.env.push("NVIDIA_VISIBLE_DEVICES=void".to_string());

    for n in &inv.control_nodes {
        let needed = match n.path.as_str() {
            "/dev/nvidia-uvm" | "/dev/nvidia-uvm-tools" => caps.contains(Capability::Compute),
            "/dev/nvidia-modeset" => {
                caps.contains(Capability::Display) || caps.contains(Capability::Graphics)
            }
            _ => true,
        };
        if needed {
            push_node(&mut common, n);
        }
    }

    let mut ops = Vec::new();
    let mut links = library_links(&libs);
    links.extend(graphics_links(inv, caps, &libs));
    links.sort_by_cached_key(|l| l.to_string());
    links.dedup();
    if !links.is_empty() {
        ops.push(InRootOp::CreateSymlinks { links });
    }
    if libs.iter().any(|l| l.name == "libcuda.so") {
        ops.push(InRootOp::EnableCudaCompat {
            host_driver_version: Some(inv.driver_version.to_string()),
            host_cuda_version: None,
            compat_root: crate::ops::DEFAULT_COMPAT_ROOT.to_string(),
        });
    }
    let mut folders: Vec<&str> = libs.iter().map(|l| dir_and_file(&l.path).0).collect();
    folders.sort();
    folders.dedup();
    if !folders.is_empty() {
        ops.push(InRootOp::UpdateLdcache {
            folders: folders.into_iter().map(String::from).collect(),
        });
    }
    // NVIDIA 1.20's common hooks, in its order: the container's procfs says the driver must
    // not make device nodes, and EGL and Vulkan see the container's GPUs only.
    ops.push(InRootOp::DisableDeviceNodeModification {
        proc_root: (inv.roots.proc_root != std::path::Path::new(crate::ops::DEFAULT_PROC_ROOT))
            .then(|| inv.roots.proc_root.to_string_lossy().into_owned()),
    });
    ops.push(InRootOp::UpdateApplicationProfile);
    common.hooks = ops.iter().map(|o| o.to_hook(&opts.hook_path)).collect();

    let mut mounts: Vec<Mount> = Vec::new();
    // Binaries go to the capability as named: libnvidia-container gives the compute ones
    // (MPS) to `compute` only, not to `video`, which brings the compute libraries.
    for b in inv
        .binaries
        .iter()
        .filter(|b| b.capability.is_none_or(|c| caps.requested(c)))
    {
        mounts.push(mount(&b.host_path, &b.path, FILE_MOUNT_OPTIONS));
    }
    for l in &libs {
        mounts.push(mount(&l.host_path, &l.path, FILE_MOUNT_OPTIONS));
    }
    for f in &inv.firmware {
        mounts.push(mount(&f.host_path, &f.path, FILE_MOUNT_OPTIONS));
    }
    for f in inv.ipc.iter().filter(|f| wants(caps, f.capability)) {
        mounts.push(mount(&f.host_path, &f.path, IPC_MOUNT_OPTIONS));
    }
    for f in inv.configs.iter().filter(|f| wants(caps, f.capability)) {
        mounts.push(mount(&f.host_path, &f.path, FILE_MOUNT_OPTIONS));
    }
    mounts.sort_by(|a, b| a.container_path.cmp(&b.container_path));
    mounts.dedup_by(|a, b| a.container_path == b.container_path);
    common.mounts = mounts;

    let gpus = inv
        .gpus
        .iter()
        .filter_map(|g| {
            let node = g.node.as_ref()?;
            let mut edits = ContainerEdits::default();
            push_node(&mut edits, node);
            // Its DRM nodes go with it for a display or a GBM/Wayland client (NVIDIA's graphics
            // modifier gives them to `graphics` and `display`), and their udev by-path links,
            // by which Xorg and Vulkan pick a GPU.
            let mut links = Vec::new();
            if wants_graphics(caps) {
                for n in &g.drm {
                    push_node(&mut edits, n);
                }
                links.extend(g.drm_links.iter().map(|l| Link {
                    target: l.target.clone(),
                    link: l.link.clone(),
                }));
                if !links.is_empty() {
                    edits.hooks.push(
                        InRootOp::CreateSymlinks {
                            links: links.clone(),
                        }
                        .to_hook(&opts.hook_path),
                    );
                }
            }
            Some(GpuEdits {
                index: g.index,
                uuid: g.uuid.clone(),
                edits,
                links,
            })
        })
        .collect();
    Plan {
        common,
        ops,
        gpus,
        mig: Vec::new(),
        mig_gpus: Vec::new(),
    }
}

/// The edits for the global MIG capabilities (`--mig-config`, `--mig-monitor`): the host's
/// capabilities directory `caps_dir` bound read-only at `/proc/driver/nvidia/capabilities`, where
/// `nvidia-smi` reads which node grants what, and each capability's `/dev/nvidia-caps` node.
pub fn mig_edits(caps_dir: &std::path::Path, nodes: &[DeviceNode]) -> ContainerEdits {
    let mut edits = ContainerEdits::default();
    edits
        .mounts
        .push(mount(caps_dir, CAPS_CONTAINER_DIR, CAPS_MOUNT_OPTIONS));
    for n in nodes {
        push_node(&mut edits, n);
    }
    edits
}

/// The edits for IMEX channels: each channel's node.
pub fn imex_edits(nodes: &[DeviceNode]) -> ContainerEdits {
    let mut edits = ContainerEdits::default();
    for n in nodes {
        push_node(&mut edits, n);
    }
    edits
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuctk_host::{DriverVersion, HostFile, Roots};
    use std::path::PathBuf;

    #[test]
    fn dedup_edits_keeps_the_first_of_each_in_order() {
        let node = |path: &str, minor: i64| CdiNode {
            path: path.to_string(),
            minor: Some(minor),
            ..CdiNode::default()
        };
        let mut e = ContainerEdits {
            device_nodes: vec![
                node("/dev/nvidia1", 1),
                node("/dev/nvidia0", 0),
                node("/dev/nvidia1", 9),
                node("/dev/nvidiactl", 255),
                node("/dev/nvidia0", 0),
            ],
            additional_gids: vec![44, 5, 44, 0, 5, 7],
            env: vec!["A=1".to_string(), "A=1".to_string()],
            ..ContainerEdits::default()
        };
        dedup_edits(&mut e);
        assert_eq!(
            e.device_nodes,
            vec![
                node("/dev/nvidia1", 1),
                node("/dev/nvidia0", 0),
                node("/dev/nvidiactl", 255),
            ]
        );
        assert_eq!(e.additional_gids, vec![44, 5, 0, 7]);
        // Only nodes and groups: the rest is the callers' to keep.
        assert_eq!(e.env, vec!["A=1".to_string(), "A=1".to_string()]);
    }

    fn host() -> Inventory {
        let dir = "/usr/lib/x86_64-linux-gnu";
        Inventory {
            roots: Roots::default(),
            driver_version: DriverVersion::parse("570.124.06").unwrap(),
            cuda_version: None,
            gpus: Vec::new(),
            control_nodes: Vec::new(),
            libraries: vec![Library {
                name: "libnvidia-allocator.so".into(),
                capability: Capability::Compute,
                host_path: PathBuf::from(format!("{dir}/libnvidia-allocator.so.570.124.06")),
                path: format!("{dir}/libnvidia-allocator.so.570.124.06"),
                soname: Some("libnvidia-allocator.so.1".into()),
                is_32bit: false,
                has_dev_link: false,
                elf: None,
            }],
            binaries: Vec::new(),
            firmware: Vec::new(),
            ipc: Vec::new(),
            configs: vec![HostFile {
                name: "libglxserver_nvidia.so.570.124.06".into(),
                capability: Some(Capability::Display),
                host_path: PathBuf::from(
                    "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.570.124.06",
                ),
                path: "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.570.124.06".into(),
            }],
            library_source: "test".into(),
            warnings: Vec::new(),
        }
    }

    fn links(caps: &str) -> Vec<String> {
        let p = plan(
            &host(),
            &PlanOptions {
                hook_path: "/usr/bin/nvidia-cdi-hook".into(),
                capabilities: CapabilitySet::parse(caps).unwrap(),
            },
        );
        p.ops
            .iter()
            .filter_map(|o| match o {
                InRootOp::CreateSymlinks { links } => Some(links.iter().map(|l| l.to_string())),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// GBM's backend link comes with `graphics` when the allocator is there (`compute`), the GLX
    /// server module's unversioned name with `display`.
    #[test]
    fn graphics_links_follow_the_capabilities() {
        let gbm = "../libnvidia-allocator.so.1::/usr/lib/x86_64-linux-gnu/gbm/nvidia-drm_gbm.so";
        let glx = "libglxserver_nvidia.so.570.124.06::/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so";
        let all = links("compute,display");
        assert!(all.iter().any(|l| l == gbm), "{all:?}");
        assert!(all.iter().any(|l| l == glx), "{all:?}");
        let compute = links("compute");
        assert!(!compute.iter().any(|l| l == gbm || l == glx), "{compute:?}");
        let graphics = links("graphics");
        assert!(
            !graphics.iter().any(|l| l == gbm || l == glx),
            "{graphics:?}"
        );
    }
}
