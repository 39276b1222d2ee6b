//! Building a fake GPU host: device nodes, /proc files and a driver tree
//! with real ELF libraries and a real ld.so.cache, described by a
//! [`MockHost`] saved next to it as `mock-host.json`.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::artifacts::{BINARIES, LIBRARIES};
use crate::error::io_err;
use crate::mig::{self, MockMig};
use crate::{ids, patch, procfs, sys, Error};

/// Major number of the NVIDIA GPU and control device nodes.
pub const NVIDIA_MAJOR: u32 = 195;
/// Major of the DRM nodes (`/dev/dri/card*`, `renderD*`).
pub const DRM_MAJOR: u32 = 226;
/// Group of the DRM card nodes: `video`, as udev's rules give them (44 on Debian and Ubuntu).
pub const VIDEO_GID: u32 = 44;
/// Minor of `/dev/nvidiactl`.
pub const NVIDIACTL_MINOR: u32 = 255;
/// Minor of `/dev/nvidia-modeset`.
pub const NVIDIA_MODESET_MINOR: u32 = 254;
/// Most GPUs a mock host can have (bus ids must stay below 0x100).
pub const MAX_GPUS: u32 = 64;
/// Most IMEX channel nodes a mock host makes (the driver's default `ImexChannelCount`).
pub const MAX_IMEX_CHANNELS: u32 = 2048;
/// Minor of `/dev/nvidia-caps/nvidia-cap1`, the MIG config capability, as the driver numbers it.
pub const MIG_CONFIG_MINOR: u32 = 1;
/// Minor of `/dev/nvidia-caps/nvidia-cap2`, the MIG monitor capability.
pub const MIG_MONITOR_MINOR: u32 = 2;
/// Name of the metadata file written into the host directory.
pub const HOST_JSON: &str = "mock-host.json";

/// The CPU architecture of a mock host: its library directory, the driver's files (ELF machine)
/// and so its ld.so.cache flags, and the kernel module's name for it in /proc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arch {
    /// x86_64: `/usr/lib/x86_64-linux-gnu`, cache flags `libc6,x86-64` (0x0303).
    Amd64,
    /// aarch64: `/usr/lib/aarch64-linux-gnu`, cache flags `libc6,AArch64` (0x0a03).
    Arm64,
}

impl Arch {
    /// This build's architecture.
    pub fn native() -> Arch {
        if cfg!(target_arch = "aarch64") {
            Arch::Arm64
        } else {
            Arch::Amd64
        }
    }

    /// Debian's multiarch triplet.
    pub fn triplet(self) -> &'static str {
        match self {
            Arch::Amd64 => "x86_64-linux-gnu",
            Arch::Arm64 => "aarch64-linux-gnu",
        }
    }

    /// The name the kernel (and the NVIDIA module's version file) uses.
    pub fn kernel_name(self) -> &'static str {
        match self {
            Arch::Amd64 => "x86_64",
            Arch::Arm64 => "aarch64",
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        })
    }
}

impl FromStr for Arch {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "amd64" | "x86_64" => Ok(Arch::Amd64),
            "arm64" | "aarch64" => Ok(Arch::Arm64),
            _ => Err(Error::UnknownArch { value: s.into() }),
        }
    }
}

/// How the driver is installed on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// Distribution packages on a Debian/Ubuntu host: libraries in the
    /// multiarch directory.
    Debian,
    /// RHEL-style host: libraries in /usr/lib64, which Debian's loader does
    /// not search by default.
    Rhel,
    /// The GPU Operator's driver container: an Ubuntu-like driver tree at
    /// /run/nvidia/driver while device nodes stay on the host.
    DriverContainer,
}

impl Layout {
    /// All layouts, for tests that cover each.
    pub const ALL: [Layout; 3] = [Layout::Debian, Layout::Rhel, Layout::DriverContainer];

    /// Library directory inside the driver root, container style, for this build's
    /// architecture.
    pub fn lib_dir(self) -> &'static str {
        self.lib_dir_for(Arch::native())
    }

    /// Library directory inside the driver root for `arch`.
    pub fn lib_dir_for(self, arch: Arch) -> &'static str {
        match (self, arch) {
            (Layout::Rhel, _) => "/usr/lib64",
            (Layout::Debian | Layout::DriverContainer, Arch::Amd64) => "/usr/lib/x86_64-linux-gnu",
            (Layout::Debian | Layout::DriverContainer, Arch::Arm64) => "/usr/lib/aarch64-linux-gnu",
        }
    }

    /// Driver root relative to the host root ("" is the host root itself).
    pub fn driver_root_rel(self) -> &'static str {
        match self {
            Layout::DriverContainer => "run/nvidia/driver",
            Layout::Debian | Layout::Rhel => "",
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layout::Debian => "debian",
            Layout::Rhel => "rhel",
            Layout::DriverContainer => "driver-container",
        })
    }
}

impl FromStr for Layout {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "debian" => Ok(Layout::Debian),
            "rhel" => Ok(Layout::Rhel),
            "driver-container" => Ok(Layout::DriverContainer),
            _ => Err(Error::UnknownLayout { value: s.into() }),
        }
    }
}

/// What to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfig {
    /// Number of GPUs, 1..=64.
    pub gpus: u32,
    /// Driver version such as `570.124.06`.
    pub driver_version: String,
    /// CUDA version the driver supports, e.g. (12, 8).
    pub cuda_version: (u32, u32),
    /// Installation layout.
    pub layout: Layout,
    /// GPU model name reported everywhere.
    pub model: String,
    /// Seed of the GPU UUIDs.
    pub seed: String,
    /// ldconfig to run: a bare name is looked up in $PATH, /sbin, /usr/sbin.
    pub ldconfig: PathBuf,
    /// Run ldconfig through this program (`qemu-aarch64` for an aarch64 ldconfig on x86_64:
    /// glibc's ldconfig only takes its own architecture's libraries).
    pub ldconfig_via: Option<PathBuf>,
    /// Architecture of the driver files and layout (default: this build's).
    pub arch: Arch,
    /// IMEX channel nodes to make, `channel0` up (the driver makes none by default).
    pub imex_channels: u32,
    /// The nodes of NVIDIA's gated modes to make (none by default).
    pub gated: GatedDevices,
    /// GPUs in MIG mode: index and the profiles of their GPU instances, e.g.
    /// `(0, ["1g.10gb", "2g.20gb"])` (see [`crate::parse_mig_arg`]).
    pub mig: Vec<(u32, Vec<String>)>,
}

/// The devices other kernel modules than the GPU driver make, which NVIDIA's toolkit gives when
/// asked (`NVIDIA_GDS=enabled`, `cdi generate --mode gds`, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatedDevices {
    /// GPUDirect Storage: `nvidia-fs0..15`, as the `nvidia-fs` module makes them on a dynamic
    /// major, with `/etc/cufile.json` and the `/run/udev` folder.
    pub gds: bool,
    /// Mellanox OFED: `infiniband/uverbs0`, `uverbs1` (231:192, 193, `infiniband_verbs`) and
    /// `infiniband/rdma_cm` (a misc node).
    pub mofed: bool,
    /// GDRCopy: `gdrdrv` on a dynamic major.
    pub gdrcopy: bool,
    /// NVSwitches: `nvidia-nvswitch0..N-1` and `nvidia-nvswitchctl` (minor 255) on the
    /// `nvidia-nvswitch` major.
    pub nvswitches: u32,
}

/// Major of the InfiniBand verbs nodes (`infiniband_verbs`), fixed by the kernel.
pub const INFINIBAND_VERBS_MAJOR: u32 = 231;
/// First minor of `infiniband/uverbs<N>`.
pub const UVERBS_FIRST_MINOR: u32 = 192;
/// Major of misc devices, where `rdma_cm` lives.
pub const MISC_MAJOR: u32 = 10;
/// The misc minor given to the mock's `rdma_cm` (the kernel hands it a dynamic one).
pub const RDMA_CM_MINOR: u32 = 227;
/// `nvidia-fs` nodes the module makes (its `nvfs_n_devices` default).
pub const NVIDIA_FS_NODES: u32 = 16;
/// Minor of `/dev/nvidia-nvswitchctl`.
pub const NVSWITCHCTL_MINOR: u32 = 255;
/// Most NVSwitches a mock host can have.
pub const MAX_NVSWITCHES: u32 = 64;

impl HostConfig {
    /// Two A100s, Debian layout, seed "gpuctk", ldconfig from $PATH.
    pub fn new(driver_version: &str, cuda_version: (u32, u32)) -> Self {
        HostConfig {
            gpus: 2,
            driver_version: driver_version.to_string(),
            cuda_version,
            layout: Layout::Debian,
            model: "NVIDIA A100-SXM4-80GB".to_string(),
            seed: "gpuctk".to_string(),
            ldconfig: PathBuf::from("ldconfig"),
            ldconfig_via: None,
            arch: Arch::native(),
            imex_channels: 0,
            gated: GatedDevices::default(),
            mig: Vec::new(),
        }
    }

    /// Reject values the fake driver could not represent.
    pub fn validate(&self) -> Result<(), Error> {
        let invalid = |field, value: String, reason: &str| Error::InvalidConfig {
            field,
            value,
            reason: reason.to_string(),
        };
        if !valid_driver_version(&self.driver_version) {
            return Err(invalid(
                "driver version",
                self.driver_version.clone(),
                "expected digits in the form 570.124.06 or 550.54",
            ));
        }
        if self.gated.nvswitches > MAX_NVSWITCHES {
            return Err(invalid(
                "NVSwitch count",
                self.gated.nvswitches.to_string(),
                &format!("must be at most {MAX_NVSWITCHES}"),
            ));
        }
        if self.imex_channels > MAX_IMEX_CHANNELS {
            return Err(invalid(
                "IMEX channel count",
                self.imex_channels.to_string(),
                &format!("must be at most {MAX_IMEX_CHANNELS}"),
            ));
        }
        if self.gpus == 0 || self.gpus > MAX_GPUS {
            return Err(invalid(
                "GPU count",
                self.gpus.to_string(),
                "must be between 1 and 64",
            ));
        }
        let (major, minor) = self.cuda_version;
        if !(1..=999).contains(&major) || minor > 99 {
            return Err(invalid(
                "CUDA version",
                format!("{major}.{minor}"),
                "major must be 1..=999 and minor 0..=99",
            ));
        }
        for (field, value) in [("model", &self.model), ("seed", &self.seed)] {
            if value.is_empty() || value.contains([';', '\n', '\0']) {
                return Err(invalid(
                    field,
                    value.clone(),
                    "must be non-empty and contain no ';', newline or NUL",
                ));
            }
        }
        let mut seen = Vec::new();
        for (gpu, profiles) in &self.mig {
            if *gpu >= self.gpus || seen.contains(gpu) {
                return Err(invalid(
                    "MIG layout",
                    gpu.to_string(),
                    "each GPU index must exist and appear once",
                ));
            }
            seen.push(*gpu);
            mig::place(profiles).map_err(|e| invalid("MIG layout", profiles.join(","), &e))?;
        }
        let config = self.config_string();
        if config.len() > patch::CONFIG_MAX_LEN {
            return Err(invalid(
                "model/seed",
                config,
                &format!(
                    "the combined config must fit in {} bytes",
                    patch::CONFIG_MAX_LEN
                ),
            ));
        }
        Ok(())
    }

    /// CUDA version as cuDriverGetVersion reports it: 12.8 -> 12080.
    pub fn cuda_version_int(&self) -> u32 {
        self.cuda_version.0 * 1000 + self.cuda_version.1 * 10
    }

    fn config_string(&self) -> String {
        let mut config = patch::config_string(
            &self.driver_version,
            self.cuda_version_int(),
            &self.model,
            &self.seed,
        );
        if !self.mig.is_empty() {
            // GPU index and minor are the same on a mock host.
            config.push_str(&format!("mig={};", mig::config_value(&self.mig)));
        }
        config
    }
}

/// `^\d+\.\d+(\.\d+)?$`
fn valid_driver_version(v: &str) -> bool {
    let parts: Vec<&str> = v.split('.').collect();
    (2..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// A built mock host, as saved in `mock-host.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MockHost {
    /// The host directory (canonical).
    pub root: PathBuf,
    /// Installation layout.
    pub layout: Layout,
    /// Architecture (this build's in a manifest from before).
    #[serde(default = "Arch::native")]
    pub arch: Arch,
    /// Driver version, e.g. `570.124.06`.
    pub driver_version: String,
    /// CUDA version, e.g. `12.8`.
    pub cuda_version: String,
    /// GPU model.
    pub model: String,
    /// Where the driver files live (root, or root/run/nvidia/driver).
    pub driver_root: PathBuf,
    /// Directory holding `dev/` (the host root).
    pub dev_root: PathBuf,
    /// The fake /proc.
    pub proc_root: PathBuf,
    /// Library directory inside the driver root, e.g. `/usr/lib64`.
    pub lib_dir: String,
    /// Major number given to nvidia-uvm.
    pub uvm_major: u32,
    /// Major number of the MIG capability nodes (`nvidia-caps`); 0 in a manifest from before.
    #[serde(default)]
    pub caps_major: u32,
    /// Major number of the IMEX channel nodes (`nvidia-caps-imex-channels`).
    #[serde(default)]
    pub imex_major: u32,
    /// IMEX channel nodes made, `channel0` up.
    #[serde(default)]
    pub imex_channels: u32,
    /// The gated modes' nodes made.
    #[serde(default)]
    pub gated: GatedDevices,
    /// Majors of `nvidia-fs`, `gdrdrv` and `nvidia-nvswitch` (0 where not made).
    #[serde(default)]
    pub gated_majors: GatedMajors,
    /// The GPUs.
    pub gpus: Vec<MockGpu>,
}

/// The dynamic majors of the gated modes' modules, 0 for a module not "loaded".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatedMajors {
    /// `nvidia-fs`.
    pub nvidia_fs: u32,
    /// `gdrdrv`.
    pub gdrdrv: u32,
    /// `nvidia-nvswitch`.
    pub nvswitch: u32,
}

/// One GPU of a mock host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MockGpu {
    /// Index as NVML enumerates it on the host.
    pub index: u32,
    /// Minor of `/dev/nvidia<minor>`.
    pub minor: u32,
    /// `GPU-...` UUID.
    pub uuid: String,
    /// PCI bus id, `0000:17:00.0`.
    pub bus_id: String,
    /// Model name.
    pub model: String,
    /// Its MIG devices when it is in MIG mode (empty otherwise).
    #[serde(default)]
    pub mig: Vec<MockMig>,
}

impl MockGpu {
    /// Whether the GPU is in MIG mode.
    pub fn mig_enabled(&self) -> bool {
        !self.mig.is_empty()
    }
}

impl MockHost {
    /// Host path of the driver library directory.
    pub fn lib_path(&self) -> PathBuf {
        self.driver_root.join(self.lib_dir.trim_start_matches('/'))
    }

    /// Host paths of the versioned driver libraries (`libcuda.so.<ver>`, ...).
    pub fn library_paths(&self) -> Vec<PathBuf> {
        LIBRARIES
            .iter()
            .map(|l| self.lib_path().join(l.file_name(&self.driver_version)))
            .collect()
    }

    /// Host paths of the driver executables (`usr/bin/nvidia-smi`, ...).
    pub fn binary_paths(&self) -> Vec<PathBuf> {
        BINARIES
            .iter()
            .map(|b| self.driver_root.join("usr/bin").join(b.name))
            .collect()
    }

    /// Host path of `/dev/nvidia<minor>`.
    pub fn gpu_node(&self, minor: u32) -> PathBuf {
        self.dev_root.join(format!("dev/nvidia{minor}"))
    }
}

/// Build a mock host in `dir`, which must be absent or empty.
pub fn create_host(dir: &Path, cfg: &HostConfig) -> Result<MockHost, Error> {
    cfg.validate()?;
    // Pick the major before touching anything so a refusal leaves no debris.
    let real_devices = Path::new("/proc/devices");
    let real = fs::read_to_string(real_devices).unwrap_or_default();
    let no_major = || Error::NoFreeMajor {
        path: real_devices.into(),
    };
    let uvm_major = procfs::pick_uvm_major(&real).ok_or_else(no_major)?;
    // The capability majors come after it, from the same free range.
    let caps_major = procfs::pick_free_major(&real, &[uvm_major]).ok_or_else(no_major)?;
    let imex_major =
        procfs::pick_free_major(&real, &[uvm_major, caps_major]).ok_or_else(no_major)?;
    let mut used = vec![uvm_major, caps_major, imex_major];
    let mut next_major = |wanted: bool| -> Result<u32, Error> {
        if !wanted {
            return Ok(0);
        }
        let m = procfs::pick_free_major(&real, &used).ok_or_else(no_major)?;
        used.push(m);
        Ok(m)
    };
    let gated_majors = GatedMajors {
        nvidia_fs: next_major(cfg.gated.gds)?,
        gdrdrv: next_major(cfg.gated.gdrcopy)?,
        nvswitch: next_major(cfg.gated.nvswitches > 0)?,
    };
    let root = sys::prepare_empty_dir(dir)?;
    let driver_root = match cfg.layout.driver_root_rel() {
        "" => root.clone(),
        rel => root.join(rel),
    };
    let host = MockHost {
        root: root.clone(),
        layout: cfg.layout,
        arch: cfg.arch,
        driver_version: cfg.driver_version.clone(),
        cuda_version: format!("{}.{}", cfg.cuda_version.0, cfg.cuda_version.1),
        model: cfg.model.clone(),
        driver_root,
        dev_root: root.clone(),
        proc_root: root.join("proc"),
        lib_dir: cfg.layout.lib_dir_for(cfg.arch).to_string(),
        uvm_major,
        caps_major,
        imex_major,
        imex_channels: cfg.imex_channels,
        gated: cfg.gated.clone(),
        gated_majors,
        gpus: (0..cfg.gpus)
            .map(|i| MockGpu {
                index: i,
                minor: i,
                uuid: ids::gpu_uuid(&cfg.seed, i),
                bus_id: ids::gpu_bus_id(i),
                model: cfg.model.clone(),
                mig: cfg
                    .mig
                    .iter()
                    .find(|(g, _)| *g == i)
                    .map(|(_, p)| mig::devices(&cfg.seed, i, p))
                    .unwrap_or_default(),
            })
            .collect(),
    };
    write_device_nodes(&host)?;
    write_proc(&host)?;
    write_os_release(&host)?;
    write_driver_tree(&host, &cfg.config_string())?;
    write_loader_config(&host)?;
    refresh_ld_cache(&host, &cfg.ldconfig, cfg.ldconfig_via.as_deref())?;
    let json = serde_json::to_vec_pretty(&host).map_err(|source| Error::Json {
        op: "serialize",
        path: root.join(HOST_JSON),
        source,
    })?;
    sys::write_file(&root.join(HOST_JSON), &json, 0o644)?;
    Ok(host)
}

/// Read the [`MockHost`] a previous [`create_host`] saved in `dir`.
pub fn load_host(dir: &Path) -> Result<MockHost, Error> {
    let path = dir.join(HOST_JSON);
    let text = fs::read(&path).map_err(io_err(
        "read",
        &path,
        "is this a directory made by create_host?",
    ))?;
    serde_json::from_slice(&text).map_err(|source| Error::Json {
        op: "parse",
        path,
        source,
    })
}

fn write_device_nodes(host: &MockHost) -> Result<(), Error> {
    let dev = host.dev_root.join("dev");
    sys::make_dir(&dev, 0o755)?;
    for gpu in &host.gpus {
        sys::make_char_device(&host.gpu_node(gpu.minor), NVIDIA_MAJOR, gpu.minor, 0o666)?;
    }
    // What nvidia-drm makes: a card and a render node per GPU, listed in the GPU's sysfs folder.
    let dri = dev.join("dri");
    sys::make_dir(&dri, 0o755)?;
    for gpu in &host.gpus {
        let (card, render) = (
            format!("card{}", gpu.index),
            format!("renderD{}", 128 + gpu.index),
        );
        sys::make_char_device(&dri.join(&card), DRM_MAJOR, gpu.index, 0o660)?;
        sys::set_group(&dri.join(&card), VIDEO_GID)?;
        sys::make_char_device(&dri.join(&render), DRM_MAJOR, 128 + gpu.index, 0o666)?;
        // udev's persistent links, `pci-<bus id>-card -> ../cardN`.
        for (kind, node) in [("card", &card), ("render", &render)] {
            sys::make_symlink(
                &Path::new("..").join(node),
                &dri.join(format!("by-path/pci-{}-{kind}", gpu.bus_id)),
            )?;
        }
        let drm = host
            .dev_root
            .join("sys/bus/pci/devices")
            .join(&gpu.bus_id)
            .join("drm");
        sys::make_dir(&drm.join(&card), 0o755)?;
        sys::make_dir(&drm.join(&render), 0o755)?;
    }
    sys::make_char_device(&dev.join("nvidiactl"), NVIDIA_MAJOR, NVIDIACTL_MINOR, 0o666)?;
    sys::make_char_device(
        &dev.join("nvidia-modeset"),
        NVIDIA_MAJOR,
        NVIDIA_MODESET_MINOR,
        0o666,
    )?;
    sys::make_char_device(&dev.join("nvidia-uvm"), host.uvm_major, 0, 0o666)?;
    sys::make_char_device(&dev.join("nvidia-uvm-tools"), host.uvm_major, 1, 0o666)?;
    // The MIG capability nodes nvidia-modprobe makes, with the mode their files give (0444).
    let caps = dev.join("nvidia-caps");
    sys::make_dir(&caps, 0o755)?;
    for minor in [MIG_CONFIG_MINOR, MIG_MONITOR_MINOR] {
        sys::make_char_device(
            &caps.join(format!("nvidia-cap{minor}")),
            host.caps_major,
            minor,
            procfs::CAP_FILE_MODE,
        )?;
    }
    write_gated_nodes(host, &dev)?;
    // The nodes of each MIG instance's capabilities, as nvidia-modprobe -f makes them (a GPU
    // instance's once, however many compute instances it holds).
    let mut minors: Vec<u32> = host
        .gpus
        .iter()
        .flat_map(|g| &g.mig)
        .flat_map(|m| [m.gi_minor, m.ci_minor])
        .collect();
    minors.sort_unstable();
    minors.dedup();
    for minor in minors {
        sys::make_char_device(
            &caps.join(format!("nvidia-cap{minor}")),
            host.caps_major,
            minor,
            procfs::CAP_FILE_MODE,
        )?;
    }
    if host.imex_channels > 0 {
        let imex = dev.join("nvidia-caps-imex-channels");
        sys::make_dir(&imex, 0o755)?;
        for id in 0..host.imex_channels {
            sys::make_char_device(
                &imex.join(format!("channel{id}")),
                host.imex_major,
                id,
                0o666,
            )?;
        }
    }
    Ok(())
}

/// The gated modes' nodes, as their modules and udev rules make them (all 0666, as the
/// packages' rules set them), and GDS's cuFile configuration and udev folder.
fn write_gated_nodes(host: &MockHost, dev: &Path) -> Result<(), Error> {
    let g = &host.gated;
    let m = &host.gated_majors;
    if g.gds {
        for minor in 0..NVIDIA_FS_NODES {
            sys::make_char_device(
                &dev.join(format!("nvidia-fs{minor}")),
                m.nvidia_fs,
                minor,
                0o666,
            )?;
        }
        sys::write_file(
            &host.driver_root.join("etc/cufile.json"),
            CUFILE_JSON.as_bytes(),
            0o644,
        )?;
        sys::make_dir(&host.driver_root.join("run/udev/data"), 0o755)?;
    }
    if g.mofed {
        let ib = dev.join("infiniband");
        sys::make_dir(&ib, 0o755)?;
        for i in 0..2 {
            sys::make_char_device(
                &ib.join(format!("uverbs{i}")),
                INFINIBAND_VERBS_MAJOR,
                UVERBS_FIRST_MINOR + i,
                0o666,
            )?;
        }
        sys::make_char_device(&ib.join("rdma_cm"), MISC_MAJOR, RDMA_CM_MINOR, 0o666)?;
    }
    if g.gdrcopy {
        sys::make_char_device(&dev.join("gdrdrv"), m.gdrdrv, 0, 0o666)?;
    }
    if g.nvswitches > 0 {
        for i in 0..g.nvswitches {
            sys::make_char_device(
                &dev.join(format!("nvidia-nvswitch{i}")),
                m.nvswitch,
                i,
                0o666,
            )?;
        }
        sys::make_char_device(
            &dev.join("nvidia-nvswitchctl"),
            m.nvswitch,
            NVSWITCHCTL_MINOR,
            0o666,
        )?;
    }
    Ok(())
}

/// A cuFile configuration as the GDS package installs it (its leading part; cuFile reads JSON
/// with `//` comments).
const CUFILE_JSON: &str = r#"{
    // NOTE : Application can override custom configuration via export CUFILE_ENV_PATH_JSON=<filepath>
    // e.g : export CUFILE_ENV_PATH_JSON="/home/<xxx>/cufile.json"

    "logging": {
        // log directory, if not enabled will create log file under current working directory
        //"dir": "/home/<xxxx>",

        // NOTICE|ERROR|WARN|INFO|DEBUG|TRACE (in decreasing order of severity)
        "level": "ERROR"
    },

    "profile": {
        // nvtx profiling on/off
        "nvtx": false,
        // cufile stats level(0-3)
        "cufile_stats": 0
    },

    "properties": {
        // max IO chunk size (parameter should be multiples of 64K) used by cuFileRead/Write internally per IO request
        "max_direct_io_size_kb" : 16384,
        // device memory size (parameter should be 4K aligned) for reserving bounce buffers for the entire GPU
        "max_device_cache_size_kb" : 131072,
        // per-io bounce-buffer size (parameter should be multiples of 64K) ranging from 1024kb to 16384kb
        "per_buffer_cache_size_kb": 1024,
        // limit on maximum device memory size (parameter should be 4K aligned) that can be pinned for a given process
        "max_device_pinned_mem_size_kb" : 33554432,
        // true or false (true will enable asynchronous io submission to nvidia-fs driver)
        "use_poll_mode" : false,
        // maximum IO request size (parameter should be 4K aligned) within or equal to which library will use polling for IO completion
        "poll_mode_max_size_kb": 4,
        // allow compat mode, this will enable use of cuFile posix read/writes
        "allow_compat_mode": true
    }
}
"#;

fn write_proc(host: &MockHost) -> Result<(), Error> {
    let nv = host.proc_root.join("driver/nvidia");
    sys::write_file(
        &nv.join("version"),
        procfs::version_file(host.arch, &host.driver_version).as_bytes(),
        0o444,
    )?;
    sys::write_file(&nv.join("params"), procfs::params_file().as_bytes(), 0o444)?;
    for gpu in &host.gpus {
        sys::write_file(
            &nv.join("gpus").join(&gpu.bus_id).join("information"),
            procfs::gpu_information(gpu, &host.driver_version).as_bytes(),
            0o444,
        )?;
    }
    for (name, minor) in [("config", MIG_CONFIG_MINOR), ("monitor", MIG_MONITOR_MINOR)] {
        sys::write_file(
            &nv.join("capabilities/mig").join(name),
            procfs::cap_file(minor).as_bytes(),
            0o444,
        )?;
    }
    sys::write_file(
        &host.proc_root.join("driver/nvidia-caps/mig-minors"),
        mig::mig_minors_file(MIG_CONFIG_MINOR, MIG_MONITOR_MINOR).as_bytes(),
        0o444,
    )?;
    for gpu in &host.gpus {
        // The driver makes `gpu<minor>/mig` for every GPU it attaches, MIG mode or not
        // (`osRmCapRegisterGpu`: "For now, always add mig directory"); its mode is r-x for all,
        // ours 755 so that whoever made the mock host can remove it.
        let mig = nv.join(format!("capabilities/gpu{}/mig", gpu.minor));
        sys::make_dir(&mig, 0o755)?;
        for m in &gpu.mig {
            let gi = nv.join(format!("capabilities/gpu{}/mig/gi{}", gpu.minor, m.gi));
            sys::write_file(
                &gi.join("access"),
                procfs::cap_file(m.gi_minor).as_bytes(),
                0o444,
            )?;
            sys::write_file(
                &gi.join(format!("ci{}/access", m.ci)),
                procfs::cap_file(m.ci_minor).as_bytes(),
                0o444,
            )?;
        }
    }
    sys::write_file(
        &host.proc_root.join("devices"),
        procfs::devices_file(
            host.uvm_major,
            host.caps_major,
            host.imex_major,
            &gated_devices_entries(host),
        )
        .as_bytes(),
        0o444,
    )
}

/// The `/proc/devices` lines of the gated modes' modules that are "loaded".
fn gated_devices_entries(host: &MockHost) -> Vec<(u32, &'static str)> {
    let (g, m) = (&host.gated, &host.gated_majors);
    let mut out = Vec::new();
    if g.gds {
        out.push((m.nvidia_fs, "nvidia-fs"));
    }
    if g.mofed {
        out.push((INFINIBAND_VERBS_MAJOR, "infiniband_verbs"));
    }
    if g.gdrcopy {
        out.push((m.gdrdrv, "gdrdrv"));
    }
    if g.nvswitches > 0 {
        out.push((m.nvswitch, "nvidia-nvswitch"));
    }
    out
}

fn write_os_release(host: &MockHost) -> Result<(), Error> {
    let (host_os, driver_os) = match host.layout {
        Layout::Debian => (DEBIAN_OS_RELEASE, None),
        Layout::Rhel => (RHEL_OS_RELEASE, None),
        Layout::DriverContainer => (DEBIAN_OS_RELEASE, Some(UBUNTU_OS_RELEASE)),
    };
    sys::write_file(&host.root.join("etc/os-release"), host_os.as_bytes(), 0o644)?;
    if let Some(text) = driver_os {
        sys::write_file(
            &host.driver_root.join("etc/os-release"),
            text.as_bytes(),
            0o644,
        )?;
    }
    Ok(())
}

const DEBIAN_OS_RELEASE: &str = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nVERSION=\"12 (bookworm)\"\nVERSION_CODENAME=bookworm\nID=debian\n";
const RHEL_OS_RELEASE: &str = "NAME=\"Red Hat Enterprise Linux\"\nVERSION=\"9.4 (Plow)\"\nID=\"rhel\"\nID_LIKE=\"fedora\"\nVERSION_ID=\"9.4\"\nPRETTY_NAME=\"Red Hat Enterprise Linux 9.4 (Plow)\"\n";
const UBUNTU_OS_RELEASE: &str = "PRETTY_NAME=\"Ubuntu 22.04.5 LTS\"\nNAME=\"Ubuntu\"\nVERSION_ID=\"22.04\"\nVERSION=\"22.04.5 LTS (Jammy Jellyfish)\"\nVERSION_CODENAME=jammy\nID=ubuntu\nID_LIKE=debian\n";

/// A `libcuda.so.<driver_version>` as a CUDA forward-compat package puts it in an image
/// (`/usr/local/cuda/compat`): the mock libcuda of that driver, answering `cuda_version` to
/// `cuDriverGetVersion`, with the forward-compatibility note real libraries carry.
pub fn compat_libcuda(driver_version: &str, cuda_version: (u32, u32)) -> Result<Vec<u8>, Error> {
    let cfg = HostConfig::new(driver_version, cuda_version);
    cfg.validate()?;
    let lib = LIBRARIES
        .iter()
        .find(|l| l.stem == "libcuda")
        .expect("the catalogue has libcuda");
    let bytes = lib.render(cfg.arch, &cfg.config_string(), driver_version)?;
    let note = crate::patch::cuda_note_json(
        driver_version,
        &format!("{}.{}", cuda_version.0, cuda_version.1),
    );
    crate::patch::patch_note(&bytes, &note).map_err(|source| Error::Patch {
        artifact: lib.file_name(driver_version),
        source,
    })
}

fn write_driver_tree(host: &MockHost, config: &str) -> Result<(), Error> {
    let ver = &host.driver_version;
    let lib = host.lib_path();
    sys::make_dir(&lib, 0o755)?;
    for l in LIBRARIES {
        let mut bytes = l.render(host.arch, config, ver)?;
        if l.stem == "libcuda" {
            let note = crate::patch::cuda_note_json(ver, &host.cuda_version);
            bytes = crate::patch::patch_note(&bytes, &note).map_err(|source| Error::Patch {
                artifact: l.file_name(ver),
                source,
            })?;
        }
        sys::write_file(&lib.join(l.file_name(ver)), &bytes, 0o755)?;
        if l.dev_link {
            // What the installer ships; the soname link itself is ldconfig's job.
            sys::make_symlink(
                Path::new(&l.soname(ver)),
                &lib.join(format!("{}.so", l.stem)),
            )?;
        }
    }
    let bin = host.driver_root.join("usr/bin");
    sys::make_dir(&bin, 0o755)?;
    for b in BINARIES {
        sys::write_file(&bin.join(b.name), &b.render(host.arch, config)?, 0o755)?;
    }
    let firmware = host.driver_root.join("lib/firmware/nvidia").join(ver);
    for name in ["gsp_ga10x.bin", "gsp_tu10x.bin"] {
        let contents = format!("gpuctk mock GSP firmware {name} {ver}\n");
        sys::write_file(&firmware.join(name), contents.as_bytes(), 0o644)?;
    }
    // The loaders' vendor files where NVIDIA's installer puts them, with the content of the
    // driver's own (the Debian 535 packages' bytes, a loader reads the library name from them).
    for (rel, contents) in VENDOR_FILES {
        sys::write_file(&host.driver_root.join(rel), contents.as_bytes(), 0o644)?;
    }
    sys::make_socket(&host.driver_root.join("run/nvidia-persistenced/socket"))
}

/// The EGL vendor file, the Vulkan ICD file and the OpenCL ICD file of a driver install.
pub const VENDOR_FILES: &[(&str, &str)] = &[
    (
        "usr/share/glvnd/egl_vendor.d/10_nvidia.json",
        r#"{
    "file_format_version" : "1.0.0",
    "ICD" : {
        "library_path" : "libEGL_nvidia.so.0"
    }
}
"#,
    ),
    (
        "etc/vulkan/icd.d/nvidia_icd.json",
        r#"{
    "file_format_version" : "1.0.0",
    "ICD": {
        "library_path": "libGLX_nvidia.so.0",
        "api_version" : "1.3.242"
    }
}
"#,
    ),
    ("etc/OpenCL/vendors/nvidia.icd", "libnvidia-opencl.so.1\n"),
];

/// File name of the ld.so.conf.d snippet naming the library directory.
fn ld_conf_name(layout: Layout, arch: Arch) -> &'static str {
    match (layout, arch) {
        (Layout::Rhel, _) => "nvidia-lib64.conf",
        (Layout::Debian | Layout::DriverContainer, Arch::Amd64) => "x86_64-linux-gnu.conf",
        (Layout::Debian | Layout::DriverContainer, Arch::Arm64) => "aarch64-linux-gnu.conf",
    }
}

fn write_loader_config(host: &MockHost) -> Result<(), Error> {
    let etc = host.driver_root.join("etc");
    sys::write_file(
        &etc.join("ld.so.conf"),
        b"include /etc/ld.so.conf.d/*.conf\n",
        0o644,
    )?;
    let snippet = format!("# gpuctk mock driver libraries\n{}\n", host.lib_dir);
    sys::write_file(
        &etc.join("ld.so.conf.d")
            .join(ld_conf_name(host.layout, host.arch)),
        snippet.as_bytes(),
        0o644,
    )
}

fn refresh_ld_cache(host: &MockHost, ldconfig: &Path, via: Option<&Path>) -> Result<(), Error> {
    // ldconfig keeps an aux cache here; without the directory it complains.
    sys::make_dir(&host.driver_root.join("var/cache/ldconfig"), 0o700)?;
    let program = sys::run_ldconfig(ldconfig, via, &host.driver_root)?;
    let incomplete = |what: String| Error::LdconfigIncomplete {
        ldconfig: program.clone(),
        root: host.driver_root.clone(),
        what,
    };
    let cache = host.driver_root.join("etc/ld.so.cache");
    if !cache.is_file() {
        return Err(incomplete(format!("{} was not created", cache.display())));
    }
    let lib = host.lib_path();
    for l in LIBRARIES {
        let soname = l.soname(&host.driver_version);
        let file = l.file_name(&host.driver_version);
        if soname == file {
            continue;
        }
        let link = lib.join(&soname);
        match fs::read_link(&link) {
            Ok(target) if target == Path::new(&file) => {}
            Ok(target) => {
                return Err(incomplete(format!(
                    "{} points to {}, expected {file}",
                    link.display(),
                    target.display()
                )))
            }
            Err(_) => {
                return Err(incomplete(format!(
                    "soname link {} was not created",
                    link.display()
                )))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_version_pattern() {
        for ok in ["570.124.06", "550.54", "1.0", "535.183.01"] {
            assert!(valid_driver_version(ok), "{ok}");
        }
        for bad in [
            "",
            "570",
            "570.",
            ".1",
            "570.124.06.1",
            "570.a.1",
            "v570.1",
            "570..1",
            " 570.1",
        ] {
            assert!(!valid_driver_version(bad), "{bad}");
        }
    }

    #[test]
    fn layout_round_trip() {
        for l in Layout::ALL {
            assert_eq!(l.to_string().parse::<Layout>().unwrap(), l);
            let json = serde_json::to_string(&l).unwrap();
            assert_eq!(json, format!("\"{l}\""));
        }
        let err = "ubuntu".parse::<Layout>().unwrap_err().to_string();
        assert!(err.contains("debian, rhel, driver-container"), "{err}");
    }

    #[test]
    fn validation() {
        let good = HostConfig::new("570.124.06", (12, 8));
        assert!(good.validate().is_ok());
        assert_eq!(good.cuda_version_int(), 12080);
        for (gpus, ok) in [(0, false), (1, true), (64, true), (65, false)] {
            let c = HostConfig {
                gpus,
                ..good.clone()
            };
            assert_eq!(c.validate().is_ok(), ok, "{gpus}");
        }
        let c = HostConfig {
            model: "a;b".into(),
            ..good.clone()
        };
        assert!(c.validate().is_err());
        let c = HostConfig {
            model: String::new(),
            ..good.clone()
        };
        assert!(c.validate().is_err());
        let c = HostConfig {
            model: "x".repeat(3000),
            ..good.clone()
        };
        assert!(c.validate().is_err());
        let c = HostConfig {
            driver_version: "570".into(),
            ..good
        };
        let msg = c.validate().unwrap_err().to_string();
        assert!(msg.contains("driver version \"570\""), "{msg}");
    }
}
