//! What a driver installation consists of, by capability: the library and binary names that
//! `NVIDIA_DRIVER_CAPABILITIES` selects, grouped as libnvidia-container groups them.
//!
//! This is data, not discovery: discovery looks these names up, planning filters by capability.

use std::fmt;
use std::str::FromStr;

/// A driver capability as `NVIDIA_DRIVER_CAPABILITIES` names it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Capability {
    /// CUDA and OpenCL.
    Compute,
    /// NVML and `nvidia-smi`.
    Utility,
    /// NVENC/NVDEC.
    Video,
    /// OpenGL, EGL, Vulkan.
    Graphics,
    /// X11 display (adds `/dev/nvidia-modeset`).
    Display,
    /// 32-bit libraries of the other capabilities.
    Compat32,
    /// NVIDIA NGX (DLSS).
    Ngx,
}

impl Capability {
    /// Every capability, in the order `all` expands to.
    pub const ALL: [Capability; 7] = [
        Capability::Compute,
        Capability::Compat32,
        Capability::Graphics,
        Capability::Utility,
        Capability::Video,
        Capability::Display,
        Capability::Ngx,
    ];

    /// The name used in `NVIDIA_DRIVER_CAPABILITIES`.
    pub fn name(self) -> &'static str {
        match self {
            Capability::Compute => "compute",
            Capability::Utility => "utility",
            Capability::Video => "video",
            Capability::Graphics => "graphics",
            Capability::Display => "display",
            Capability::Compat32 => "compat32",
            Capability::Ngx => "ngx",
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown capability name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown driver capability {0:?} (known: compute, compat32, graphics, utility, video, display, ngx, all)")]
pub struct UnknownCapability(pub String);

impl FromStr for Capability {
    type Err = UnknownCapability;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Capability::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| UnknownCapability(s.to_string()))
    }
}

/// A library the driver may ship: its lookup name (`libcuda.so`, matched against sonames as a
/// prefix, as libnvidia-container does) and the capability that selects it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LibrarySpec {
    /// The unversioned name, e.g. `libcuda.so`.
    pub name: &'static str,
    /// The capability that asks for it.
    pub capability: Capability,
    /// It carries a version of its own (`libnvidia-egl-wayland.so.1.1.13`), not the driver's:
    /// found through `ld.so.cache` only, any numeric version accepted.
    pub own_version: bool,
}

const fn lib(name: &'static str, capability: Capability) -> LibrarySpec {
    LibrarySpec {
        name,
        capability,
        own_version: false,
    }
}

const fn own_version_lib(name: &'static str, capability: Capability) -> LibrarySpec {
    LibrarySpec {
        name,
        capability,
        own_version: true,
    }
}

/// Every driver library we know, by capability (libnvidia-container's lists, plus the GLVND
/// vendor libraries that the CDI generator also mounts).
pub const LIBRARIES: &[LibrarySpec] = &[
    lib("libnvidia-ml.so", Capability::Utility),
    lib("libnvidia-cfg.so", Capability::Utility),
    lib("libnvidia-nscq.so", Capability::Utility),
    lib("libcuda.so", Capability::Compute),
    lib("libcudadebugger.so", Capability::Compute),
    lib("libnvidia-opencl.so", Capability::Compute),
    lib("libnvidia-gpucomp.so", Capability::Compute),
    lib("libnvidia-ptxjitcompiler.so", Capability::Compute),
    lib("libnvidia-fatbinaryloader.so", Capability::Compute),
    lib("libnvidia-allocator.so", Capability::Compute),
    lib("libnvidia-compiler.so", Capability::Compute),
    lib("libnvidia-pkcs11.so", Capability::Compute),
    lib("libnvidia-pkcs11-openssl3.so", Capability::Compute),
    lib("libnvidia-nvvm.so", Capability::Compute),
    lib("libnvidia-tileiras.so", Capability::Compute),
    lib("libvdpau_nvidia.so", Capability::Video),
    lib("libnvidia-encode.so", Capability::Video),
    lib("libnvidia-opticalflow.so", Capability::Video),
    lib("libnvcuvid.so", Capability::Video),
    lib("libnvidia-eglcore.so", Capability::Graphics),
    lib("libnvidia-glcore.so", Capability::Graphics),
    lib("libnvidia-tls.so", Capability::Graphics),
    lib("libnvidia-glsi.so", Capability::Graphics),
    lib("libnvidia-fbc.so", Capability::Graphics),
    lib("libnvidia-ifr.so", Capability::Graphics),
    lib("libnvidia-rtcore.so", Capability::Graphics),
    lib("libnvoptix.so", Capability::Graphics),
    lib("libGLX_nvidia.so", Capability::Graphics),
    lib("libEGL_nvidia.so", Capability::Graphics),
    lib("libGLESv2_nvidia.so", Capability::Graphics),
    lib("libGLESv1_CM_nvidia.so", Capability::Graphics),
    lib("libnvidia-glvkspirv.so", Capability::Graphics),
    lib("libnvidia-cbl.so", Capability::Graphics),
    lib("libnvidia-vulkan-producer.so", Capability::Graphics),
    // The EGL external platforms that the `egl_external_platform.d` files name (NVIDIA's CDI
    // generator mounts them; libnvidia-container does not know them).
    own_version_lib("libnvidia-egl-gbm.so", Capability::Graphics),
    own_version_lib("libnvidia-egl-wayland.so", Capability::Graphics),
    own_version_lib("libnvidia-egl-wayland2.so", Capability::Graphics),
    own_version_lib("libnvidia-egl-xcb.so", Capability::Graphics),
    own_version_lib("libnvidia-egl-xlib.so", Capability::Graphics),
    lib("libnvidia-ngx.so", Capability::Ngx),
];

/// A driver binary and the capability that selects it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinarySpec {
    /// File name, e.g. `nvidia-smi`.
    pub name: &'static str,
    /// The capability that asks for it.
    pub capability: Capability,
}

/// Driver binaries mounted into `/usr/bin`.
pub const BINARIES: &[BinarySpec] = &[
    BinarySpec {
        name: "nvidia-smi",
        capability: Capability::Utility,
    },
    BinarySpec {
        name: "nvidia-debugdump",
        capability: Capability::Utility,
    },
    BinarySpec {
        name: "nvidia-persistenced",
        capability: Capability::Utility,
    },
    BinarySpec {
        name: "nv-fabricmanager",
        capability: Capability::Utility,
    },
    BinarySpec {
        name: "nvidia-cuda-mps-control",
        capability: Capability::Compute,
    },
    BinarySpec {
        name: "nvidia-cuda-mps-server",
        capability: Capability::Compute,
    },
    BinarySpec {
        name: "nvidia-imex",
        capability: Capability::Compute,
    },
    BinarySpec {
        name: "nvidia-imex-ctl",
        capability: Capability::Compute,
    },
];

/// The standard `PATH` directories, in lookup order: where a bare program name is looked for
/// after `PATH` (the low-level runtime), and the `PATH` a hook gets.
pub const STANDARD_PATH: [&str; 6] = [
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// Directories searched for binaries under the driver root, in order.
pub const BINARY_DIRS: &[&str] = &["/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin"];

/// Library directories tried under the driver root when it has no `ld.so.cache`, or for a
/// library the cache does not list.
pub const FALLBACK_LIBRARY_DIRS: &[&str] = &[
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib/aarch64-linux-gnu/nvidia/current",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib",
    "/lib",
];

/// 32-bit library directories for `compat32`.
pub const FALLBACK_LIBRARY32_DIRS: &[&str] = &["/usr/lib/i386-linux-gnu", "/usr/lib32", "/usr/lib"];

/// Where a loader's vendor file goes in the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigTarget {
    /// `/usr/share/<rel>`, wherever it was found (NVIDIA's choice: the first data directory
    /// every loader reads).
    UsrShare,
    /// `/etc/<rel>` (Vulkan's and OpenCL's loaders read `/etc` first).
    Etc,
}

/// A vendor file that a loader (GLVND's EGL, Vulkan, OpenCL, OptiX, Xorg) reads to find the
/// driver, looked up relative to each config search directory (`/etc`, then the data
/// directories `/usr/local/share` and `/usr/share`, or `--config-search-path`) under the driver
/// root, first hit kept. The lists are NVIDIA's (`internal/discover/graphics.go`).
#[derive(Debug, Clone, Copy)]
pub struct ConfigSpec {
    /// The path relative to a search directory, e.g. `vulkan/icd.d/nvidia_icd.json`.
    pub rel: &'static str,
    /// Where it goes.
    pub target: ConfigTarget,
    /// The capability that selects it.
    pub capability: Capability,
    /// Also looked for at the driver root itself (GKE installs the Vulkan files there).
    pub at_driver_root: bool,
}

const fn config(
    rel: &'static str,
    target: ConfigTarget,
    capability: Capability,
    at_driver_root: bool,
) -> ConfigSpec {
    ConfigSpec {
        rel,
        target,
        capability,
        at_driver_root,
    }
}

/// The vendor files, in the order they are looked up.
pub const CONFIGS: &[ConfigSpec] = &[
    config(
        "glvnd/egl_vendor.d/10_nvidia.json",
        ConfigTarget::UsrShare,
        Capability::Graphics,
        false,
    ),
    config(
        "egl/egl_external_platform.d/15_nvidia_gbm.json",
        ConfigTarget::UsrShare,
        Capability::Graphics,
        false,
    ),
    config(
        "egl/egl_external_platform.d/10_nvidia_wayland.json",
        ConfigTarget::UsrShare,
        Capability::Graphics,
        false,
    ),
    config(
        "egl/egl_external_platform.d/09_nvidia_wayland2.json",
        ConfigTarget::UsrShare,
        Capability::Graphics,
        false,
    ),
    config(
        "egl/egl_external_platform.d/20_nvidia_xcb.json",
        ConfigTarget::UsrShare,
        Capability::Graphics,
        false,
    ),
    config(
        "egl/egl_external_platform.d/20_nvidia_xlib.json",
        ConfigTarget::UsrShare,
        Capability::Graphics,
        false,
    ),
    config(
        "nvidia/nvoptix.bin",
        ConfigTarget::UsrShare,
        Capability::Graphics,
        false,
    ),
    config(
        "X11/xorg.conf.d/10-nvidia.conf",
        ConfigTarget::UsrShare,
        Capability::Display,
        false,
    ),
    config(
        "X11/xorg.conf.d/nvidia-drm-outputclass.conf",
        ConfigTarget::UsrShare,
        Capability::Display,
        false,
    ),
    config(
        "OpenCL/vendors/nvidia.icd",
        ConfigTarget::Etc,
        Capability::Compute,
        false,
    ),
    config(
        "vulkan/icd.d/nvidia_icd.json",
        ConfigTarget::Etc,
        Capability::Graphics,
        true,
    ),
    config(
        VULKAN_ARCH_ICD,
        ConfigTarget::Etc,
        Capability::Graphics,
        true,
    ),
    config(
        "vulkan/icd.d/nvidia_layers.json",
        ConfigTarget::Etc,
        Capability::Graphics,
        true,
    ),
    config(
        "vulkan/implicit_layer.d/nvidia_layers.json",
        ConfigTarget::Etc,
        Capability::Graphics,
        true,
    ),
];

/// The Vulkan ICD file that names this machine's architecture.
#[cfg(target_arch = "aarch64")]
const VULKAN_ARCH_ICD: &str = "vulkan/icd.d/nvidia_icd.aarch64.json";
#[cfg(not(target_arch = "aarch64"))]
const VULKAN_ARCH_ICD: &str = "vulkan/icd.d/nvidia_icd.x86_64.json";

/// Config search directories under the driver root when `--config-search-path` gives none:
/// `/etc`, then `$XDG_DATA_DIRS`' default.
pub const CONFIG_SEARCH_DIRS: &[&str] = &["/etc", "/usr/local/share", "/usr/share"];

/// The Xorg modules (`display`): the name, and whether it carries the driver version as its
/// suffix (`libglxserver_nvidia.so.<version>`). Kept at their host path, so that an
/// `xorg.conf` `ModulePath` stays valid.
pub const XORG_MODULES: &[(&str, bool)] =
    &[("nvidia_drv.so", false), ("libglxserver_nvidia.so", true)];

/// Where the Xorg modules are looked for, relative to a library directory (`<libdir>/...`) and,
/// after those, as absolute paths (NVIDIA's `buildXOrgSearchPaths`).
pub const XORG_MODULE_SUBDIRS: &[&str] = &[
    "nvidia/xorg",
    "xorg/modules/drivers",
    "xorg/modules/extensions",
    "xorg/modules/updates/drivers",
    "xorg/modules/updates/extensions",
];

/// Absolute Xorg module directories, after those under the library directories.
pub const XORG_MODULE_DIRS: &[&str] = &[
    "/usr/lib/xorg/modules/drivers",
    "/usr/lib/xorg/modules/extensions",
    "/usr/lib/xorg/modules/updates/drivers",
    "/usr/lib/xorg/modules/updates/extensions",
    "/usr/lib64/xorg/modules/drivers",
    "/usr/lib64/xorg/modules/extensions",
    "/usr/lib64/xorg/modules/updates/drivers",
    "/usr/lib64/xorg/modules/updates/extensions",
    "/usr/X11R6/lib/modules/drivers",
    "/usr/X11R6/lib/modules/extensions",
    "/usr/X11R6/lib64/modules/drivers",
    "/usr/X11R6/lib64/modules/extensions",
];
