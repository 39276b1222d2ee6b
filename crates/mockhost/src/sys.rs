//! Thin wrappers over the filesystem and process calls the builders make,
//! each turning failures into an [`Error`] that names the path.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::io_err;
use crate::Error;

/// Create `dir` if absent; fail unless it ends up an empty directory.
/// Returns its canonical path.
pub(crate) fn prepare_empty_dir(dir: &Path) -> Result<PathBuf, Error> {
    match fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {
            let mut entries = fs::read_dir(dir).map_err(io_err("read directory", dir, ""))?;
            if entries.next().is_some() {
                return Err(Error::NotEmpty { path: dir.into() });
            }
        }
        Ok(_) => return Err(Error::NotADirectory { path: dir.into() }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(dir).map_err(io_err("create directory", dir, ""))?;
        }
        Err(e) => return Err(io_err("stat", dir, "")(e)),
    }
    fs::canonicalize(dir).map_err(io_err("canonicalize", dir, ""))
}

/// `mkdir -p` then chmod, so the mode does not depend on the umask.
pub(crate) fn make_dir(path: &Path, mode: u32) -> Result<(), Error> {
    fs::create_dir_all(path).map_err(io_err("create directory", path, ""))?;
    set_mode(path, mode)
}

pub(crate) fn set_mode(path: &Path, mode: u32) -> Result<(), Error> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(io_err("chmod", path, ""))
}

/// Write a file (creating its parent) with an explicit mode.
pub(crate) fn write_file(path: &Path, contents: &[u8], mode: u32) -> Result<(), Error> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(io_err("create directory", parent, ""))?;
    }
    fs::write(path, contents).map_err(io_err("write", path, ""))?;
    set_mode(path, mode)
}

/// Create symlink `link` pointing at `target` (taken literally).
pub(crate) fn make_symlink(target: &Path, link: &Path) -> Result<(), Error> {
    if let Some(parent) = link.parent() {
        fs::create_dir_all(parent).map_err(io_err("create directory", parent, ""))?;
    }
    symlink(target, link).map_err(io_err("symlink", link, ""))
}

/// `mknod path c major:minor` with the exact `mode` (umask bypassed by chmod).
pub(crate) fn make_char_device(
    path: &Path,
    major: u32,
    minor: u32,
    mode: u32,
) -> Result<(), Error> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| Error::InvalidConfig {
        field: "path",
        value: path.display().to_string(),
        reason: "contains a NUL byte".into(),
    })?;
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &c,
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(mode & 0o7777),
        rustix::fs::makedev(major, minor),
    )
    .map_err(|e| io_err("mknod", path, "creating device nodes needs root")(e.into()))?;
    set_mode(path, mode)
}

/// `chown path -1:gid`: give `path` to a group, as udev gives the DRM card nodes to `video`.
pub(crate) fn set_group(path: &Path, gid: u32) -> Result<(), Error> {
    std::os::unix::fs::lchown(path, None, Some(gid)).map_err(io_err("chown", path, ""))
}

/// Create a unix socket file at `path` the way a daemon's listener leaves it.
pub(crate) fn make_socket(path: &Path) -> Result<(), Error> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(io_err("create directory", parent, ""))?;
    }
    let listener = std::os::unix::net::UnixListener::bind(path).map_err(io_err(
        "bind unix socket",
        path,
        "socket paths are limited to 107 bytes; use a shorter directory",
    ))?;
    drop(listener);
    Ok(())
}

/// Find an external program: a path with a slash is used as is; a bare name
/// is looked up in $PATH and then in `fallbacks`.
pub(crate) fn resolve_program(
    program: &Path,
    fallbacks: &[&str],
    hint: &'static str,
) -> Result<PathBuf, Error> {
    let name = program.as_os_str();
    let mut tried = Vec::new();
    if name.as_bytes().contains(&b'/') {
        if program.is_file() {
            return Ok(program.to_path_buf());
        }
        tried.push(program.to_path_buf());
    } else {
        let path_var = std::env::var_os("PATH").unwrap_or_default();
        let dirs = std::env::split_paths(&path_var).collect::<Vec<_>>();
        let fallback_dirs = fallbacks.iter().map(PathBuf::from);
        for dir in dirs.into_iter().chain(fallback_dirs) {
            let candidate = dir.join(program);
            if candidate.is_file() {
                return Ok(candidate);
            }
            tried.push(candidate);
        }
    }
    Err(Error::ToolNotFound {
        tool: program.display().to_string(),
        tried: tried
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        hint,
    })
}

/// Run `program args...`, returning stdout; a non-zero exit is an error
/// carrying stderr.
pub(crate) fn run(program: &Path, args: &[&str]) -> Result<String, Error> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(io_err("run", program, ""))?;
    if !out.status.success() {
        return Err(Error::ToolFailed {
            program: program.to_path_buf(),
            args: args.join(" "),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ldconfig -r root`: builds root/etc/ld.so.cache from root/etc/ld.so.conf
/// and creates the soname links in the directories it scans.
pub(crate) fn run_ldconfig(
    ldconfig: &Path,
    via: Option<&Path>,
    root: &Path,
) -> Result<PathBuf, Error> {
    let program = resolve_program(
        ldconfig,
        &["/sbin", "/usr/sbin"],
        "apt-get install libc-bin (or dnf install glibc)",
    )?;
    let root_s = root.to_string_lossy();
    match via {
        None => run(&program, &["-r", &root_s])?,
        Some(via) => {
            let runner = resolve_program(via, &[], "apt-get install qemu-user")?;
            let program_s = program.to_string_lossy();
            run(&runner, &[&program_s, "-r", &root_s])?
        }
    };
    Ok(program)
}
