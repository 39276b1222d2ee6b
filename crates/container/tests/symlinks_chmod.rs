//! create_symlinks and chmod: ln -sf / chmod semantics, and malicious
//! images whose symlinks point at the host.

mod common;

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::PathBuf;

use common::*;
use gpuctk_container::{chmod, create_symlinks, HookError, Link, Root, RootError};

fn fixture() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let host = tmp.path().join("host");
    std::fs::create_dir_all(root.join("usr/lib64")).unwrap();
    std::fs::create_dir_all(host.join("lib")).unwrap();
    std::fs::write(host.join("shadow"), b"secret").unwrap();
    std::fs::set_permissions(host.join("shadow"), std::fs::Permissions::from_mode(0o600)).unwrap();
    (tmp, root, host)
}

fn links(v: &[&str]) -> Vec<Link> {
    v.iter().map(|s| Link::parse(s).unwrap()).collect()
}

#[test]
fn create_symlinks_basic() {
    let (_tmp, root, _host) = fixture();
    let r = Root::open(&root).unwrap();
    std::fs::write(root.join("usr/lib64/libcuda.so"), b"old file").unwrap();
    symlink("wrong", root.join("usr/lib64/libfoo.so")).unwrap();
    create_symlinks(
        &r,
        &links(&[
            "libcuda.so.1::/usr/lib64/libcuda.so",
            "libfoo.so.1::/usr/lib64/libfoo.so",
            "../lib64/libfoo.so.1::/usr/new/dir/libfoo.so",
            "/usr/lib64::/usr/lib/nvidia",
        ]),
    )
    .unwrap();
    let rl = |p: &str| std::fs::read_link(root.join(p)).unwrap();
    assert_eq!(rl("usr/lib64/libcuda.so"), PathBuf::from("libcuda.so.1"));
    assert_eq!(rl("usr/lib64/libfoo.so"), PathBuf::from("libfoo.so.1"));
    assert_eq!(
        rl("usr/new/dir/libfoo.so"),
        PathBuf::from("../lib64/libfoo.so.1")
    );
    assert_eq!(rl("usr/lib/nvidia"), PathBuf::from("/usr/lib64"));
    // Running again is a no-op.
    create_symlinks(&r, &links(&["libcuda.so.1::/usr/lib64/libcuda.so"])).unwrap();
}

/// A link that replaces a symlinked folder earlier links were made in: the links after it go
/// where the new link leads, which is made as for any other link (the folder-once shortcut
/// made them fail there, in a folder that did not exist).
#[test]
fn create_symlinks_after_a_link_replacing_their_folder() {
    let (_tmp, root, _host) = fixture();
    std::fs::create_dir_all(root.join("opt/old")).unwrap();
    symlink("old", root.join("opt/lib")).unwrap();
    create_symlinks(
        &Root::open(&root).unwrap(),
        &links(&[
            "a.so.1::/opt/lib/a.so",
            "new::/opt/lib",
            "b.so.1::/opt/lib/b.so",
        ]),
    )
    .unwrap();
    let rl = |p: &str| std::fs::read_link(root.join(p)).unwrap();
    assert_eq!(rl("opt/old/a.so"), PathBuf::from("a.so.1"));
    assert_eq!(rl("opt/lib"), PathBuf::from("new"));
    assert_eq!(rl("opt/new/b.so"), PathBuf::from("b.so.1"));
}

#[test]
fn create_symlinks_refuses_to_replace_a_directory() {
    let (_tmp, root, _host) = fixture();
    std::fs::create_dir_all(root.join("usr/lib64/libcuda.so/inner")).unwrap();
    let e = create_symlinks(
        &Root::open(&root).unwrap(),
        &links(&["libcuda.so.1::/usr/lib64/libcuda.so"]),
    )
    .unwrap_err();
    assert!(
        matches!(e, HookError::Root(RootError::IsDirectory { .. })),
        "{e}"
    );
    assert!(e.to_string().contains("/usr/lib64/libcuda.so"), "{e}");
    assert!(root.join("usr/lib64/libcuda.so/inner").is_dir());
}

#[test]
fn create_symlinks_through_host_symlinks_stays_in_root() {
    for relative in [false, true] {
        let (_tmp, root, host) = fixture();
        let before = snapshot(&host);
        let target = if relative {
            PathBuf::from(format!(
                "../../../../../../..{}",
                host.join("lib").display()
            ))
        } else {
            host.join("lib")
        };
        symlink(&target, root.join("usr/lib")).unwrap();
        // /etc/shadow-style: the link path itself is a symlink to a host file.
        std::fs::create_dir_all(root.join("etc")).unwrap();
        symlink(host.join("shadow"), root.join("etc/shadow")).unwrap();
        let r = Root::open(&root).unwrap();
        create_symlinks(
            &r,
            &links(&[
                "/usr/lib64/libcuda.so.1::/usr/lib/libcuda.so.1",
                "/usr/lib64/x::/usr/lib/sub/dir/x",
                "evil::/etc/shadow",
            ]),
        )
        .unwrap();
        assert_eq!(snapshot(&host), before, "relative={relative}");
        let inroot = rerooted(&root, &host.join("lib"));
        assert_eq!(
            std::fs::read_link(inroot.join("libcuda.so.1")).unwrap(),
            PathBuf::from("/usr/lib64/libcuda.so.1")
        );
        assert!(inroot.join("sub/dir").is_dir());
        // The in-root link was replaced; the host file it pointed at was not touched.
        assert_eq!(
            std::fs::read_link(root.join("etc/shadow")).unwrap(),
            PathBuf::from("evil")
        );
    }
}

#[test]
fn link_parse_errors_name_value_and_form() {
    for bad in ["nolink", "::/x", "target::", "target::relative"] {
        let msg = Link::parse(bad).unwrap_err().to_string();
        assert!(msg.contains(bad), "{msg}");
        assert!(msg.contains("TARGET::LINK"), "{msg}");
    }
}

#[test]
fn chmod_basic_and_missing() {
    let (_tmp, root, _host) = fixture();
    std::fs::create_dir_all(root.join("dev/dri")).unwrap();
    mknod(&root.join("dev/dri/card0"), 226, 0, 0o600);
    let r = Root::open(&root).unwrap();
    chmod(&r, 0o755, &["/dev/dri".into(), "/dev/dri/card0".into()]).unwrap();
    let mode = |p: &str| std::fs::symlink_metadata(root.join(p)).unwrap().mode() & 0o7777;
    assert_eq!(mode("dev/dri"), 0o755);
    assert_eq!(mode("dev/dri/card0"), 0o755);
    let e = chmod(&r, 0o755, &["/dev/nvidia-caps".into()]).unwrap_err();
    assert!(matches!(e, HookError::ChmodMissing { .. }));
    assert!(e.to_string().contains("/dev/nvidia-caps"), "{e}");
    assert!(matches!(
        chmod(&r, 0o10755, &["/dev/dri".into()]),
        Err(HookError::BadMode { .. })
    ));
}

#[test]
fn chmod_through_host_symlinks_stays_in_root() {
    let (_tmp, root, host) = fixture();
    let before = snapshot(&host);
    std::fs::create_dir_all(root.join("etc")).unwrap();
    symlink(host.join("shadow"), root.join("etc/shadow")).unwrap();
    symlink(
        format!("../../../../../..{}", host.display()),
        root.join("hostrel"),
    )
    .unwrap();
    let r = Root::open(&root).unwrap();
    for p in ["/etc/shadow", "/hostrel/shadow", "/hostrel/lib"] {
        let e = chmod(&r, 0o777, &[p.into()]).unwrap_err();
        assert!(matches!(e, HookError::ChmodMissing { .. }), "{p}: {e}");
    }
    assert_eq!(snapshot(&host), before);
    let inroot = rerooted(&root, &host);
    std::fs::create_dir_all(inroot.join("lib")).unwrap();
    std::fs::write(inroot.join("shadow"), b"image file").unwrap();
    // Present in the root now, but not a device path: refused, nothing changed.
    for p in ["/etc/shadow", "/hostrel/lib"] {
        let e = chmod(&r, 0o640, &[p.into()]).unwrap_err();
        assert!(matches!(e, HookError::ChmodRefused { .. }), "{p}: {e}");
        assert!(e.to_string().contains("only device nodes"), "{e}");
    }
    assert_eq!(
        std::fs::metadata(inroot.join("shadow")).unwrap().mode() & 0o7777,
        0o644
    );
    assert_eq!(snapshot(&host), before);
}

/// Regression (issue 8): chmod left system directories at mode 000 and 7777 when handed a
/// confused root; now it changes only permission bits of device paths under /dev.
#[test]
fn chmod_only_device_paths_and_permission_bits() {
    let (_tmp, root, _host) = fixture();
    std::fs::create_dir_all(root.join("dev/dri")).unwrap();
    std::fs::create_dir_all(root.join("usr/bin")).unwrap();
    std::fs::write(root.join("dev/file"), b"").unwrap();
    mknod(&root.join("dev/dri/card0"), 226, 0, 0o600);
    symlink("/usr/bin", root.join("dev/sneaky")).unwrap();
    let r = Root::open(&root).unwrap();
    let mode = |p: &str| std::fs::symlink_metadata(root.join(p)).unwrap().mode() & 0o7777;
    let before = mode("usr/bin");
    for p in ["/usr/bin", "/dev", "/dev/", "/dev/sneaky", "/dev/file", "/"] {
        let e = chmod(&r, 0o000, &[p.into()]).unwrap_err();
        assert!(matches!(e, HookError::ChmodRefused { .. }), "{p}: {e}");
    }
    assert_eq!(mode("usr/bin"), before);
    for m in [0o7777, 0o4755, 0o2755, 0o1777] {
        assert!(matches!(
            chmod(&r, m, &["/dev/dri".into()]),
            Err(HookError::BadMode { .. })
        ));
    }
    chmod(&r, 0o755, &["/dev/dri".into()]).unwrap();
    assert_eq!(mode("dev/dri"), 0o755);
}
