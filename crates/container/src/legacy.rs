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
//!    (`mount_setattr`) before it is ever attached anywhere.
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
//!    us). Device nodes are made with `mknodat` in their in-root parent.
//!    On failure, what was mounted is detached and what was created is
//!    removed.
//! 5. The in-root operations ([`InRootOp`], typed by the caller: from the
//!    plan, or decoded from a static spec's hooks by the hook's own command
//!    line) run on the same [`Root`]; a hook that is not one of them is
//!    noted and skipped.

pub mod bpf;
pub mod cgroup;

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use gpuctk_cdi::spec::{ContainerEdits, DeviceNode, Mount};

use crate::hooks::{self, CompatOutcome, HookError, LdcacheReport};
use crate::ops::Outcome;
use crate::root::{split_parent, FileKind, Root, RootError};
use cgroup::{DeviceCgroup, DeviceRule, DeviceType};
use gpuctk_core::ops::InRootOp;

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

/// A device node, resolved: everything known before entering.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodePlan {
    path: String,
    /// `S_IFCHR` or `S_IFBLK`.
    kind: u32,
    major: u32,
    minor: u32,
    mode: u32,
    uid: Option<u32>,
    gid: Option<u32>,
    access: u8,
}

fn plan_node(n: &DeviceNode) -> Result<NodePlan, LegacyError> {
    let bad = |reason: String| LegacyError::Device {
        path: n.path.clone(),
        reason,
    };
    if !n.path.starts_with('/') || n.path.contains('\0') {
        return Err(bad("the path must be an absolute container path".into()));
    }
    let kind = match n.r#type.as_deref() {
        Some("c") | Some("u") => Some(libc::S_IFCHR),
        Some("b") => Some(libc::S_IFBLK),
        Some(t) => return Err(bad(format!("type {t:?} is not supported (only c, u, b)"))),
        None => None,
    };
    let major = n.major.filter(|m| *m != 0);
    let need_host = kind.is_none() || major.is_none() || n.file_mode.is_none();
    let host = if need_host {
        let hp = n.host_path.as_deref().unwrap_or(&n.path);
        match std::fs::metadata(hp) {
            Ok(m) => Some(m),
            Err(e) if kind.is_none() || major.is_none() => {
                return Err(bad(format!(
                    "type or major not given and host node {hp} cannot be read: {e}"
                )))
            }
            Err(_) => None,
        }
    } else {
        None
    };
    use std::os::unix::fs::MetadataExt;
    let host_kind = host.as_ref().map(|m| m.mode() & libc::S_IFMT);
    let kind = match kind.or(host_kind) {
        Some(k) if k == libc::S_IFCHR || k == libc::S_IFBLK => k,
        _ => return Err(bad("the host file is not a device node".into())),
    };
    let to_u32 = |v: i64, what: &str| {
        u32::try_from(v).map_err(|_| bad(format!("{what} {v} is out of range")))
    };
    let (major, minor) = match major {
        Some(m) => (to_u32(m, "major")?, to_u32(n.minor.unwrap_or(0), "minor")?),
        None => {
            let rdev = host.as_ref().map(|m| m.rdev()).unwrap_or(0);
            (libc::major(rdev), libc::minor(rdev))
        }
    };
    let mode = match n.file_mode {
        Some(m) => m & 0o777,
        None => host.as_ref().map_or(0o666, |m| m.mode() & 0o777),
    };
    let perms = n.permissions.as_deref().unwrap_or("rwm");
    let access = if perms == "none" {
        0
    } else {
        DeviceRule::parse_access(perms)
            .ok_or_else(|| bad(format!("permissions {perms:?}: expected a subset of rwm")))?
    };
    Ok(NodePlan {
        path: n.path.clone(),
        kind,
        major,
        minor,
        mode,
        uid: n.uid,
        gid: n.gid,
        access,
    })
}

/// The device cgroup rules for the nodes.
fn node_rules(nodes: &[NodePlan]) -> Vec<DeviceRule> {
    nodes
        .iter()
        .filter(|n| n.access != 0)
        .map(|n| DeviceRule {
            allow: true,
            kind: if n.kind == libc::S_IFBLK {
                DeviceType::Block
            } else {
                DeviceType::Char
            },
            major: Some(n.major),
            minor: Some(n.minor),
            access: n.access,
        })
        .collect()
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;
const OPEN_TREE_CLONE: u32 = 1;
const AT_RECURSIVE: u32 = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;

/// Mount flags from OCI options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct MountFlags {
    set: u64,
    clear: u64,
    recursive: bool,
    /// `MS_PRIVATE` etc. to apply once attached.
    propagation: Option<u64>,
}

fn parse_options(m: &Mount) -> Result<MountFlags, LegacyError> {
    let bad = |reason: String| LegacyError::Mount {
        host_path: m.host_path.clone(),
        container_path: m.container_path.clone(),
        reason,
    };
    let mut f = MountFlags::default();
    let mut bind = matches!(m.r#type.as_deref(), Some("bind") | Some("rbind"));
    if let Some(t) = m
        .r#type
        .as_deref()
        .filter(|t| !matches!(*t, "bind" | "rbind" | "none"))
    {
        return Err(bad(format!("type {t:?}: only bind mounts can be injected")));
    }
    let set = |on: bool, attr: u64, f: &mut MountFlags| {
        if on {
            f.set |= attr;
            f.clear &= !attr;
        } else {
            f.clear |= attr;
            f.set &= !attr;
        }
    };
    for o in &m.options {
        match o.as_str() {
            "bind" => bind = true,
            "rbind" => {
                bind = true;
                f.recursive = true;
            }
            "ro" => set(true, MOUNT_ATTR_RDONLY, &mut f),
            "rw" => set(false, MOUNT_ATTR_RDONLY, &mut f),
            "nosuid" => set(true, MOUNT_ATTR_NOSUID, &mut f),
            "suid" => set(false, MOUNT_ATTR_NOSUID, &mut f),
            "nodev" => set(true, MOUNT_ATTR_NODEV, &mut f),
            "dev" => set(false, MOUNT_ATTR_NODEV, &mut f),
            "noexec" => set(true, MOUNT_ATTR_NOEXEC, &mut f),
            "exec" => set(false, MOUNT_ATTR_NOEXEC, &mut f),
            "private" | "rprivate" => f.propagation = Some(libc::MS_PRIVATE),
            "slave" | "rslave" => f.propagation = Some(libc::MS_SLAVE),
            "shared" | "rshared" => f.propagation = Some(libc::MS_SHARED),
            "unbindable" | "runbindable" => f.propagation = Some(libc::MS_UNBINDABLE),
            "relatime" | "norelatime" | "noatime" | "atime" | "strictatime" | "nodiratime"
            | "diratime" | "defaults" => {}
            other => return Err(bad(format!("option {other:?} is not supported"))),
        }
    }
    if !bind {
        return Err(bad(
            "only bind mounts (option bind or rbind) can be injected".into(),
        ));
    }
    Ok(f)
}

/// A mount, prepared on the host: the detached clone of its source.
#[derive(Debug)]
struct MountPlan {
    host_path: String,
    container_path: String,
    tree: OwnedFd,
    dir: bool,
    flags: MountFlags,
}

fn cstring(s: &OsStr, what: &str) -> Result<CString, LegacyError> {
    CString::new(s.as_bytes()).map_err(|_| LegacyError::Io {
        what: what.to_string(),
        op: "path",
        source: io::Error::from_raw_os_error(libc::EINVAL),
    })
}

fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: stat is plain old data.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor and pointer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

fn owned_or_err(fd: libc::c_long) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

fn mount_setattr(fd: RawFd, recursive: bool, attr: &MountAttr) -> io::Result<()> {
    let flags = libc::AT_EMPTY_PATH as u32 | if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: valid descriptor, empty NUL-terminated path, attr of the size passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd,
            c"".as_ptr(),
            flags,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn plan_mount(m: &Mount) -> Result<MountPlan, LegacyError> {
    let flags = parse_options(m)?;
    let bad = |reason: String| LegacyError::Mount {
        host_path: m.host_path.clone(),
        container_path: m.container_path.clone(),
        reason,
    };
    if !m.container_path.starts_with('/') {
        return Err(bad("the container path must be absolute".into()));
    }
    let what = format!("mount source {}", m.host_path);
    let io = |op: &'static str| {
        let what = what.clone();
        move |source| LegacyError::Io { what, op, source }
    };
    let canonical = std::fs::canonicalize(&m.host_path).map_err(io("resolve"))?;
    let c = cstring(canonical.as_os_str(), &what)?;
    // SAFETY: valid NUL-terminated path.
    let src = owned_or_err(unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    } as libc::c_long)
    .map_err(io("open"))?;
    let st = fstat(src.as_raw_fd()).map_err(io("stat"))?;
    let dir = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG | libc::S_IFSOCK => false,
        libc::S_IFDIR => true,
        _ => {
            return Err(bad(format!(
                "{} is not a regular file, socket or directory",
                canonical.display()
            )))
        }
    };
    let clone_flags = OPEN_TREE_CLONE
        | libc::O_CLOEXEC as u32
        | libc::AT_EMPTY_PATH as u32
        | if flags.recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: valid descriptor and empty NUL-terminated path.
    let tree = owned_or_err(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            src.as_raw_fd(),
            c"".as_ptr(),
            clone_flags,
        )
    })
    .map_err(io("open_tree"))?;
    if flags.set != 0 || flags.clear != 0 {
        let attr = MountAttr {
            attr_set: flags.set,
            attr_clr: flags.clear,
            propagation: 0,
            userns_fd: 0,
        };
        mount_setattr(tree.as_raw_fd(), flags.recursive, &attr).map_err(io("mount_setattr"))?;
    }
    Ok(MountPlan {
        host_path: m.host_path.clone(),
        container_path: m.container_path.clone(),
        tree,
        dir,
        flags,
    })
}

// ---------------------------------------------------------------- inject

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
    let host_root_id = stat_id(host_root.as_raw_fd())?;

    // 3. The container's mount namespace, in a thread of our own.
    let ns_path = target.proc_root.join(target.pid.to_string()).join("ns/mnt");
    let ns_err = |op, source| LegacyError::Io {
        what: ns_path.display().to_string(),
        op,
        source,
    };
    let ns = std::fs::File::open(&ns_path).map_err(|e| ns_err("open", e))?;
    let theirs = fstat(ns.as_raw_fd()).map_err(|e| ns_err("stat", e))?;
    let own_path = target.proc_root.join("thread-self/ns/mnt");
    let ours = std::fs::metadata(&own_path).map_err(|e| LegacyError::Io {
        what: own_path.display().to_string(),
        op: "stat",
        source: e,
    })?;
    use std::os::unix::fs::MetadataExt;
    let enter = (theirs.st_dev, theirs.st_ino) != (ours.dev(), ours.ino());
    report.entered_namespace = enter;

    let rootfs = target.rootfs.clone();
    let work = Work {
        ns: enter.then(|| OwnedFd::from(ns)),
        rootfs,
        host_root_id,
        mounts,
        nodes,
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

fn open_path_dir(path: &CString) -> io::Result<OwnedFd> {
    // SAFETY: valid NUL-terminated path.
    owned_or_err(unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    } as libc::c_long)
}

fn stat_id(fd: RawFd) -> Result<(u64, u64), LegacyError> {
    let st = fstat(fd).map_err(|source| LegacyError::Io {
        what: "container rootfs".into(),
        op: "stat",
        source,
    })?;
    Ok((st.st_dev, st.st_ino))
}

/// Everything the namespace thread needs, prepared on the host.
struct Work {
    ns: Option<OwnedFd>,
    rootfs: PathBuf,
    host_root_id: (u64, u64),
    mounts: Vec<MountPlan>,
    nodes: Vec<NodePlan>,
    works: Vec<InRootOp>,
}

#[derive(Default)]
struct Inner {
    root: PathBuf,
    mounts: Vec<String>,
    device_nodes: Vec<String>,
    ldcache: Option<LdcacheReport>,
    compat: Option<CompatOutcome>,
    links: usize,
    notes: Vec<String>,
}

/// What to undo when a later step fails.
enum Undo {
    /// A mount on `name` in directory `dir`.
    Mount(OwnedFd, OsString),
    /// A file or node we created.
    Created(OwnedFd, OsString),
}

const IN_ROOT: u64 = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;

fn openat2(dirfd: RawFd, path: &CString, flags: i32, resolve: u64) -> io::Result<OwnedFd> {
    // SAFETY: open_how is plain old data; zero is valid for every field.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.resolve = resolve;
    for _ in 0..64 {
        // SAFETY: valid pointers to a NUL-terminated path and an open_how
        // of the size passed.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dirfd,
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        match owned_or_err(rc) {
            Ok(fd) => return Ok(fd),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EINTR)) => {}
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::from_raw_os_error(libc::EAGAIN))
}

fn fstatat_nofollow(dirfd: RawFd, name: &CString) -> io::Result<libc::stat> {
    // SAFETY: stat is plain old data.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor, NUL-terminated name and pointer.
    if unsafe { libc::fstatat(dirfd, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Work {
    fn run(self) -> Result<Inner, LegacyError> {
        let err = |op, source| LegacyError::Io {
            what: "entering the container's mount namespace".into(),
            op,
            source,
        };
        // setns(CLONE_NEWNS) needs a filesystem context (root, cwd, umask)
        // that no other thread shares; give this thread its own, which
        // also keeps the fchdir of a rollback to this thread.
        // SAFETY: a plain syscall affecting this thread only.
        check(unsafe { libc::unshare(libc::CLONE_FS) }).map_err(|e| err("unshare(CLONE_FS)", e))?;
        if let Some(ns) = &self.ns {
            // SAFETY: valid namespace descriptor.
            check(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNS) })
                .map_err(|e| err("setns", e))?;
        }
        let (root_fd, root_path) = self.find_root()?;
        let root = Root::open(&root_path)?;
        if root.metadata("/").map(|m| (m.dev, m.ino))? != self.host_root_id {
            return Err(LegacyError::NoRoot {
                rootfs: self.rootfs.clone(),
                reason: "changed while it was being opened".into(),
            });
        }
        let mut undo = Vec::new();
        let mut inner = Inner {
            root: root_path,
            ..Inner::default()
        };
        match self.apply(&root_fd, &root, &mut undo, &mut inner) {
            Ok(()) => Ok(inner),
            Err(e) => {
                rollback(undo);
                Err(e)
            }
        }
    }

    /// The container root in this namespace: `/` once the runtime has
    /// pivoted into it, else the rootfs path; either must be the inode the
    /// host sees at the rootfs path.
    fn find_root(&self) -> Result<(OwnedFd, PathBuf), LegacyError> {
        let slash = CString::new("/").expect("no NUL");
        if self.ns.is_some() {
            if let Ok(fd) = open_path_dir(&slash) {
                if stat_id(fd.as_raw_fd())? == self.host_root_id {
                    return Ok((fd, PathBuf::from("/")));
                }
            }
        }
        let c = cstring(self.rootfs.as_os_str(), "container rootfs")?;
        match open_path_dir(&c) {
            Ok(fd) if stat_id(fd.as_raw_fd())? == self.host_root_id => {
                Ok((fd, self.rootfs.clone()))
            }
            Ok(_) => Err(LegacyError::NoRoot {
                rootfs: self.rootfs.clone(),
                reason: "the container's mount namespace shows another directory there".into(),
            }),
            Err(e) => Err(LegacyError::NoRoot {
                rootfs: self.rootfs.clone(),
                reason: format!("not found in the container's mount namespace: {e}"),
            }),
        }
    }

    fn apply(
        &self,
        root_fd: &OwnedFd,
        root: &Root,
        undo: &mut Vec<Undo>,
        inner: &mut Inner,
    ) -> Result<(), LegacyError> {
        for m in &self.mounts {
            mount_one(root_fd, root, m, undo)?;
            inner.mounts.push(m.container_path.clone());
        }
        for n in &self.nodes {
            make_node(root_fd, root, n, undo)?;
            inner.device_nodes.push(n.path.clone());
        }
        let pending = hooks::Pending::default();
        for op in &self.works {
            let outcome =
                crate::ops::run(root, op, &pending).map_err(|source| LegacyError::Hook {
                    hook: op.name().to_string(),
                    source,
                })?;
            match outcome {
                Outcome::Links(n) => inner.links += n,
                Outcome::Compat(o) => {
                    inner.notes.push(o.to_string());
                    inner.compat = Some(o);
                }
                Outcome::Ldcache(r) => inner.ldcache = Some(r),
                Outcome::Chmod => {}
            }
        }
        Ok(())
    }
}

/// Opens the in-root parent directory of `path` (created when missing)
/// and returns it with the final name.
fn parent_of(
    root_fd: &OwnedFd,
    root: &Root,
    path: &str,
) -> Result<(OwnedFd, OsString, CString), LegacyError> {
    let (parent, name) = split_parent(path)?;
    root.mkdir_all(&parent, 0o755)?;
    let rel = parent.trim_start_matches('/');
    let rel =
        CString::new(if rel.is_empty() { "." } else { rel }).map_err(|_| LegacyError::Io {
            what: path.to_string(),
            op: "path",
            source: io::Error::from_raw_os_error(libc::EINVAL),
        })?;
    let dir = openat2(
        root_fd.as_raw_fd(),
        &rel,
        libc::O_PATH | libc::O_DIRECTORY,
        IN_ROOT,
    )
    .map_err(|source| LegacyError::Io {
        what: format!("{parent} (parent of {path}) in the container"),
        op: "open",
        source,
    })?;
    let cname = cstring(&name, path)?;
    Ok((dir, name, cname))
}

fn mount_one(
    root_fd: &OwnedFd,
    root: &Root,
    m: &MountPlan,
    undo: &mut Vec<Undo>,
) -> Result<(), LegacyError> {
    let what = format!("mount {} -> {}", m.host_path, m.container_path);
    let io = |op: &'static str| {
        let what = what.clone();
        move |source| LegacyError::Io { what, op, source }
    };
    let (dir, name, cname) = parent_of(root_fd, root, &m.container_path)?;
    let dfd = dir.as_raw_fd();
    let created = if m.dir {
        // SAFETY: valid descriptor and NUL-terminated single name.
        match check(unsafe { libc::mkdirat(dfd, cname.as_ptr(), 0o755) }) {
            Ok(()) => true,
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => false,
            Err(e) => return Err(io("mkdir")(e)),
        }
    } else {
        // SAFETY: valid descriptor and NUL-terminated single name.
        let fd = unsafe {
            libc::openat(
                dfd,
                cname.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_WRONLY | libc::O_CLOEXEC,
                0o644 as libc::c_uint,
            )
        };
        match owned_or_err(fd as libc::c_long) {
            Ok(_) => true,
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => false,
            Err(e) => return Err(io("create")(e)),
        }
    };
    if created {
        let dup = dir.try_clone().map_err(io("dup"))?;
        undo.push(Undo::Created(dup, name.clone()));
    }
    // The target itself, never followed if it is a symlink.
    let target = openat2(
        dfd,
        &cname,
        libc::O_PATH | libc::O_NOFOLLOW,
        libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS | libc::RESOLVE_BENEATH,
    )
    .map_err(io("open target"))?;
    let st = fstat(target.as_raw_fd()).map_err(io("stat target"))?;
    let kind = st.st_mode & libc::S_IFMT;
    let ok = if m.dir {
        kind == libc::S_IFDIR
    } else {
        kind == libc::S_IFREG
    };
    if !ok {
        return Err(LegacyError::Mount {
            host_path: m.host_path.clone(),
            container_path: m.container_path.clone(),
            reason: format!(
                "the container already has a {} there; refusing to mount over it",
                kind_name(kind)
            ),
        });
    }
    // SAFETY: valid descriptors and empty NUL-terminated paths.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            m.tree.as_raw_fd(),
            c"".as_ptr(),
            target.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(io("move_mount")(io::Error::last_os_error()));
    }
    let dup = dir.try_clone().map_err(io("dup"))?;
    undo.push(Undo::Mount(dup, name));
    if let Some(p) = m.flags.propagation {
        let attr = MountAttr {
            attr_set: 0,
            attr_clr: 0,
            propagation: p,
            userns_fd: 0,
        };
        mount_setattr(m.tree.as_raw_fd(), m.flags.recursive, &attr)
            .map_err(io("mount_setattr (propagation)"))?;
    }
    Ok(())
}

fn kind_name(kind: u32) -> FileKind {
    match kind {
        libc::S_IFDIR => FileKind::Dir,
        libc::S_IFLNK => FileKind::Symlink,
        libc::S_IFCHR => FileKind::CharDevice,
        libc::S_IFBLK => FileKind::BlockDevice,
        libc::S_IFIFO => FileKind::Fifo,
        libc::S_IFSOCK => FileKind::Socket,
        _ => FileKind::File,
    }
}

fn make_node(
    root_fd: &OwnedFd,
    root: &Root,
    n: &NodePlan,
    undo: &mut Vec<Undo>,
) -> Result<(), LegacyError> {
    let io = |op: &'static str| {
        let what = format!("device node {}", n.path);
        move |source| LegacyError::Io { what, op, source }
    };
    let (dir, name, cname) = parent_of(root_fd, root, &n.path)?;
    let dfd = dir.as_raw_fd();
    let rdev = libc::makedev(n.major, n.minor);
    match fstatat_nofollow(dfd, &cname) {
        Ok(st) => {
            let kind = st.st_mode & libc::S_IFMT;
            if kind != n.kind || st.st_rdev != rdev {
                return Err(LegacyError::Device {
                    path: n.path.clone(),
                    reason: format!(
                        "the container already has a {} there{}; refusing to replace it",
                        kind_name(kind),
                        if kind == n.kind {
                            format!(" ({}:{})", libc::major(st.st_rdev), libc::minor(st.st_rdev))
                        } else {
                            String::new()
                        }
                    ),
                });
            }
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            // SAFETY: valid descriptor and NUL-terminated single name.
            check(unsafe { libc::mknodat(dfd, cname.as_ptr(), n.kind | n.mode, rdev) })
                .map_err(io("mknod"))?;
            let dup = dir.try_clone().map_err(io("dup"))?;
            undo.push(Undo::Created(dup, name));
        }
        Err(e) => return Err(io("lstat")(e)),
    }
    // mknod is subject to the umask; set the mode exactly.
    // SAFETY: valid descriptor and NUL-terminated single name (a device
    // node we just checked, not a symlink).
    check(unsafe { libc::fchmodat(dfd, cname.as_ptr(), n.mode, 0) }).map_err(io("chmod"))?;
    if n.uid.is_some() || n.gid.is_some() {
        let uid = n.uid.unwrap_or(u32::MAX);
        let gid = n.gid.unwrap_or(u32::MAX);
        // SAFETY: valid descriptor and NUL-terminated single name; -1 keeps an id.
        check(unsafe { libc::fchownat(dfd, cname.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) })
            .map_err(io("chown"))?;
    }
    Ok(())
}

/// Detaches the mounts and removes the files made, newest first.
fn rollback(undo: Vec<Undo>) {
    for u in undo.into_iter().rev() {
        match u {
            Undo::Mount(dir, name) => {
                if let Ok(c) = CString::new(name.as_bytes()) {
                    // This thread's cwd is its own (unshare(CLONE_FS));
                    // the name is a single component.
                    // SAFETY: valid descriptor and NUL-terminated name.
                    unsafe {
                        if libc::fchdir(dir.as_raw_fd()) == 0 {
                            libc::umount2(c.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW);
                        }
                    }
                }
            }
            Undo::Created(dir, name) => {
                if let Ok(c) = CString::new(name.as_bytes()) {
                    // SAFETY: valid descriptor and NUL-terminated single name.
                    unsafe {
                        if libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) != 0 {
                            libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
