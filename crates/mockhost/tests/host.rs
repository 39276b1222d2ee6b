//! create_host / load_host against the real filesystem (needs root for mknod).

mod common;

use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use common::*;
use gpuctk_mockhost::{create_host, gpu_bus_id, gpu_uuid, load_host, HostConfig, Layout};

/// Expected (file stem, soname) pairs, written out independently of the crate.
fn expected_libraries(ver: &str) -> Vec<(String, String)> {
    [
        ("libcuda", "libcuda.so.1"),
        ("libnvidia-ml", "libnvidia-ml.so.1"),
        ("libnvidia-ptxjitcompiler", "libnvidia-ptxjitcompiler.so.1"),
        ("libnvidia-nvvm", "libnvidia-nvvm.so.4"),
        ("libcudadebugger", "libcudadebugger.so.1"),
        ("libnvidia-allocator", "libnvidia-allocator.so.1"),
        ("libnvidia-cfg", "libnvidia-cfg.so.1"),
        ("libnvidia-opencl", "libnvidia-opencl.so.1"),
        ("libnvidia-encode", "libnvidia-encode.so.1"),
        ("libnvcuvid", "libnvcuvid.so.1"),
        ("libEGL_nvidia", "libEGL_nvidia.so.0"),
        ("libGLX_nvidia", "libGLX_nvidia.so.0"),
    ]
    .iter()
    .map(|(stem, soname)| (format!("{stem}.so.{ver}"), soname.to_string()))
    .chain(std::iter::once((
        format!("libnvidia-glcore.so.{ver}"),
        format!("libnvidia-glcore.so.{ver}"),
    )))
    .collect()
}

fn real_char_majors() -> Vec<u32> {
    let text = fs::read_to_string("/proc/devices").unwrap();
    let chars = text.split("Block devices").next().unwrap();
    chars
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

fn check_host(layout: Layout, gpus: u32) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("host");
    let ver = "570.124.06";
    let mut cfg = HostConfig::new(ver, (12, 8));
    cfg.gpus = gpus;
    cfg.layout = layout;
    cfg.ldconfig = PathBuf::from(ldconfig());
    let started = std::time::Instant::now();
    let host = create_host(&dir, &cfg).unwrap_or_else(|e| panic!("{layout} x{gpus}: {e}"));
    eprintln!("create_host {layout} x{gpus}: {:?}", started.elapsed());

    let root = fs::canonicalize(&dir).unwrap();
    assert_eq!(host.root, root);
    assert_eq!(host.dev_root, root);
    assert_eq!(host.proc_root, root.join("proc"));
    assert_eq!(host.cuda_version, "12.8");
    assert_eq!(host.driver_version, ver);
    let (driver_root, lib_dir) = match layout {
        Layout::Debian => (root.clone(), "/usr/lib/x86_64-linux-gnu"),
        Layout::Rhel => (root.clone(), "/usr/lib64"),
        Layout::DriverContainer => (root.join("run/nvidia/driver"), "/usr/lib/x86_64-linux-gnu"),
    };
    assert_eq!(host.driver_root, driver_root);
    assert_eq!(host.lib_dir, lib_dir);
    assert_eq!(host.gpus.len(), gpus as usize);

    // Device nodes.
    let dev = root.join("dev");
    for i in 0..gpus {
        assert_eq!(
            char_device(&dev.join(format!("nvidia{i}"))),
            (195, i, 0o666)
        );
    }
    assert!(absent(&dev.join(format!("nvidia{gpus}"))));
    assert_eq!(char_device(&dev.join("nvidiactl")), (195, 255, 0o666));
    assert_eq!(char_device(&dev.join("nvidia-modeset")), (195, 254, 0o666));
    let u = host.uvm_major;
    assert!(
        !real_char_majors().contains(&u),
        "uvm major {u} is a real driver's"
    );
    assert!((234..=511).contains(&u));
    assert_eq!(char_device(&dev.join("nvidia-uvm")), (u, 0, 0o666));
    assert_eq!(char_device(&dev.join("nvidia-uvm-tools")), (u, 1, 0o666));

    // /proc.
    let nv = root.join("proc/driver/nvidia");
    let version = fs::read_to_string(nv.join("version")).unwrap();
    let first = version.lines().next().unwrap();
    assert!(first.starts_with("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "));
    assert_eq!(first.split("  ").nth(1), Some(ver), "{first}");
    assert!(version
        .lines()
        .nth(1)
        .unwrap()
        .starts_with("GCC version:  gcc version"));
    for (i, gpu) in host.gpus.iter().enumerate() {
        let i = i as u32;
        assert_eq!(gpu.index, i);
        assert_eq!(gpu.minor, i);
        assert_eq!(gpu.uuid, gpu_uuid("gpuctk", i));
        assert_eq!(gpu.bus_id, gpu_bus_id(i));
        let info =
            fs::read_to_string(nv.join("gpus").join(&gpu.bus_id).join("information")).unwrap();
        assert_eq!(
            proc_field(&info, "Model").as_deref(),
            Some("NVIDIA A100-SXM4-80GB")
        );
        assert_eq!(proc_field(&info, "GPU UUID"), Some(gpu.uuid.clone()));
        assert_eq!(proc_field(&info, "Bus Location"), Some(gpu.bus_id.clone()));
        assert_eq!(proc_field(&info, "Device Minor"), Some(i.to_string()));
        assert_eq!(proc_field(&info, "GPU Excluded").as_deref(), Some("No"));
        assert!(info.contains("GPU UUID: \t GPU-"), "{info}");
    }
    let bus_dirs = fs::read_dir(nv.join("gpus")).unwrap().count();
    assert_eq!(bus_dirs, gpus as usize);
    let params = fs::read_to_string(nv.join("params")).unwrap();
    assert_eq!(
        proc_field(&params, "ModifyDeviceFiles").as_deref(),
        Some("1")
    );
    let devices = fs::read_to_string(root.join("proc/devices")).unwrap();
    assert!(devices.starts_with("Character devices:\n"));
    assert!(devices.contains("\n195 nvidia-frontend\n"));
    assert!(devices.contains(&format!("\n{u} nvidia-uvm\n")));
    assert!(devices.contains("\n\nBlock devices:\n"));

    // Libraries: real ELF shared objects with the real sonames.
    let lib = driver_root.join(lib_dir.trim_start_matches('/'));
    for (file, soname) in expected_libraries(ver) {
        let path = lib.join(&file);
        assert!(is_elf(&path), "{} is not ELF", path.display());
        assert_eq!(
            readelf_soname(&path).as_deref(),
            Some(soname.as_str()),
            "{file}"
        );
        if soname != file {
            assert_eq!(
                fs::read_link(lib.join(&soname)).unwrap(),
                PathBuf::from(&file)
            );
        }
    }
    assert_eq!(
        fs::read_link(lib.join("libcuda.so")).unwrap(),
        Path::new("libcuda.so.1")
    );
    assert_eq!(
        fs::read_link(lib.join("libnvidia-ml.so")).unwrap(),
        Path::new("libnvidia-ml.so.1")
    );
    assert_eq!(host.library_paths().len(), expected_libraries(ver).len());
    // The config block carries this host's values.
    let cuda = fs::read(lib.join(format!("libcuda.so.{ver}"))).unwrap();
    let needle = b"GPUCTK_MOCK_CONFIG_V1\0driver=570.124.06;cuda=12080;model=NVIDIA A100-SXM4-80GB;seed=gpuctk;\0";
    assert!(cuda.windows(needle.len()).any(|w| w == needle));

    // Binaries.
    let bin = driver_root.join("usr/bin");
    for name in [
        "nvidia-smi",
        "nvidia-debugdump",
        "nvidia-persistenced",
        "nvidia-cuda-mps-control",
        "nvidia-cuda-mps-server",
    ] {
        assert!(is_elf(&bin.join(name)), "{name}");
        assert_eq!(mode(&bin.join(name)), 0o755, "{name}");
    }
    assert_eq!(
        readelf_needed(&bin.join("nvidia-smi")),
        vec!["libnvidia-ml.so.1", "libc.so.6"]
    );

    // Firmware, persistenced socket.
    for fw in ["gsp_ga10x.bin", "gsp_tu10x.bin"] {
        assert!(driver_root
            .join("lib/firmware/nvidia")
            .join(ver)
            .join(fw)
            .is_file());
    }
    let sock = fs::symlink_metadata(driver_root.join("run/nvidia-persistenced/socket")).unwrap();
    assert!(sock.file_type().is_socket());

    // ld.so.cache, read back by the real ldconfig.
    let cache = driver_root.join("etc/ld.so.cache");
    let listing = run(ldconfig(), &["-p", "-C", cache.to_str().unwrap()]);
    assert!(listing.status.success(), "{listing:?}");
    let listing = stdout(&listing);
    let want = format!("libcuda.so.1 (libc6,x86-64) => {lib_dir}/libcuda.so.1");
    assert!(listing.contains(&want), "{want} not in:\n{listing}");
    assert!(listing.contains(&format!(
        "libnvidia-ml.so.1 (libc6,x86-64) => {lib_dir}/libnvidia-ml.so.1"
    )));
    let conf_d = fs::read_dir(driver_root.join("etc/ld.so.conf.d")).unwrap();
    let named = conf_d
        .map(|e| fs::read_to_string(e.unwrap().path()).unwrap())
        .any(|t| t.lines().any(|l| l.trim() == lib_dir));
    assert!(named, "no ld.so.conf.d snippet names {lib_dir}");

    // Metadata.
    assert_eq!(load_host(&dir).unwrap(), host);
    let json: serde_json::Value =
        serde_json::from_slice(&fs::read(root.join("mock-host.json")).unwrap()).unwrap();
    assert_eq!(json["layout"], layout.to_string());
    assert_eq!(json["gpus"][0]["uuid"], gpu_uuid("gpuctk", 0));
}

#[test]
fn debian_1_8_64() {
    for n in [1, 8, 64] {
        check_host(Layout::Debian, n);
    }
}

#[test]
fn rhel_1_8_64() {
    for n in [1, 8, 64] {
        check_host(Layout::Rhel, n);
    }
}

#[test]
fn driver_container_1_8_64() {
    for n in [1, 8, 64] {
        check_host(Layout::DriverContainer, n);
    }
}

#[test]
fn uuid_matches_independent_computation() {
    // Computed with a separate Python FNV-1a implementation.
    assert_eq!(
        gpu_uuid("gpuctk", 0),
        "GPU-0986a80f-9ded-4980-0986-ab0f9ded4e99"
    );
    assert_eq!(
        gpu_uuid("gpuctk", 7),
        "GPU-01cb930f-99d0-44f1-01cb-900f99d03fd8"
    );
    assert_eq!(
        gpu_uuid("node-a", 63),
        "GPU-23cd39dd-bfcd-6213-23cd-3addbfcd63c6"
    );
}

fn cfg() -> HostConfig {
    let mut c = HostConfig::new("570.124.06", (12, 8));
    c.ldconfig = PathBuf::from(ldconfig());
    c
}

#[test]
fn rejects_non_empty_dir() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("x"), b"").unwrap();
    let err = create_host(tmp.path(), &cfg()).unwrap_err().to_string();
    assert!(err.contains("is not empty"), "{err}");
    assert!(err.contains(&tmp.path().display().to_string()), "{err}");
}

#[test]
fn accepts_existing_empty_dir() {
    let tmp = tempfile::tempdir().unwrap();
    create_host(tmp.path(), &cfg()).unwrap();
}

#[test]
fn rejects_bad_inputs_without_writing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("h");
    let bad = [
        HostConfig {
            driver_version: "570".into(),
            ..cfg()
        },
        HostConfig {
            driver_version: "570.124.06-beta".into(),
            ..cfg()
        },
        HostConfig { gpus: 0, ..cfg() },
        HostConfig { gpus: 65, ..cfg() },
        HostConfig {
            model: "A;B".into(),
            ..cfg()
        },
        HostConfig {
            model: String::new(),
            ..cfg()
        },
    ];
    for c in bad {
        let err = create_host(&dir, &c).unwrap_err().to_string();
        assert!(err.starts_with("invalid "), "{err}");
        assert!(absent(&dir), "directory created for invalid config {c:?}");
    }
}

#[test]
fn missing_ldconfig_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let c = HostConfig {
        ldconfig: "/nonexistent/ldconfig".into(),
        ..cfg()
    };
    let err = create_host(&tmp.path().join("h"), &c)
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/ldconfig"), "{err}");
    assert!(err.contains("apt-get install libc-bin"), "{err}");
}

#[test]
fn failing_ldconfig_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let c = HostConfig {
        ldconfig: "/bin/false".into(),
        ..cfg()
    };
    let err = create_host(&tmp.path().join("h"), &c)
        .unwrap_err()
        .to_string();
    assert!(err.contains("/bin/false -r"), "{err}");
}

#[test]
fn load_host_of_non_host_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let err = load_host(tmp.path()).unwrap_err().to_string();
    assert!(err.contains("mock-host.json"), "{err}");
}

#[test]
fn layout_names() {
    assert_eq!(
        "driver-container".parse::<Layout>().unwrap(),
        Layout::DriverContainer
    );
    let err = "centos".parse::<Layout>().unwrap_err().to_string();
    assert!(err.contains("debian, rhel, driver-container"));
}

/// The mock libcuda carries the forward-compatibility note real libraries (575 and later) do:
/// one SHT_NOTE section `.note.cuda.fwd_compatibility`, one note owned by "NVIDIA Corporation",
/// JSON with the keys as shipped (`"CUDA version"`, `"driver"`), as `readelf -n` shows it; and a
/// compat library built for an image answers its own versions.
#[test]
fn libcuda_carries_the_real_compat_note() {
    let tmp = tempfile::tempdir().unwrap();
    let host = create_host(&tmp.path().join("h"), &cfg()).unwrap();
    let lib = host
        .lib_path()
        .join(format!("libcuda.so.{}", host.driver_version));
    let notes = |bytes: &[u8]| {
        gpuctk_elf::note_section(bytes, ".note.cuda.fwd_compatibility")
            .unwrap()
            .expect("the section")
    };
    let n = notes(&fs::read(&lib).unwrap());
    assert_eq!(n.len(), 1, "{n:?}");
    assert_eq!(n[0].owner, "NVIDIA Corporation");
    let v: serde_json::Value = serde_json::from_slice(&n[0].desc).unwrap();
    assert_eq!(v["CUDA version"], host.cuda_version.as_str());
    let major: u64 = host
        .driver_version
        .split('.')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        v["driver"].as_array().unwrap().contains(&major.into()),
        "{v}"
    );
    let readelf = std::process::Command::new("readelf")
        .arg("-n")
        .arg(&lib)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&readelf.stdout);
    assert_eq!(text.matches("NVIDIA Corporation").count(), 1, "{text}");
    assert!(
        readelf.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&readelf.stderr)
    );

    let compat = gpuctk_mockhost::compat_libcuda("575.57.08", (12, 9)).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&notes(&compat)[0].desc).unwrap();
    assert_eq!(v["CUDA version"], "12.9");
    assert_eq!(
        v["driver"],
        serde_json::json!([535, 550, 560, 565, 570, 575])
    );
}

/// The MIG capability files in the driver's format, byte for byte, the `nvidia-caps` and
/// `nvidia-caps-imex-channels` majors in /proc/devices, and the nodes they describe.
#[test]
fn mig_capabilities_and_imex_channels() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("host");
    let mut cfg = HostConfig::new("570.124.06", (12, 8));
    cfg.ldconfig = PathBuf::from(ldconfig());
    cfg.imex_channels = 3;
    let host = create_host(&dir, &cfg).unwrap();
    let caps = host.proc_root.join("driver/nvidia/capabilities/mig");
    assert_eq!(
        fs::read_to_string(caps.join("config")).unwrap(),
        "DeviceFileMinor: 1\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
    );
    assert_eq!(
        fs::read_to_string(caps.join("monitor")).unwrap(),
        "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
    );
    let devices = fs::read_to_string(host.proc_root.join("devices")).unwrap();
    assert!(devices.contains(&format!("{} nvidia-caps\n", host.caps_major)));
    assert!(devices.contains(&format!("{} nvidia-caps-imex-channels\n", host.imex_major)));
    let majors = [host.uvm_major, host.caps_major, host.imex_major];
    for m in majors {
        assert!(!real_char_majors().contains(&m), "{m} is a real driver's");
    }
    assert!(majors[0] != majors[1] && majors[1] != majors[2] && majors[0] != majors[2]);
    let node = |p: &str| {
        let md = fs::metadata(host.dev_root.join(p)).unwrap();
        assert!(md.file_type().is_char_device(), "{p}");
        (
            libc::major(md.rdev()),
            libc::minor(md.rdev()),
            md.mode() & 0o777,
        )
    };
    assert_eq!(
        node("dev/nvidia-caps/nvidia-cap1"),
        (host.caps_major, 1, 0o444)
    );
    assert_eq!(
        node("dev/nvidia-caps/nvidia-cap2"),
        (host.caps_major, 2, 0o444)
    );
    assert_eq!(
        node("dev/nvidia-caps-imex-channels/channel2"),
        (host.imex_major, 2, 0o666)
    );
    assert!(absent(
        &host.dev_root.join("dev/nvidia-caps-imex-channels/channel3")
    ));
    assert_eq!(load_host(&dir).unwrap(), host);
}
