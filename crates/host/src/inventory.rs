//! The `Inventory`: what the host offers, as discovery found it. Plain data that planning and
//! `gpuctk info` read; it does not know who consumes it.

use std::path::PathBuf;

use crate::catalog::Capability;
use crate::cuda::CudaVersion;
use crate::procfs::DriverVersion;

/// The three roots discovery reads from. Each is a parameter so tests run on temp trees.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Roots {
    /// Where the driver's user-space files live: `/`, or `/run/nvidia/driver` under the GPU
    /// Operator. Container paths are host paths with this prefix removed.
    pub driver_root: PathBuf,
    /// The root under which `/dev/nvidia*` are found.
    pub dev_root: PathBuf,
    /// The procfs mount, normally `/proc`.
    pub proc_root: PathBuf,
}

impl Roots {
    /// The roots, the dev root being the driver root when none is given (as NVIDIA's
    /// `--dev-root` and `[nvidia-container-cli] dev-root` default: a driver container's
    /// `/dev` is where its root is).
    pub fn new(driver_root: PathBuf, dev_root: Option<PathBuf>, proc_root: PathBuf) -> Roots {
        Roots {
            dev_root: dev_root.unwrap_or_else(|| driver_root.clone()),
            driver_root,
            proc_root,
        }
    }
}

impl Default for Roots {
    fn default() -> Self {
        Roots {
            driver_root: PathBuf::from("/"),
            dev_root: PathBuf::from("/"),
            proc_root: PathBuf::from("/proc"),
        }
    }
}

/// A character device node on the host.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceNode {
    /// The path inside the container, e.g. `/dev/nvidia0`.
    pub path: String,
    /// The node on the host (under the dev root).
    pub host_path: PathBuf,
    /// Device major.
    pub major: u32,
    /// Device minor.
    pub minor: u32,
    /// Permission bits, e.g. 0o666.
    pub mode: u32,
    /// Owning group.
    pub gid: u32,
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Gpu {
    /// Index in PCI bus order, as NVML and `nvidia-smi` number them.
    pub index: u32,
    /// Minor of `/dev/nvidiaN`.
    pub minor: u32,
    /// `GPU-...` UUID.
    pub uuid: String,
    /// PCI bus id, e.g. `0000:17:00.0`.
    pub bus_id: String,
    /// Marketing name.
    pub model: String,
    /// Its device node, `None` when `/dev/nvidiaN` is missing or wrong.
    pub node: Option<DeviceNode>,
    /// Its DRM nodes (`/dev/dri/cardN`, `/dev/dri/renderDN`), from
    /// `<dev root>/sys/bus/pci/devices/<bus id>/drm`: the ones a display or a GBM/Wayland
    /// client opens. Empty without `nvidia-drm` loaded.
    pub drm: Vec<DeviceNode>,
    /// The udev links to those nodes in `/dev/dri/by-path` (`pci-<bus id>-card`, `-render`)
    /// that lead to one of them, by which Xorg, Vulkan and EGL device selection find a GPU.
    pub drm_links: Vec<DrmLink>,
}

/// A `/dev/dri/by-path` link as udev made it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DrmLink {
    /// The link's path in the container, e.g. `/dev/dri/by-path/pci-0000:01:00.0-card`.
    pub link: String,
    /// Its target, as read on the host, e.g. `../card1`.
    pub target: String,
}

/// A driver library found on the host.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Library {
    /// The catalogue name it was looked up by, e.g. `libcuda.so`.
    pub name: String,
    /// The capability that selects it.
    pub capability: Capability,
    /// The resolved file on the host.
    pub host_path: PathBuf,
    /// Where it goes in the container: the resolved path with the driver root removed.
    pub path: String,
    /// `DT_SONAME` from the ELF file, e.g. `libcuda.so.1`.
    pub soname: Option<String>,
    /// A 32-bit library (for `compat32`).
    pub is_32bit: bool,
    /// A unversioned development link (`libcuda.so -> libcuda.so.1`) exists next to it on the host.
    pub has_dev_link: bool,
    /// The ELF header fields its `ld.so.cache` flags come from, as discovery read them (`None`
    /// when not read): the shim's `update-ldcache` takes them, and [`Library::soname`], from
    /// here rather than reading the file again. Required in what is read back (not taken for
    /// `None` when missing): a snapshot of the shape before it is not used.
    #[serde(deserialize_with = "Option::deserialize")]
    pub elf: Option<ElfAbi>,
}

/// What ldconfig's flags for a library are made of: `e_machine`, the class, `e_flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ElfAbi {
    /// `e_machine`.
    pub machine: u16,
    /// A 64-bit object (`ELFCLASS64`).
    pub elf64: bool,
    /// `e_flags`.
    pub flags: u32,
}

/// A non-library file to mount: a binary, firmware, an IPC socket or directory.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostFile {
    /// Short name, e.g. `nvidia-smi`.
    pub name: String,
    /// The capability that selects it, `None` for files every GPU container needs.
    pub capability: Option<Capability>,
    /// The file on the host (symlinks resolved).
    pub host_path: PathBuf,
    /// The path in the container.
    pub path: String,
}

/// Everything discovery found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Inventory {
    /// The roots it was read from.
    pub roots: Roots,
    /// The kernel module's version, e.g. `570.124.06`.
    pub driver_version: DriverVersion,
    /// The newest CUDA version this driver branch supports.
    pub cuda_version: Option<CudaVersion>,
    /// GPUs in index order.
    pub gpus: Vec<Gpu>,
    /// `nvidiactl`, `nvidia-modeset`, `nvidia-uvm`, `nvidia-uvm-tools`, as present.
    pub control_nodes: Vec<DeviceNode>,
    /// Driver libraries.
    pub libraries: Vec<Library>,
    /// Driver binaries.
    pub binaries: Vec<HostFile>,
    /// GSP firmware files.
    pub firmware: Vec<HostFile>,
    /// persistenced / fabricmanager sockets and the MPS pipe directory.
    pub ipc: Vec<HostFile>,
    /// The loaders' vendor files (EGL, Vulkan and OpenCL ICDs, `nvoptix.bin`, Xorg configs) and
    /// the Xorg modules.
    pub configs: Vec<HostFile>,
    /// Where the libraries were looked up: `ld.so.cache` or the fallback directories.
    pub library_source: String,
    /// Things that are odd but not fatal (a missing node, a stale major).
    pub warnings: Vec<String>,
}

impl Inventory {
    /// The container-side directories holding the 64-bit libraries, sorted and unique.
    pub fn library_dirs(&self) -> Vec<String> {
        let mut dirs: Vec<String> = self
            .libraries
            .iter()
            .filter(|l| !l.is_32bit)
            .filter_map(|l| l.path.rsplit_once('/').map(|(d, _)| d.to_string()))
            .collect();
        dirs.sort();
        dirs.dedup();
        dirs
    }

    /// Look a GPU up by index or UUID.
    pub fn gpu(&self, id: &str) -> Option<&Gpu> {
        if let Ok(i) = id.parse::<u32>() {
            return self.gpus.iter().find(|g| g.index == i);
        }
        self.gpus.iter().find(|g| g.uuid.eq_ignore_ascii_case(id))
    }
}
