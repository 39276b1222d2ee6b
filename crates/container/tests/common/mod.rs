//! Helpers shared by the integration tests: a sentinel host directory that
//! must never change, fixture libraries built with gcc, and the tools that
//! check results independently of this crate (chroot, ldconfig -p, readelf).
#![allow(dead_code)]

use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Run a program; a missing tool fails the test instead of skipping it.
pub fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} (is it installed?): {e}"))
}

/// Run and require success; returns stdout.
pub fn run_ok(program: &str, args: &[&str]) -> String {
    let out = run(program, args);
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Everything about a host tree an escape could change: paths, modes,
/// contents and link targets, sorted.
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, u32, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let m = std::fs::symlink_metadata(&d).unwrap();
        let content = if m.file_type().is_symlink() {
            std::fs::read_link(&d).unwrap().into_os_string().into_vec()
        } else if m.is_file() {
            std::fs::read(&d).unwrap()
        } else {
            todo.extend(std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().path()));
            Vec::new()
        };
        out.push((d, m.mode(), content));
    }
    out.sort();
    out
}

/// `host` as a path under `root`: where in-root resolution of the
/// absolute host path lands.
pub fn rerooted(root: &Path, host: &Path) -> PathBuf {
    root.join(host.strip_prefix("/").unwrap())
}

/// Builds a shared object `out` with `soname` from a tiny C source.
pub fn build_lib(out: &Path, soname: &str, symbol: &str) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("lib.c");
    std::fs::write(&src, format!("int {symbol}(void) {{ return 42; }}\n")).unwrap();
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    run_ok(
        "gcc",
        &[
            "-shared",
            "-fPIC",
            "-O0",
            &format!("-Wl,-soname,{soname}"),
            "-o",
            out.to_str().unwrap(),
            src.to_str().unwrap(),
        ],
    );
}

/// The bytes of one ELF note (4-byte aligned): owner, type, descriptor.
pub fn note_bytes(owner: &str, note_type: u32, desc: &[u8]) -> Vec<u8> {
    let mut name = owner.as_bytes().to_vec();
    name.push(0);
    let mut b = Vec::new();
    b.extend_from_slice(&(name.len() as u32).to_le_bytes());
    b.extend_from_slice(&(desc.len() as u32).to_le_bytes());
    b.extend_from_slice(&note_type.to_le_bytes());
    b.extend_from_slice(&name);
    b.resize(b.len().div_ceil(4) * 4, 0);
    b.extend_from_slice(desc);
    b.resize(b.len().div_ceil(4) * 4, 0);
    b
}

/// Adds `.note.cuda.fwd_compatibility` (SHT_NOTE, owner "NVIDIA
/// Corporation", JSON `desc`) to `lib` with objcopy.
pub fn add_cuda_note(lib: &Path, desc: &str) {
    let dir = tempfile::tempdir().unwrap();
    let note = dir.path().join("note.bin");
    std::fs::write(&note, note_bytes("NVIDIA Corporation", 1, desc.as_bytes())).unwrap();
    let sec = ".note.cuda.fwd_compatibility";
    run_ok(
        "objcopy",
        &[
            "--add-section",
            &format!("{sec}={}", note.display()),
            "--set-section-flags",
            &format!("{sec}=readonly,contents"),
            lib.to_str().unwrap(),
        ],
    );
    let sections = run_ok("readelf", &["-S", "-W", lib.to_str().unwrap()]);
    let line = sections
        .lines()
        .find(|l| l.contains(sec))
        .unwrap_or_else(|| panic!("objcopy did not add {sec}:\n{sections}"));
    assert!(line.contains("NOTE"), "{sec} is not SHT_NOTE: {line}");
}

pub fn mknod(path: &Path, major: u32, minor: u32, mode: u32) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
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
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
}

pub fn ldconfig() -> &'static str {
    for p in ["/usr/sbin/ldconfig", "/sbin/ldconfig"] {
        if Path::new(p).exists() {
            return p;
        }
    }
    panic!("ldconfig not found: apt-get install libc-bin");
}

/// `ldconfig -p -C <cache>`: `(soname, arch text, path)` per entry.
pub fn ldconfig_p(cache: &Path) -> Vec<(String, String, String)> {
    let text = run_ok(ldconfig(), &["-p", "-C", cache.to_str().unwrap()]);
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let (left, path) = l.split_once(" => ")?;
            let left = left.trim();
            let (name, arch) = left.split_once(' ')?;
            Some((name.to_string(), arch.to_string(), path.trim().to_string()))
        })
        .collect()
}

/// `chroot root cmd...`.
pub fn chroot(root: &Path, cmd: &[&str]) -> Output {
    let mut args = vec![root.to_str().unwrap()];
    args.extend_from_slice(cmd);
    run("chroot", &args)
}
