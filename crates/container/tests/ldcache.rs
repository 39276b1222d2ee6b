//! update_ldcache end to end with the real dynamic loader (a Debian-like
//! rootfs, RHEL-layout driver libraries in /usr/lib64, chroot), and against
//! malicious images. Needs root (mknod, chroot).

mod common;

use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};

use common::*;
use gpuctk_container::{update_ldcache, HookError, Root};
use gpuctk_mockhost::{
    create_host, create_rootfs, HostConfig, Layout, LibraryLoad, MockHost, ProbeReport,
    RootfsConfig, PROBE_PATH,
};

struct Env {
    _tmp: tempfile::TempDir,
    host: MockHost,
    rootfs: PathBuf,
}

fn setup() -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = HostConfig::new("570.124.06", (12, 8));
    cfg.layout = Layout::Rhel;
    cfg.ldconfig = ldconfig().into();
    let host = create_host(&tmp.path().join("host"), &cfg).unwrap();
    let rootfs = tmp.path().join("rootfs");
    let rcfg = RootfsConfig {
        ldconfig: ldconfig().into(),
        ..RootfsConfig::default()
    };
    create_rootfs(&rootfs, &rcfg).unwrap();
    Env {
        _tmp: tmp,
        host,
        rootfs,
    }
}

/// What the runtime's bind mounts would give the container: the driver
/// files in /usr/lib64 (no soname links), nvidia-smi, two device nodes.
fn inject(env: &Env) {
    let lib = env.rootfs.join("usr/lib64");
    std::fs::create_dir_all(&lib).unwrap();
    for path in env.host.library_paths() {
        std::fs::copy(&path, lib.join(path.file_name().unwrap())).unwrap();
    }
    for path in env.host.binary_paths() {
        if path.file_name().unwrap() == "nvidia-smi" {
            std::fs::copy(&path, env.rootfs.join("usr/bin/nvidia-smi")).unwrap();
        }
    }
    mknod(&env.rootfs.join("dev/nvidiactl"), 195, 255, 0o666);
    mknod(&env.rootfs.join("dev/nvidia0"), 195, 0, 0o666);
}

fn probe(rootfs: &Path) -> (ProbeReport, String) {
    let out = chroot(rootfs, &[PROBE_PATH]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "probe failed: {out:?}");
    (ProbeReport::parse(&text), text)
}

#[test]
fn rhel_driver_in_debian_image_loads_after_update() {
    let env = setup();
    inject(&env);

    // Without our update Debian's loader does not search /usr/lib64.
    let (before, text) = probe(&env.rootfs);
    assert!(
        matches!(before.libcuda, Some(LibraryLoad::Failed(_))),
        "libcuda loaded without the cache update:\n{text}"
    );

    let old = ldconfig_p(&env.rootfs.join("etc/ld.so.cache"));
    let root = Root::open(&env.rootfs).unwrap();
    let report = update_ldcache(&root, &["/usr/lib64".into()]).unwrap();
    eprintln!("{report:#?}");
    assert!(report.links.contains(&(
        "/usr/lib64/libcuda.so.1".into(),
        "libcuda.so.570.124.06".into()
    )));

    let (after, text) = probe(&env.rootfs);
    eprintln!("{text}");
    match &after.libcuda {
        Some(LibraryLoad::Loaded { path, realpath }) => {
            assert_eq!(path, "/usr/lib64/libcuda.so.1");
            assert_eq!(realpath, "/usr/lib64/libcuda.so.570.124.06");
        }
        other => panic!("libcuda not loaded: {other:?}\n{text}"),
    }
    assert_eq!(after.cu_driver_version, Some((0, 12080)), "{text}");
    assert_eq!(after.cu_device_count, Some((0, 1)), "{text}");

    let smi = chroot(&env.rootfs, &["/usr/bin/nvidia-smi", "-L"]);
    assert!(smi.status.success(), "nvidia-smi -L: {smi:?}");
    let lines: Vec<String> = String::from_utf8_lossy(&smi.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-"),
        "{lines:?}"
    );
    assert!(lines[0].contains(&env.host.gpus[0].uuid), "{lines:?}");

    // glibc's own reader sees the new entries and all the image's old ones.
    let new = ldconfig_p(&env.rootfs.join("etc/ld.so.cache"));
    let has = |name: &str, path: &str| new.iter().any(|(n, _, p)| n == name && p == path);
    assert!(has("libcuda.so.1", "/usr/lib64/libcuda.so.1"), "{new:#?}");
    assert!(
        has("libnvidia-ml.so.1", "/usr/lib64/libnvidia-ml.so.1"),
        "{new:#?}"
    );
    // Old entries stay unless a library of the folder took their soname
    // (the loader symlink /usr/lib64/ld-linux-x86-64.so.2 does).
    let ours: Vec<&str> = report.entries.iter().map(|e| e.key.as_str()).collect();
    for (name, arch, path) in old.iter().filter(|(n, _, _)| !ours.contains(&n.as_str())) {
        assert!(
            new.iter()
                .any(|(n, a, p)| n == name && a == arch && p == path),
            "old entry {name} => {path} lost"
        );
    }
    assert!(new.iter().any(|(n, _, _)| n == "libc.so.6"));
    let x8664 = new
        .iter()
        .find(|(n, _, _)| n == "libcuda.so.1")
        .map(|(_, a, _)| a.clone())
        .unwrap();
    assert!(
        x8664.contains("x86-64") || !cfg!(target_arch = "x86_64"),
        "{x8664}"
    );

    let m = std::fs::metadata(env.rootfs.join("etc/ld.so.cache")).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o644);
    let conf = std::fs::read_to_string(env.rootfs.join("etc/ld.so.conf.d/00-gpuctk.conf")).unwrap();
    assert!(conf.lines().any(|l| l == "/usr/lib64"), "{conf}");

    // A later ldconfig inside the container keeps the folder.
    run_ok(ldconfig(), &["-r", env.rootfs.to_str().unwrap()]);
    let (again, text) = probe(&env.rootfs);
    assert!(
        matches!(again.libcuda, Some(LibraryLoad::Loaded { .. })),
        "{text}"
    );

    // Idempotent: a second run changes nothing it reports as created.
    let second = update_ldcache(&root, &["/usr/lib64".into()]).unwrap();
    assert!(second.links.is_empty(), "{second:#?}");
}

fn small_root() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let host = tmp.path().join("host");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("shadow"), b"root:secret\n").unwrap();
    build_lib(&host.join("libhost.so.1.0"), "libhost.so.1", "host_fn");
    (tmp, root, host)
}

#[test]
fn corrupt_image_cache_is_an_error_naming_it() {
    let (_tmp, root, _host) = small_root();
    std::fs::write(root.join("etc/ld.so.cache"), b"garbage, not a cache").unwrap();
    let e = update_ldcache(&Root::open(&root).unwrap(), &[]).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, HookError::CorruptCache { .. }), "{msg}");
    assert!(msg.contains("/etc/ld.so.cache"), "{msg}");
    assert!(msg.contains("damaged"), "{msg}");
    // The old file is left as it was.
    assert_eq!(
        std::fs::read(root.join("etc/ld.so.cache")).unwrap(),
        b"garbage, not a cache"
    );
}

#[test]
fn cache_symlinked_to_a_host_file_is_replaced_in_root() {
    let (_tmp, root, host) = small_root();
    let before = snapshot(&host);
    build_lib(&root.join("usr/lib64/libfoo.so.1.2"), "libfoo.so.1", "foo");
    symlink(host.join("shadow"), root.join("etc/ld.so.cache")).unwrap();
    update_ldcache(&Root::open(&root).unwrap(), &["/usr/lib64".into()]).unwrap();
    assert_eq!(snapshot(&host), before);
    let m = std::fs::symlink_metadata(root.join("etc/ld.so.cache")).unwrap();
    assert!(m.is_file());
    let entries = ldconfig_p(&root.join("etc/ld.so.cache"));
    assert!(entries
        .iter()
        .any(|(n, _, p)| n == "libfoo.so.1" && p == "/usr/lib64/libfoo.so.1"));
}

#[test]
fn etc_symlinked_to_host_dir_is_written_in_root() {
    for relative in [false, true] {
        let (_tmp, root, host) = small_root();
        let before = snapshot(&host);
        std::fs::remove_dir(root.join("etc")).unwrap();
        let target = if relative {
            PathBuf::from(format!("../../../../../../../..{}", host.display()))
        } else {
            host.clone()
        };
        symlink(&target, root.join("etc")).unwrap();
        build_lib(&root.join("usr/lib64/libfoo.so.1.2"), "libfoo.so.1", "foo");
        let report = update_ldcache(&Root::open(&root).unwrap(), &["/usr/lib64".into()]).unwrap();
        assert_eq!(snapshot(&host), before, "relative={relative}");
        // The container sees /etc/ld.so.cache through its own /etc link.
        let inroot = rerooted(&root, &host);
        let entries = ldconfig_p(&inroot.join("ld.so.cache"));
        assert!(entries.iter().any(|(n, _, _)| n == "libfoo.so.1"));
        assert!(inroot.join("ld.so.conf").is_file());
        assert!(inroot.join("ld.so.conf.d/00-gpuctk.conf").is_file());
        assert!(report.created_ld_so_conf);
    }
}

#[test]
fn symlinked_folder_to_host_library_dir_does_not_touch_host() {
    for relative in [false, true] {
        let (_tmp, root, host) = small_root();
        let before = snapshot(&host);
        std::fs::create_dir_all(root.join("usr")).unwrap();
        let target = if relative {
            PathBuf::from(format!("../../../../../../../..{}", host.display()))
        } else {
            host.clone()
        };
        symlink(&target, root.join("usr/lib64")).unwrap();
        let r = Root::open(&root).unwrap();
        let report = update_ldcache(&r, &["/usr/lib64".into()]).unwrap();
        // A string-joining implementation would create <host>/libhost.so.1.
        assert_eq!(snapshot(&host), before, "relative={relative}");
        assert!(report.entries.is_empty(), "{report:#?}");
        assert!(report
            .notes
            .iter()
            .any(|n| n.contains("/usr/lib64") && n.contains("skipped")));

        // With the link's target present inside the root, that copy is used.
        let inroot = rerooted(&root, &host);
        build_lib(&inroot.join("libin.so.3.1"), "libin.so.3", "inroot");
        let report = update_ldcache(&r, &["/usr/lib64".into()]).unwrap();
        assert_eq!(snapshot(&host), before);
        assert!(std::fs::symlink_metadata(inroot.join("libin.so.3")).is_ok());
        assert_eq!(report.entries.len(), 1, "{report:#?}");
        assert_eq!(report.entries[0].value, "/usr/lib64/libin.so.3");
    }
}

#[test]
fn library_symlinks_to_host_are_not_read() {
    let (_tmp, root, host) = small_root();
    let before = snapshot(&host);
    std::fs::create_dir_all(root.join("usr/lib64")).unwrap();
    symlink(
        host.join("libhost.so.1.0"),
        root.join("usr/lib64/libhost.so.1"),
    )
    .unwrap();
    let report = update_ldcache(&Root::open(&root).unwrap(), &["/usr/lib64".into()]).unwrap();
    assert!(report.entries.is_empty(), "{report:#?}");
    assert_eq!(snapshot(&host), before);
}

#[test]
fn soname_link_slot_taken_by_a_directory_or_bad_soname() {
    let (_tmp, root, _host) = small_root();
    let lib = root.join("usr/lib64");
    build_lib(&lib.join("libfoo.so.1.2"), "libfoo.so.1", "foo");
    std::fs::create_dir_all(lib.join("libfoo.so.1/keep")).unwrap();
    build_lib(&lib.join("libevil.so.1.0"), "../../../etc/evil.so", "evil");
    build_lib(&lib.join("libok.so.2.0"), "libok.so.2", "ok");
    // A stale link is fixed, as ldconfig does.
    symlink("libgone.so.2.0", lib.join("libok.so.2")).unwrap();
    let report = update_ldcache(&Root::open(&root).unwrap(), &["/usr/lib64/".into()]).unwrap();
    assert!(lib.join("libfoo.so.1/keep").is_dir());
    assert!(!root.join("etc/evil.so").exists());
    assert!(!lib.join("../../../etc/evil.so").exists());
    let keys: Vec<&str> = report.entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, vec!["libok.so.2"], "{report:#?}");
    assert_eq!(
        std::fs::read_link(lib.join("libok.so.2")).unwrap(),
        PathBuf::from("libok.so.2.0")
    );
    assert!(report
        .notes
        .iter()
        .any(|n| n.contains("libfoo.so.1") && n.contains("directory")));
    assert!(report.notes.iter().any(|n| n.contains("not a file name")));
}

#[test]
fn earlier_folder_wins_and_missing_folders_are_noted() {
    let (_tmp, root, _host) = small_root();
    build_lib(&root.join("opt/a/libx.so.1.0"), "libx.so.1", "a");
    build_lib(&root.join("opt/b/libx.so.1.1"), "libx.so.1", "b");
    let report = update_ldcache(
        &Root::open(&root).unwrap(),
        &["/opt/missing".into(), "/opt/a".into(), "/opt/b".into()],
    )
    .unwrap();
    let e: Vec<_> = report.entries.iter().map(|e| e.value.as_str()).collect();
    assert_eq!(e, vec!["/opt/a/libx.so.1"]);
    assert!(report.notes.iter().any(|n| n.starts_with("/opt/missing")));
    let entries = ldconfig_p(&root.join("etc/ld.so.cache"));
    let x: Vec<_> = entries
        .iter()
        .filter(|(n, _, _)| n == "libx.so.1")
        .collect();
    assert_eq!(x.len(), 1, "{entries:?}");
    assert_eq!(x[0].2, "/opt/a/libx.so.1");
    let conf = std::fs::read_to_string(root.join("etc/ld.so.conf.d/00-gpuctk.conf")).unwrap();
    assert!(conf.contains("/opt/a\n/opt/b\n"), "{conf}");
    assert!(!conf.contains("missing"));
    assert!(matches!(
        update_ldcache(&Root::open(&root).unwrap(), &["relative/dir".into()]),
        Err(HookError::NotAbsolute { .. })
    ));
}

/// Regression (issue 8): one 1 MB `00-compat-*.conf` in the image delayed container start by
/// 11 to 21 s (quadratic de-duplication, one directory lookup per line). Now linear and capped:
/// at most MAX_COMPAT_DIRS directories, MAX_CONF bytes per file, noted in the report.
#[test]
fn huge_compat_confs_cost_nothing() {
    let (_tmp, root, _host) = small_root();
    std::fs::create_dir_all(root.join("etc/ld.so.conf.d")).unwrap();
    let mut text = String::new();
    let mut i = 0;
    while text.len() < (1 << 20) {
        text.push_str(&format!("/opt/compat/dir{i}\n"));
        i += 1;
    }
    for n in 0..4 {
        std::fs::write(
            root.join(format!("etc/ld.so.conf.d/00-compat-{n}.conf")),
            &text,
        )
        .unwrap();
    }
    // Small files with many distinct directories, under the size cap.
    let small: String = (0..3000).map(|i| format!("/x/{i}\n")).collect();
    std::fs::write(root.join("etc/ld.so.conf.d/00-compat-small.conf"), small).unwrap();
    // Many conf files.
    for n in 0..400 {
        std::fs::write(
            root.join(format!("etc/ld.so.conf.d/z{n:03}.conf")),
            "/usr/x\n",
        )
        .unwrap();
    }
    let r = Root::open(&root).unwrap();
    let t = std::time::Instant::now();
    let report = update_ldcache(&r, &["/usr/lib64".into()]).unwrap();
    let took = t.elapsed();
    assert!(report.compat_dirs.len() <= gpuctk_container::hooks::MAX_COMPAT_DIRS);
    let notes = report.notes.join("\n");
    assert!(
        notes.contains("more than the 65536 allowed; skipped"),
        "{notes}"
    );
    assert!(notes.contains("only the first 256 read"), "{notes}");
    assert!(
        notes.contains("compat directories; the rest ignored"),
        "{notes}"
    );
    // Generous bound (the figure is in `cargo bench`): was 11 to 25 s.
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
}

/// A library folder with more entries than we scan is not read whole: the image's files are
/// skipped with a note. Regression (issue 17): the libraries about to be mounted there (the
/// shim's pending mounts) were skipped with them, so the cache lost the driver; they always go
/// in, and the image's cache entries into the folder are kept, not dropped as stale.
#[test]
fn huge_library_folder_is_skipped_with_a_note() {
    let (_tmp, root, host) = small_root();
    let dir = root.join("usr/lib64");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..(gpuctk_container::hooks::MAX_DIR_ENTRIES + 1) {
        std::fs::File::create(dir.join(format!("libf{i}.so.1"))).unwrap();
    }
    let r = Root::open(&root).unwrap();
    let report = update_ldcache(&r, &["/usr/lib64".into()]).unwrap();
    assert!(report.entries.is_empty());
    let note =
        "more than 8192 entries; the image's files skipped, the 0 libraries mounted into it read";
    assert!(
        report.notes.iter().any(|n| n.contains(note)),
        "{:?}",
        report.notes
    );

    let mut cache = gpuctk_ldcache::Cache::new();
    cache.entries.push(gpuctk_ldcache::Entry::new(
        "libimage.so.1",
        "/usr/lib64/libimage.so.1",
        gpuctk_container::elf::library_info(
            &std::fs::File::open(host.join("libhost.so.1.0")).unwrap(),
        )
        .unwrap()
        .cache_flags()
        .unwrap(),
    ));
    std::fs::write(root.join("etc/ld.so.cache"), cache.to_bytes()).unwrap();
    let mut pending = gpuctk_container::hooks::Pending::default();
    pending.add(
        "/usr/lib64/libhost.so.1.0",
        std::fs::File::open(host.join("libhost.so.1.0")).unwrap(),
    );
    let report =
        gpuctk_container::hooks::update_ldcache_pending(&r, &["/usr/lib64".into()], &pending)
            .unwrap();
    let keys: Vec<&str> = report.entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["libhost.so.1"], "{:?}", report.notes);
    let listed: Vec<String> = ldconfig_p(&root.join("etc/ld.so.cache"))
        .into_iter()
        .map(|(name, _, path)| format!("{name} {path}"))
        .collect();
    assert!(
        listed.contains(&"libhost.so.1 /usr/lib64/libhost.so.1".to_string()),
        "{listed:?}"
    );
    assert!(
        listed.contains(&"libimage.so.1 /usr/lib64/libimage.so.1".to_string()),
        "{listed:?}"
    );
}

/// Regression (issue 8): update-ldcache linked any file whose name contains `.so`
/// (`preloadable_libintl.so`), which ldconfig ignores. Our entries now match the real
/// `ldconfig -r` on the same directory.
#[test]
fn candidate_names_follow_ldconfig() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let dir = root.join("opt/libs");
    for (file, soname) in [
        ("preloadable_libintl.so", "libintl-preload.so.1"),
        ("libgood.so.1.2", "libgood.so.1"),
        ("ld-fake.so.2", "ld-fake.so.2"),
        ("notlib.so.3", "libnotlib.so.3"),
        ("libtmp.so.4.#prelink#.ABCDEF", "libtmp.so.4"),
        ("libnoso.a", "libnoso.so.5"),
    ] {
        build_lib(&dir.join(file), soname, "f");
    }
    std::fs::create_dir_all(root.join("etc")).unwrap();
    // The real ldconfig on a copy of the same tree.
    let copy = tmp.path().join("copy");
    run_ok(
        "cp",
        &["-a", root.to_str().unwrap(), copy.to_str().unwrap()],
    );
    std::fs::write(copy.join("etc/ld.so.conf"), "/opt/libs\n").unwrap();
    run_ok(ldconfig(), &["-r", copy.to_str().unwrap()]);
    let mut want: Vec<String> = ldconfig_p(&copy.join("etc/ld.so.cache"))
        .into_iter()
        .map(|(name, _, _)| name)
        .collect();
    want.sort();
    assert_eq!(want, ["ld-fake.so.2", "libgood.so.1"]);

    let r = Root::open(&root).unwrap();
    let report = update_ldcache(&r, &["/opt/libs".into()]).unwrap();
    let mut got: Vec<String> = report.entries.iter().map(|e| e.key.clone()).collect();
    got.sort();
    assert_eq!(got, want);
    assert!(!dir.join("libintl-preload.so.1").exists());
}

/// Library links leading out of the folder are each a full in-root resolution, which an image
/// can make cost milliseconds (issue 17): past 256 of them the rest are skipped with a note,
/// while links within the folder (a chain `libhost.so -> libhost.so.1 -> libhost.so.1.0`) cost
/// one lookup each and always count.
#[test]
fn far_library_links_are_capped_near_ones_are_not() {
    let (_tmp, root, host) = small_root();
    let dir = root.join("usr/lib64");
    std::fs::create_dir_all(root.join("opt")).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(host.join("libhost.so.1.0"), root.join("opt/libhost.so.1.0")).unwrap();
    std::fs::copy(host.join("libhost.so.1.0"), dir.join("libhost.so.1.0")).unwrap();
    symlink("libhost.so.1.0", dir.join("libhost.so.2")).unwrap();
    symlink("libhost.so.2", dir.join("libhost.so")).unwrap();
    let far = gpuctk_container::hooks::MAX_FAR_LINKS + 10;
    for i in 0..far {
        symlink(
            "../../opt/libhost.so.1.0",
            dir.join(format!("libfar{i}.so.1")),
        )
        .unwrap();
    }
    let r = Root::open(&root).unwrap();
    let report = update_ldcache(&r, &["/usr/lib64".into()]).unwrap();
    let keys: Vec<&str> = report.entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["libhost.so.1"], "{:?}", report.notes);
    let note = format!("{far} library links lead out of the folder, more than the 256 we follow");
    assert!(
        report.notes.iter().any(|n| n.contains(&note)),
        "{:?}",
        report.notes
    );
}

/// A container started again on its root (issue 21): the cache it would write is the one there,
/// so the file is left as it is (same inode: no rename over it, which costs the file system a
/// writeback and an eviction); a cache that differs, in its bytes or its mode, is replaced.
#[test]
fn an_unchanged_cache_is_not_written_again() {
    let (_tmp, root, _host) = small_root();
    build_lib(&root.join("usr/lib64/libfoo.so.1.2"), "libfoo.so.1", "foo");
    let r = Root::open(&root).unwrap();
    let cache = root.join("etc/ld.so.cache");
    update_ldcache(&r, &["/usr/lib64".into()]).unwrap();
    let first = std::fs::metadata(&cache).unwrap();
    update_ldcache(&r, &["/usr/lib64".into()]).unwrap();
    let again = std::fs::metadata(&cache).unwrap();
    assert_eq!((again.ino(), again.mode()), (first.ino(), first.mode()));
    // Another library: new bytes, a new file.
    build_lib(&root.join("usr/lib64/libbar.so.2.0"), "libbar.so.2", "bar");
    update_ldcache(&r, &["/usr/lib64".into()]).unwrap();
    let grown = std::fs::metadata(&cache).unwrap();
    assert_ne!(grown.ino(), first.ino());
    assert!(ldconfig_p(&cache)
        .iter()
        .any(|(n, _, _)| n == "libbar.so.2"));
    // The same bytes with another mode: written again, with its mode.
    let bytes = std::fs::read(&cache).unwrap();
    std::fs::set_permissions(&cache, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    update_ldcache(&r, &["/usr/lib64".into()]).unwrap();
    let fixed = std::fs::metadata(&cache).unwrap();
    assert_ne!(fixed.ino(), grown.ino());
    assert_eq!(fixed.mode() & 0o7777, 0o644);
    assert_eq!(std::fs::read(&cache).unwrap(), bytes);
}

/// The shim's update-ldcache takes the soname and flags host discovery read
/// ([`Pending::add_known`](gpuctk_container::hooks::Pending::add_known)) rather than reading the
/// library's ELF again: the cache and the links it writes are those that reading the same
/// libraries gives, byte for byte.
#[test]
fn known_libraries_give_the_cache_that_reading_them_gives() {
    use gpuctk_container::hooks::{update_ldcache_pending, Pending};
    let (_tmp, host_root, host) = small_root();
    build_lib(&host.join("libfoo.so.1.2"), "libfoo.so.1", "foo");
    build_lib(&host.join("libbar.so.2.0"), "libbar.so.2", "bar");
    // The image has a library of its own in the folder, and a cache.
    build_lib(
        &host_root.join("usr/lib64/libimg.so.3.1"),
        "libimg.so.3",
        "img",
    );
    let r = Root::open(&host_root).unwrap();
    update_ldcache(&r, &["/usr/lib64".into()]).unwrap();
    let image = host_root.parent().unwrap().join("image");
    run_ok(
        "cp",
        &["-a", host_root.to_str().unwrap(), image.to_str().unwrap()],
    );
    let libs = ["libfoo.so.1.2", "libbar.so.2.0", "libhost.so.1.0"];
    let mut results = Vec::new();
    for known in [false, true] {
        let root = host_root.parent().unwrap().join(format!("known-{known}"));
        run_ok(
            "cp",
            &["-a", image.to_str().unwrap(), root.to_str().unwrap()],
        );
        let mut pending = Pending::default();
        for name in libs {
            let file = std::fs::File::open(host.join(name)).unwrap();
            let path = format!("/usr/lib64/{name}");
            if known {
                let info = gpuctk_container::elf::library_info(&file).unwrap();
                let flags = info.cache_flags().unwrap();
                pending.add_known(&path, info.soname.as_deref().unwrap(), flags);
            } else {
                pending.add(&path, file);
            }
        }
        let r = Root::open(&root).unwrap();
        let report = update_ldcache_pending(&r, &["/usr/lib64".into()], &pending).unwrap();
        let links: Vec<(String, PathBuf)> = ["libfoo.so.1", "libbar.so.2", "libhost.so.1"]
            .iter()
            .map(|l| {
                let target = std::fs::read_link(root.join("usr/lib64").join(l)).unwrap();
                (l.to_string(), target)
            })
            .collect();
        let cache = std::fs::read(root.join("etc/ld.so.cache")).unwrap();
        results.push((cache, links, report.entries, report.notes));
    }
    let listed = ldconfig_p(
        &host_root
            .parent()
            .unwrap()
            .join("known-true/etc/ld.so.cache"),
    );
    for soname in ["libfoo.so.1", "libbar.so.2", "libhost.so.1", "libimg.so.3"] {
        assert!(listed.iter().any(|(n, _, _)| n == soname), "{listed:?}");
    }
    assert_eq!(results[0], results[1]);
}

/// A library whose soname and flags are known is not opened: its host file may be gone (or
/// unreadable) and the cache still gets its entry and its soname link.
#[test]
fn known_libraries_are_not_read() {
    use gpuctk_container::hooks::{update_ldcache_pending, Pending};
    let (_tmp, root, _host) = small_root();
    let flags = gpuctk_ldcache::flags::FLAG_X8664_LIB64 | gpuctk_ldcache::flags::FLAG_ELF_LIBC6;
    let mut pending = Pending::default();
    pending.add_known("/usr/lib64/libgone.so.7.1", "libgone.so.7", flags);
    let r = Root::open(&root).unwrap();
    let report = update_ldcache_pending(&r, &["/usr/lib64".into()], &pending).unwrap();
    assert_eq!(
        report.entries,
        [gpuctk_ldcache::Entry::new(
            "libgone.so.7",
            "/usr/lib64/libgone.so.7",
            flags
        )],
        "{:?}",
        report.notes
    );
    assert_eq!(
        std::fs::read_link(root.join("usr/lib64/libgone.so.7")).unwrap(),
        Path::new("libgone.so.7.1")
    );
}

/// Regression (issue 21): create-symlinks replaced a wrong soname link, then update-ldcache in
/// the same run (the shim's), which takes the links create-symlinks left in place rather than
/// looking again, must see the new target: an entry, and nothing left to fix.
#[test]
fn update_ldcache_sees_the_link_create_symlinks_replaced() {
    use gpuctk_container::hooks::Pending;
    use gpuctk_container::ops::{run, Outcome};
    use gpuctk_core::ops::{InRootOp, Link};
    let (_tmp, root, _host) = small_root();
    let lib = root.join("usr/lib64");
    build_lib(&lib.join("libfoo.so.1.2"), "libfoo.so.1", "foo");
    symlink("libgone.so", lib.join("libfoo.so.1")).unwrap();
    let r = Root::open(&root).unwrap();
    let mut pending = Pending::default();
    let links = vec![Link::parse("libfoo.so.1.2::/usr/lib64/libfoo.so.1").unwrap()];
    run(&r, &InRootOp::CreateSymlinks { links }, &mut pending).unwrap();
    let folders = vec!["/usr/lib64".to_string()];
    let Outcome::Ldcache(report) =
        run(&r, &InRootOp::UpdateLdcache { folders }, &mut pending).unwrap()
    else {
        panic!("not an ldcache outcome")
    };
    assert_eq!(
        std::fs::read_link(lib.join("libfoo.so.1")).unwrap(),
        Path::new("libfoo.so.1.2")
    );
    assert!(report.links.is_empty(), "{report:#?}");
    let keys: Vec<(&str, &str)> = report
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect();
    assert_eq!(keys, [("libfoo.so.1", "/usr/lib64/libfoo.so.1")]);
}

/// The links a run placed are taken as they are, in the folder they were placed in (by device
/// and inode) only: update-ldcache does not look at them again there, and does elsewhere.
#[test]
fn placed_links_are_taken_in_their_folder_only() {
    use gpuctk_container::hooks::{update_ldcache_pending, Pending, Placed};
    let (_tmp, root, _host) = small_root();
    let lib = root.join("usr/lib64");
    build_lib(&lib.join("libfoo.so.1.2"), "libfoo.so.1", "foo");
    std::fs::create_dir_all(root.join("usr/lib")).unwrap();
    let id = |p: &Path| {
        let m = std::fs::metadata(p).unwrap();
        (m.dev(), m.ino())
    };
    let r = Root::open(&root).unwrap();
    for (folder, taken) in [(root.join("usr/lib"), false), (lib.clone(), true)] {
        // On disk the link is wrong; the record says it is right.
        let _ = std::fs::remove_file(lib.join("libfoo.so.1"));
        symlink("libwrong.so", lib.join("libfoo.so.1")).unwrap();
        let mut placed = Placed::default();
        placed.insert(id(&folder), "libfoo.so.1", "libfoo.so.1.2");
        let mut pending = Pending::default();
        pending.add_links(placed);
        let report = update_ldcache_pending(&r, &["/usr/lib64".into()], &pending).unwrap();
        let target = std::fs::read_link(lib.join("libfoo.so.1")).unwrap();
        if taken {
            assert!(report.links.is_empty(), "{report:#?}");
            assert_eq!(target, Path::new("libwrong.so"));
        } else {
            assert_eq!(report.links.len(), 1, "{report:#?}");
            assert_eq!(target, Path::new("libfoo.so.1.2"));
        }
    }
}

/// Regression (issue 21): with what an earlier scan found the image's libraries to be
/// (`Pending::set_seen`), a scan gives the very cache and links that reading every file
/// gives, and learns nothing more; the first scan learned each library and the linker script.
#[test]
fn seen_libraries_give_the_cache_reading_gives() {
    use gpuctk_container::hooks::{update_ldcache_pending, Pending, SeenLibraries};
    let (_tmp, root, _host) = small_root();
    let lib = root.join("usr/lib64");
    build_lib(&lib.join("libfoo.so.1.2"), "libfoo.so.1", "foo");
    build_lib(&lib.join("libbar.so.2.0"), "libbar.so.2", "bar");
    std::fs::write(lib.join("libfoo.so"), b"GROUP ( libfoo.so.1 )\n").unwrap();
    let folders = ["/usr/lib64".to_string()];
    let r = Root::open(&root).unwrap();
    let mut runs = Vec::new();
    let mut seen = SeenLibraries::default();
    for _ in 0..2 {
        let mut pending = Pending::default();
        pending.set_seen(seen);
        let report = update_ldcache_pending(&r, &folders, &pending).unwrap();
        seen = pending.take_seen().unwrap();
        let cache = std::fs::read(root.join("etc/ld.so.cache")).unwrap();
        runs.push((report.entries, cache, seen.learned()));
    }
    assert_eq!(runs[0].2, 3, "two libraries and a linker script learned");
    assert_eq!(runs[1].2, 3, "nothing read the second time");
    assert_eq!(runs[0].0, runs[1].0);
    assert_eq!(runs[0].1, runs[1].1);
    assert_eq!(seen.len(), 3);
}

/// Regression (issue 21): in a root that persists, the image holds a file at a pending mount's
/// path (the mount point a runtime made before, here an ELF library of another soname, as an
/// image's own copy would be) and the soname link to it an earlier scan made. The link leads to
/// what the mount will hold, so the image's file is neither looked at nor read: the cache is
/// that of the pending library alone, and no link is made for the shadowed file's soname.
#[test]
fn a_link_to_a_pending_mount_does_not_read_the_file_the_mount_covers() {
    use gpuctk_container::hooks::{update_ldcache_pending, Pending};
    let (_tmp, root, _host) = small_root();
    let flags = gpuctk_ldcache::flags::FLAG_X8664_LIB64 | gpuctk_ldcache::flags::FLAG_ELF_LIBC6;
    build_lib(
        &root.join("usr/lib64/libgone.so.7.1"),
        "libshadowed.so.9",
        "shadowed",
    );
    std::os::unix::fs::symlink("libgone.so.7.1", root.join("usr/lib64/libgone.so.7")).unwrap();
    let mut pending = Pending::default();
    pending.add_known("/usr/lib64/libgone.so.7.1", "libgone.so.7", flags);
    let r = Root::open(&root).unwrap();
    let report = update_ldcache_pending(&r, &["/usr/lib64".into()], &pending).unwrap();
    assert_eq!(
        report.entries,
        [gpuctk_ldcache::Entry::new(
            "libgone.so.7",
            "/usr/lib64/libgone.so.7",
            flags
        )],
        "{:?}",
        report.notes
    );
    assert!(
        !root.join("usr/lib64/libshadowed.so.9").exists(),
        "no link for the covered file's soname"
    );
    let listed = ldconfig_p(&root.join("etc/ld.so.cache"));
    assert!(
        !listed.iter().any(|(n, _, _)| n == "libshadowed.so.9"),
        "{listed:?}"
    );
}
