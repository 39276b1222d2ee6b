//! End to end: a rootfs from create_rootfs, the mock driver injected by
//! hand as a container runtime would, and the probe and fake nvidia-smi
//! run inside it through chroot(8). Needs root.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;
use gpuctk_mockhost::{
    create_host, create_rootfs, HostConfig, LibraryLoad, MockHost, ProbeReport, RootfsConfig,
};

const LIBDIR: &str = "usr/lib/x86_64-linux-gnu";

struct Env {
    _tmp: tempfile::TempDir,
    host: MockHost,
    rootfs: PathBuf,
}

fn rootfs_cfg() -> RootfsConfig {
    RootfsConfig {
        busybox: "/bin/busybox".into(),
        ldconfig: ldconfig().into(),
    }
}

fn setup(gpus: u32) -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = HostConfig::new("570.124.06", (12, 8));
    cfg.gpus = gpus;
    cfg.seed = "e2e".into();
    cfg.ldconfig = ldconfig().into();
    let host = create_host(&tmp.path().join("host"), &cfg).unwrap();
    let rootfs = tmp.path().join("rootfs");
    create_rootfs(&rootfs, &rootfs_cfg()).unwrap();
    Env {
        _tmp: tmp,
        host,
        rootfs,
    }
}

/// What a runtime hook does: copy libraries and binaries, create the nodes
/// the container is given, refresh the container's loader cache.
fn inject(env: &Env, minors: &[u32]) {
    let lib = env.rootfs.join(LIBDIR);
    for path in env.host.library_paths() {
        fs::copy(&path, lib.join(path.file_name().unwrap())).unwrap();
    }
    for path in env.host.binary_paths() {
        fs::copy(
            &path,
            env.rootfs.join("usr/bin").join(path.file_name().unwrap()),
        )
        .unwrap();
    }
    let dev = env.rootfs.join("dev");
    let host_dev = env.host.dev_root.join("dev");
    let mut nodes: Vec<String> = minors.iter().map(|m| format!("nvidia{m}")).collect();
    nodes.extend([
        "nvidiactl".into(),
        "nvidia-uvm".into(),
        "nvidia-uvm-tools".into(),
    ]);
    for name in nodes {
        let rdev = fs::metadata(host_dev.join(&name)).unwrap().rdev();
        mknod(
            &dev.join(&name),
            libc::major(rdev),
            libc::minor(rdev),
            0o666,
        );
    }
    refresh_cache(&env.rootfs);
}

fn refresh_cache(rootfs: &Path) {
    let out = run(ldconfig(), &["-r", rootfs.to_str().unwrap()]);
    assert!(out.status.success(), "ldconfig -r: {out:?}");
}

fn chroot(rootfs: &Path, user: Option<&str>, cmd: &[&str]) -> Output {
    let mut args = Vec::new();
    let spec;
    if let Some(u) = user {
        spec = format!("--userspec={u}");
        args.push(spec.as_str());
    }
    args.push(rootfs.to_str().unwrap());
    args.extend_from_slice(cmd);
    run("chroot", &args)
}

fn probe(rootfs: &Path, user: Option<&str>) -> (ProbeReport, String) {
    let out = chroot(rootfs, user, &["/usr/bin/gpuctk-probe"]);
    let text = stdout(&out);
    eprintln!("--- gpuctk-probe (user {user:?}) ---\n{text}");
    assert!(out.status.success(), "probe failed: {out:?}");
    (ProbeReport::parse(&text), text)
}

fn smi_list(rootfs: &Path) -> Vec<String> {
    let out = chroot(rootfs, None, &["/usr/bin/nvidia-smi", "-L"]);
    assert!(out.status.success(), "nvidia-smi -L: {out:?}");
    stdout(&out).lines().map(str::to_string).collect()
}

fn uuid_of(host: &MockHost, minor: u32) -> String {
    host.gpus
        .iter()
        .find(|g| g.minor == minor)
        .unwrap()
        .uuid
        .clone()
}

#[test]
fn probe_and_nvidia_smi_see_injected_gpus() {
    let env = setup(4);
    inject(&env, &[0, 1, 2, 3]);
    let (report, text) = probe(&env.rootfs, None);

    for m in 0..4 {
        assert!(
            text.contains(&format!("dev /dev/nvidia{m} ENXIO\n")),
            "{text}"
        );
    }
    assert!(text.contains("dev /dev/nvidiactl ENXIO\n"), "{text}");
    assert!(!text.contains("/dev/nvidia4"), "{text}");
    let real = format!("/{LIBDIR}/libcuda.so.570.124.06");
    match &report.libcuda {
        Some(LibraryLoad::Loaded { realpath, .. }) => assert_eq!(realpath, &real),
        other => panic!("libcuda not loaded: {other:?}\n{text}"),
    }
    assert!(text.contains("\ncuInit 0\n"), "{text}");
    assert!(text.contains("\ncuDriverGetVersion 0 12080\n"), "{text}");
    assert!(text.contains("\ncuDeviceGetCount 0 4\n"), "{text}");
    assert!(
        text.contains("cuDeviceGetName 0 0 NVIDIA A100-SXM4-80GB\n"),
        "{text}"
    );
    assert_eq!(report.cu_device_count, Some((0, 4)));
    assert_eq!(report.nvml_init, Some(0));
    let want: Vec<String> = (0..4).map(|m| uuid_of(&env.host, m)).collect();
    assert_eq!(report.nvml_uuids, want);

    let listed = smi_list(&env.rootfs);
    let expected: Vec<String> = (0..4)
        .map(|i| {
            format!(
                "GPU {i}: NVIDIA A100-SXM4-80GB (UUID: {})",
                uuid_of(&env.host, i)
            )
        })
        .collect();
    assert_eq!(listed, expected);

    let out = chroot(&env.rootfs, None, &["/usr/bin/nvidia-smi"]);
    let table = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    assert!(table.contains("Driver Version: 570.124.06"), "{table}");
    assert!(table.contains("CUDA Version: 12.8"), "{table}");
    assert_eq!(table.matches("NVIDIA A100-SXM4-80GB").count(), 4, "{table}");

    let out = chroot(
        &env.rootfs,
        None,
        &[
            "/usr/bin/nvidia-smi",
            "--query-gpu=index,uuid,pci.bus_id",
            "--format=csv,noheader",
        ],
    );
    assert_eq!(
        stdout(&out).lines().next(),
        Some(format!("0, {}, 00000000:17:00.0", uuid_of(&env.host, 0)).as_str())
    );

    // Removing a node is what a smaller device allocation looks like.
    fs::remove_file(env.rootfs.join("dev/nvidia2")).unwrap();
    let (report, text) = probe(&env.rootfs, None);
    assert_eq!(report.cu_device_count, Some((0, 3)), "{text}");
    assert!(!text.contains("/dev/nvidia2 "), "{text}");
    let listed = smi_list(&env.rootfs);
    assert_eq!(listed.len(), 3);
    for (i, m) in [0u32, 1, 3].iter().enumerate() {
        assert_eq!(
            listed[i],
            format!(
                "GPU {i}: NVIDIA A100-SXM4-80GB (UUID: {})",
                uuid_of(&env.host, *m)
            )
        );
    }
}

#[test]
fn denied_node_looks_like_lost_cgroup_access() {
    let env = setup(2);
    inject(&env, &[0, 1]);
    // As non-root, mode 000 makes open() fail with EACCES, as the devices
    // cgroup would with EPERM.
    fs::set_permissions(
        env.rootfs.join("dev/nvidia1"),
        std::os::unix::fs::PermissionsExt::from_mode(0o000),
    )
    .unwrap();
    let (report, text) = probe(&env.rootfs, Some("65534:65534"));
    assert_eq!(report.device("/dev/nvidia1"), Some("EACCES"), "{text}");
    assert_eq!(report.device("/dev/nvidia0"), Some("ENXIO"), "{text}");
    assert_eq!(report.cu_init, Some(304), "{text}");
    assert_eq!(report.nvml_init, Some(999), "{text}");
    let out = chroot(
        &env.rootfs,
        Some("65534:65534"),
        &["/usr/bin/nvidia-smi", "-L"],
    );
    assert_eq!(stdout(&out), "Failed to initialize NVML: Unknown Error\n");
    assert_eq!(out.status.code(), Some(255));
}

#[test]
fn no_control_node_means_driver_not_loaded() {
    let env = setup(1);
    inject(&env, &[0]);
    fs::remove_file(env.rootfs.join("dev/nvidiactl")).unwrap();
    let (report, text) = probe(&env.rootfs, None);
    assert_eq!(report.cu_init, Some(100), "{text}");
    assert_eq!(report.nvml_init, Some(9), "{text}");
    let out = chroot(&env.rootfs, None, &["/usr/bin/nvidia-smi"]);
    assert_eq!(out.status.code(), Some(9));
    assert!(stdout(&out).contains("couldn't communicate with the NVIDIA driver"));
}

#[test]
fn no_gpu_nodes_means_no_device() {
    let env = setup(1);
    inject(&env, &[]);
    let (report, text) = probe(&env.rootfs, None);
    assert_eq!(report.cu_init, Some(100), "{text}");
    let out = chroot(&env.rootfs, None, &["/usr/bin/nvidia-smi", "-L"]);
    assert_eq!(stdout(&out), "No devices were found\n");
    assert_eq!(out.status.code(), Some(6));
}

#[test]
fn without_injection_libcuda_is_missing() {
    let env = setup(1);
    let (report, text) = probe(&env.rootfs, None);
    assert!(report.devices.is_empty(), "{text}");
    match report.libcuda {
        Some(LibraryLoad::Failed(msg)) => assert!(msg.contains("libcuda.so.1"), "{msg}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(report.cu_init, None);
}

#[test]
fn rhel_libraries_need_the_right_cache() {
    // The RHEL lib dir is not in the Debian rootfs's search path: copying the
    // libraries there without telling ldconfig must not make libcuda loadable.
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = HostConfig::new("550.54.15", (12, 4));
    cfg.layout = gpuctk_mockhost::Layout::Rhel;
    cfg.ldconfig = ldconfig().into();
    let host = create_host(&tmp.path().join("host"), &cfg).unwrap();
    let rootfs = tmp.path().join("rootfs");
    create_rootfs(&rootfs, &rootfs_cfg()).unwrap();
    for path in host.library_paths() {
        fs::copy(
            &path,
            rootfs.join("usr/lib64").join(path.file_name().unwrap()),
        )
        .unwrap();
    }
    mknod(&rootfs.join("dev/nvidiactl"), 195, 255, 0o666);
    mknod(&rootfs.join("dev/nvidia0"), 195, 0, 0o666);
    refresh_cache(&rootfs);
    let (report, text) = probe(&rootfs, None);
    assert!(
        matches!(report.libcuda, Some(LibraryLoad::Failed(_))),
        "{text}"
    );

    fs::write(rootfs.join("etc/ld.so.conf.d/nvidia.conf"), "/usr/lib64\n").unwrap();
    refresh_cache(&rootfs);
    let (report, text) = probe(&rootfs, None);
    assert_eq!(report.cu_init, Some(0), "{text}");
    assert_eq!(report.cu_driver_version, Some((0, 12040)), "{text}");
}

#[test]
fn stub_binaries_and_busybox_run() {
    let env = setup(1);
    inject(&env, &[0]);
    let out = chroot(&env.rootfs, None, &["/usr/bin/nvidia-persistenced"]);
    assert_eq!(stdout(&out), "nvidia-persistenced: version 570.124.06\n");
    let out = chroot(
        &env.rootfs,
        None,
        &[
            "/bin/sh",
            "-c",
            "echo hello; readlink /lib64/ld-linux-x86-64.so.2",
        ],
    );
    assert_eq!(
        stdout(&out),
        "hello\n/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2\n"
    );
}
