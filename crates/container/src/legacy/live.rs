//! The work done in the container's mount namespace, by a thread of our own: find and check the
//! root, mount, make nodes, run the in-root operations, and undo all of it on failure.

use super::*;

pub(super) fn stat_id(fd: BorrowedFd<'_>) -> Result<(u64, u64), LegacyError> {
    let st = fstat(fd).map_err(|source| LegacyError::Io {
        what: "container rootfs".into(),
        op: "stat",
        source,
    })?;
    Ok((st.st_dev, st.st_ino))
}

/// Everything the namespace thread needs, prepared on the host.
pub(super) struct Work {
    pub(super) ns: Option<OwnedFd>,
    pub(super) rootfs: PathBuf,
    pub(super) host_root_id: (u64, u64),
    pub(super) mounts: Vec<MountPlan>,
    pub(super) nodes: Vec<NodePlan>,
    /// The host's node for each of `nodes`, in order.
    pub(super) host_nodes: Vec<HostNode>,
    /// [`may_mknod`]'s answer.
    pub(super) may_mknod: bool,
    pub(super) works: Vec<InRootOp>,
}

#[derive(Default)]
pub(super) struct Inner {
    pub(super) root: PathBuf,
    pub(super) mounts: Vec<String>,
    pub(super) device_nodes: Vec<String>,
    pub(super) ldcache: Option<LdcacheReport>,
    pub(super) compat: Option<CompatOutcome>,
    pub(super) links: usize,
    pub(super) notes: Vec<String>,
}

/// What to undo when a later step fails.
pub(super) enum Undo {
    /// A mount on `name` in directory `dir`.
    Mount(OwnedFd, OsString),
    /// A file or node we created.
    Created(OwnedFd, OsString),
}

impl Work {
    pub(super) fn run(self) -> Result<Inner, LegacyError> {
        let err = |op, source| LegacyError::Io {
            what: "entering the container's mount namespace".into(),
            op,
            source,
        };
        // setns(CLONE_NEWNS) needs a filesystem context (root, cwd, umask)
        // that no other thread shares; give this thread its own, which
        // also keeps the fchdir of a rollback to this thread.
        sys::unshare_fs().map_err(|e| err("unshare(CLONE_FS)", e))?;
        if let Some(ns) = &self.ns {
            sys::enter_mount_ns(ns.as_fd()).map_err(|e| err("setns", e))?;
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
                if stat_id(fd.as_fd())? == self.host_root_id {
                    return Ok((fd, PathBuf::from("/")));
                }
            }
        }
        let c = cstring(self.rootfs.as_os_str(), "container rootfs")?;
        match open_path_dir(&c) {
            Ok(fd) if stat_id(fd.as_fd())? == self.host_root_id => Ok((fd, self.rootfs.clone())),
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
        clear_leftovers(root_fd, root, &self.mounts, &mut inner.notes)?;
        for m in &self.mounts {
            mount_one(root_fd, root, m, undo)?;
            inner.mounts.push(m.container_path.clone());
        }
        for (n, host) in self.nodes.iter().zip(&self.host_nodes) {
            make_node(
                root_fd,
                root,
                n,
                host,
                self.may_mknod,
                undo,
                &mut inner.notes,
            )?;
            inner.device_nodes.push(n.path.clone());
        }
        let mut pending = hooks::Pending::default();
        for op in &self.works {
            let outcome =
                crate::ops::run(root, op, &mut pending).map_err(|source| LegacyError::Hook {
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
                Outcome::Chmod | Outcome::AppProfile(_) => {}
            }
        }
        Ok(())
    }
}

/// Opens the in-root parent directory of `path` (created when missing)
/// and returns it with the final name.
pub(super) fn parent_of(
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
        root_fd.as_fd(),
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

/// Detaches the mounts and removes the files made, newest first.
pub(super) fn rollback(undo: Vec<Undo>) {
    for u in undo.into_iter().rev() {
        match u {
            Undo::Mount(dir, name) => {
                if let Ok(c) = CString::new(name.as_bytes()) {
                    // This thread's cwd is its own (unshare(CLONE_FS));
                    // the name is a single component.
                    let _ = sys::detach_at(dir.as_fd(), &c);
                }
            }
            Undo::Created(dir, name) => {
                if let Ok(c) = CString::new(name.as_bytes()) {
                    if sys::unlinkat(dir.as_fd(), &c, false).is_err() {
                        let _ = sys::unlinkat(dir.as_fd(), &c, true);
                    }
                }
            }
        }
    }
}
