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

/// The minors of the `/dev/nvidiaN` character devices `spec` has the runtime make (what
/// `update-application-profile` finds in the created container's `/dev`), sorted.
pub fn gpu_minors_in_spec(spec: &serde_json::Value) -> Vec<u32> {
    let mut minors: Vec<u32> = spec
        .pointer("/linux/devices")
        .and_then(|d| d.as_array())
        .into_iter()
        .flatten()
        .filter(|d| d.get("type").and_then(|t| t.as_str()) == Some("c"))
        .filter(|d| {
            d.get("path")
                .and_then(|p| p.as_str())
                .and_then(|p| p.strip_prefix("/dev/nvidia"))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|d| d.get("minor").and_then(|m| m.as_u64()))
        .filter_map(|m| u32::try_from(m).ok())
        .collect();
    minors.sort_unstable();
    minors.dedup();
    minors
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
    let shows = container_shows_driver_procfs(spec)
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
