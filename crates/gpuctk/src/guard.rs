//! The deliveries' side of the driver guards (see `gpuctk_container::guard`): where the
//! runtime takes a bind mount over `/proc/driver/nvidia/params` (crun, and legacy injection,
//! which mounts itself), the `disable-device-node-modification` hook becomes that mount, so no
//! hook process runs; under runc, which refuses mounts inside `/proc`, the hook stays.

use std::path::{Path, PathBuf};

use gpuctk_cdi::spec::ContainerEdits;
use gpuctk_core::ops::{InRootOp, DEFAULT_PROC_ROOT};

/// Whether `runtime` is crun, which takes bind mounts onto procfs files.
pub fn is_crun(runtime: &Path) -> bool {
    runtime
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("crun"))
}

/// Whether a container made from `spec` will show the driver's procfs folder, so that a bind
/// mount onto its params file finds its target (crun would otherwise try to create it in
/// procfs and fail the container): the kernel's procfs, which the container's is a view of,
/// shows it (the real `/proc`, whatever proc root discovery reads), or the spec mounts
/// something at its folder.
pub fn container_shows_driver_procfs(spec: &serde_json::Value) -> std::io::Result<bool> {
    let mounted = spec
        .get("mounts")
        .and_then(|m| m.as_array())
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("destination").and_then(|d| d.as_str()))
        .any(|d| d.trim_end_matches('/') == "/proc/driver/nvidia");
    if mounted {
        return Ok(true);
    }
    match std::fs::metadata("/proc/driver/nvidia") {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// The driver's GPU folders under `<proc_root>/driver/nvidia/gpus` that are not of a GPU with
/// one of `minors` (sorted; libnvidia-container shows a container its own GPUs' folders only),
/// as container paths, sorted. An `information` file that cannot be read or parsed is an error
/// naming it.
pub fn other_gpu_proc_dirs(proc_root: &Path, minors: &[u32]) -> anyhow::Result<Vec<String>> {
    let infos = match gpuctk_host::checks::gpu_informations(proc_root) {
        Ok(i) => i,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => anyhow::bail!("{}/driver/nvidia/gpus: {e}", proc_root.display()),
    };
    let mut gpus = Vec::new();
    for info in infos {
        let info = info?;
        gpus.push((info.minor, info.bus_id));
    }
    Ok(other_gpu_dirs_of(&gpus, minors))
}

/// [`other_gpu_proc_dirs`] from the GPUs discovery already read (minor, bus id); `minors`
/// sorted, as [`gpu_minors_in_spec`] gives them.
fn other_gpu_dirs_of(gpus: &[(u32, String)], minors: &[u32]) -> Vec<String> {
    let mut dirs: Vec<String> = gpus
        .iter()
        .filter(|(minor, bus)| {
            !(minors.binary_search(minor).is_ok()
                || bus.is_empty()
                || bus.contains('/')
                || bus == "."
                || bus == "..")
        })
        .map(|(_, bus)| format!("{DRIVER_GPUS_DIR}/{bus}"))
        .collect();
    dirs.sort();
    dirs.dedup();
    dirs
}

/// [`other_gpu_proc_dirs`], from `known` (the GPUs discovery found, minor and bus id) when
/// given, so their information files are not read again.
fn other_gpu_dirs(
    proc_root: &Path,
    known: Option<&[(u32, String)]>,
    minors: &[u32],
) -> anyhow::Result<Vec<String>> {
    match known {
        Some(gpus) => Ok(other_gpu_dirs_of(gpus, minors)),
        None => other_gpu_proc_dirs(proc_root, minors),
    }
}

/// The container's folder of the driver's per-GPU procfs folders.
pub const DRIVER_GPUS_DIR: &str = "/proc/driver/nvidia/gpus";

/// Masks (OCI `linux.maskedPaths`: the runtime mounts an empty read-only tmpfs there) the
/// driver's procfs folders of the GPUs `spec` does not give the container. Returns how many.
/// `known`: the GPUs (minor, bus id) discovery found for this create, when it ran, so their
/// information files are not read again.
pub fn mask_other_gpus(
    spec: &mut serde_json::Value,
    proc_root: &Path,
    known: Option<&[(u32, String)]>,
) -> anyhow::Result<usize> {
    let dirs = other_gpu_dirs(proc_root, known, &gpu_minors_in_spec(spec))?;
    if dirs.is_empty() {
        return Ok(0);
    }
    let Some(obj) = spec.as_object_mut() else {
        return Ok(0);
    };
    let linux = obj.entry("linux").or_insert_with(|| serde_json::json!({}));
    let Some(linux) = linux.as_object_mut() else {
        anyhow::bail!("config.json: linux is not an object");
    };
    let masked = linux
        .entry("maskedPaths")
        .or_insert_with(|| serde_json::json!([]));
    let Some(masked) = masked.as_array_mut() else {
        anyhow::bail!("config.json: linux.maskedPaths is not an array");
    };
    let mut added = 0;
    for d in dirs {
        if !masked.iter().any(|m| m.as_str() == Some(d.as_str())) {
            masked.push(serde_json::Value::String(d));
            added += 1;
        }
    }
    Ok(added)
}

/// The empty folder in the bundle that legacy injection binds over other GPUs' folders.
pub const BUNDLE_MASK_DIR: &str = "gpuctk-masked";

/// For deliveries that bind instead of masking (legacy injection): an empty read-only folder,
/// made in `bundle`, bound over the driver's procfs folder of each GPU `edits` do not give.
/// `known` as for [`mask_other_gpus`].
pub fn other_gpus_as_mounts(
    edits: &mut ContainerEdits,
    proc_root: &Path,
    known: Option<&[(u32, String)]>,
    bundle: &Path,
) -> anyhow::Result<usize> {
    let mut made = serde_json::json!({});
    gpuctk_cdi::apply::apply_edits(&mut made, edits)?;
    let dirs = other_gpu_dirs(proc_root, known, &gpu_minors_in_spec(&made))?;
    if dirs.is_empty() {
        return Ok(0);
    }
    let root = gpuctk_container::Root::open(bundle)
        .map_err(|e| anyhow::anyhow!("bundle {}: {e}", bundle.display()))?;
    root.mkdir_all(&format!("/{BUNDLE_MASK_DIR}"), 0o555)
        .map_err(|e| anyhow::anyhow!("bundle {}: {e}", bundle.display()))?;
    let source = bundle.join(BUNDLE_MASK_DIR).to_string_lossy().into_owned();
    for d in &dirs {
        edits.mounts.push(gpuctk_cdi::spec::Mount {
            host_path: source.clone(),
            container_path: d.clone(),
            options: ["ro", "nosuid", "nodev", "noexec", "bind"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            r#type: Some("bind".to_string()),
        });
    }
    Ok(dirs.len())
}

/// Whether container path `p` is a GPU's node, `/dev/nvidiaN`.
fn is_gpu_node(p: &str) -> bool {
    p.strip_prefix("/dev/nvidia")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// [`gpu_minors_in_spec`] of `spec` once `nodes` (filled from the host) are applied to it, as
/// `apply_edits` does (a node takes the place of the spec's device of its path), without
/// making that spec: the shim's create asks it before it edits the spec for good.
pub fn gpu_minors_with_nodes(
    spec: &serde_json::Value,
    nodes: &[gpuctk_cdi::spec::DeviceNode],
) -> Vec<u32> {
    // The nodes' paths, each with its last node: a later node of the same path takes an
    // earlier one's place, and the spec's own. A set, not a scan of the nodes for each (a spec
    // of 64 GPUs has 130 of them, and a CDI spec as many as it likes).
    let mut last: foldhash::HashMap<&str, &gpuctk_cdi::spec::DeviceNode> =
        foldhash::HashMap::with_capacity_and_hasher(nodes.len(), Default::default());
    for n in nodes {
        last.insert(&n.path, n);
    }
    let mut minors: Vec<u32> = spec
        .pointer("/linux/devices")
        .and_then(|d| d.as_array())
        .into_iter()
        .flatten()
        .filter(|d| d.get("type").and_then(|t| t.as_str()) == Some("c"))
        .filter(|d| {
            d.get("path")
                .and_then(|p| p.as_str())
                .is_some_and(|p| is_gpu_node(p) && !last.contains_key(p))
        })
        .filter_map(|d| d.get("minor").and_then(|m| m.as_u64()))
        .filter_map(|m| u32::try_from(m).ok())
        .chain(
            last.values()
                .filter(|n| n.r#type.as_deref() == Some("c") && is_gpu_node(&n.path))
                .filter_map(|n| u32::try_from(n.minor.unwrap_or(0)).ok()),
        )
        .collect();
    minors.sort_unstable();
    minors.dedup();
    minors
}

/// The minors of the `/dev/nvidiaN` character devices `spec` has the runtime make (what
/// `update-application-profile` finds in the created container's `/dev`), sorted.
pub fn gpu_minors_in_spec(spec: &serde_json::Value) -> Vec<u32> {
    gpu_minors_with_nodes(spec, &[])
}

/// Takes the `disable-device-node-modification` operation out of `ops` and its hook out of
/// `edits` (the other hooks' indices follow); returns the procfs it reads.
pub fn take_params_op(
    edits: &mut ContainerEdits,
    ops: &mut Vec<(usize, InRootOp)>,
) -> Option<PathBuf> {
    let pos = ops
        .iter()
        .position(|(_, o)| matches!(o, InRootOp::DisableDeviceNodeModification { .. }))?;
    let (index, op) = ops.remove(pos);
    if index < edits.hooks.len() {
        edits.hooks.remove(index);
        for (i, _) in ops.iter_mut() {
            if *i > index {
                *i -= 1;
            }
        }
    }
    let InRootOp::DisableDeviceNodeModification { proc_root } = op else {
        return None;
    };
    Some(PathBuf::from(
        proc_root.as_deref().unwrap_or(DEFAULT_PROC_ROOT),
    ))
}

/// Turns the `disable-device-node-modification` hook among `edits` into the read-only bind of
/// the rewritten params file, written into `bundle`. Returns whether there was such a hook.
pub fn params_as_mount(
    edits: &mut ContainerEdits,
    ops: &mut Vec<(usize, InRootOp)>,
    bundle: &Path,
) -> anyhow::Result<bool> {
    let Some(proc_root) = take_params_op(edits, ops) else {
        return Ok(false);
    };
    if let Some(m) = gpuctk_container::guard::params_mount(&proc_root, bundle)? {
        edits.mounts.push(m);
    }
    Ok(true)
}

/// The shim's part: the `disable-device-node-modification` hook among `edits` is dropped where
/// it would change nothing (the container shows no driver procfs, or the host's params already
/// say 0), becomes crun's mount, or stays for runc (one hook process; runc refuses mounts
/// inside `/proc`).
pub fn params_in_shim(
    spec: &serde_json::Value,
    edits: &mut ContainerEdits,
    ops: &mut Vec<(usize, InRootOp)>,
    bundle: &Path,
    runtime: &Path,
) -> anyhow::Result<()> {
    let Some(proc_root) = ops.iter().find_map(|(_, o)| match o {
        InRootOp::DisableDeviceNodeModification { proc_root } => Some(PathBuf::from(
            proc_root.as_deref().unwrap_or(DEFAULT_PROC_ROOT),
        )),
        _ => None,
    }) else {
        return Ok(());
    };
    // Where the params read are the kernel's own (the default proc root), that read says it
    // all: no folder, no file, nothing to guard. No `stat` of the folder first.
    let shows = proc_root == Path::new(DEFAULT_PROC_ROOT)
        || container_shows_driver_procfs(spec)
            .map_err(|e| anyhow::anyhow!("/proc/driver/nvidia: {e}"))?;
    let params = if shows {
        gpuctk_container::guard::host_params(&proc_root)?
    } else {
        None
    };
    match params {
        None => {
            take_params_op(edits, ops);
        }
        Some(p) if is_crun(runtime) => {
            take_params_op(edits, ops);
            edits
                .mounts
                .push(gpuctk_container::guard::bundle_params_mount(bundle, &p)?);
        }
        Some(_) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hook_leaves_and_the_others_keep_their_indices() {
        let ops = [
            InRootOp::UpdateLdcache {
                folders: vec!["/usr/lib64".into()],
            },
            InRootOp::DisableDeviceNodeModification { proc_root: None },
            InRootOp::UpdateApplicationProfile,
        ];
        let mut edits = ContainerEdits {
            hooks: ops.iter().map(|o| o.to_hook("/h")).collect(),
            ..Default::default()
        };
        let mut typed: Vec<(usize, InRootOp)> = ops.iter().cloned().enumerate().collect();
        assert_eq!(
            take_params_op(&mut edits, &mut typed),
            Some(PathBuf::from("/proc"))
        );
        assert_eq!(edits.hooks.len(), 2);
        assert_eq!(typed[1], (1, InRootOp::UpdateApplicationProfile));
        assert_eq!(edits.hooks[1].args[1], "update-application-profile");
        assert_eq!(take_params_op(&mut edits, &mut typed), None);
        assert!(is_crun(Path::new("/usr/bin/crun")) && !is_crun(Path::new("/usr/sbin/runc")));
    }

    #[test]
    fn other_gpus_folders_masked_once() {
        let t = tempfile::tempdir().unwrap();
        let mut cfg = gpuctk_mockhost::HostConfig::new("570.124.06", (12, 8));
        cfg.gpus = 3;
        let h = gpuctk_mockhost::create_host(&t.path().join("h"), &cfg).unwrap();
        let dir = |i: usize| format!("{DRIVER_GPUS_DIR}/{}", h.gpus[i].bus_id);
        let mut spec = serde_json::json!({"linux": {
            "devices": [{"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": h.gpus[1].minor}],
            "maskedPaths": ["/proc/kcore", dir(2)]
        }});
        let pristine = spec.clone();
        assert_eq!(mask_other_gpus(&mut spec, &h.proc_root, None).unwrap(), 1);
        assert_eq!(
            spec["linux"]["maskedPaths"],
            serde_json::json!(["/proc/kcore", dir(2), dir(0)])
        );
        // From the GPUs discovery found (no procfs read): the same.
        let known: Vec<(u32, String)> =
            h.gpus.iter().map(|g| (g.minor, g.bus_id.clone())).collect();
        let mut again = pristine.clone();
        let nowhere = t.path().join("no-proc");
        assert_eq!(
            mask_other_gpus(&mut again, &nowhere, Some(&known)).unwrap(),
            1
        );
        assert_eq!(again, spec);
        // No driver there: nothing masked. A damaged information file: an error naming it.
        assert_eq!(mask_other_gpus(&mut spec, t.path(), None).unwrap(), 0);
        let info = h
            .proc_root
            .join("driver/nvidia/gpus")
            .join(&h.gpus[0].bus_id)
            .join("information");
        std::fs::write(&info, "garbage").unwrap();
        let msg = mask_other_gpus(&mut spec, &h.proc_root, None)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("information"), "{msg}");
        let mut bad = serde_json::json!({"linux": {"maskedPaths": {}}});
        std::fs::remove_file(&info).unwrap();
        std::fs::remove_dir(info.parent().unwrap()).unwrap();
        assert!(mask_other_gpus(&mut bad, &h.proc_root, None).is_err());
    }

    /// The minors once the edits' nodes are in, asked without applying them, are those of the
    /// spec they make: a node takes the place of the spec's device of its path.
    #[test]
    fn gpu_minors_with_nodes_are_those_of_the_applied_spec() {
        use gpuctk_cdi::spec::{ContainerEdits, DeviceNode};
        let node = |path: &str, t: &str, minor: Option<i64>| DeviceNode {
            path: path.into(),
            r#type: Some(t.into()),
            major: Some(195),
            minor,
            ..Default::default()
        };
        let spec = serde_json::json!({"process": {"env": []}, "linux": {"devices": [
            {"path": "/dev/nvidia3", "type": "c", "major": 195, "minor": 3},
            {"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1},
            {"path": "/dev/nvidia9", "type": "b", "major": 8, "minor": 9},
            {"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}
        ]}});
        for nodes in [
            vec![],
            vec![
                node("/dev/nvidia0", "c", Some(0)),
                node("/dev/nvidiactl", "c", Some(255)),
            ],
            // Its path given a new minor, and a block device where the spec had a GPU.
            vec![
                node("/dev/nvidia3", "c", Some(5)),
                node("/dev/nvidia1", "b", Some(1)),
            ],
            vec![
                node("/dev/nvidia9", "c", Some(9)),
                node("/dev/nvidia2", "c", None),
            ],
            vec![
                node("/dev/nvidia4", "c", Some(-1)),
                node("/dev/nvidia4", "c", Some(4)),
            ],
            vec![
                node("/dev/nvidia4", "c", Some(4)),
                node("/dev/nvidia4", "c", Some(6)),
            ],
        ] {
            let mut made = spec.clone();
            let edits = ContainerEdits {
                device_nodes: nodes.clone(),
                ..Default::default()
            };
            gpuctk_cdi::apply::apply_edits(&mut made, &edits).unwrap();
            assert_eq!(
                gpu_minors_with_nodes(&spec, &nodes),
                gpu_minors_in_spec(&made),
                "{nodes:?}"
            );
        }
    }

    #[test]
    fn gpu_minors_from_the_spec_devices() {
        let spec = serde_json::json!({"linux": {"devices": [
            {"path": "/dev/nvidia3", "type": "c", "major": 195, "minor": 3},
            {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255},
            {"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1},
            {"path": "/dev/nvidia7", "type": "b", "major": 8, "minor": 7},
            {"path": "/dev/nvidia-caps/nvidia-cap1", "type": "c", "major": 240, "minor": 1}
        ]}});
        assert_eq!(gpu_minors_in_spec(&spec), [1, 3]);
        assert!(gpu_minors_in_spec(&serde_json::json!({})).is_empty());
    }
}
