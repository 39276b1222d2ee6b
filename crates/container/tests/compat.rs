//! enable_cuda_compat on fixture compat libraries built with gcc (with and
//! without a `.note.cuda.fwd_compatibility` note added by objcopy), then
//! update_ldcache and the real loader in a chroot. Needs root.

mod common;

use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};

use common::*;
use gpuctk_container::{enable_cuda_compat, update_ldcache, CompatOutcome, Root};
use gpuctk_mockhost::{
    create_host, create_rootfs, HostConfig, Layout, LibraryLoad, ProbeReport, RootfsConfig,
    PROBE_PATH,
};

const COMPAT: &str = "/usr/local/cuda/compat";
const NOTE: &str =
    r#"{"Format":"1","CUDA Version":"12.9","Driver":[535,550,570],"Device":["all"]}"#;

/// `<root>/usr/local/cuda-12.9/compat/libcuda.so.<ver>` (soname
/// libcuda.so.1), `/usr/local/cuda -> cuda-12.9`, optionally with the note.
fn compat_fixture(root: &Path, version: &str, note: Option<&str>) -> PathBuf {
    let dir = root.join("usr/local/cuda-12.9/compat");
    let lib = dir.join(format!("libcuda.so.{version}"));
    build_lib(&lib, "libcuda.so.1", "cuCompatMarker");
    if let Some(n) = note {
        add_cuda_note(&lib, n);
    }
    if std::fs::symlink_metadata(root.join("usr/local/cuda")).is_err() {
        symlink("cuda-12.9", root.join("usr/local/cuda")).unwrap();
    }
    lib
}

fn compat_confs(root: &Path) -> Vec<(String, String, u32)> {
    let Ok(rd) = std::fs::read_dir(root.join("etc/ld.so.conf.d")) else {
        return Vec::new();
    };
    let mut v: Vec<_> = rd
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with("00-compat-"))
        .map(|e| {
            let m = e.metadata().unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read_to_string(e.path()).unwrap(),
                m.mode() & 0o7777,
            )
        })
        .collect();
    v.sort();
    v
}

fn temp_root() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::create_dir_all(root.join("usr/local")).unwrap();
    (tmp, root)
}

#[test]
fn newer_compat_with_listed_branch_is_chosen() {
    let (_tmp, root) = temp_root();
    compat_fixture(&root, "575.57.08", Some(NOTE));
    let r = Root::open(&root).unwrap();
    let out = enable_cuda_compat(&r, Some("570.124.06"), None, COMPAT).unwrap();
    eprintln!("{out}");
    match &out {
        CompatOutcome::Enabled {
            library,
            compat_version,
            compat_dir,
            conf_file,
            ..
        } => {
            assert_eq!(library, "/usr/local/cuda/compat/libcuda.so.575.57.08");
            assert_eq!(compat_version, "575.57.08");
            assert_eq!(compat_dir, "/usr/local/cuda-12.9/compat");
            assert!(conf_file.starts_with("/etc/ld.so.conf.d/00-compat-"));
        }
        other => panic!("{other:?}"),
    }
    let confs = compat_confs(&root);
    assert_eq!(confs.len(), 1, "{confs:?}");
    assert_eq!(confs[0].1.trim_end(), "/usr/local/cuda-12.9/compat");
    assert_eq!(confs[0].2, 0o644);
    // Deterministic: running again rewrites the same single file.
    let again = enable_cuda_compat(&r, Some("570.124.06"), None, COMPAT).unwrap();
    assert!(again.enabled());
    assert_eq!(compat_confs(&root), confs);
}

#[test]
fn host_branch_not_listed_is_not_chosen() {
    let (_tmp, root) = temp_root();
    compat_fixture(&root, "575.57.08", Some(NOTE));
    let out =
        enable_cuda_compat(&Root::open(&root).unwrap(), Some("560.35.03"), None, COMPAT).unwrap();
    assert!(matches!(out, CompatOutcome::NotUsed { .. }), "{out:?}");
    assert!(out.to_string().contains("560"), "{out}");
    assert!(compat_confs(&root).is_empty());
}

#[test]
fn older_compat_is_not_chosen() {
    let (_tmp, root) = temp_root();
    compat_fixture(
        &root,
        "575.57.08",
        Some(r#"{"CUDA Version":"12.9","Driver":[575,580]}"#),
    );
    let out =
        enable_cuda_compat(&Root::open(&root).unwrap(), Some("580.65.06"), None, COMPAT).unwrap();
    assert!(matches!(out, CompatOutcome::NotUsed { .. }), "{out:?}");
    assert!(compat_confs(&root).is_empty());
}

#[test]
fn without_note_the_majors_decide() {
    let (_tmp, root) = temp_root();
    compat_fixture(&root, "575.57.08", None);
    let r = Root::open(&root).unwrap();
    let out = enable_cuda_compat(&r, Some("575.10.01"), None, COMPAT).unwrap();
    assert!(matches!(out, CompatOutcome::NotUsed { .. }), "{out:?}");
    assert!(compat_confs(&root).is_empty());
    let out = enable_cuda_compat(&r, Some("560.35.03"), None, COMPAT).unwrap();
    assert!(out.enabled(), "{out:?}");
    assert_eq!(compat_confs(&root)[0].1, "/usr/local/cuda-12.9/compat\n");
}

#[test]
fn two_candidates_or_none_is_not_chosen() {
    let (_tmp, root) = temp_root();
    let r = Root::open(&root).unwrap();
    assert_eq!(
        enable_cuda_compat(&r, Some("570.124.06"), None, COMPAT).unwrap(),
        CompatOutcome::NoCompatDir {
            compat_root: COMPAT.into()
        }
    );
    assert_eq!(
        enable_cuda_compat(&r, None, None, COMPAT).unwrap(),
        CompatOutcome::NoVersionGiven
    );
    compat_fixture(&root, "575.57.08", Some(NOTE));
    compat_fixture(&root, "580.65.06", Some(NOTE));
    let out = enable_cuda_compat(&r, Some("570.124.06"), None, COMPAT).unwrap();
    match &out {
        CompatOutcome::NoSingleLibrary { found, .. } => assert_eq!(found.len(), 2),
        other => panic!("{other:?}"),
    }
    assert!(compat_confs(&root).is_empty());
}

#[test]
fn compat_root_symlinked_to_host_is_not_followed_out() {
    let tmp = tempfile::tempdir().unwrap();
    let host = tmp.path().join("host");
    compat_fixture(&host, "575.57.08", Some(NOTE));
    let before = snapshot(&host);
    let root = tmp.path().join("root");
    std::fs::create_dir_all(root.join("usr/local")).unwrap();
    symlink(
        host.join("usr/local/cuda-12.9"),
        root.join("usr/local/cuda"),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    let hostconf = tmp.path().join("hostconf");
    std::fs::create_dir_all(&hostconf).unwrap();
    symlink(&hostconf, root.join("etc/ld.so.conf.d")).unwrap();
    let r = Root::open(&root).unwrap();
    let out = enable_cuda_compat(&r, Some("570.124.06"), None, COMPAT).unwrap();
    assert!(matches!(out, CompatOutcome::NoCompatDir { .. }), "{out:?}");
    assert_eq!(snapshot(&host), before);

    // A real compat dir in the image, with conf.d pointing at a host dir:
    // the conf file lands inside the root.
    std::fs::remove_file(root.join("usr/local/cuda")).unwrap();
    compat_fixture(&root, "575.57.08", Some(NOTE));
    let out = enable_cuda_compat(&r, Some("570.124.06"), None, COMPAT).unwrap();
    assert!(out.enabled(), "{out:?}");
    assert_eq!(std::fs::read_dir(&hostconf).unwrap().count(), 0);
    let inroot = rerooted(&root, &hostconf);
    assert_eq!(std::fs::read_dir(&inroot).unwrap().count(), 1);
    assert_eq!(snapshot(&host), before);
}

#[test]
fn chosen_compat_wins_in_the_cache_and_the_loader() {
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
    std::fs::create_dir_all(rootfs.join("usr/lib64")).unwrap();
    for p in host.library_paths() {
        std::fs::copy(&p, rootfs.join("usr/lib64").join(p.file_name().unwrap())).unwrap();
    }
    mknod(&rootfs.join("dev/nvidiactl"), 195, 255, 0o666);
    mknod(&rootfs.join("dev/nvidia0"), 195, 0, 0o666);
    compat_fixture(&rootfs, "575.57.08", Some(NOTE));

    let r = Root::open(&rootfs).unwrap();
    let out = enable_cuda_compat(&r, Some("570.124.06"), None, COMPAT).unwrap();
    assert!(out.enabled(), "{out:?}");
    let report = update_ldcache(&r, &["/usr/lib64".into()]).unwrap();
    assert_eq!(
        report.compat_dirs,
        vec!["/usr/local/cuda-12.9/compat".to_string()]
    );

    let entries = ldconfig_p(&rootfs.join("etc/ld.so.cache"));
    let cuda: Vec<_> = entries
        .iter()
        .filter(|(n, _, _)| n == "libcuda.so.1")
        .collect();
    assert_eq!(cuda.len(), 1, "{entries:#?}");
    assert_eq!(cuda[0].2, "/usr/local/cuda-12.9/compat/libcuda.so.1");
    // The rest of the driver still comes from /usr/lib64.
    assert!(entries
        .iter()
        .any(|(n, _, p)| n == "libnvidia-ml.so.1" && p == "/usr/lib64/libnvidia-ml.so.1"));

    // The real ldconfig on a copy of the same tree (the drop-ins we wrote included) puts the
    // compat libcuda first too: the loader takes the first entry of a name.
    let copy = tmp.path().join("copy");
    run_ok(
        "cp",
        &["-a", rootfs.to_str().unwrap(), copy.to_str().unwrap()],
    );
    run_ok(ldconfig(), &["-r", copy.to_str().unwrap()]);
    let first = |entries: &[(String, String, String)], name: &str| {
        entries
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, _, p)| p.clone())
    };
    let real = ldconfig_p(&copy.join("etc/ld.so.cache"));
    for name in ["libcuda.so.1", "libnvidia-ml.so.1"] {
        let theirs = first(&real, name).map(|p| {
            // ldconfig names the soname link it made; the loader follows it to the file.
            let target = std::fs::canonicalize(copy.join(p.trim_start_matches('/'))).unwrap();
            format!("/{}", target.strip_prefix(&copy).unwrap().display())
        });
        let ours = first(&entries, name).map(|p| {
            let target = std::fs::canonicalize(rootfs.join(p.trim_start_matches('/'))).unwrap();
            format!("/{}", target.strip_prefix(&rootfs).unwrap().display())
        });
        assert_eq!(
            ours, theirs,
            "{name}: ours {entries:#?}\nldconfig's {real:#?}"
        );
    }

    let out = chroot(&rootfs, &[PROBE_PATH]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // The fixture lacks the CUDA entry points, so the probe follows its
    // "libcuda ok" line with "libcuda missing-symbols": judge the first.
    let loaded = text
        .lines()
        .find(|l| l.starts_with("libcuda ok "))
        .unwrap_or("");
    let report = ProbeReport::parse(loaded);
    match &report.libcuda {
        Some(LibraryLoad::Loaded { realpath, .. }) => {
            assert_eq!(
                realpath, "/usr/local/cuda-12.9/compat/libcuda.so.575.57.08",
                "{text}"
            )
        }
        other => panic!("libcuda not loaded: {other:?}\n{text}"),
    }
}

/// Regression (issue 10's defect, found with the hardening work): the note in a real
/// `libcuda.so` (575 and later) spells its keys `"driver"` and `"CUDA version"`; we looked them
/// up with exact case, so a real compat library was never used. Keys now match without regard
/// to ASCII case, as NVIDIA's decoder does.
#[test]
fn note_keys_match_without_regard_to_case() {
    for note in [
        r#"{"format":1,"CUDA version":"12.9","driver":[535,550,570],"device":[1,2]}"#,
        r#"{"FORMAT":1,"cuda version":"12.9","DRIVER":[570]}"#,
    ] {
        let (_tmp, root) = temp_root();
        compat_fixture(&root, "575.57.08", Some(note));
        let r = Root::open(&root).unwrap();
        let out = enable_cuda_compat(&r, Some("570.124.06"), None, COMPAT).unwrap();
        assert!(out.enabled(), "{note}: {out}");
        // The host branch must still be listed.
        let out = enable_cuda_compat(&r, Some("560.35.03"), None, COMPAT).unwrap();
        assert!(!out.enabled(), "{note}: {out}");
        // The CUDA-version rule (Tegra) reads the lower-case key too.
        let (_tmp2, root2) = temp_root();
        compat_fixture(&root2, "575.57.08", Some(note));
        let r2 = Root::open(&root2).unwrap();
        assert!(enable_cuda_compat(&r2, None, Some("12.6"), COMPAT)
            .unwrap()
            .enabled());
    }
}

/// A compat library that is not readable ELF, or whose note is not JSON, is judged as NVIDIA
/// does then: by the driver majors in the file names, with the reason noted.
#[test]
fn unreadable_compat_library_falls_back_to_the_majors() {
    let (_tmp, root) = temp_root();
    let lib = root.join("usr/local/cuda/compat/libcuda.so.575.57.08");
    std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
    std::fs::write(&lib, b"\x7fELF truncated").unwrap();
    let r = Root::open(&root).unwrap();
    let out = enable_cuda_compat(&r, Some("570.124.06"), None, COMPAT).unwrap();
    assert!(out.enabled(), "{out}");
    assert!(out.to_string().contains("not a readable ELF file"), "{out}");
    let out = enable_cuda_compat(&r, Some("580.1.1"), None, COMPAT).unwrap();
    assert!(!out.enabled(), "{out}");

    let (_tmp, root) = temp_root();
    compat_fixture(&root, "575.57.08", Some("{not json"));
    let r = Root::open(&root).unwrap();
    let out = enable_cuda_compat(&r, Some("570.124.06"), None, COMPAT).unwrap();
    assert!(out.enabled(), "{out}");
    assert!(out.to_string().contains("is not a JSON object"), "{out}");
}

/// NVIDIA's own table for this hook (its cudacompat tests), row by row, on fixtures of ours:
/// placeholder files where NVIDIA's rows use empty files (not readable ELF: the driver majors in
/// the file names decide), and a gcc-built library carrying the note of a real 575.57.08 compat
/// `libcuda` where its rows read the ELF note. Each row gives NVIDIA's answer: the directory
/// written into the drop-in, or none.
#[test]
fn nvidia_cudacompat_table() {
    struct Row {
        what: &'static str,
        files: &'static [(&'static str, &'static str)],
        driver: Option<&'static str>,
        cuda: Option<&'static str>,
        compat_root: &'static str,
        want: Option<&'static str>,
    }
    const NEWER: &[(&str, &str)] = &[
        ("/etc/ld.so.cache", ""),
        ("/usr/local/cuda/compat/libcuda.so.333.88.99", ""),
    ];
    const NOTE_575: &str = r#"{"Format":1,"CUDA Version":"12.9","Driver":[535,550,560,565,570,575],"Device":[1,2,7,8,9,10,11,12,13,14]}"#;
    let row = |what, files, driver, want| Row {
        what,
        files,
        driver,
        cuda: None,
        compat_root: COMPAT,
        want,
    };
    let elf = |what, driver, cuda, want| Row {
        what,
        files: &[("elf", "")],
        driver,
        cuda,
        compat_root: "compat/575.57.08",
        want,
    };
    let host = Some("222.55.66");
    let rows = [
        row("empty root", &[], host, None),
        row(
            "compat lib is newer; no ldcache",
            &[("/usr/local/cuda/compat/libcuda.so.333.88.99", "")],
            host,
            Some(COMPAT),
        ),
        row("compat lib is newer; ldcache", NEWER, host, Some(COMPAT)),
        row(
            "compat lib is older",
            &[("/usr/local/cuda/compat/libcuda.so.111.88.99", "")],
            host,
            None,
        ),
        row(
            "compat lib has the same major",
            &[("/usr/local/cuda/compat/libcuda.so.222.88.99", "")],
            host,
            None,
        ),
        row(
            "numeric comparison is used",
            &[("/usr/local/cuda/compat/libcuda.so.222.88.99", "")],
            Some("99.55.66"),
            Some(COMPAT),
        ),
        row(
            "driver version empty",
            &[("/usr/local/cuda/compat/libcuda.so.222.88.99", "")],
            Some(""),
            None,
        ),
        row(
            "symlinks are followed",
            &[
                ("/etc/alternatives/cuda/compat/libcuda.so.333.88.99", ""),
                ("/usr/local/cuda", "symlink=/etc/alternatives/cuda"),
            ],
            host,
            Some("/etc/alternatives/cuda/compat"),
        ),
        row(
            "symlinks stay in the container",
            &[
                ("/compat/libcuda.so.333.88.99", ""),
                ("/usr/local/cuda", "symlink=../../../../../../"),
            ],
            host,
            Some("/compat"),
        ),
        Row {
            compat_root: "/usr/local/cuda/compat-other",
            ..row(
                "the given compat root is used",
                &[
                    ("/usr/local/cuda/compat/libcuda.so.111.88.99", ""),
                    ("/usr/local/cuda/compat-other/libcuda.so.333.88.99", ""),
                ],
                host,
                Some("/usr/local/cuda/compat-other"),
            )
        },
        elf(
            "note: CUDA newer than the host's",
            None,
            Some("12.8"),
            Some("/compat/575.57.08"),
        ),
        elf("note: CUDA equal to the host's", None, Some("12.9"), None),
        elf(
            "note: CUDA older than the host's (12.10 > 12.9)",
            None,
            Some("12.10"),
            None,
        ),
        elf(
            "note: host branch not listed",
            Some("590.44.01"),
            None,
            None,
        ),
        elf(
            "note: host branch listed and older than the compat branch",
            Some("570.211.01"),
            None,
            Some("/compat/575.57.08"),
        ),
        elf(
            "note: same branch, compat newer",
            Some("575.10.10"),
            None,
            Some("/compat/575.57.08"),
        ),
        elf("note: same branch, equal", Some("575.57.08"), None, None),
        elf(
            "note: same branch, compat older",
            Some("575.99.99"),
            None,
            None,
        ),
    ];
    let mut failures = Vec::new();
    for r in rows {
        let (_tmp, root) = temp_root();
        for (name, contents) in r.files {
            if *name == "elf" {
                let lib = root.join("compat/575.57.08/libcuda.so.575.57.08");
                build_lib(&lib, "libcuda.so.1", "cuCompatMarker");
                add_cuda_note(&lib, NOTE_575);
                continue;
            }
            let p = root.join(name.trim_start_matches('/'));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            match contents.strip_prefix("symlink=") {
                Some(target) => symlink(target, &p).unwrap(),
                None => std::fs::write(&p, contents).unwrap(),
            }
        }
        let out = enable_cuda_compat(&Root::open(&root).unwrap(), r.driver, r.cuda, r.compat_root)
            .unwrap();
        let got = match &out {
            CompatOutcome::Enabled { compat_dir, .. } => Some(compat_dir.as_str()),
            _ => None,
        };
        let confs = compat_confs(&root);
        let written: Vec<&str> = confs.iter().map(|c| c.1.trim_end()).collect();
        if got != r.want || written != r.want.into_iter().collect::<Vec<_>>() {
            failures.push(format!(
                "{}: want {:?}, got {got:?} (drop-ins {written:?}): {out}",
                r.what, r.want
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
