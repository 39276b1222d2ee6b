//! Helpers shared by the integration tests. They check results with tools
//! independent of the crate (readelf, ldconfig, stat) wherever possible.
#![allow(dead_code)]

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

/// Run a program, panicking with a clear message if it cannot be started
/// (a missing tool fails the test rather than skipping it).
pub fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} (is it installed?): {e}"))
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// DT_SONAME via binutils' readelf.
pub fn readelf_soname(path: &Path) -> Option<String> {
    dynamic_entries(path, "SONAME").into_iter().next()
}

/// DT_NEEDED via binutils' readelf.
pub fn readelf_needed(path: &Path) -> Vec<String> {
    dynamic_entries(path, "NEEDED")
}

fn dynamic_entries(path: &Path, tag: &str) -> Vec<String> {
    let out = run("readelf", &["-d", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "readelf -d {}: {:?}",
        path.display(),
        out
    );
    stdout(&out)
        .lines()
        .filter(|l| l.contains(&format!("({tag})")))
        .filter_map(|l| {
            let start = l.find('[')? + 1;
            let end = l.rfind(']')?;
            Some(l[start..end].to_string())
        })
        .collect()
}

pub fn is_elf(path: &Path) -> bool {
    std::fs::read(path)
        .map(|b| b.starts_with(b"\x7fELF"))
        .unwrap_or(false)
}

/// (major, minor, permission bits) of a character device, or a panic.
pub fn char_device(path: &Path) -> (u32, u32, u32) {
    let m =
        std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display()));
    assert!(
        m.file_type().is_char_device(),
        "{} is not a char device",
        path.display()
    );
    let rdev = m.rdev();
    (
        libc::major(rdev),
        libc::minor(rdev),
        m.permissions().mode() & 0o7777,
    )
}

pub fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

pub fn mknod(path: &Path, major: u32, minor: u32, mode: u32) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: valid C string for the duration of the call.
    let rc = unsafe {
        libc::mknod(
            c.as_ptr(),
            libc::S_IFCHR | mode,
            libc::makedev(major, minor),
        )
    };
    assert_eq!(
        rc,
        0,
        "mknod {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// "Key: \t value" lines of an nv-procfs file.
pub fn proc_field(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_string())
    })
}

pub fn ldconfig() -> &'static str {
    for p in ["/usr/sbin/ldconfig", "/sbin/ldconfig"] {
        if Path::new(p).exists() {
            return p;
        }
    }
    panic!("ldconfig not found: apt-get install libc-bin");
}

/// Whether nothing is at `path`, not even a dangling symlink. `Path::exists` follows links and
/// says false on any error, so `!exists()` holds for a dangling link or an unreadable parent too;
/// this panics on any error but "not found".
pub fn absent(path: &Path) -> bool {
    match std::fs::symlink_metadata(path) {
        Ok(_) => false,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => panic!("stat {}: {e}", path.display()),
    }
}
