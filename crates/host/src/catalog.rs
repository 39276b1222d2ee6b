//! What a driver installation consists of, by capability: the library and binary names that
//! `NVIDIA_DRIVER_CAPABILITIES` selects, grouped as libnvidia-container groups them.
//!
//! This is data, not discovery: discovery looks these names up, planning filters by capability.

use std::fmt;
use std::str::FromStr;

/// A driver capability as `NVIDIA_DRIVER_CAPABILITIES` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
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
}

const fn lib(name: &'static str, capability: Capability) -> LibrarySpec {
    LibrarySpec { name, capability }
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
