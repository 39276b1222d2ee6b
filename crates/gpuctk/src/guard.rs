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
}
