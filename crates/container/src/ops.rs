//! Runs a typed [`InRootOp`] on a container root: the one place the hook process, the shim
//! (before it execs the runtime) and legacy injection (in the live container) do the work.

use gpuctk_core::ops::InRootOp;

use crate::hooks::{self, CompatOutcome, HookError, LdcacheReport, Pending};
use crate::root::Root;

/// What an operation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `create-symlinks`: how many links were asked for.
    Links(usize),
    /// `enable-cuda-compat`: the decision.
    Compat(CompatOutcome),
    /// `update-ldcache`: what the cache holds.
    Ldcache(LdcacheReport),
    /// `chmod`.
    Chmod,
    /// `update-application-profile`: the GPU minors the profile names.
    AppProfile(Vec<u32>),
}

/// Does `op` on `root`; `pending` are the library mounts the runtime will add after us (empty
/// when they are in place already). What `op` leaves in place that a later operation of the
/// same run may take as it is goes into `pending` too: the links of `create-symlinks`, which
/// `update-ldcache` then does not read back.
pub fn run(root: &Root, op: &InRootOp, pending: &mut Pending) -> Result<Outcome, HookError> {
    Ok(match op {
        InRootOp::CreateSymlinks { links } => {
            let placed = hooks::create_symlinks_placed(root, links, pending.seen_mut())?;
            pending.add_links(placed);
            Outcome::Links(links.len())
        }
        InRootOp::EnableCudaCompat {
            host_driver_version,
            host_cuda_version,
            compat_root,
        } => Outcome::Compat(hooks::enable_cuda_compat(
            root,
            host_driver_version.as_deref(),
            host_cuda_version.as_deref(),
            compat_root,
        )?),
        InRootOp::UpdateLdcache { folders } => {
            Outcome::Ldcache(hooks::update_ldcache_pending(root, folders, pending)?)
        }
        InRootOp::Chmod { mode, paths } => {
            hooks::chmod(root, *mode, paths)?;
            Outcome::Chmod
        }
        InRootOp::UpdateApplicationProfile => match pending.gpu_minors().map(<[u32]>::to_vec) {
            Some(minors) => {
                crate::guard::write_app_profile(root, &minors, pending.seen_mut())?;
                Outcome::AppProfile(minors)
            }
            None => Outcome::AppProfile(crate::guard::update_application_profile(root)?),
        },
        // A mount over the container's procfs: its hook, or the delivery's own mount
        // (`guard::params_mount`), does it.
        InRootOp::DisableDeviceNodeModification { .. } => {
            return Err(HookError::NeedsLiveContainer(op.name()))
        }
    })
}
