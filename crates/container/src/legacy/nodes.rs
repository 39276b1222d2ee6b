//! Device nodes for legacy injection: each planned on the host from its CDI edit (type, numbers,
//! mode, cgroup access), then made with `mknodat` in its in-root parent or bound from the host.

use super::*;

/// A device node, resolved: everything known before entering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NodePlan {
    pub(super) path: String,
    /// The node on the host, bound in where `mknod` is not permitted (a user namespace).
    pub(super) host_path: String,
    /// `S_IFCHR` or `S_IFBLK`.
    pub(super) kind: u32,
    pub(super) major: u32,
    pub(super) minor: u32,
    pub(super) mode: u32,
    pub(super) uid: Option<u32>,
    pub(super) gid: Option<u32>,
    pub(super) access: u8,
}

pub(super) fn plan_node(n: &DeviceNode) -> Result<NodePlan, LegacyError> {
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
        host_path: n.host_path.clone().unwrap_or_else(|| n.path.clone()),
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
pub(super) fn node_rules(nodes: &[NodePlan]) -> Vec<DeviceRule> {
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

/// Whether this process may make device nodes: `CAP_MKNOD` in its effective set, in the initial
/// user namespace (`<proc_root>/self/uid_map` maps every uid to itself, libnvidia-container's
/// test). Anywhere else the kernel refuses mknod of a device, whatever the directory.
pub(super) fn may_mknod(proc_root: &Path) -> Result<bool, LegacyError> {
    let cap_mknod = sys::has_cap_mknod().map_err(|source| LegacyError::Io {
        what: "this process's capabilities".into(),
        op: "capget",
        source,
    })?;
    if !cap_mknod {
        return Ok(false);
    }
    let path = proc_root.join("self/uid_map");
    let io_err = |op, source| LegacyError::Io {
        what: path.display().to_string(),
        op,
        source,
    };
    // A kernel's map holds at most 340 lines (Linux 4.15 and later) of three fields in
    // `%10u`: about 11 KiB. One byte past the cap is read, so a longer file is an error, never
    // judged by its first lines.
    const MAX_UID_MAP: u64 = 16 * 1024;
    let mut map = String::new();
    use std::io::Read;
    std::fs::File::open(&path)
        .map_err(|e| io_err("open", e))?
        .take(MAX_UID_MAP + 1)
        .read_to_string(&mut map)
        .map_err(|e| io_err("read", e))?;
    if map.len() as u64 > MAX_UID_MAP {
        return Err(io_err(
            "read",
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("more than {MAX_UID_MAP} bytes, where a kernel's map is at most 340 lines (about 11 KiB); check the proc root"),
            ),
        ));
    }
    Ok(map.split_whitespace().eq(["0", "0", "4294967295"]))
}

/// Makes node `n` in the container with mknod when `may_mknod` ([`may_mknod`]'s answer), else
/// binds the host's node in, as libnvidia-container always does. Where mknod is not permitted the
/// kernel's errno depends on the set-up (`EPERM` in a folder the caller may write, `EACCES` in one
/// it may not, `EROFS` on a read-only mount), so it is not tried; where it is tried and fails,
/// whatever the errno, binding is the fallback. A bind needs a mount target: an empty file we
/// create, or one already there (a previous start's on a reused root, enroot's
/// `x-create=file`); where neither is possible, one line names the node, why, and the fix. What
/// the caller should know (a node used as it was) goes to `notes`.
pub(super) fn make_node(
    root_fd: &OwnedFd,
    root: &Root,
    n: &NodePlan,
    host: &HostNode,
    may_mknod: bool,
    undo: &mut Vec<Undo>,
    notes: &mut Vec<String>,
) -> Result<(), LegacyError> {
    let io = |op: &'static str| {
        let what = format!("device node {}", n.path);
        move |source| LegacyError::Io { what, op, source }
    };
    let (dir, name, cname) = parent_of(root_fd, root, &n.path)?;
    let dfd = dir.as_fd();
    let rdev = libc::makedev(n.major, n.minor);
    match fstatat_nofollow(dfd, &cname) {
        Ok(st) => {
            let kind = st.st_mode & libc::S_IFMT;
            if kind == n.kind && st.st_rdev == rdev {
                return existing_node(&dir, &name, &cname, &st, n, host, may_mknod, undo, notes);
            }
            if kind == libc::S_IFREG && st.st_size == 0 {
                // A mount target: a previous start's on a reused root, or the engine's. The
                // host's node is bound onto it, as libnvidia-container binds onto what is there.
                return bind_host_node(&dir, &name, &cname, host, Some(&st), undo)
                    .map_err(|f| f.into_error(n, None));
            }
            return Err(LegacyError::Device {
                path: n.path.clone(),
                reason: format!(
                    "the container already has a {} there{}; refusing to replace it",
                    FileKind::from_mode(kind),
                    if kind == n.kind {
                        format!(" ({}:{})", libc::major(st.st_rdev), libc::minor(st.st_rdev))
                    } else {
                        String::new()
                    }
                ),
            });
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        Err(e) => return Err(io("lstat")(e)),
    }
    let refused = if may_mknod {
        match sys::mknodat(dfd, &cname, n.kind, n.mode, rdev) {
            Ok(()) => {
                undo.push(Undo::Created(dir.try_clone().map_err(io("dup"))?, name));
                return set_made_node(dfd, &cname, n);
            }
            // Whatever the kernel's reason (a device cgroup, a read-only /dev, an LSM), the
            // host's node may still be bound in.
            Err(e) => Some(e),
        }
    } else {
        None
    };
    bind_host_node(&dir, &name, &cname, host, None, undo).map_err(|f| f.into_error(n, refused))
}

/// Mode and owner of a node we just made with mknod (which the umask limits).
fn set_made_node(dfd: BorrowedFd<'_>, cname: &CString, n: &NodePlan) -> Result<(), LegacyError> {
    let io = |op: &'static str| {
        let what = format!("device node {}", n.path);
        move |source| LegacyError::Io { what, op, source }
    };
    // A device node we just made, not a symlink.
    sys::fchmodat(dfd, cname, n.mode).map_err(io("chmod"))?;
    if n.uid.is_some() || n.gid.is_some() {
        sys::fchownat_nofollow(dfd, cname, n.uid, n.gid).map_err(io("chown"))?;
    }
    Ok(())
}

/// The right node is there already (a /dev bound from the host, one made beforehand, a second
/// run). Its mode is changed only if it must be and may be; a node we may not change (root's, in
/// a user namespace, or on a read-only /dev) gets the host's node bound over it, so that the
/// container opens it with the host's mode; the host's own node is never changed.
#[allow(clippy::too_many_arguments)]
fn existing_node(
    dir: &OwnedFd,
    name: &OsString,
    cname: &CString,
    st: &sys::Stat,
    n: &NodePlan,
    host: &HostNode,
    may_mknod: bool,
    undo: &mut Vec<Undo>,
    notes: &mut Vec<String>,
) -> Result<(), LegacyError> {
    if st.st_mode & 0o777 == n.mode {
        return Ok(());
    }
    if host.id == Some((st.st_dev, st.st_ino)) {
        notes.push(format!(
            "device node {}: the host's own node, used with the host's mode {:o}",
            n.path,
            st.st_mode & 0o777
        ));
        return Ok(());
    }
    let chmod = if may_mknod {
        // A device node we just checked, not a symlink.
        sys::fchmodat(dir.as_fd(), cname, n.mode)
    } else {
        Err(io::Error::from_raw_os_error(libc::EPERM))
    };
    let Err(chmod) = chmod else {
        return Ok(());
    };
    match bind_host_node(dir, name, cname, host, Some(st), undo) {
        Ok(()) => Ok(()),
        Err(f) => {
            let f = match f {
                BindFail::Op(op, e) => format!("{op}: {e}"),
                BindFail::Device(r) => r,
            };
            notes.push(format!(
                "device node {}: mode {:o}, not {:o}, and neither chmod ({chmod}) nor binding the host's {} over it ({f}) was possible; used as it is",
                n.path,
                st.st_mode & 0o777,
                n.mode,
                n.host_path
            ));
            Ok(())
        }
    }
}

/// Why binding the host's node failed.
#[derive(Debug)]
pub(super) enum BindFail {
    /// A system call failed.
    Op(&'static str, io::Error),
    /// What is wrong with the node or its target.
    Device(String),
}

impl BindFail {
    /// The same failure once more (a kept failure is reported where the bind was needed).
    fn again(&self) -> BindFail {
        match self {
            BindFail::Op(op, e) => BindFail::Op(
                op,
                e.raw_os_error()
                    .map(io::Error::from_raw_os_error)
                    .unwrap_or_else(|| io::Error::new(e.kind(), e.to_string())),
            ),
            BindFail::Device(r) => BindFail::Device(r.clone()),
        }
    }

    /// The one-line error: the node, why it was not made, why it was not bound, and the fix.
    fn into_error(self, n: &NodePlan, mknod: Option<io::Error>) -> LegacyError {
        let (op, e) = match self {
            BindFail::Device(reason) => {
                return LegacyError::Device {
                    path: n.path.clone(),
                    reason,
                }
            }
            BindFail::Op(op, e) => (op, e),
        };
        let parent = n
            .path
            .rsplit_once('/')
            .map(|(p, _)| if p.is_empty() { "/" } else { p })
            .unwrap_or("/");
        let why = match &mknod {
            Some(m) => format!("mknod: {m}"),
            None => "this process may not make device nodes (no CAP_MKNOD in the initial user namespace)".to_string(),
        };
        let fix = match (op, e.raw_os_error()) {
            ("create mount point", Some(libc::EACCES | libc::EPERM)) => format!(
                "; {parent} is not writable by this user: give the container a /dev it may write (a tmpfs, as enroot's ENROOT_RESTRICT_DEV makes) or create {} there first (an empty file is enough)",
                n.path
            ),
            ("create mount point", Some(libc::EROFS)) => format!(
                "; {parent} is read-only: mount a writable /dev in the container (a tmpfs) or create {} there first (an empty file is enough)",
                n.path
            ),
            ("open_tree" | "move_mount", Some(libc::EPERM)) => "; this process may not mount either: run it as root, or in a user namespace that owns the container's mount namespace (enroot, apptainer --userns)".to_string(),
            _ => String::new(),
        };
        LegacyError::Device {
            path: n.path.clone(),
            reason: format!(
                "{why}, and binding the host's {} failed: {op}: {e}{fix}",
                n.host_path
            ),
        }
    }
}

/// The host's node, opened and cloned on the host before the container's namespace is entered
/// (where the host's path may name another file, or none), in case it is to be bound in.
#[derive(Debug)]
pub(super) struct HostNode {
    /// Its device and inode, when it could be opened.
    id: Option<(u64, u64)>,
    /// A detached clone of it, or why there is none.
    tree: Result<Detached, BindFail>,
}

/// Opens `n.host_path` on the host: it must be a character or block device of the planned
/// numbers. Failures are kept for when a bind is needed, not reported now: mknod may not need it.
pub(super) fn open_host_node(n: &NodePlan) -> HostNode {
    let src = match cstring(std::ffi::OsStr::new(&n.host_path), &n.host_path) {
        Ok(c) => sys::open(&c, libc::O_PATH | libc::O_NOFOLLOW),
        Err(_) => Err(io::Error::from_raw_os_error(libc::EINVAL)),
    };
    let src = match src {
        Ok(fd) => fd,
        Err(e) => {
            return HostNode {
                id: None,
                tree: Err(BindFail::Op("open", e)),
            }
        }
    };
    let st = match fstat(src.as_fd()) {
        Ok(st) => st,
        Err(e) => {
            return HostNode {
                id: None,
                tree: Err(BindFail::Op("stat", e)),
            }
        }
    };
    let id = Some((st.st_dev, st.st_ino));
    if st.st_mode & libc::S_IFMT != n.kind || st.st_rdev != libc::makedev(n.major, n.minor) {
        return HostNode {
            id,
            tree: Err(BindFail::Device(format!(
                "the host's {} is not the device {}:{}, so it cannot be bound in",
                n.host_path, n.major, n.minor
            ))),
        };
    }
    let tree = match cstring(std::ffi::OsStr::new(&n.host_path), &n.host_path) {
        Ok(path) => detach(&src, &path, false).map_err(|e| BindFail::Op("open_tree", e)),
        Err(_) => Err(BindFail::Op(
            "open",
            io::Error::from_raw_os_error(libc::EINVAL),
        )),
    };
    HostNode { id, tree }
}

/// Bind the host's node (cloned in [`open_host_node`]) onto `name` in `dir`, as
/// libnvidia-container does. The target is a new empty file, or, with `existing`, the file that
/// is there (still that inode).
fn bind_host_node(
    dir: &OwnedFd,
    name: &OsString,
    cname: &CString,
    host: &HostNode,
    existing: Option<&sys::Stat>,
    undo: &mut Vec<Undo>,
) -> Result<(), BindFail> {
    let tree = match &host.tree {
        Ok(t) => t,
        Err(f) => return Err(f.again()),
    };
    let dfd = dir.as_fd();
    let dup = || dir.try_clone().map_err(|e| BindFail::Op("dup", e));
    if existing.is_none() {
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_WRONLY;
        sys::openat(dfd, cname, flags, 0o644).map_err(|e| BindFail::Op("create mount point", e))?;
        undo.push(Undo::Created(dup()?, name.clone()));
    }
    let target = openat2(
        dfd,
        cname,
        libc::O_PATH | libc::O_NOFOLLOW,
        libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS | libc::RESOLVE_BENEATH,
    )
    .map_err(|e| BindFail::Op("open mount point", e))?;
    let now = fstat(target.as_fd()).map_err(|e| BindFail::Op("stat mount point", e))?;
    let same = match existing {
        Some(seen) => (now.st_dev, now.st_ino) == (seen.st_dev, seen.st_ino),
        None => now.st_mode & libc::S_IFMT == libc::S_IFREG,
    };
    if !same {
        return Err(BindFail::Device(
            "the mount point changed while it was being opened".into(),
        ));
    }
    attach(tree, dfd, cname, &target, &MountFlags::default())
        .map_err(|e| BindFail::Op("move_mount", e))?;
    undo.push(Undo::Mount(dup()?, name.clone()));
    Ok(())
}
