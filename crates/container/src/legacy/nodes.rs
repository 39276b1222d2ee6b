//! Device nodes for legacy injection: each planned on the host from its CDI edit (type, numbers,
//! mode, cgroup access) and made with `mknodat` in its in-root parent, inside the container.

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

pub(super) fn kind_name(kind: u32) -> FileKind {
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

pub(super) fn make_node(
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
    let created = match fstatat_nofollow(dfd, &cname) {
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
            // The right node is there (a /dev bound from the host, a second run): its mode is
            // changed only if it must be, and a node we may not change (a user namespace) is
            // used as it is, as libnvidia-container does.
            if st.st_mode & 0o777 != n.mode {
                // SAFETY: valid descriptor and NUL-terminated single name (a device node we
                // just checked, not a symlink).
                match check(unsafe { libc::fchmodat(dfd, cname.as_ptr(), n.mode, 0) }) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
                    Err(e) => return Err(io("chmod")(e)),
                }
            }
            return Ok(());
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            // SAFETY: valid descriptor and NUL-terminated single name.
            match check(unsafe { libc::mknodat(dfd, cname.as_ptr(), n.kind | n.mode, rdev) }) {
                Ok(()) => true,
                // A user namespace may not make device nodes: bind the host's instead.
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                    bind_host_node(&dir, &name, &cname, n, undo)?;
                    return Ok(());
                }
                Err(e) => return Err(io("mknod")(e)),
            }
        }
        Err(e) => return Err(io("lstat")(e)),
    };
    if created {
        let dup = dir.try_clone().map_err(io("dup"))?;
        undo.push(Undo::Created(dup, name));
    }
    // mknod is subject to the umask; set the mode exactly.
    // SAFETY: valid descriptor and NUL-terminated single name (a device
    // node we just made, not a symlink).
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

/// Bind the host's node `n.host_path` onto a new empty file `name` in `dir`, as
/// libnvidia-container does in a user namespace: the node must be a character or block device
/// of the planned numbers.
fn bind_host_node(
    dir: &OwnedFd,
    name: &OsString,
    cname: &CString,
    n: &NodePlan,
    undo: &mut Vec<Undo>,
) -> Result<(), LegacyError> {
    let io = |op: &'static str| {
        let what = format!("device node {} (bound from {})", n.path, n.host_path);
        move |source| LegacyError::Io { what, op, source }
    };
    let host = cstring(std::ffi::OsStr::new(&n.host_path), &n.host_path)?;
    // SAFETY: valid NUL-terminated path.
    let src = owned_or_err(unsafe {
        libc::open(
            host.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    } as libc::c_long)
    .map_err(io("open"))?;
    let st = fstat(src.as_raw_fd()).map_err(io("stat"))?;
    if st.st_mode & libc::S_IFMT != n.kind || st.st_rdev != libc::makedev(n.major, n.minor) {
        return Err(LegacyError::Device {
            path: n.path.clone(),
            reason: format!(
                "mknod is not permitted here and the host's {} is not the device {}:{}",
                n.host_path, n.major, n.minor
            ),
        });
    }
    // SAFETY: valid descriptor and empty NUL-terminated path.
    let tree = owned_or_err(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            src.as_raw_fd(),
            c"".as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as u32 | libc::AT_EMPTY_PATH as u32,
        )
    })
    .map_err(io("open_tree"))?;
    let dfd = dir.as_raw_fd();
    // SAFETY: valid descriptor and NUL-terminated single name.
    let fd = unsafe {
        libc::openat(
            dfd,
            cname.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_WRONLY | libc::O_CLOEXEC,
            0o644 as libc::c_uint,
        )
    };
    owned_or_err(fd as libc::c_long).map_err(io("create mount point"))?;
    undo.push(Undo::Created(
        dir.try_clone().map_err(io("dup"))?,
        name.clone(),
    ));
    let target = openat2(
        dfd,
        cname,
        libc::O_PATH | libc::O_NOFOLLOW,
        libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS | libc::RESOLVE_BENEATH,
    )
    .map_err(io("open mount point"))?;
    // SAFETY: valid descriptors and empty NUL-terminated paths.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            target.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(io("move_mount")(io::Error::last_os_error()));
    }
    undo.push(Undo::Mount(
        dir.try_clone().map_err(io("dup"))?,
        name.clone(),
    ));
    Ok(())
}
