//! One bind mount into a container from a process that is already in its mount namespace and
//! sees its root at the host path (a createContainer hook, before `pivot_root`): the same
//! prepared, flag-set, in-root mount as legacy injection's.

use super::*;

/// Binds `m` (a file or directory on the host) into `root`, creating the target when missing;
/// nothing is left mounted or created on failure.
pub fn bind_into(root: &Root, m: &Mount) -> Result<(), LegacyError> {
    let rootfs = root.host_path();
    let c = cstring(rootfs.as_os_str(), "container rootfs")?;
    let root_fd = open_path_dir(&c).map_err(|source| LegacyError::Io {
        what: format!("container rootfs {}", rootfs.display()),
        op: "open",
        source,
    })?;
    let opened = root.metadata("/")?;
    if stat_id(root_fd.as_fd())? != (opened.dev, opened.ino) {
        return Err(LegacyError::NoRoot {
            rootfs: rootfs.to_path_buf(),
            reason: "changed while it was being opened".into(),
        });
    }
    let plan = plan_mount(m)?;
    let mut undo = Vec::new();
    mount_one(&root_fd, root, &plan, &mut undo).inspect_err(|_| rollback(undo))
}
