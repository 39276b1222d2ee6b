//! A minimal Debian-like container root filesystem: static busybox, the
//! host's glibc (only what the fake binaries need), loader configuration
//! and cache, and the probe at /usr/bin/gpuctk-probe.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Component, Path, PathBuf};

use crate::artifacts::{BINARIES, LIBRARIES, PROBE};
use crate::error::io_err;
use crate::{sys, Error};

/// Where the probe lives inside the rootfs.
pub const PROBE_PATH: &str = "/usr/bin/gpuctk-probe";

/// Applets the rootfs must have for tests and runtimes to work with it.
const REQUIRED_APPLETS: &[&str] = &[
    "sh", "ls", "cat", "echo", "env", "true", "false", "mkdir", "stat", "readlink",
];

/// What to build the rootfs from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootfsConfig {
    /// A statically linked busybox (default /bin/busybox).
    pub busybox: PathBuf,
    /// ldconfig to run: a bare name is looked up in $PATH, /sbin, /usr/sbin.
    pub ldconfig: PathBuf,
}

impl Default for RootfsConfig {
    fn default() -> Self {
        RootfsConfig {
            busybox: PathBuf::from("/bin/busybox"),
            ldconfig: PathBuf::from("ldconfig"),
        }
    }
}

/// The embedded probe binary, for callers that assemble their own rootfs.
pub fn probe_binary() -> &'static [u8] {
    PROBE
}

/// Debian's multiarch triplet for this build's architecture.
fn triplet() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        "aarch64-linux-gnu"
    } else {
        "x86_64-linux-gnu"
    }
}

/// Host directories searched for glibc, in order.
fn host_lib_dirs() -> Vec<String> {
    let t = triplet();
    vec![
        format!("/lib/{t}"),
        format!("/usr/lib/{t}"),
        "/lib64".into(),
        "/usr/lib64".into(),
        "/lib".into(),
        "/usr/lib".into(),
    ]
}

/// Build the rootfs in `dir`, which must be absent or empty.
pub fn create_rootfs(dir: &Path, cfg: &RootfsConfig) -> Result<(), Error> {
    create_rootfs_from(dir, cfg, Path::new("/"))
}

/// [`create_rootfs`] taking glibc from `host_root` instead of `/`.
pub fn create_rootfs_from(dir: &Path, cfg: &RootfsConfig, host_root: &Path) -> Result<(), Error> {
    let busybox = check_busybox(&cfg.busybox)?;
    let applets = busybox_applets(&cfg.busybox)?;
    let root = sys::prepare_empty_dir(dir)?;
    let host_root = fs::canonicalize(host_root).map_err(io_err("canonicalize", host_root, ""))?;

    // Merged /usr, as Debian 12 ships it. Relative links so that paths
    // through them stay inside the rootfs when followed from outside.
    for (link, target) in [
        ("bin", "usr/bin"),
        ("sbin", "usr/sbin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        sys::make_dir(&root.join(target), 0o755)?;
        sys::make_symlink(Path::new(target), &root.join(link))?;
    }
    for d in [
        format!("usr/lib/{}", triplet()),
        "usr/local/bin".into(),
        "etc/ld.so.conf.d".into(),
        "dev".into(),
        "proc".into(),
        "sys".into(),
        "run".into(),
        "var/cache/ldconfig".into(),
    ] {
        sys::make_dir(&root.join(d), 0o755)?;
    }
    sys::make_dir(&root.join("tmp"), 0o1777)?;
    sys::make_dir(&root.join("root"), 0o700)?;

    sys::write_file(&root.join("usr/bin/busybox"), &busybox, 0o755)?;
    for applet in &applets {
        let link = root.join("usr/bin").join(applet);
        if fs::symlink_metadata(&link).is_err() {
            sys::make_symlink(Path::new("busybox"), &link)?;
        }
    }

    install_glibc(&root, &host_root)?;
    sys::write_file(&root.join(PROBE_PATH.trim_start_matches('/')), PROBE, 0o755)?;
    write_etc(&root)?;
    sys::run_ldconfig(&cfg.ldconfig, None, &root)?;
    let cache = root.join("etc/ld.so.cache");
    if !cache.is_file() {
        return Err(Error::LdconfigIncomplete {
            ldconfig: cfg.ldconfig.clone(),
            root,
            what: format!("{} was not created", cache.display()),
        });
    }
    Ok(())
}

/// Read busybox and make sure it is static: a dynamic one would need the
/// host's loader and libraries inside every container.
fn check_busybox(path: &Path) -> Result<Vec<u8>, Error> {
    if !path.is_file() {
        return Err(Error::BusyboxNotFound { path: path.into() });
    }
    let bytes = fs::read(path).map_err(io_err("read", path, ""))?;
    let info = gpuctk_elf::object(&bytes[..]).map_err(|source| Error::Elf {
        what: path.display().to_string(),
        source,
    })?;
    if let Some(interp) = info.interp {
        return Err(Error::BusyboxNotStatic {
            path: path.into(),
            interp,
        });
    }
    Ok(bytes)
}

/// Applet names from `busybox --list`, checked against the required set.
fn busybox_applets(path: &Path) -> Result<Vec<String>, Error> {
    let out = sys::run(path, &["--list"])?;
    let applets = parse_applets(&out);
    for required in REQUIRED_APPLETS {
        if !applets.iter().any(|a| a == required) {
            return Err(Error::BusyboxApplet {
                path: path.into(),
                applet: required.to_string(),
            });
        }
    }
    Ok(applets)
}

/// One applet per line; anything that is not a plain file name is dropped
/// so a strange busybox cannot make us write outside usr/bin.
fn parse_applets(list: &str) -> Vec<String> {
    list.lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && !a.contains('/') && a != &"." && a != &"..")
        .map(str::to_string)
        .collect()
}

/// Sonames the embedded artifacts need that the mock driver does not provide.
fn needed_from_artifacts() -> Result<(String, BTreeSet<String>), Error> {
    let ours: BTreeSet<&str> = ["libcuda.so.1", "libnvidia-ml.so.1"].into();
    let mut needed = BTreeSet::new();
    let probe = gpuctk_elf::object(PROBE).map_err(|source| Error::Elf {
        what: "gpuctk-probe".into(),
        source,
    })?;
    let interp = probe.interp.clone().ok_or_else(|| Error::NotDynamic {
        what: "gpuctk-probe".into(),
    })?;
    let all = std::iter::once(("gpuctk-probe", PROBE))
        .chain(BINARIES.iter().map(|b| (b.name, b.bytes)))
        .chain(LIBRARIES.iter().map(|l| (l.stem, l.bytes)));
    for (name, bytes) in all {
        let info = gpuctk_elf::object(bytes).map_err(|source| Error::Elf {
            what: name.into(),
            source,
        })?;
        needed.extend(
            info.needed
                .into_iter()
                .filter(|n| !ours.contains(n.as_str())),
        );
    }
    Ok((interp, needed))
}

/// Copy the loader and the needed libraries (and what they need) from the host.
fn install_glibc(root: &Path, host_root: &Path) -> Result<(), Error> {
    let (interp, mut pending) = needed_from_artifacts()?;
    install_host_file(root, host_root, Path::new(&interp))?;
    let dirs = host_lib_dirs();
    let mut done = BTreeSet::new();
    while let Some(name) = pending.pop_first() {
        if !done.insert(name.clone()) {
            continue;
        }
        let found = dirs
            .iter()
            .map(|d| Path::new(d).join(&name))
            .find(|p| host_root.join(rel(p)).is_file());
        let Some(logical) = found else {
            return Err(Error::HostLibraryNotFound {
                name,
                tried: dirs
                    .iter()
                    .map(|d| host_root.join(rel(Path::new(d))).display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        let canonical = install_host_file(root, host_root, &logical)?;
        let bytes = fs::read(&canonical).map_err(io_err("read", &canonical, ""))?;
        let info = gpuctk_elf::object(&bytes[..]).map_err(|source| Error::Elf {
            what: canonical.display().to_string(),
            source,
        })?;
        // The loader shows up as a dependency of libc under its own name.
        let interp_name = Path::new(&interp)
            .file_name()
            .map(|f| f.to_string_lossy().into_owned());
        pending.extend(
            info.needed
                .into_iter()
                .filter(|n| Some(n) != interp_name.as_ref() && !done.contains(n)),
        );
    }
    Ok(())
}

/// `path` without its leading `/`, for joining under a root.
fn rel(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| !matches!(c, Component::RootDir | Component::Prefix(_)))
        .collect()
}

/// Copy host file `logical` into the rootfs at its resolved location, and
/// if the logical path went through a symlink on the host, recreate that
/// link so `logical` resolves inside the rootfs too (e.g. /lib64/ld-linux
/// -> /lib/x86_64-linux-gnu/ld-linux). Returns the host file's real path.
fn install_host_file(root: &Path, host_root: &Path, logical: &Path) -> Result<PathBuf, Error> {
    let host_path = host_root.join(rel(logical));
    let canonical = fs::canonicalize(&host_path).map_err(io_err(
        "resolve",
        &host_path,
        "the host's glibc is copied into the rootfs",
    ))?;
    let inside = canonical
        .strip_prefix(host_root)
        .unwrap_or(&canonical)
        .to_path_buf();
    let dest = root.join(rel(&inside));
    let bytes = fs::read(&canonical).map_err(io_err("read", &canonical, ""))?;
    sys::write_file(&dest, &bytes, 0o755)?;
    let logical_dest = root.join(rel(logical));
    if fs::symlink_metadata(&logical_dest).is_err() {
        let target = match fs::read_link(&host_path) {
            Ok(t) => t,
            Err(_) => Path::new("/").join(&inside),
        };
        sys::make_symlink(&target, &logical_dest)?;
    }
    Ok(canonical)
}

fn write_etc(root: &Path) -> Result<(), Error> {
    let etc = root.join("etc");
    let t = triplet();
    let files: [(&str, String); 8] = [
        ("debian_version", "12.10\n".into()),
        (
            "os-release",
            "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\n\
             VERSION_ID=\"12\"\nVERSION=\"12 (bookworm)\"\nVERSION_CODENAME=bookworm\nID=debian\n"
                .into(),
        ),
        (
            "passwd",
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
                .into(),
        ),
        ("group", "root:x:0:\nnogroup:x:65534:\n".into()),
        ("hostname", "gpuctk-rootfs\n".into()),
        ("hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost\n".into()),
        ("ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n".into()),
        (
            "ld.so.conf.d/x86_64-linux-gnu.conf",
            format!("# Multiarch support\n/usr/local/lib/{t}\n/lib/{t}\n/usr/lib/{t}\n"),
        ),
    ];
    for (name, text) in files {
        let name = name.replace("x86_64-linux-gnu", t);
        sys::write_file(&etc.join(name), text.as_bytes(), 0o644)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applet_list_is_sanitized() {
        let got = parse_applets("sh\n../evil\n\nls\n.\nusr/bin/x\n cat \n");
        assert_eq!(got, vec!["sh", "ls", "cat"]);
    }

    #[test]
    fn artifacts_need_only_glibc() {
        let (interp, needed) = needed_from_artifacts().unwrap();
        assert!(interp.starts_with('/'));
        assert!(needed.contains("libc.so.6"), "{needed:?}");
        assert!(!needed.contains("libnvidia-ml.so.1"));
    }

    #[test]
    fn rel_strips_root() {
        assert_eq!(rel(Path::new("/lib64/x")), PathBuf::from("lib64/x"));
        assert_eq!(rel(Path::new("a/b")), PathBuf::from("a/b"));
    }
}
