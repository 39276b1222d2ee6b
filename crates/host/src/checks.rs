//! Raw host facts for `gpuctk doctor`, read without judging them: the state of a device node,
//! its `/dev/char/M:m` link, the character-device majors, the GPUs procfs lists and the
//! versions of a driver library the loader would find. Unlike [`crate::discover`], nothing here
//! drops what looks wrong: the caller wants to say what it found.

use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::catalog;
use crate::procfs::{self, GpuInformation};
use crate::resolve::{host_path, resolve_in_root};

/// What sits at a device node's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeState {
    /// Nothing (or it cannot be stat'ed: the error).
    Missing(String),
    /// Something that is not a character device.
    NotCharDevice,
    /// A character device.
    Char {
        /// Its major.
        major: u32,
        /// Its minor.
        minor: u32,
    },
}

/// The node `/dev/<name>` under `dev_root`, with its host path.
pub fn char_node(dev_root: &Path, name: &str) -> (PathBuf, NodeState) {
    let host = host_path(dev_root, &Path::new("/dev").join(name));
    let state = match fs::metadata(&host) {
        Err(e) => NodeState::Missing(e.to_string()),
        Ok(md) if !md.file_type().is_char_device() => NodeState::NotCharDevice,
        Ok(md) => NodeState::Char {
            major: libc::major(md.rdev()),
            minor: libc::minor(md.rdev()),
        },
    };
    (host, state)
}

/// What `/dev/char/<major>:<minor>` under `dev_root` is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CharLink {
    /// A link that leads (inside the dev root) to a character device of that number.
    Ok {
        /// The link's target as written.
        target: String,
    },
    /// No such entry.
    Missing,
    /// Something else: a dangling link, one to another device, not a link.
    Wrong(String),
}

/// The `/dev/char/<major>:<minor>` entry under `dev_root`, which systemd uses to find a device
/// from its number (a `daemon-reload` re-applies device cgroup rules through it).
pub fn dev_char_link(dev_root: &Path, major: u32, minor: u32) -> (PathBuf, CharLink) {
    let inner = PathBuf::from(format!("/dev/char/{major}:{minor}"));
    let host = host_path(dev_root, &inner);
    let md = match fs::symlink_metadata(&host) {
        Ok(md) => md,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return (host, CharLink::Missing),
        Err(e) => return (host, CharLink::Wrong(e.to_string())),
    };
    if !md.file_type().is_symlink() {
        // udev makes links; a node of the right number works as well.
        let same = md.file_type().is_char_device()
            && (libc::major(md.rdev()), libc::minor(md.rdev())) == (major, minor);
        let state = if same {
            CharLink::Ok {
                target: "(a device node)".to_string(),
            }
        } else {
            CharLink::Wrong("not a symlink to the device".to_string())
        };
        return (host, state);
    }
    let target = fs::read_link(&host)
        .map(|t| t.to_string_lossy().into_owned())
        .unwrap_or_default();
    let state = match resolve_in_root(dev_root, &inner) {
        Err(e) => CharLink::Wrong(format!("-> {target}: {e}")),
        Ok(resolved) => match fs::metadata(host_path(dev_root, &resolved)) {
            Ok(m)
                if m.file_type().is_char_device()
                    && (libc::major(m.rdev()), libc::minor(m.rdev())) == (major, minor) =>
            {
                CharLink::Ok { target }
            }
            Ok(m) if m.file_type().is_char_device() => CharLink::Wrong(format!(
                "-> {target}, which is {}:{}",
                libc::major(m.rdev()),
                libc::minor(m.rdev())
            )),
            Ok(_) => CharLink::Wrong(format!("-> {target}, which is not a character device")),
            Err(e) => CharLink::Wrong(format!("-> {target}: {e}")),
        },
    };
    (host, state)
}

/// The character-device majors by name from `<proc_root>/devices` (empty when it is absent).
pub fn char_majors(proc_root: &Path) -> io::Result<Vec<(u32, String)>> {
    match crate::discover::read_capped(&proc_root.join("devices"), crate::discover::MAX_PROC_FILE) {
        Ok(b) => Ok(procfs::parse_char_devices(&String::from_utf8_lossy(&b))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// A GPU `information` file that cannot be used; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum InformationError {
    /// It cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// It is not the NVIDIA module's format.
    #[error("{}: {source}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: procfs::ProcError,
    },
}

/// Every GPU `<proc_root>/driver/nvidia/gpus/*/information` describes, in the order of their
/// directories' names (bus ids), each with its file; a file that cannot be read or does not
/// parse is an `Err` naming it. An error listing the directory (not only opening it) is the
/// `io::Error`. The one reader of these files, for `doctor`, the node list and discovery.
pub fn gpu_informations(
    proc_root: &Path,
) -> io::Result<Vec<Result<GpuInformation, InformationError>>> {
    let dir = proc_root.join("driver/nvidia/gpus");
    let mut names: Vec<std::ffi::OsString> = crate::discover::read_dir_entries(&dir)?
        .into_iter()
        .map(|e| e.name)
        .collect();
    names.sort();
    Ok(names
        .into_iter()
        .map(|n| {
            let file = dir.join(&n).join("information");
            let bytes = crate::discover::read_capped(&file, crate::discover::MAX_PROC_FILE)
                .map_err(|source| InformationError::Read {
                    path: file.clone(),
                    source,
                })?;
            let Ok(text) = String::from_utf8(bytes) else {
                return Err(InformationError::Parse {
                    path: file,
                    source: procfs::ProcError::NotText,
                });
            };
            procfs::parse_information(&text)
                .map_err(|source| InformationError::Parse { path: file, source })
        })
        .collect())
}

/// A driver library the loader would find: the file, inside the driver root, and the version
/// its name ends in (`libcuda.so.570.124.06` → `570.124.06`), if it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledLibrary {
    /// The file, as seen from inside the driver root (links followed).
    pub path: String,
    /// The version suffix after `.so.`, when it looks like a driver version.
    pub version: Option<String>,
}

/// The files `name` (e.g. `libcuda.so`) resolves to in the driver root, whatever their version:
/// each entry of its `etc/ld.so.cache` whose soname starts with `name`, else `<name>.1` in the
/// standard library directories. For telling a library of another driver from none at all.
pub fn installed_library_versions(driver_root: &Path, name: &str) -> Vec<InstalledLibrary> {
    let mut candidates: Vec<String> = Vec::new();
    if let Ok(bytes) = fs::read(driver_root.join("etc/ld.so.cache")) {
        if let Ok(cache) = gpuctk_ldcache::parse(&bytes) {
            candidates.extend(
                cache
                    .entries
                    .iter()
                    .filter(|e| {
                        e.key
                            .strip_prefix(name)
                            .is_some_and(|r| r.is_empty() || r.starts_with('.'))
                    })
                    .map(|e| e.value.clone()),
            );
        }
    }
    if candidates.is_empty() {
        candidates.extend(
            catalog::FALLBACK_LIBRARY_DIRS
                .iter()
                .map(|d| format!("{d}/{name}.1")),
        );
    }
    let mut out: Vec<InstalledLibrary> = Vec::new();
    for c in candidates {
        let Ok(resolved) = resolve_in_root(driver_root, Path::new(&c)) else {
            continue;
        };
        if !host_path(driver_root, &resolved).is_file() {
            continue;
        }
        let path = resolved.to_string_lossy().into_owned();
        if out.iter().any(|l| l.path == path) {
            continue;
        }
        let version = resolved
            .file_name()
            .and_then(|f| f.to_str())
            .and_then(|f| f.strip_prefix(&format!("{name}.")))
            .filter(|v| procfs::DriverVersion::parse(v).is_some())
            .map(str::to_string);
        out.push(InstalledLibrary { path, version });
    }
    out
}

/// Whether `path` is a regular file with an execute bit (following links).
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Why a user other than the owner could not run `path`, or `None` when anyone can: the file
/// is missing or not a regular file, lacks the execute bit for others, or a directory on the way
/// (the file's own and, when it is a link, its target's) lacks the search bit for others. A
/// rootless engine runs hooks as the user who started it, so a hook only root can reach fails
/// every container that asks for it.
pub fn why_others_cannot_run(path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) => return Some(format!("{}: {e}", path.display())),
    };
    if !meta.is_file() {
        return Some(format!("{} is not a regular file", path.display()));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o001 == 0 {
        return Some(format!(
            "{} has mode {mode:04o}: others may not execute it",
            path.display()
        ));
    }
    let real = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    for p in [path, real.as_path()] {
        for dir in p.ancestors().skip(1).filter(|d| !d.as_os_str().is_empty()) {
            let Ok(m) = fs::metadata(dir) else { continue };
            let mode = m.permissions().mode() & 0o7777;
            if mode & 0o001 == 0 {
                return Some(format!(
                    "directory {} has mode {mode:04o}: others may not enter it",
                    dir.display()
                ));
            }
        }
    }
    None
}

/// `name` looked up as a shell would: a name with a `/` as it is, else the first executable
/// `<dir>/<name>` for the dirs of `path_env` (a `PATH` value).
pub fn which(name: &str, path_env: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return is_executable(&p).then_some(p);
    }
    path_env
        .into_iter()
        .flat_map(std::env::split_paths)
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(name))
        .find(|c| is_executable(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `devices` is read capped: a real one is parsed, one no driver writes (here past the cap,
    /// as any file may be under a wrong `--proc-root`) is an error, not read whole.
    #[test]
    fn proc_devices_is_read_capped() {
        let d = tempfile::tempdir().unwrap();
        assert!(char_majors(d.path()).unwrap().is_empty());
        let real = "Character devices:\n195 nvidia\n508 nvidia-uvm\n\nBlock devices:\n8 sd\n";
        fs::write(d.path().join("devices"), real).unwrap();
        assert_eq!(
            char_majors(d.path()).unwrap(),
            [(195, "nvidia".to_string()), (508, "nvidia-uvm".to_string())]
        );
        let huge = real.repeat(crate::discover::MAX_PROC_FILE as usize / real.len() + 1);
        fs::write(d.path().join("devices"), huge).unwrap();
        let e = char_majors(d.path()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        assert!(e.to_string().contains("larger than"), "{e}");
    }

    #[test]
    fn others_cannot_run_a_hook_behind_a_private_dir() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let set = |p: &Path, m: u32| fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
        set(d.path(), 0o755);
        let open = d.path().join("open");
        fs::create_dir(&open).unwrap();
        set(&open, 0o755);
        let hook = open.join("hook");
        fs::write(&hook, "#!/bin/sh\n").unwrap();
        set(&hook, 0o755);
        // tempdir's own parents (/tmp) are open to all.
        assert_eq!(why_others_cannot_run(&hook), None);
        set(&hook, 0o750);
        assert!(why_others_cannot_run(&hook).unwrap().contains("mode 0750"));
        set(&hook, 0o755);
        set(&open, 0o700);
        let why = why_others_cannot_run(&hook).unwrap();
        assert!(why.contains("directory") && why.contains("0700"), "{why}");
        // Through a link in an open directory to a file behind the private one.
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&hook, &link).unwrap();
        assert!(why_others_cannot_run(&link).unwrap().contains("0700"));
        assert!(why_others_cannot_run(&d.path().join("none")).is_some());
    }
    use std::os::unix::fs::symlink;

    #[test]
    fn char_links() {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir_all(d.path().join("dev/char")).unwrap();
        // /dev/null is 1:3 on every Linux.
        symlink("/dev/null-ish", d.path().join("dev/char/1:3")).unwrap();
        let (_, s) = dev_char_link(d.path(), 1, 3);
        assert!(matches!(s, CharLink::Wrong(_)), "{s:?}");
        assert_eq!(dev_char_link(d.path(), 1, 5).1, CharLink::Missing);
    }

    #[test]
    fn which_finds_executables_only() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("tool");
        fs::write(&f, "#!/bin/sh\n").unwrap();
        let path = std::ffi::OsString::from(d.path());
        assert_eq!(which("tool", Some(&path)), None);
        fs::set_permissions(&f, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(which("tool", Some(&path)), Some(f.clone()));
        assert_eq!(which(f.to_str().unwrap(), None), Some(f));
    }
}
