//! Unit tests of [`Root`] on temp trees, most with a malicious image: each
//! asserts the in-root result and that a host directory outside the root
//! is byte for byte unchanged.

use super::*;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;

/// A temp dir holding `root/` (the container) and `host/` (a sentinel host
/// directory outside it, with a file `secret` mode 0600).
struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    host: PathBuf,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let host = tmp.path().join("host");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("secret"), b"host secret\n").unwrap();
    std::fs::set_permissions(host.join("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::create_dir(host.join("sub")).unwrap();
    Fixture {
        _tmp: tmp,
        root,
        host,
    }
}

/// Everything about a host tree that an escape could change.
pub(crate) fn snapshot(dir: &Path) -> Vec<(PathBuf, u32, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let m = std::fs::symlink_metadata(&d).unwrap();
        let content = if m.file_type().is_symlink() {
            std::fs::read_link(&d).unwrap().into_os_string().into_vec()
        } else if m.is_file() {
            std::fs::read(&d).unwrap()
        } else {
            let mut names: Vec<_> = std::fs::read_dir(&d)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            names.sort();
            todo.extend(names);
            Vec::new()
        };
        out.push((d, m.mode(), content));
    }
    out.sort();
    out
}

/// `host` as a path under `root` (where in-root resolution of the absolute
/// host path lands).
fn rerooted(root: &Path, host: &Path) -> PathBuf {
    root.join(host.strip_prefix("/").unwrap())
}

#[test]
fn reads_files_with_a_cap() {
    let f = fixture();
    std::fs::write(f.root.join("etc/a"), b"hello").unwrap();
    let r = Root::open(&f.root).unwrap();
    assert_eq!(r.read_to_vec("/etc/a", 5).unwrap(), b"hello");
    assert!(matches!(
        r.read_to_vec("/etc/a", 4),
        Err(RootError::TooLarge {
            size: 5,
            cap: 4,
            ..
        })
    ));
    assert!(r
        .read_to_vec("/etc/missing", 10)
        .unwrap_err()
        .is_not_found());
    let m = r.metadata("/etc/a").unwrap();
    assert_eq!((m.kind, m.size), (FileKind::File, 5));
    assert_eq!(r.metadata("/etc").unwrap().kind, FileKind::Dir);
    assert_eq!(
        r.read_dir_names_limited("/etc", 64).unwrap(),
        vec!["a".to_string()]
    );
    assert_eq!(
        r.read_dir_names_limited("/", 64).unwrap(),
        vec!["etc".to_string()]
    );
}

#[test]
fn open_read_refuses_a_fifo_without_blocking() {
    let f = fixture();
    let p = CString::new(f.root.join("etc/fifo").as_os_str().as_bytes()).unwrap();
    let cwd = rustix::fs::CWD;
    sys::mknodat(cwd, &p, libc::S_IFIFO, 0o644, 0).unwrap();
    let r = Root::open(&f.root).unwrap();
    assert!(matches!(
        r.open_read("/etc/fifo"),
        Err(RootError::NotRegular {
            kind: FileKind::Fifo,
            ..
        })
    ));
}

#[test]
fn reads_through_absolute_symlink_stay_in_root() {
    let f = fixture();
    let before = snapshot(&f.host);
    symlink(f.host.join("secret"), f.root.join("etc/passwd")).unwrap();
    symlink(&f.host, f.root.join("hostdir")).unwrap();
    let r = Root::open(&f.root).unwrap();
    // The host file is not reachable: the link resolves to <root>/<host>/secret.
    assert!(r
        .read_to_vec("/etc/passwd", 100)
        .unwrap_err()
        .is_not_found());
    assert!(r
        .read_dir_names_limited("/hostdir", 64)
        .unwrap_err()
        .is_not_found());
    // With an in-root copy at the re-rooted place, that copy is read.
    let inroot = rerooted(&f.root, &f.host);
    std::fs::create_dir_all(&inroot).unwrap();
    std::fs::write(inroot.join("secret"), b"container file").unwrap();
    assert_eq!(
        r.read_to_vec("/etc/passwd", 100).unwrap(),
        b"container file"
    );
    assert_eq!(
        r.read_dir_names_limited("/hostdir", 64).unwrap(),
        vec!["secret"]
    );
    assert_eq!(snapshot(&f.host), before);
}

#[test]
fn dotdot_escapes_are_clamped() {
    let f = fixture();
    std::fs::write(f.root.join("etc/x"), b"in root").unwrap();
    let r = Root::open(&f.root).unwrap();
    assert_eq!(
        r.read_to_vec("/../../../../etc/x", 100).unwrap(),
        b"in root"
    );
    symlink("../../../../../../../../etc", f.root.join("etc2")).unwrap();
    assert_eq!(r.read_to_vec("/etc2/x", 100).unwrap(), b"in root");
    assert_eq!(r.canonicalize("/etc2/x").unwrap(), "/etc/x");
    assert_eq!(r.canonicalize("/../etc2/../etc/x").unwrap(), "/etc/x");
}

#[test]
fn write_through_absolute_symlinked_parent_never_reaches_host() {
    let f = fixture();
    let before = snapshot(&f.host);
    std::fs::remove_dir(f.root.join("etc")).unwrap();
    symlink(&f.host, f.root.join("etc")).unwrap();
    let r = Root::open(&f.root).unwrap();

    // The parent does not exist inside the root: refused, nothing written.
    let e = r
        .write_file_atomic("/etc/ld.so.cache", b"x", 0o644)
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
    let e = r.symlink_force("x", "/etc/link").unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert!(r.chmod("/etc/secret", 0o777).unwrap_err().is_not_found());
    assert_eq!(snapshot(&f.host), before);

    // mkdir -p follows the dangling link inside the root.
    r.mkdir_all("/etc/ld.so.conf.d", 0o755).unwrap();
    let inroot = rerooted(&f.root, &f.host);
    assert!(inroot.join("ld.so.conf.d").is_dir());
    r.write_file_atomic("/etc/ld.so.conf.d/a.conf", b"/x\n", 0o644)
        .unwrap();
    assert_eq!(
        std::fs::read(inroot.join("ld.so.conf.d/a.conf")).unwrap(),
        b"/x\n"
    );
    assert_eq!(snapshot(&f.host), before);
}

#[test]
fn write_through_relative_escaping_parent_stays_in_root() {
    let f = fixture();
    let before = snapshot(&f.host);
    // ../../../../<host> from /etc climbs to the root, then into <root>/<host>.
    let rel = format!("../../../../../../..{}", f.host.display());
    std::fs::remove_dir(f.root.join("etc")).unwrap();
    symlink(&rel, f.root.join("etc")).unwrap();
    let inroot = rerooted(&f.root, &f.host);
    std::fs::create_dir_all(&inroot).unwrap();
    let r = Root::open(&f.root).unwrap();
    r.write_file_atomic("/etc/secret", b"replaced in root", 0o640)
        .unwrap();
    assert_eq!(
        std::fs::read(inroot.join("secret")).unwrap(),
        b"replaced in root"
    );
    assert_eq!(
        std::fs::metadata(inroot.join("secret")).unwrap().mode() & 0o7777,
        0o640
    );
    assert_eq!(snapshot(&f.host), before);
}

#[test]
fn a_symlinked_target_file_is_replaced_not_followed() {
    let f = fixture();
    let before = snapshot(&f.host);
    symlink(f.host.join("secret"), f.root.join("etc/ld.so.cache")).unwrap();
    let r = Root::open(&f.root).unwrap();
    r.write_file_atomic("/etc/ld.so.cache", b"new cache", 0o644)
        .unwrap();
    let m = std::fs::symlink_metadata(f.root.join("etc/ld.so.cache")).unwrap();
    assert!(m.is_file());
    assert_eq!(m.mode() & 0o7777, 0o644);
    assert_eq!(
        std::fs::read(f.root.join("etc/ld.so.cache")).unwrap(),
        b"new cache"
    );
    assert_eq!(snapshot(&f.host), before);
    // No temporary files left behind.
    assert_eq!(
        r.read_dir_names_limited("/etc", 64).unwrap(),
        vec!["ld.so.cache"]
    );
}

#[test]
fn write_refuses_to_replace_a_directory_and_keeps_old_file_on_error() {
    let f = fixture();
    std::fs::create_dir(f.root.join("etc/d")).unwrap();
    let r = Root::open(&f.root).unwrap();
    assert!(matches!(
        r.write_file_atomic("/etc/d", b"x", 0o644),
        Err(RootError::IsDirectory { .. })
    ));
    assert!(f.root.join("etc/d").is_dir());
    assert!(matches!(
        r.write_file_atomic("/", b"x", 0o644),
        Err(RootError::InvalidPath { .. })
    ));
    assert!(matches!(
        r.write_file_atomic("/etc/..", b"x", 0o644),
        Err(RootError::InvalidPath { .. })
    ));
}

/// A file read moments before is replaced with no second look; a folder put in its place
/// meanwhile is still refused by name (the rename's `EISDIR`), and no temp file is left.
#[test]
fn a_file_read_before_is_replaced_and_a_folder_swapped_in_refused() {
    let f = fixture();
    let r = Root::open(&f.root).unwrap();
    let etc = r.open_dir("/etc").unwrap();
    std::fs::write(f.root.join("etc/c"), b"old").unwrap();
    let seen = etc.lstat("c").unwrap().unwrap();
    assert!(etc
        .write_file_if_changed("c", b"new", 0o644, Some((&seen, b"old")))
        .unwrap());
    assert_eq!(std::fs::read(f.root.join("etc/c")).unwrap(), b"new");
    std::fs::remove_file(f.root.join("etc/c")).unwrap();
    std::fs::create_dir(f.root.join("etc/c")).unwrap();
    let e = etc
        .write_file_if_changed("c", b"newer", 0o644, Some((&seen, b"old")))
        .unwrap_err();
    assert!(matches!(e, RootError::IsDirectory { .. }), "{e}");
    let left: Vec<_> = std::fs::read_dir(f.root.join("etc"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("gpuctk"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A folder's own `symlink_force` makes a link of one name in it, never through a path.
#[test]
fn dir_symlink_force_takes_one_name() {
    let f = fixture();
    let before = snapshot(&f.host);
    let r = Root::open(&f.root).unwrap();
    let etc = r.open_dir("/etc").unwrap();
    assert_eq!(etc.symlink_force("a", "l").unwrap(), LinkOutcome::Created);
    assert_eq!(etc.symlink_force("a", "l").unwrap(), LinkOutcome::Unchanged);
    assert_eq!(
        std::fs::read_link(f.root.join("etc/l")).unwrap(),
        PathBuf::from("a")
    );
    for bad in ["", ".", "..", "../l", "../../host/x"] {
        let e = etc.symlink_force("a", bad).unwrap_err();
        assert!(matches!(e, RootError::InvalidPath { .. }), "{bad:?}: {e}");
    }
    assert!(matches!(
        etc.symlink_force("", "m"),
        Err(RootError::InvalidPath { .. })
    ));
    assert_eq!(snapshot(&f.host), before);
}

/// A link that is there already is `Unchanged` where nothing may be written (a read-only root:
/// the link is made first, and only its failure reads what is there), and any other failure
/// to make it is still an error naming it. The check runs in this test binary again, in a
/// mount namespace of its own where the root is a read-only bind mount.
#[test]
fn an_existing_link_on_a_read_only_root_is_unchanged() {
    if let Some(root) = std::env::var_os("GPUCTK_TEST_RO_ROOT") {
        let r = Root::open(Path::new(&root)).unwrap();
        assert_eq!(
            r.symlink_force("a", "/etc/l").unwrap(),
            LinkOutcome::Unchanged
        );
        let e = r.symlink_force("b", "/etc/l").unwrap_err().to_string();
        assert!(e.contains("/etc/l") && e.contains("symlink"), "{e}");
        let e = r.symlink_force("a", "/etc/new").unwrap_err().to_string();
        assert!(e.contains("/etc/new") && e.contains("Read-only"), "{e}");
        println!("checked on a read-only root");
        return;
    }
    let f = fixture();
    symlink("a", f.root.join("etc/l")).unwrap();
    let root = f.root.display().to_string();
    let out = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount --bind \"$1\" \"$1\" && mount -o remount,bind,ro \"$1\" && exec \"$2\" --exact root::tests::an_existing_link_on_a_read_only_root_is_unchanged --nocapture")
        .args(["sh", &root])
        .arg(std::env::current_exe().unwrap())
        .env("GPUCTK_TEST_RO_ROOT", &root)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("checked on a read-only root"), "{text}");
}

#[test]
fn symlink_force_has_ln_sf_semantics() {
    let f = fixture();
    let r = Root::open(&f.root).unwrap();
    assert_eq!(
        r.symlink_force("a", "/etc/l").unwrap(),
        LinkOutcome::Created
    );
    assert_eq!(
        r.symlink_force("a", "/etc/l").unwrap(),
        LinkOutcome::Unchanged
    );
    assert_eq!(
        r.symlink_force("b", "/etc/l").unwrap(),
        LinkOutcome::Replaced
    );
    assert_eq!(
        std::fs::read_link(f.root.join("etc/l")).unwrap(),
        PathBuf::from("b")
    );
    std::fs::write(f.root.join("etc/file"), b"x").unwrap();
    assert_eq!(
        r.symlink_force("b", "/etc/file").unwrap(),
        LinkOutcome::Replaced
    );
    assert!(std::fs::symlink_metadata(f.root.join("etc/file"))
        .unwrap()
        .file_type()
        .is_symlink());
    std::fs::create_dir(f.root.join("etc/dir")).unwrap();
    assert!(matches!(
        r.symlink_force("b", "/etc/dir"),
        Err(RootError::IsDirectory { .. })
    ));
    assert!(f.root.join("etc/dir").is_dir());
    assert_eq!(r.read_link("/etc/l").unwrap(), OsString::from("b"));
    let names = r.read_dir_names_limited("/etc", 64).unwrap();
    assert_eq!(names, vec!["dir", "file", "l"]);
}

#[test]
fn symlink_force_through_host_symlink_stays_in_root() {
    let f = fixture();
    let before = snapshot(&f.host);
    symlink(&f.host, f.root.join("lib")).unwrap();
    let inroot = rerooted(&f.root, &f.host);
    std::fs::create_dir_all(&inroot).unwrap();
    let r = Root::open(&f.root).unwrap();
    // /lib/secret resolves to <root>/<host>/secret, which does not exist.
    assert_eq!(
        r.symlink_force("/etc/shadow", "/lib/secret").unwrap(),
        LinkOutcome::Created
    );
    assert_eq!(
        std::fs::read_link(inroot.join("secret")).unwrap(),
        PathBuf::from("/etc/shadow")
    );
    assert_eq!(snapshot(&f.host), before);
}

#[test]
fn chmod_follows_links_only_inside_root() {
    let f = fixture();
    let before = snapshot(&f.host);
    std::fs::write(f.root.join("etc/file"), b"x").unwrap();
    symlink(f.host.join("secret"), f.root.join("etc/evil")).unwrap();
    symlink("file", f.root.join("etc/good")).unwrap();
    let r = Root::open(&f.root).unwrap();
    for try2 in [true, false] {
        assert!(r
            .chmod_impl("/etc/evil", 0o666, try2)
            .unwrap_err()
            .is_not_found());
        r.chmod_impl("/etc/good", 0o600, try2).unwrap();
        assert_eq!(r.metadata("/etc/file").unwrap().mode, 0o600);
        r.chmod_impl("/etc/file", 0o751, try2).unwrap();
        assert_eq!(r.metadata("/etc/file").unwrap().mode, 0o751);
        r.chmod_impl("/etc", 0o711, try2).unwrap();
        assert_eq!(r.metadata("/etc").unwrap().mode, 0o711);
        r.chmod_impl("/etc", 0o755, try2).unwrap();
        // The link itself is untouched.
        assert_eq!(
            r.symlink_metadata("/etc/good").unwrap().kind,
            FileKind::Symlink
        );
    }
    // With an in-root file at the re-rooted place, that file changes.
    let inroot = rerooted(&f.root, &f.host);
    std::fs::create_dir_all(&inroot).unwrap();
    std::fs::write(inroot.join("secret"), b"c").unwrap();
    r.chmod("/etc/evil", 0o604).unwrap();
    assert_eq!(
        std::fs::metadata(inroot.join("secret")).unwrap().mode() & 0o7777,
        0o604
    );
    assert_eq!(snapshot(&f.host), before);
}

#[test]
fn chmod_of_device_nodes_without_opening_them() {
    let f = fixture();
    std::fs::create_dir(f.root.join("dev")).unwrap();
    let p = CString::new(f.root.join("dev/nvidia0").as_os_str().as_bytes()).unwrap();
    // 195:0 has no driver here: opening it would fail.
    sys::mknodat(
        rustix::fs::CWD,
        &p,
        libc::S_IFCHR,
        0o600,
        sys::makedev(195, 0),
    )
    .unwrap();
    symlink("/dev/nvidia0", f.root.join("dev/link0")).unwrap();
    let r = Root::open(&f.root).unwrap();
    for (try2, mode) in [(true, 0o666), (false, 0o660)] {
        r.chmod_impl("/dev/link0", mode, try2).unwrap();
        let m = r.metadata("/dev/nvidia0").unwrap();
        assert_eq!((m.kind, m.mode), (FileKind::CharDevice, mode));
    }
}

#[test]
fn canonicalize_resolves_in_root() {
    let f = fixture();
    std::fs::create_dir_all(f.root.join("usr/local/cuda-12.9/compat")).unwrap();
    symlink("cuda-12.9", f.root.join("usr/local/cuda")).unwrap();
    symlink("/usr/local", f.root.join("opt")).unwrap();
    symlink(&f.host, f.root.join("evil")).unwrap();
    let r = Root::open(&f.root).unwrap();
    assert_eq!(
        r.canonicalize("/usr/local/cuda/compat").unwrap(),
        "/usr/local/cuda-12.9/compat"
    );
    assert_eq!(
        r.canonicalize("/opt/cuda/compat/").unwrap(),
        "/usr/local/cuda-12.9/compat"
    );
    assert_eq!(r.canonicalize("/").unwrap(), "/");
    assert_eq!(
        r.canonicalize("/usr/local/cuda").unwrap(),
        "/usr/local/cuda-12.9"
    );
    assert!(r.canonicalize("/evil").unwrap_err().is_not_found());
    assert!(r.canonicalize("/usr/nope").unwrap_err().is_not_found());
    symlink("loop2", f.root.join("loop1")).unwrap();
    symlink("loop1", f.root.join("loop2")).unwrap();
    assert!(matches!(
        r.canonicalize("/loop1"),
        Err(RootError::Loop { .. })
    ));
    std::fs::write(f.root.join("etc/file"), b"").unwrap();
    assert_eq!(
        r.canonicalize("/etc/file/x").unwrap_err().errno(),
        Some(libc::ENOTDIR)
    );
}

#[test]
fn mkdir_all_creates_components_and_refuses_files() {
    let f = fixture();
    let r = Root::open(&f.root).unwrap();
    r.mkdir_all("/a/b/c", 0o755).unwrap();
    assert!(f.root.join("a/b/c").is_dir());
    r.mkdir_all("/a/b/c", 0o755).unwrap();
    std::fs::write(f.root.join("a/file"), b"").unwrap();
    assert_eq!(
        r.mkdir_all("/a/file/x", 0o755).unwrap_err().errno(),
        Some(libc::ENOTDIR)
    );
    assert!(matches!(
        r.mkdir_all("/a/new/../x", 0o755),
        Err(RootError::InvalidPath { .. })
    ));
    symlink("a/b", f.root.join("ab")).unwrap();
    r.mkdir_all("/ab/d", 0o755).unwrap();
    assert!(f.root.join("a/b/d").is_dir());
}

#[test]
fn paths_with_nul_are_rejected() {
    let f = fixture();
    let r = Root::open(&f.root).unwrap();
    assert!(matches!(
        r.metadata("/etc\0/x"),
        Err(RootError::InvalidPath { .. })
    ));
    assert!(matches!(
        r.symlink_force("a\0b", "/etc/x"),
        Err(RootError::InvalidPath { .. })
    ));
    assert!(Root::open(f.root.join("nonexistent")).is_err());
}

/// The crate's one `openat2` wrapper takes a `&CString` as legacy injection passes it (through
/// deref), resolves `..` and absolute symlinks inside the directory with `RESOLVE_IN_ROOT`, and
/// gives a close-on-exec descriptor.
#[test]
fn openat2_wrapper_resolves_in_root() {
    let f = fixture();
    std::fs::write(f.root.join("etc/x"), b"in root").unwrap();
    symlink("/etc/x", f.root.join("abs")).unwrap();
    let dir = File::open(&f.root).unwrap();
    for path in ["../../etc/x", "abs", "/etc/x"] {
        let c = CString::new(path).unwrap();
        let fd = openat2(dir.as_fd(), &c, libc::O_RDONLY, libc::RESOLVE_IN_ROOT).unwrap();
        let fl = rustix::io::fcntl_getfd(&fd).unwrap();
        assert!(fl.contains(rustix::io::FdFlags::CLOEXEC), "{path}");
        let text = std::io::read_to_string(File::from(fd)).unwrap();
        assert_eq!(text, "in root", "{path}");
    }
    let c = CString::new("abs").unwrap();
    let e = openat2(dir.as_fd(), &c, libc::O_RDONLY, libc::RESOLVE_NO_SYMLINKS).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
}

/// A listing stops at its cap with TooManyEntries instead of reading every name.
#[test]
fn listings_are_capped() {
    let f = fixture();
    for i in 0..10 {
        std::fs::write(f.root.join(format!("etc/f{i}")), b"").unwrap();
    }
    let r = Root::open(&f.root).unwrap();
    assert_eq!(r.read_dir_names_limited("/etc", 10).unwrap().len(), 10);
    assert!(matches!(
        r.read_dir_names_limited("/etc", 9),
        Err(RootError::TooManyEntries { cap: 9, .. })
    ));
}

/// Regression (CI, stop 15): a file atomically replaced by another writer between the type
/// check and the open (25 shims rewriting `/etc/ld.so.cache` in one shared rootfs) made
/// `open_read` fail with "changed while it was being resolved"; it must read one version whole.
#[test]
fn open_read_survives_a_file_replaced_by_rename() {
    let f = fixture();
    let a = b"version a".repeat(100);
    let b = b"version b".repeat(120);
    std::fs::write(f.root.join("etc/cache"), &a).unwrap();
    let r = Root::open(&f.root).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let tmp = f.root.join(format!("etc/.cache.{n}"));
                std::fs::write(&tmp, if n % 2 == 0 { &b } else { &a }).unwrap();
                std::fs::rename(&tmp, f.root.join("etc/cache")).unwrap();
                n += 1;
            }
        });
        let result = (|| {
            for _ in 0..20_000 {
                let got = r.read_to_vec("/etc/cache", 4096)?;
                assert!(got == a || got == b, "{} bytes: neither version", got.len());
            }
            Ok::<_, RootError>(())
        })();
        stop.store(true, Ordering::Relaxed);
        result.unwrap();
    });
}

/// Regression (issue 17): the walk behind `canonicalize`, `mkdir_all` and `resolve_lexically`
/// opened the whole prefix from the root again for every component, so a path n components
/// deep cost about n² kernel lookups (an image's chain of deep symlinks made one
/// `create-symlinks` take 35 s). It now moves one directory descriptor along: the bytes of path
/// handed to the kernel stay a small multiple of the path's length.
#[test]
fn walk_work_is_linear_in_the_path() {
    let f = fixture();
    let depth = 1000;
    let path = format!("/{}", vec!["d"; depth].join("/"));
    std::fs::create_dir_all(f.root.join(&path[1..])).unwrap();
    let r = Root::open(&f.root).unwrap();
    OPENAT2_PATH_BYTES.with(|c| c.set(0));
    assert_eq!(r.canonicalize(&path).unwrap(), path);
    r.mkdir_all(&format!("{path}/new/er"), 0o755).unwrap();
    assert!(f.root.join(&path[1..]).join("new/er").is_dir());
    let lexical = r.resolve_lexically(&format!("{path}/../d/x/y")).unwrap();
    assert_eq!(lexical, format!("{path}/x/y"));
    let bytes = OPENAT2_PATH_BYTES.with(|c| c.get());
    assert!(
        bytes < 20 * path.len() as u64,
        "{bytes} bytes of path resolved by the kernel for three walks of {} bytes",
        path.len()
    );
}

/// The walk's budget (issue 17): a path whose symlinks expand past [`MAX_WALK_COMPONENTS`]
/// components stops at once with an error naming it; within the budget the same kind of link
/// (thousands of `..` and names) resolves where the kernel's resolution leads.
#[test]
fn walk_stops_past_its_component_budget() {
    let f = fixture();
    let a = f.root.join("a");
    std::fs::create_dir_all(a.join("end")).unwrap();
    let hops = "../a/".repeat(800);
    for (link, next) in [("L0", "L1"), ("L1", "L2"), ("L2", "end")] {
        symlink(format!("{hops}{next}"), a.join(link)).unwrap();
    }
    let r = Root::open(&f.root).unwrap();
    assert_eq!(r.canonicalize("/a/L2").unwrap(), "/a/end");
    assert_eq!(r.canonicalize("/../../a/../a/L1").unwrap(), "/a/end");
    r.mkdir_all("/a/L2/new", 0o755).unwrap();
    assert!(a.join("end/new").is_dir());
    assert_eq!(r.resolve_lexically("/a/L1/x/y").unwrap(), "/a/end/x/y");
    for e in [
        r.canonicalize("/a/L0").unwrap_err(),
        r.mkdir_all("/a/L0/x", 0o755).unwrap_err(),
        r.resolve_lexically("/a/L0/x").unwrap_err(),
    ] {
        assert!(
            matches!(
                e,
                RootError::TooManyComponents {
                    cap: MAX_WALK_COMPONENTS,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().starts_with("/a/L0"), "{e}");
    }
    assert!(!a.join("end/x").exists());
}

/// The shim's resolver of many paths (issue 21): the answers of [`Root::resolve_lexically`],
/// with the kernel's `openat2` and with its userspace emulation, and each folder opened once:
/// a second path in a folder already walked, or through a symlink already read, opens nothing.
#[test]
fn lexical_resolver_agrees_and_opens_each_folder_once() {
    let f = fixture();
    let r = &f.root;
    for d in [
        "usr/lib/x86_64-linux-gnu",
        "etc/nvidia",
        "proc",
        "deep/a/b/c",
    ] {
        std::fs::create_dir_all(r.join(d)).unwrap();
    }
    symlink("usr/lib", r.join("lib")).unwrap();
    symlink("/usr/lib", r.join("usr/lib64")).unwrap();
    symlink("../../../etc", r.join("usr/lib/x86_64-linux-gnu/up")).unwrap();
    symlink("/proc/self/root/etc", r.join("etc/magic")).unwrap();
    symlink(&f.host, r.join("etc/host")).unwrap();
    symlink("loop", r.join("etc/loop")).unwrap();
    std::fs::write(r.join("etc/file"), b"x").unwrap();
    let host_before = snapshot(&f.host);
    let paths = [
        "/",
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
        "/usr/lib64/x86_64-linux-gnu/x",
        "/usr/lib/x86_64-linux-gnu/up/nvidia/x",
        "/lib/x86_64-linux-gnu/../../../../etc/ld.so.cache",
        "/etc/magic/x",
        "/etc/host/secret",
        "/etc/loop",
        "/etc/file/x",
        "/etc/file",
        "/deep/a/b/c/../../b/c/d",
        "/missing/../x",
        "/missing/x/y",
    ];
    for force in [false, true] {
        opath::FORCE.with(|c| c.set(force));
        let root = Root::open(r).unwrap();
        let mut walked = Root::open(r).unwrap();
        let mut resolver = LexicalResolver::new(&mut walked);
        for p in paths {
            for _ in 0..2 {
                let (a, b) = (resolver.resolve(p), root.resolve_lexically(p));
                assert_eq!(
                    a.as_ref().map_err(ToString::to_string),
                    b.as_ref().map_err(ToString::to_string),
                    "{p} (emulated: {force})"
                );
            }
        }
        // Every folder of these is open already: what goes to openat2 is their new last names,
        // each looked up once, no folder again.
        OPENAT2_PATH_BYTES.with(|c| c.set(0));
        let more = [
            "/usr/lib/x86_64-linux-gnu/libcudadebugger.so.1",
            "/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1",
            "/usr/lib/x86_64-linux-gnu/up/nvidia/y",
            "/deep/a/b/c/e",
        ];
        for p in more.iter().chain(&more) {
            resolver.resolve(p).unwrap();
        }
        let names: usize = more
            .iter()
            .map(|p| p.rsplit('/').next().unwrap().len())
            .sum();
        assert_eq!(
            OPENAT2_PATH_BYTES.with(|c| c.get()),
            names as u64,
            "emulated: {force}"
        );
        opath::FORCE.with(|c| c.set(false));
    }
    assert_eq!(
        snapshot(&f.host),
        host_before,
        "the host directory is left alone"
    );
}

/// Issue 21: a folder that the paths handed to [`LexicalResolver::expect`] end in eight times
/// or more is listed once, and the names the listing settles (missing, a file, a symlink) are
/// not looked up: only folders are opened. The answers are [`Root::resolve_lexically`]'s, for
/// files, links to files, to folders, out of the root and dangling; and a folder too big to
/// list whole has its names looked up as before. A symlink on the way is read with no `lstat`.
#[test]
fn a_resolver_answers_the_names_of_a_listed_folder_from_the_listing() {
    let f = fixture();
    let r = &f.root;
    let lib = r.join("usr/lib/x86_64-linux-gnu");
    std::fs::create_dir_all(lib.join("sub")).unwrap();
    std::fs::create_dir_all(r.join("etc")).unwrap();
    std::fs::create_dir_all(r.join("big")).unwrap();
    std::fs::write(lib.join("libA.so.1"), b"x").unwrap();
    symlink("libA.so.1", lib.join("libB.so.1")).unwrap();
    symlink("/etc", lib.join("up")).unwrap();
    symlink(&f.host, lib.join("host")).unwrap();
    symlink("nothing", lib.join("dangling")).unwrap();
    for i in 0..=walk::MAX_LISTED {
        std::fs::write(r.join(format!("big/f{i}")), b"").unwrap();
    }
    symlink("/etc", r.join("big/up")).unwrap();
    let host_before = snapshot(&f.host);
    let leaves = [
        "libA.so.1",
        "libB.so.1",
        "missing.so.1",
        "up/x",
        "sub/y",
        "dangling",
        "host/secret",
        "libC.so.1",
        "libD.so.1",
        "libE.so.1",
        "libF.so.1",
    ];
    let paths: Vec<String> = leaves
        .iter()
        .map(|l| format!("/usr/lib/x86_64-linux-gnu/{l}"))
        .chain(["f1", "f2", "f3", "f4", "f5", "f6", "up/x", "none"].map(|l| format!("/big/{l}")))
        .collect();
    for force in [false, true] {
        opath::FORCE.with(|c| c.set(force));
        let root = Root::open(r).unwrap();
        for expect in [true, false] {
            let mut walked = Root::open(r).unwrap();
            let mut resolver = LexicalResolver::new(&mut walked);
            if expect {
                resolver.expect(paths.iter().map(String::as_str));
            }
            resolver.resolve("/usr/lib/x86_64-linux-gnu").unwrap();
            resolver.resolve("/big").unwrap();
            let want: Vec<_> = paths
                .iter()
                .map(|p| root.resolve_lexically(p).map_err(|e| e.to_string()))
                .collect();
            // What each path sent to `openat2`, in bytes of names.
            let mut sent = std::collections::HashMap::new();
            let got: Vec<_> = paths
                .iter()
                .map(|p| {
                    OPENAT2_PATH_BYTES.with(|c| c.set(0));
                    let r = resolver.resolve(p).map_err(|e| e.to_string());
                    sent.insert(p.as_str(), OPENAT2_PATH_BYTES.with(|c| c.get()));
                    r
                })
                .collect();
            assert_eq!(got, want, "emulated: {force}, listed: {expect}");
            // The names the listing settles cost no lookup; a folder is still opened (`sub`,
            // then `y` in it); `big` is too big to list, and its names are looked up.
            let lib = |l: &str| sent[format!("/usr/lib/x86_64-linux-gnu/{l}").as_str()];
            for l in [
                "libA.so.1",
                "libB.so.1",
                "missing.so.1",
                "libC.so.1",
                "libF.so.1",
            ] {
                let want = if expect { 0 } else { l.len() as u64 };
                assert_eq!(lib(l), want, "{l} (emulated: {force}, listed: {expect})");
            }
            assert_eq!(lib("sub/y"), 4, "emulated: {force}, listed: {expect}");
            assert_eq!(sent["/big/f1"], 2, "emulated: {force}, listed: {expect}");
            // A symlink met on the way is read, not `lstat`ed first, listed or not.
            let mut walked = Root::open(r).unwrap();
            let mut resolver = LexicalResolver::new(&mut walked);
            resolver.resolve("/big").unwrap();
            LSTATS.with(|c| c.set(0));
            assert_eq!(resolver.resolve("/big/up/x").unwrap(), "/etc/x");
            assert_eq!(LSTATS.with(|c| c.get()), 0, "emulated: {force}");
        }
        opath::FORCE.with(|c| c.set(false));
    }
    assert_eq!(
        snapshot(&f.host),
        host_before,
        "the host directory is left alone"
    );
}

/// Issue 21: the last name of a path handed to [`LexicalResolver::expect_files`] is read as a
/// link first, so a file there (a mount target a runtime made before, in a root that persists)
/// costs one `readlink` and no `openat2`; the answers are [`Root::resolve_lexically`]'s for a
/// file, links (relative, absolute, out of the root, dangling), a missing name, a folder, and
/// a later path through a name first seen that way, which is looked up again.
#[test]
fn a_resolver_reads_the_last_name_of_a_file_path_as_a_link_first() {
    let f = fixture();
    let r = &f.root;
    let bin = r.join("usr/bin");
    std::fs::create_dir_all(bin.join("dir")).unwrap();
    std::fs::write(bin.join("nvidia-smi"), b"").unwrap();
    std::fs::write(bin.join("dir/inner"), b"").unwrap();
    symlink("/etc", bin.join("dir/up")).unwrap();
    symlink("nvidia-smi", bin.join("rel")).unwrap();
    symlink("/usr/bin/nvidia-smi", bin.join("abs")).unwrap();
    symlink("/usr/bin/dir", bin.join("todir")).unwrap();
    symlink(&f.host, bin.join("host")).unwrap();
    symlink("nothing", bin.join("dangling")).unwrap();
    let host_before = snapshot(&f.host);
    let files: Vec<String> = [
        "nvidia-smi",
        "rel",
        "abs",
        "todir",
        "host",
        "dangling",
        "missing",
        "dir",
    ]
    .iter()
    .map(|n| format!("/usr/bin/{n}"))
    .collect();
    let after = [
        "/usr/bin/dir/inner",
        "/usr/bin/dir/up/x",
        "/usr/bin/todir/up/x",
        "/usr/bin/host/secret",
    ];
    for force in [false, true] {
        opath::FORCE.with(|c| c.set(force));
        let root = Root::open(r).unwrap();
        for as_files in [true, false] {
            let mut walked = Root::open(r).unwrap();
            let mut resolver = LexicalResolver::new(&mut walked);
            if as_files {
                resolver.expect_files(files.iter().map(String::as_str));
            }
            resolver.resolve("/usr/bin").unwrap();
            for p in files.iter().map(String::as_str).chain(after) {
                let want = root.resolve_lexically(p).map_err(|e| e.to_string());
                OPENAT2_PATH_BYTES.with(|c| c.set(0));
                let got = resolver.resolve(p).map_err(|e| e.to_string());
                let sent = OPENAT2_PATH_BYTES.with(|c| c.get());
                assert_eq!(got, want, "{p} (emulated: {force}, files: {as_files})");
                if p == "/usr/bin/nvidia-smi" {
                    let want = if as_files {
                        0
                    } else {
                        "nvidia-smi".len() as u64
                    };
                    assert_eq!(sent, want, "emulated: {force}, files: {as_files}");
                }
            }
        }
        opath::FORCE.with(|c| c.set(false));
    }
    assert_eq!(
        snapshot(&f.host),
        host_before,
        "the host directory is left alone"
    );
}

/// Issue 21: the names a resolver found missing go to its root with its folders
/// ([`LexicalResolver::keep_folders`]): [`Root::open_dir`] of a path through one says it is not
/// there with no lookup, while a path that only looks alike (through a symlink) is looked up,
/// and once the root's names change (a folder made there) the path is looked up again.
#[test]
fn a_root_knows_the_names_its_resolver_found_missing() {
    let f = fixture();
    let r = &f.root;
    std::fs::create_dir_all(r.join("usr/local")).unwrap();
    std::fs::create_dir_all(r.join("opt/cuda/compat")).unwrap();
    symlink("/opt", r.join("alt")).unwrap();
    for force in [false, true] {
        opath::FORCE.with(|c| c.set(force));
        let mut root = Root::open(r).unwrap();
        let mut resolver = LexicalResolver::new(&mut root);
        resolver.resolve("/usr/local/cuda/compat").unwrap();
        resolver.resolve("/alt/missing").unwrap();
        resolver.keep_folders();
        OPENAT2_PATH_BYTES.with(|c| c.set(0));
        let e = root.open_dir("/usr/local/cuda/compat").unwrap_err();
        assert!(e.is_not_found(), "{e}");
        assert!(root.open_dir("usr/local/cuda").unwrap_err().is_not_found());
        assert_eq!(OPENAT2_PATH_BYTES.with(|c| c.get()), 0, "emulated: {force}");
        // `opt/missing` was found missing, not `alt/missing`: looked up, and there.
        std::fs::create_dir_all(r.join("opt/missing")).unwrap();
        root.open_dir("/alt/missing").unwrap();
        root.open_dir("/opt/cuda/compat").unwrap();
        root.mkdir_all("/usr/local/cuda/compat", 0o755).unwrap();
        root.open_dir("/usr/local/cuda/compat").unwrap();
        std::fs::remove_dir_all(r.join("usr/local/cuda")).unwrap();
        std::fs::remove_dir_all(r.join("opt/missing")).unwrap();
        opath::FORCE.with(|c| c.set(false));
    }
}

/// Regression (issue 21): the folders a resolver opened are handed to its root
/// ([`LexicalResolver::keep_folders`]), which gives them to the work that follows without
/// resolving their paths again: two `Dir`s of one kept folder each list all of it, and a path
/// through a symlink, or one the resolver did not walk, is resolved as before.
#[test]
fn kept_folders_are_opened_without_a_resolution() {
    let f = fixture();
    let r = &f.root;
    let lib = r.join("usr/lib/x86_64-linux-gnu");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::create_dir_all(r.join("opt/x")).unwrap();
    std::fs::write(lib.join("a"), b"").unwrap();
    std::fs::write(lib.join("b"), b"").unwrap();
    symlink("usr/lib", r.join("lib")).unwrap();
    let md = std::fs::metadata(&lib).unwrap();
    let bytes = || OPENAT2_PATH_BYTES.with(|c| c.get());
    for force in [false, true] {
        opath::FORCE.with(|c| c.set(force));
        let mut root = Root::open(r).unwrap();
        let mut resolver = LexicalResolver::new(&mut root);
        resolver
            .resolve("/lib/x86_64-linux-gnu/libcuda.so.1")
            .unwrap();
        resolver.resolve("/etc/ld.so.cache").unwrap();
        resolver.keep_folders();
        OPENAT2_PATH_BYTES.with(|c| c.set(0));
        let one = root.open_dir("/usr/lib/x86_64-linux-gnu").unwrap();
        let two = root.open_dir("usr/lib/x86_64-linux-gnu/").unwrap();
        let etc = root.mkdir_all_open("/etc", 0o755).unwrap();
        let up = root.open_dir("usr").unwrap().open_dir("lib").unwrap();
        assert_eq!(
            bytes(),
            0,
            "kept folders resolved again (emulated: {force})"
        );
        for d in [&one, &two, &one, &up.open_dir("x86_64-linux-gnu").unwrap()] {
            assert_eq!(d.names(10).unwrap(), ["a", "b"], "emulated: {force}");
        }
        assert_eq!(one.id().unwrap(), (md.dev(), md.ino()));
        assert_eq!(etc.lstat("ld.so.cache").unwrap(), None);
        // Through the symlink, with a `..`, or not walked: resolved from the root as ever.
        for p in ["/lib/x86_64-linux-gnu", "/etc/../usr/lib/x86_64-linux-gnu"] {
            OPENAT2_PATH_BYTES.with(|c| c.set(0));
            assert_eq!(root.open_dir(p).unwrap().names(10).unwrap(), ["a", "b"]);
            assert!(bytes() > 0, "{p} (emulated: {force})");
        }
        OPENAT2_PATH_BYTES.with(|c| c.set(0));
        assert_eq!(root.open_dir("/opt").unwrap().names(10).unwrap(), ["x"]);
        assert!(bytes() > 0, "/opt (emulated: {force})");
        opath::FORCE.with(|c| c.set(false));
    }
}

/// Folders made below a kept one are made from it, one name at a time, with no resolution from
/// the root (the old way: a failed open of the whole path, a walk, and the whole path again); a symlink on the way is walked as ever (its folder made where it leads, inside).
#[test]
fn folders_below_a_kept_one_are_made_without_a_resolution() {
    let f = fixture();
    let r = &f.root;
    symlink("/opt", r.join("etc/link")).unwrap();
    let bytes = || OPENAT2_PATH_BYTES.with(|c| c.get());
    for force in [false, true] {
        opath::FORCE.with(|c| c.set(force));
        let _ = std::fs::remove_dir_all(r.join("etc/nvidia"));
        let _ = std::fs::remove_dir_all(r.join("opt"));
        let mut root = Root::open(r).unwrap();
        let mut resolver = LexicalResolver::new(&mut root);
        resolver.resolve("/etc/ld.so.cache").unwrap();
        resolver.keep_folders();
        OPENAT2_PATH_BYTES.with(|c| c.set(0));
        // Only the two new names are opened, each alone: "nvidia", "rc.d".
        let made = root.mkdir_all_open("/etc/nvidia/rc.d", 0o755).unwrap();
        assert_eq!(bytes(), 10, "resolved from the root (emulated: {force})");
        assert!(r.join("etc/nvidia/rc.d").is_dir());
        assert_eq!(made.lstat("x").unwrap(), None);
        // There already: opened the same way.
        root.mkdir_all_open("/etc/nvidia/rc.d", 0o755).unwrap();
        assert_eq!(bytes(), 20, "resolved from the root (emulated: {force})");
        root.mkdir_all_open("/etc/link/y", 0o755).unwrap();
        assert!(bytes() > 0, "a link walked (emulated: {force})");
        assert!(r.join("opt/y").is_dir(), "emulated: {force}");
        assert!(!f.host.join("y").exists());
        opath::FORCE.with(|c| c.set(false));
    }
}

/// A link in a kept folder whose listing shows its name is read first, else made first; either
/// way the outcome is what is there: the same link, another, none (gone since the listing, by
/// another process), or a folder, refused.
#[test]
fn links_in_a_listed_folder_have_ln_sf_outcomes_whatever_the_listing_says() {
    let f = fixture();
    let r = &f.root;
    let lib = r.join("usr/lib/x86_64-linux-gnu");
    std::fs::create_dir_all(lib.join("dir")).unwrap();
    for n in ["same", "other", "gone"] {
        symlink("t", lib.join(n)).unwrap();
    }
    for i in 0..8 {
        std::fs::write(lib.join(format!("f{i}")), b"").unwrap();
    }
    let mut root = Root::open(r).unwrap();
    let mut resolver = LexicalResolver::new(&mut root);
    let names: Vec<String> = ["same", "other", "gone", "dir", "new"]
        .iter()
        .chain(&["f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7"])
        .map(|n| format!("/usr/lib/x86_64-linux-gnu/{n}"))
        .collect();
    resolver.expect(names.iter().map(String::as_str));
    for n in &names {
        resolver.resolve(n).unwrap();
    }
    resolver.keep_folders();
    std::fs::remove_file(lib.join("gone")).unwrap();
    let d = root.open_dir("/usr/lib/x86_64-linux-gnu").unwrap();
    assert_eq!(
        d.symlink_force("t", "same").unwrap(),
        LinkOutcome::Unchanged
    );
    assert_eq!(
        d.symlink_force("u", "other").unwrap(),
        LinkOutcome::Replaced
    );
    assert_eq!(d.symlink_force("t", "gone").unwrap(), LinkOutcome::Created);
    assert_eq!(d.symlink_force("t", "new").unwrap(), LinkOutcome::Created);
    assert!(matches!(
        d.symlink_force("t", "dir"),
        Err(RootError::IsDirectory { .. })
    ));
    for (n, t) in [("same", "t"), ("other", "u"), ("gone", "t"), ("new", "t")] {
        assert_eq!(
            std::fs::read_link(lib.join(n)).unwrap(),
            PathBuf::from(t),
            "{n}"
        );
    }
}

/// A folder is listed on its own descriptor (no copy of it): a second listing of the same
/// `Dir` starts again from its first entry, and the kinds are those of the entries.
#[test]
fn a_dir_listed_twice_gives_every_name_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    for i in 0..300 {
        std::fs::write(dir.join(format!("file-with-a-longish-name-{i:03}")), b"").unwrap();
    }
    symlink("file-with-a-longish-name-000", dir.join("link")).unwrap();
    let r = Root::open(tmp.path()).unwrap();
    let d = r.open_dir("/d").unwrap();
    let first = d.names_and_kinds(1000).unwrap();
    assert_eq!(first.len(), 302);
    assert_eq!(d.names(1000).unwrap().len(), 302);
    // A change by path makes the listing kept on the descriptor stale: read again, from the
    // first entry.
    r.write_file_atomic("/d/new", b"", 0o644).unwrap();
    LISTINGS.with(|c| c.set(0));
    assert_eq!(d.names(1000).unwrap().len(), 303);
    assert_eq!(LISTINGS.with(|c| c.get()), 1);
    std::fs::remove_file(dir.join("new")).unwrap();
    r.write_file_atomic("/d/new", b"", 0o644).unwrap();
    std::fs::remove_file(dir.join("new")).unwrap();
    // Stopped at its cap, then read whole: from the first entry again.
    assert!(matches!(
        d.names(10),
        Err(RootError::TooManyEntries { cap: 10, .. })
    ));
    assert_eq!(d.names_and_kinds(1000).unwrap(), first);
    let kind = |n: &str| first.iter().find(|(m, _)| m == n).unwrap().1;
    assert_eq!(kind("link"), Some(FileKind::Symlink));
    assert_eq!(kind("sub"), Some(FileKind::Dir));
    assert_eq!(kind("file-with-a-longish-name-007"), Some(FileKind::File));
}

/// A library folder with `n` files, and the paths of a shim's walk ending in it (enough to list
/// it), resolved and kept ([`LexicalResolver::keep_folders`]) as the shim does before its ops.
fn walked_and_kept(r: &Path, n: usize) -> Root {
    let lib = r.join("usr/lib/x86_64-linux-gnu");
    std::fs::create_dir_all(lib.join("sub")).unwrap();
    for i in 0..n {
        std::fs::write(lib.join(format!("libimage{i}.so.1")), b"").unwrap();
    }
    std::fs::write(lib.join("libcuda.so.570.1"), b"").unwrap();
    std::fs::write(lib.join("libplain.so"), b"").unwrap();
    let mut root = Root::open(r).unwrap();
    let mut resolver = LexicalResolver::new(&mut root);
    let paths: Vec<String> = (0..10)
        .map(|i| format!("/usr/lib/x86_64-linux-gnu/libnvidia-{i}.so.570.1"))
        .collect();
    resolver.expect(paths.iter().map(String::as_str));
    for p in &paths {
        resolver.resolve(p).unwrap();
    }
    resolver.keep_folders();
    root
}

/// What a fresh root reads of the library folder (no listing kept anywhere).
fn listed_afresh(r: &Path) -> Vec<(String, Option<FileKind>)> {
    let before = LISTINGS.with(|c| c.get());
    let root = Root::open(r).unwrap();
    let d = root.open_dir("/usr/lib/x86_64-linux-gnu").unwrap();
    let names = d.names_and_kinds(10_000).unwrap();
    // Not counted: the listings counted are those of the root under test.
    LISTINGS.with(|c| c.set(before));
    names
}

/// Regression (issue 21): the shim's walk lists the library folder, and `update-ldcache`'s scan
/// of the same kept folder then takes that listing (every name, with its kind), with no second
/// `getdents64` of it.
#[test]
fn a_kept_folder_listed_by_the_walk_is_not_read_again_by_the_scan() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path();
    for force in [false, true] {
        opath::FORCE.with(|c| c.set(force));
        LISTINGS.with(|c| c.set(0));
        let root = walked_and_kept(r, 300);
        assert_eq!(LISTINGS.with(|c| c.get()), 1, "the walk lists it");
        let d = root.open_dir("/usr/lib/x86_64-linux-gnu").unwrap();
        let got = d.names_and_kinds(10_000).unwrap();
        assert_eq!(LISTINGS.with(|c| c.get()), 1, "emulated: {force}");
        assert_eq!(got, listed_afresh(r));
        assert_eq!(got.len(), 303);
        // A reader's cap still holds on a kept listing.
        assert!(matches!(
            d.names(100),
            Err(RootError::TooManyEntries { cap: 100, .. })
        ));
        assert_eq!(LISTINGS.with(|c| c.get()), 1, "emulated: {force}");
        opath::FORCE.with(|c| c.set(false));
    }
}

/// Regression (issue 21): the ops' changes between the walk's listing and the scan's are seen
/// by the scan: links created (the fresh container's `libcuda.so.1`) and files replaced through
/// the kept folder update its listing (no reading again); a change made another way (by path,
/// through another descriptor of the folder, a failed change) makes it read again, and a name
/// removed meanwhile is then gone from it.
#[test]
fn changes_between_two_listings_of_a_kept_folder_are_seen() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path();
    symlink("usr/lib", r.join("lib")).unwrap();
    let root = walked_and_kept(r, 20);
    let lib = r.join("usr/lib/x86_64-linux-gnu");
    let count = || LISTINGS.with(|c| c.get());
    LISTINGS.with(|c| c.set(0));
    let kind = |names: &[(String, Option<FileKind>)], n: &str| {
        names.iter().find(|(m, _)| m == n).map(|(_, k)| *k)
    };
    // Through the kept folder, as `create-symlinks` and `update-ldcache` do: kept up to date.
    let d = root
        .mkdir_all_open("/usr/lib/x86_64-linux-gnu", 0o755)
        .unwrap();
    assert_eq!(
        d.symlink_force("libcuda.so.570.1", "libcuda.so.1").unwrap(),
        LinkOutcome::Created
    );
    assert_eq!(
        d.symlink_force("libimage0.so.1", "libplain.so").unwrap(),
        LinkOutcome::Replaced
    );
    assert_eq!(
        d.symlink_force("libimage0.so.1", "libplain.so").unwrap(),
        LinkOutcome::Unchanged
    );
    d.write_file_atomic("libnew.so.1", b"x", 0o644).unwrap();
    assert!(d
        .write_file_if_changed("libimage1.so.1", b"y", 0o644, None)
        .unwrap());
    let scan = root.open_dir("/usr/lib/x86_64-linux-gnu").unwrap();
    let got = scan.names_and_kinds(10_000).unwrap();
    assert_eq!(count(), 0, "the kept listing, updated, is read");
    assert_eq!(got, listed_afresh(r));
    assert_eq!(kind(&got, "libcuda.so.1"), Some(Some(FileKind::Symlink)));
    assert_eq!(kind(&got, "libplain.so"), Some(Some(FileKind::Symlink)));
    assert_eq!(kind(&got, "libnew.so.1"), Some(Some(FileKind::File)));
    assert!(got.iter().all(|(n, _)| !n.contains("gpuctk")), "{got:?}");

    // By path (another name for the folder): read again, with what changed meanwhile.
    std::fs::remove_file(lib.join("libimage2.so.1")).unwrap();
    root.symlink_force("libcuda.so.1", "/lib/x86_64-linux-gnu/libcuda.so")
        .unwrap();
    let got = scan.names_and_kinds(10_000).unwrap();
    assert_eq!(count(), 1);
    assert_eq!(got, listed_afresh(r));
    assert_eq!(kind(&got, "libcuda.so"), Some(Some(FileKind::Symlink)));
    assert_eq!(kind(&got, "libimage2.so.1"), None, "a removed name is gone");

    // Through another descriptor of the same folder: the kept one's listing is stale.
    let other = root.open_dir("/lib/x86_64-linux-gnu").unwrap();
    other
        .write_file_atomic("libother.so.1", b"", 0o644)
        .unwrap();
    std::fs::remove_file(lib.join("libimage3.so.1")).unwrap();
    let got = scan.names_and_kinds(10_000).unwrap();
    assert_eq!(count(), 2);
    assert_eq!(got, listed_afresh(r));
    assert_eq!(kind(&got, "libother.so.1"), Some(Some(FileKind::File)));
    assert_eq!(kind(&got, "libimage3.so.1"), None);

    // A change that fails drops the listing; a folder made by path makes it stale.
    assert!(matches!(
        d.symlink_force("x", "sub"),
        Err(RootError::IsDirectory { .. })
    ));
    std::fs::remove_file(lib.join("libimage4.so.1")).unwrap();
    assert_eq!(scan.names_and_kinds(10_000).unwrap(), listed_afresh(r));
    assert_eq!(count(), 3);
    root.mkdir_all("/lib/x86_64-linux-gnu/newdir", 0o755)
        .unwrap();
    let got = scan.names_and_kinds(10_000).unwrap();
    assert_eq!(count(), 4);
    assert_eq!(kind(&got, "newdir"), Some(Some(FileKind::Dir)));
    // A mode changes no name: the listing holds.
    root.chmod("/usr/lib/x86_64-linux-gnu/libnew.so.1", 0o600)
        .unwrap();
    assert_eq!(scan.names_and_kinds(10_000).unwrap(), listed_afresh(r));
    assert_eq!(count(), 4);
}
