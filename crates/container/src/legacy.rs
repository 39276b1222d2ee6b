//! Legacy injection: realizing CDI container edits in a container that
//! exists but has not started, as libnvidia-container does for Docker's
//! `--gpus` (our `nvidia-container-runtime-hook prestart` and
//! `nvidia-container-cli configure`).
//!
//! At that point the runtime has read `config.json` already, so [`inject`]
//! does the work live:
//!
//! 1. **Device cgroup** (host side, see [`cgroup`] and [`bpf`]): one
//!    `devices.allow` line per node on v1, or every attached BPF device
//!    program replaced by one that also allows the nodes on v2. Skipped
//!    with [`Target::no_cgroups`].
//! 2. **Mount sources** are opened on the host, `O_PATH|O_NOFOLLOW` on the
//!    canonical path, checked to be a regular file, socket or directory,
//!    and cloned there into a detached mount (`open_tree(OPEN_TREE_CLONE)`)
//!    whose flags (`ro`, `nosuid`, `nodev`, `noexec`) are set
//!    (`mount_setattr`) before it is ever attached anywhere. On kernels without these calls
//!    (before 5.2, or 5.12 for the flags) the source is bound the classic way instead, from the
//!    container's namespace before `pivot_root` (see [`attach`]).
//! 3. **The container's mount namespace** is entered by a dedicated thread
//!    that first gives itself its own filesystem context
//!    (`unshare(CLONE_FS)`), which is what `setns(CLONE_NEWNS)` requires;
//!    the caller's threads and namespace are never touched, so this works
//!    from multi-threaded programs. Nothing is done when the container
//!    shares our namespace.
//! 4. In there the container root is found (before `pivot_root` it is
//!    [`Target::rootfs`]; after it, as when a runtime's `create` has
//!    returned, it is `/`), checked to be the host's rootfs inode, and
//!    opened as a [`Root`]. Each mount target is created in-root (a file
//!    for a file or socket, a directory for a directory), opened in-root
//!    without following its last component, and the detached mount is
//!    moved onto that descriptor (`move_mount`); no path is joined, so a
//!    symlink in the image cannot redirect a mount, and no `/proc` is
//!    needed (after `pivot_root` the container's `/proc` does not show
//!    us). Before that, the empty mount targets an earlier start left in
//!    the library folders we mount into (a reused root), and the links to
//!    them, are removed ([`leftovers`]). Device nodes are made with
//!    `mknodat` in their in-root parent when this process may make nodes,
//!    else the host's node is bound in ([`nodes`]). On failure, what was
//!    mounted is detached and what was created is removed.
//! 5. The in-root operations ([`InRootOp`], typed by the caller: from the
//!    plan, or decoded from a static spec's hooks by the hook's own command
//!    line) run on the same [`Root`]; a hook that is not one of them is
//!    noted and skipped.

mod attach;
pub mod bpf;
mod calls;
pub mod cgroup;
mod leftovers;
mod live;
mod mounts;
mod nodes;
mod single;

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use gpuctk_cdi::spec::{ContainerEdits, DeviceNode, Mount};

use crate::hooks::{self, CompatOutcome, HookError, LdcacheReport};
use crate::ops::Outcome;
use crate::root::{split_parent, FileKind, Root, RootError};
use crate::sys;
use attach::*;
use calls::*;
use cgroup::{DeviceCgroup, DeviceRule, DeviceType};
use gpuctk_core::ops::InRootOp;
use leftovers::*;
use live::*;
use mounts::*;
use nodes::*;

pub use single::bind_into;

/// The container to inject into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The container's init process (host pid).
    pub pid: i32,
    /// Absolute host path of the container rootfs, as its mount namespace
    /// shows it before `pivot_root`.
    pub rootfs: PathBuf,
    /// procfs, normally `/proc`.
    pub proc_root: PathBuf,
    /// Where cgroup hierarchies are mounted when mountinfo does not say,
    /// normally `/sys/fs/cgroup`.
    pub cgroup_root: PathBuf,
    /// Leave the device cgroup alone (rootless).
    pub no_cgroups: bool,
}

impl Target {
    /// `pid` and `rootfs` with `/proc`, `/sys/fs/cgroup` and cgroups on.
    pub fn new(pid: i32, rootfs: impl Into<PathBuf>) -> Target {
        Target {
            pid,
            rootfs: rootfs.into(),
            proc_root: PathBuf::from("/proc"),
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
            no_cgroups: false,
        }
    }
}

/// What [`inject`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InjectReport {
    /// Container paths mounted, in order.
    pub mounts: Vec<String>,
    /// Device nodes created (or found already right), container paths.
    pub device_nodes: Vec<String>,
    /// `v1 <dir>`, `v2 <dir>` or `skipped`.
    pub cgroup: String,
    /// What `update-ldcache` did, when the edits had one.
    pub ldcache: Option<LdcacheReport>,
    /// What `enable-cuda-compat` decided, when the edits had one.
    pub compat: Option<CompatOutcome>,
    /// Symlinks requested by `create-symlinks`.
    pub links: usize,
    /// Whether we had to enter another mount namespace.
    pub entered_namespace: bool,
    /// The container root as opened in its namespace: [`Target::rootfs`]
    /// before `pivot_root` (prestart), `/` after it (after `create`).
    pub root: PathBuf,
    /// Things skipped and other remarks, one line each.
    pub notes: Vec<String>,
}

/// Why injection failed. Each variant names the file, path or cgroup.
#[derive(Debug, thiserror::Error)]
pub enum LegacyError {
    /// A cgroup file or directory could not be used.
    #[error("{}: {reason}", path.display())]
    Cgroup {
        /// The cgroup file or directory.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A system call on a cgroup file failed.
    #[error("{}: {op}: {source}", path.display())]
    CgroupIo {
        /// The cgroup file or directory.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A `bpf(2)` call on a cgroup v2 directory failed.
    #[error("{} (cgroup v2 device policy): {op}: {source}", cgroup.display())]
    Bpf {
        /// The cgroup directory.
        cgroup: PathBuf,
        /// The bpf command.
        op: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A device node in the edits is not usable.
    #[error("device node {path}: {reason}")]
    Device {
        /// Container path of the node.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A mount in the edits is not usable.
    #[error("mount {host_path} -> {container_path}: {reason}")]
    Mount {
        /// Host path.
        host_path: String,
        /// Container path.
        container_path: String,
        /// What is wrong.
        reason: String,
    },
    /// A system call while preparing or making a mount or node failed.
    #[error("{what}: {op}: {source}")]
    Io {
        /// What it was about (a mount, a node, a namespace file).
        what: String,
        /// The system call.
        op: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Something in the container root failed.
    #[error(transparent)]
    Root(#[from] RootError),
    /// An in-root operation failed.
    #[error("hook {hook}: {source}")]
    Hook {
        /// The hook's subcommand.
        hook: String,
        /// What went wrong.
        #[source]
        source: HookError,
    },
    /// An attached device program cannot be extended with our rules.
    #[error("{}: device program {id}: {source}", path.display())]
    Program {
        /// The cgroup directory.
        path: PathBuf,
        /// The program's id.
        id: u32,
        /// Why.
        #[source]
        source: bpf::ProgramError,
    },
    /// The container root is not where it should be in its namespace.
    #[error("container root {}: {reason}", rootfs.display())]
    NoRoot {
        /// The rootfs given.
        rootfs: PathBuf,
        /// What was found.
        reason: String,
    },
    /// The worker thread could not run.
    #[error("namespace worker thread: {0}")]
    Thread(String),
}

// ---------------------------------------------------------------- plans

/// Realizes `edits` in the created, not yet started container `target`:
/// device cgroup, mounts, device nodes, then the hooks' work (see the
/// module documentation). `env` and other fields are ignored: it is too
/// late for them.
pub fn inject(
    target: &Target,
    edits: &ContainerEdits,
    ops: &[(usize, InRootOp)],
) -> Result<InjectReport, LegacyError> {
    // The rootfs as the host sees it must be a container's, not the host's own `/` or a system
    // directory (inside the container's mount namespace its root is `/`, checked by identity).
    crate::root::check_container_root(&target.rootfs)?;
    let mut report = InjectReport::default();
    let nodes = edits
        .device_nodes
        .iter()
        .map(plan_node)
        .collect::<Result<Vec<_>, _>>()?;
    for (i, h) in edits.hooks.iter().enumerate() {
        if !ops.iter().any(|(j, _)| *j == i) {
            report.notes.push(format!(
                "hook {} {:?}: not one of ours; skipped",
                h.path, h.args
            ));
        }
    }
    let works: Vec<InRootOp> = ops.iter().map(|(_, op)| op.clone()).collect();
    if !edits.env.is_empty() {
        report.notes.push(format!(
            "{} env entries not applied (too late)",
            edits.env.len()
        ));
    }

    // 1. The device cgroup, from the host.
    let rules = node_rules(&nodes);
    report.cgroup = if target.no_cgroups || rules.is_empty() {
        "skipped".to_string()
    } else {
        match cgroup::find_device_cgroup(&target.proc_root, target.pid, &target.cgroup_root)? {
            DeviceCgroup::V1(dir) => {
                cgroup::allow_v1(&dir, &rules)?;
                format!("v1 {}", dir.display())
            }
            DeviceCgroup::V2(dir) => {
                let out = bpf::allow_v2(&dir, &rules)?;
                if out.replaced.is_empty() {
                    report.notes.push(format!(
                        "cgroup v2 {}: no device program attached; devices are not restricted",
                        dir.display()
                    ));
                } else {
                    for (old, new) in &out.replaced {
                        report
                            .notes
                            .push(format!("cgroup v2: device program {old} replaced by {new}"));
                    }
                }
                format!("v2 {}", dir.display())
            }
        }
    };

    // 2. Mount sources, on the host.
    let mounts = edits
        .mounts
        .iter()
        .map(plan_mount)
        .collect::<Result<Vec<_>, _>>()?;

    // The rootfs as the host sees it, to recognise it in the container.
    let rootfs_c = cstring(target.rootfs.as_os_str(), "container rootfs")?;
    let host_root = open_path_dir(&rootfs_c).map_err(|source| LegacyError::Io {
        what: format!("container rootfs {}", target.rootfs.display()),
        op: "open",
        source,
    })?;
    let host_root_id = stat_id(host_root.as_fd())?;

    // 3. The container's mount namespace, in a thread of our own.
    let ns_path = target.proc_root.join(target.pid.to_string()).join("ns/mnt");
    let ns_err = |op, source| LegacyError::Io {
        what: ns_path.display().to_string(),
        op,
        source,
    };
    let ns = std::fs::File::open(&ns_path).map_err(|e| ns_err("open", e))?;
    let theirs = fstat(ns.as_fd()).map_err(|e| ns_err("stat", e))?;
    let own_path = target.proc_root.join("thread-self/ns/mnt");
    let ours = std::fs::metadata(&own_path).map_err(|e| LegacyError::Io {
        what: own_path.display().to_string(),
        op: "stat",
        source: e,
    })?;
    use std::os::unix::fs::MetadataExt;
    let enter = (theirs.st_dev, theirs.st_ino) != (ours.dev(), ours.ino());
    report.entered_namespace = enter;

    // The host's nodes, cloned here in case they are bound in, and whether nodes may be made.
    let host_nodes = nodes.iter().map(open_host_node).collect();
    let may_mknod = !nodes.is_empty() && may_mknod(&target.proc_root)?;

    let rootfs = target.rootfs.clone();
    let work = Work {
        ns: enter.then(|| OwnedFd::from(ns)),
        rootfs,
        host_root_id,
        mounts,
        nodes,
        host_nodes,
        may_mknod,
        works,
    };
    let inner = std::thread::Builder::new()
        .name("gpuctk-inject".into())
        .spawn(move || work.run())
        .map_err(|e| LegacyError::Thread(e.to_string()))?
        .join()
        .map_err(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panicked".to_string());
            LegacyError::Thread(msg)
        })??;
    report.root = inner.root;
    report.mounts = inner.mounts;
    report.device_nodes = inner.device_nodes;
    report.ldcache = inner.ldcache;
    report.compat = inner.compat;
    report.links = inner.links;
    report.notes.extend(inner.notes);
    Ok(report)
}

#[cfg(test)]
mod tests;
