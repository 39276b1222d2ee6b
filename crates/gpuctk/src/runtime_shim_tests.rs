//! The shim's choice between doing our createContainer hooks itself and leaving them to the
//! runtime ([`shim_choice`]), on a bundle in a temp dir: no root, no runtime, nothing run.

use super::*;
use gpuctk_cdi::spec::Mount;
use gpuctk_core::ops::Link;
use serde_json::json;

struct Bundle {
    dir: tempfile::TempDir,
}

impl Bundle {
    /// A bundle whose rootfs has `/etc`, `/usr/lib64` and `/proc`.
    fn new() -> Bundle {
        let dir = tempfile::tempdir().unwrap();
        for d in ["rootfs/etc", "rootfs/usr/lib64", "rootfs/proc"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        Bundle { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// What the CDI spec's hooks ask: the cache, a link, and the params bind (live container only).
fn ops() -> Vec<(usize, InRootOp)> {
    vec![
        (
            0,
            InRootOp::UpdateLdcache {
                folders: vec!["/usr/lib64".into()],
            },
        ),
        (
            1,
            InRootOp::CreateSymlinks {
                links: vec![Link::parse("libcuda.so.1::/usr/lib64/libcuda.so").unwrap()],
            },
        ),
        (
            2,
            InRootOp::DisableDeviceNodeModification { proc_root: None },
        ),
    ]
}

fn spec(mounts: &[&str]) -> serde_json::Value {
    json!({
        "root": {"path": "rootfs"},
        "mounts": mounts.iter().map(|d| json!({"destination": d})).collect::<Vec<_>>(),
    })
}

/// The indices the shim does, or why it leaves them all to the runtime.
fn choice(
    spec: &serde_json::Value,
    bundle: &Path,
    edits: &ContainerEdits,
    ops: Vec<(usize, InRootOp)>,
) -> Result<Vec<usize>, String> {
    match shim_choice(spec, bundle, edits, ops) {
        ShimChoice::Shim { ops, .. } => Ok(ops.into_iter().map(|(i, _)| i).collect()),
        ShimChoice::Hooks(why) => Err(why),
    }
}

#[test]
fn the_shim_does_what_it_can_see_and_leaves_the_live_container_to_hooks() {
    let b = Bundle::new();
    let edits = ContainerEdits::default();
    let got = choice(
        &spec(&["/proc", "/dev", "/usr/lib640"]),
        b.path(),
        &edits,
        ops(),
    );
    assert_eq!(got, Ok(vec![0, 1]));
    // An empty uidMappings is no user namespace.
    let mut s = spec(&[]);
    s["linux"] = json!({"uidMappings": []});
    assert_eq!(choice(&s, b.path(), &edits, ops()), Ok(vec![0, 1]));
}

#[test]
fn hooks_stay_where_the_shim_cannot_see_what_the_container_will() {
    let b = Bundle::new();
    let edits = ContainerEdits::default();
    let left = |s: &serde_json::Value, edits: &ContainerEdits, ops| {
        choice(s, b.path(), edits, ops).expect_err("left to the runtime")
    };
    assert_eq!(left(&spec(&[]), &edits, Vec::new()), "no hooks of ours");
    let mut s = spec(&[]);
    s["linux"] = json!({"uidMappings": [{"containerID": 0, "hostID": 1000, "size": 1}]});
    assert_eq!(left(&s, &edits, ops()), "a user namespace");
    assert_eq!(left(&json!({}), &edits, ops()), "no root.path");
    let s = json!({"root": {"path": "nosuchdir"}});
    assert_eq!(left(&s, &edits, ops()), "no rootfs on the host");
    // A spec mount over a path a hook works on: the cache's /etc, the library folder, above it.
    for m in ["/etc", "/usr/lib64", "/usr", "/", "/usr/lib64/"] {
        let why = left(&spec(&[m]), &edits, ops());
        assert!(why.starts_with("a spec mount covers"), "{m}: {why}");
    }
    // A CDI mount of the edits over the link's folder.
    let mut edits_over = ContainerEdits::default();
    edits_over.mounts.push(Mount {
        host_path: "/x".into(),
        container_path: "/usr/lib64".into(),
        ..Default::default()
    });
    let why = left(&spec(&[]), &edits_over, ops());
    assert!(why.starts_with("a spec mount covers"), "{why}");
}

#[test]
fn an_image_symlink_into_a_mount_leaves_the_hooks_to_the_runtime() {
    let b = Bundle::new();
    let lib = b.path().join("rootfs/usr/lib64");
    std::fs::remove_dir(&lib).unwrap();
    // The library folder is the image's link into /proc, which the runtime mounts.
    std::os::unix::fs::symlink("../proc/driver", &lib).unwrap();
    let why = choice(
        &spec(&["/proc"]),
        b.path(),
        &ContainerEdits::default(),
        ops(),
    )
    .unwrap_err();
    assert!(why.contains("(/proc/driver"), "{why}");
    // Without that mount the link is the image's own business.
    assert_eq!(
        choice(&spec(&[]), b.path(), &ContainerEdits::default(), ops()),
        Ok(vec![0, 1])
    );
}
