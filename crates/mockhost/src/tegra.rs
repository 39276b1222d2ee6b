//! A mock Jetson (Tegra) host: no NVIDIA kernel driver in procfs, the `nvhost`/`nvmap` nodes,
//! the driver's libraries under `/usr/lib/aarch64-linux-gnu/tegra` with L4T's links, the Tegra
//! markers (`/etc/nv_tegra_release`, `/sys/devices/soc0/family`), and the CSV mount-spec files
//! under `/etc/nvidia-container-runtime/host-files-for-container.d` in NVIDIA's format.
//!
//! The libraries are this machine's architecture (the mock's libcuda), at Jetson's paths: the
//! paths are what CSV mode works from.

use std::fs;
use std::path::{Path, PathBuf};

use crate::driverless::{self, patched, Base};
use crate::{artifacts, patch, sys, Error};

/// The driver version an L4T release reports (R36.4).
pub const TEGRA_DRIVER_VERSION: &str = "540.4.0";
/// L4T's library folder.
pub const TEGRA_LIB_DIR: &str = "/usr/lib/aarch64-linux-gnu/tegra";
/// The device nodes of the mock Jetson, as `devices.csv` lists them.
pub const TEGRA_NODES: [&str; 5] = [
    "nvmap",
    "nvhost-ctrl",
    "nvhost-ctrl-gpu",
    "nvhost-gpu",
    "nvhost-as-gpu",
];
/// The CSV folder inside the host.
pub const CSV_DIR: &str = "etc/nvidia-container-runtime/host-files-for-container.d";

/// A mock Jetson host.
#[derive(Debug, Clone)]
pub struct TegraHost {
    /// The host's root (driver and dev root).
    pub root: PathBuf,
    /// Its procfs (no NVIDIA driver in it).
    pub proc_root: PathBuf,
    /// Its CSV folder.
    pub csv_dir: PathBuf,
    /// The major the device nodes share (free on this machine: opening gives ENXIO).
    pub major: u32,
}

/// Build a mock Jetson host in `dir` (absent or empty).
pub fn create_tegra_host(dir: &Path) -> Result<TegraHost, Error> {
    let Base {
        root,
        dev,
        proc_root,
        major,
    } = driverless::base(dir, b"Character devices:\n  1 mem\n")?;
    for (minor, name) in TEGRA_NODES.iter().enumerate() {
        sys::make_char_device(&dev.join(name), major, minor as u32, 0o666)?;
    }
    let lib = root.join(TEGRA_LIB_DIR.trim_start_matches('/'));
    fs::create_dir_all(&lib).map_err(crate::error::io_err("create directory", &lib, ""))?;
    let config = patch::config_string(TEGRA_DRIVER_VERSION, 12060, "Orin (nvgpu)", "tegra");
    let libcuda = patched(artifacts::LIBCUDA, &config, "libcuda.so.1.1")?;
    sys::write_file(&lib.join("libcuda.so.1.1"), &libcuda, 0o644)?;
    // L4T's links: tegra/libcuda.so -> libcuda.so.1.1 and the multiarch folder's
    // libcuda.so -> tegra/libcuda.so.
    sys::make_symlink(Path::new("libcuda.so.1.1"), &lib.join("libcuda.so"))?;
    sys::make_symlink(
        Path::new("tegra/libcuda.so"),
        &root.join("usr/lib/aarch64-linux-gnu/libcuda.so"),
    )?;
    let egl = root.join("usr/lib/aarch64-linux-gnu/tegra-egl");
    fs::create_dir_all(&egl).map_err(crate::error::io_err("create directory", &egl, ""))?;
    sys::write_file(
        &egl.join("nvidia.json"),
        b"{\n    \"file_format_version\" : \"1.0.0\",\n    \"ICD\" : {\n        \"library_path\" : \"libEGL_nvidia.so.0\"\n    }\n}\n",
        0o644,
    )?;
    let etc = root.join("etc");
    sys::write_file(
        &etc.join("nv_tegra_release"),
        b"# R36 (release), REVISION: 4.0, GCID: 37537400, BOARD: generic, EABI: aarch64, DATE: Fri Sep 13 04:36:44 UTC 2024\n# KERNEL_VARIANT: oot\nTARGET_USERSPACE_LIB_DIR=nvidia\nTARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia\n",
        0o644,
    )?;
    sys::write_file(&root.join("sys/devices/soc0/family"), b"Tegra\n", 0o444)?;
    let csv_dir = root.join(CSV_DIR);
    let devices: String = TEGRA_NODES
        .iter()
        .map(|n| format!("dev, /dev/{n}\n"))
        .collect();
    sys::write_file(&csv_dir.join("devices.csv"), devices.as_bytes(), 0o644)?;
    sys::write_file(
        &csv_dir.join("drivers.csv"),
        format!(
            "lib, {TEGRA_LIB_DIR}/libcuda.so.1.1\nsym, {TEGRA_LIB_DIR}/libcuda.so\nsym, /usr/lib/aarch64-linux-gnu/libcuda.so\ndir, /usr/lib/aarch64-linux-gnu/tegra-egl\n"
        )
        .as_bytes(),
        0o644,
    )?;
    sys::write_file(
        &csv_dir.join("l4t.csv"),
        b"lib, /etc/nv_tegra_release\nlib, /usr/lib/aarch64-linux-gnu/tegra/libnvidia-absent.so.540.4.0\n",
        0o644,
    )?;
    Ok(TegraHost {
        root,
        proc_root,
        csv_dir,
        major,
    })
}
