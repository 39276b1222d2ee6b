//! Bind mounts for legacy injection: options turned into mount attributes, each source cloned
//! on the host into a detached mount with its flags set before it is attached, then moved onto
//! an in-root target opened without following its last component.

use super::*;

pub(super) const MOUNT_ATTR_RDONLY: u64 = 0x1;

pub(super) const MOUNT_ATTR_NOSUID: u64 = 0x2;

pub(super) const MOUNT_ATTR_NODEV: u64 = 0x4;

pub(super) const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// Mount flags from OCI options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct MountFlags {
    pub(super) set: u64,
    pub(super) clear: u64,
    pub(super) recursive: bool,
    /// `MS_PRIVATE` etc. to apply once attached.
    pub(super) propagation: Option<u64>,
}

pub(super) fn parse_options(m: &Mount) -> Result<MountFlags, LegacyError> {
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
pub(super) struct MountPlan {
    pub(super) host_path: String,
    pub(super) container_path: String,
    pub(super) tree: Detached,
    pub(super) dir: bool,
    pub(super) flags: MountFlags,
}

pub(super) use sys::{mount_setattr, MountAttr};

pub(super) fn plan_mount(m: &Mount) -> Result<MountPlan, LegacyError> {
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
    let src = sys::open(&c, libc::O_PATH | libc::O_NOFOLLOW).map_err(io("open"))?;
    let st = fstat(src.as_fd()).map_err(io("stat"))?;
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
    let setattr = flags.set != 0 || flags.clear != 0 || flags.propagation.is_some();
    let tree = if setattr && !has_mount_setattr() {
        by_path(&src, &c, flags.recursive).map_err(io("stat"))?
    } else {
        detach(&src, &c, flags.recursive).map_err(io("open_tree"))?
    };
    if let (Detached::Tree(t), true) = (&tree, flags.set != 0 || flags.clear != 0) {
        let attr = MountAttr {
            attr_set: flags.set,
            attr_clr: flags.clear,
            propagation: 0,
            userns_fd: 0,
        };
        mount_setattr(t.as_fd(), flags.recursive, &attr)
            .map_err(new_call("mount_setattr"))
            .map_err(io("mount_setattr"))?;
    }
    Ok(MountPlan {
        host_path: m.host_path.clone(),
        container_path: m.container_path.clone(),
        tree,
        dir,
        flags,
    })
}

pub(super) fn mount_one(
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
    let dfd = dir.as_fd();
    let created = if m.dir {
        match sys::mkdirat(dfd, &cname, 0o755) {
            Ok(()) => true,
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => false,
            Err(e) => return Err(io("mkdir")(e)),
        }
    } else {
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_WRONLY;
        match sys::openat(dfd, &cname, flags, 0o644) {
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
    let st = fstat(target.as_fd()).map_err(io("stat target"))?;
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
                FileKind::from_mode(kind)
            ),
        });
    }
    attach(&m.tree, dfd, &cname, &target, &m.flags).map_err(io("mount"))?;
    let dup = dir.try_clone().map_err(io("dup"))?;
    undo.push(Undo::Mount(dup, name));
    Ok(())
}
