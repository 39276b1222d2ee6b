//! The real Debian 535 driver packages (`libcuda1`, `libnvidia-ml1`, `nvidia-smi`, and the
//! loaders' vendor files of `nvidia-egl-common`, `nvidia-vulkan-common`, `nvidia-opencl-common`;
//! non-free),
//! downloaded by scripts/setup.sh and unpacked here with dpkg-deb -x. Nothing from them is
//! installed or run on the host. Debian puts the files in `nvidia/current` dirs and reaches
//! them through alternatives symlinks made at install time, which we recreate as postinst does.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::*;

fn debs_dir() -> PathBuf {
    let dir = std::env::var_os("GPUCTK_NVIDIA_DEBS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/nvidia-debs"));
    assert!(
        dir.is_dir(),
        "{} missing: run scripts/setup.sh (it downloads the Debian NVIDIA packages)",
        dir.display()
    );
    dir
}

#[test]
fn debian_535_packages() {
    let debs = debs_dir();
    let t = TestDir::new();
    let root = t.join("root");
    fs::create_dir_all(&root).unwrap();
    let mut version = None;
    for e in fs::read_dir(&debs).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "deb") {
            let st = Command::new("dpkg-deb")
                .arg("-x")
                .arg(&p)
                .arg(&root)
                .status()
                .unwrap();
            assert!(st.success(), "dpkg-deb -x {}", p.display());
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with("libcuda1_") {
                version = Some(
                    name.split('_')
                        .nth(1)
                        .unwrap()
                        .split('-')
                        .next()
                        .unwrap()
                        .to_string(),
                );
            }
        }
    }
    let version = version.expect("libcuda1 deb present");
    let multi = "usr/lib/x86_64-linux-gnu";
    // What update-alternatives does in the packages' postinst.
    fs::create_dir_all(root.join("etc/alternatives")).unwrap();
    fs::create_dir_all(root.join("usr/bin")).unwrap();
    for (link, alt, target) in [
        (
            format!("{multi}/libcuda.so.1"),
            "nvidia--libcuda.so.1-x86_64-linux-gnu",
            format!("/{multi}/nvidia/current/libcuda.so.1"),
        ),
        (
            format!("{multi}/libnvidia-ml.so.1"),
            "nvidia--libnvidia-ml.so.1-x86_64-linux-gnu",
            format!("/{multi}/nvidia/current/libnvidia-ml.so.1"),
        ),
        (
            "usr/bin/nvidia-smi".to_string(),
            "nvidia--nvidia-smi",
            "/usr/lib/nvidia/current/nvidia-smi".to_string(),
        ),
    ] {
        symlink(&target, root.join("etc/alternatives").join(alt)).unwrap();
        symlink(format!("/etc/alternatives/{alt}"), root.join(&link)).unwrap();
    }
    fs::create_dir_all(root.join("etc/ld.so.conf.d")).unwrap();
    fs::write(
        root.join("etc/ld.so.conf"),
        "include /etc/ld.so.conf.d/*.conf\n",
    )
    .unwrap();
    fs::write(
        root.join("etc/ld.so.conf.d/x86_64-linux-gnu.conf"),
        format!("/{multi}\n"),
    )
    .unwrap();
    let st = Command::new("ldconfig")
        .arg("-r")
        .arg(&root)
        .status()
        .unwrap();
    assert!(st.success());

    // The kernel side comes from a mock host of the same version: the real proc files and device
    // nodes need the real module.
    let h = mock_host(&t, "kernel", 2, &version, "debian");
    let roots = [
        "--driver-root".to_string(),
        root.to_str().unwrap().to_string(),
        "--dev-root".to_string(),
        h.dev_root(),
        "--proc-root".to_string(),
        h.proc_root(),
    ];
    let r = ok_without_nvml(&with(&["info", "--json"], &roots));
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let lib = |name: &str| {
        v["libraries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} not found: {}", r.stdout))
    };
    let cuda = lib("libcuda.so");
    assert_eq!(
        cuda["path"],
        format!("/{multi}/nvidia/current/libcuda.so.{version}").as_str()
    );
    assert_eq!(
        cuda["soname"], "libcuda.so.1",
        "soname read from the real ELF"
    );
    assert_eq!(lib("libnvidia-ml.so")["soname"], "libnvidia-ml.so.1");
    let smi = v["binaries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "nvidia-smi")
        .unwrap();
    assert_eq!(smi["path"], "/usr/bin/nvidia-smi");
    assert!(smi["host_path"]
        .as_str()
        .unwrap()
        .ends_with("/usr/lib/nvidia/current/nvidia-smi"));

    let r = ok_without_nvml(&with(&["cdi", "generate", "--format", "json"], &roots));
    let spec: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_cdi_schema(&spec);
    let hooks = spec["containerEdits"]["hooks"].as_array().unwrap();
    let ldcache = hooks
        .iter()
        .find(|h| h["args"][1] == "update-ldcache")
        .unwrap();
    assert_eq!(
        ldcache["args"][3],
        format!("/{multi}/nvidia/current").as_str()
    );
    let links = hooks
        .iter()
        .find(|h| h["args"][1] == "create-symlinks")
        .unwrap();
    let links: Vec<&str> = links["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        links.contains(
            &format!("libcuda.so.{version}::/{multi}/nvidia/current/libcuda.so.1").as_str()
        ),
        "{links:?}"
    );

    // The loaders' vendor files, where NVIDIA's spec puts them: the EGL vendor file at
    // /usr/share, the Vulkan ICD and layer at /etc/vulkan, the OpenCL ICD at /etc/OpenCL; each
    // the real file of the package, found where Debian installs it.
    let mounts = spec["containerEdits"]["mounts"].as_array().unwrap();
    for (container, host, names) in [
        (
            "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
            "usr/share/glvnd/egl_vendor.d/10_nvidia.json",
            "libEGL_nvidia.so.0",
        ),
        (
            "/etc/vulkan/icd.d/nvidia_icd.json",
            "usr/share/vulkan/icd.d/nvidia_icd.json",
            "libGLX_nvidia.so.0",
        ),
        (
            "/etc/vulkan/implicit_layer.d/nvidia_layers.json",
            "usr/share/vulkan/implicit_layer.d/nvidia_layers.json",
            "VK_LAYER_NV_optimus",
        ),
        (
            "/etc/OpenCL/vendors/nvidia.icd",
            "etc/OpenCL/vendors/nvidia.icd",
            "libnvidia-opencl.so.1",
        ),
    ] {
        let m = mounts
            .iter()
            .find(|m| m["containerPath"] == container)
            .unwrap_or_else(|| panic!("no mount at {container}: {mounts:?}"));
        assert_eq!(m["hostPath"], root.join(host).to_str().unwrap());
        assert!(
            fs::read_to_string(root.join(host)).unwrap().contains(names),
            "{host}"
        );
    }
    // A search path given replaces the defaults: the package's files are under /usr/share and
    // /etc, so /usr/local/share alone finds none of them.
    let r = ok_without_nvml(&with(
        &[
            "cdi",
            "generate",
            "--format",
            "json",
            "--config-search-path",
            "/usr/local/share",
        ],
        &roots,
    ));
    let spec: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let targets: Vec<&str> = spec["containerEdits"]["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["containerPath"].as_str())
        .collect();
    assert!(
        !targets
            .iter()
            .any(|t| t.ends_with(".json") || t.ends_with(".icd")),
        "{targets:?}"
    );
}

/// `ok`, with NVML kept out (`GPUCTK_NVML=off`): the real libnvidia-ml, initialised as root
/// outside a container, makes `/dev/nvidiactl` in this machine's own /dev.
fn ok_without_nvml(args: &[&str]) -> Run {
    let mut c = gpuctk(args);
    c.env("GPUCTK_NVML", "off");
    ok_command(c, args)
}
