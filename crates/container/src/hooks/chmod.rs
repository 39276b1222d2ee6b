//! `chmod`: permission bits of the device nodes and directories injected under `/dev`.

use super::HookError;
use crate::root::{FileKind, Root};

/// `chmod mode` each path inside the root (symlinks followed in-root). A
/// missing path is an error; EPERM is ignored, as NVIDIA's hook does (a
/// read-only bind mount or a user namespace may forbid it).
///
/// NVIDIA's specs use this hook for the device directories that the runtime
/// creates for injected nodes (`/dev/dri`), so it changes nothing else:
/// only permission bits (no setuid, setgid or sticky bit), and only device
/// nodes and directories strictly under the container's `/dev`. Anything
/// else (an image's `/etc/shadow`, a system directory reached through a
/// confused root) is refused with an error.
pub fn chmod(root: &Root, mode: u32, paths: &[String]) -> Result<(), HookError> {
    if mode & !0o777 != 0 {
        return Err(HookError::BadMode { mode });
    }
    for p in paths {
        let missing = || HookError::ChmodMissing {
            root: root.host_path().to_path_buf(),
            path: p.clone(),
        };
        let (resolved, md) = match root.canonicalize(p).and_then(|c| {
            let md = root.metadata(&c)?;
            Ok((c, md))
        }) {
            Ok(x) => x,
            Err(e) if e.is_not_found() => return Err(missing()),
            Err(e) => return Err(e.into()),
        };
        let under_dev = resolved.starts_with("/dev/") && resolved.len() > "/dev/".len();
        if !under_dev || !matches!(md.kind, FileKind::CharDevice | FileKind::Dir) {
            return Err(HookError::ChmodRefused {
                root: root.host_path().to_path_buf(),
                path: p.clone(),
                resolved,
                kind: md.kind,
            });
        }
        match root.chmod(&resolved, mode) {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {
                return Err(HookError::ChmodMissing {
                    root: root.host_path().to_path_buf(),
                    path: p.clone(),
                })
            }
            Err(e) if e.errno() == Some(libc::EPERM) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
