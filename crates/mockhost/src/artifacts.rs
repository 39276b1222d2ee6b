//! The fake driver's compiled files, embedded at build time (see build.rs),
//! and how each is named and patched when written into a host.

use crate::patch::{self, PatchError};
use crate::Error;

macro_rules! embed {
    ($file:literal) => {
        include_bytes!(concat!(env!("OUT_DIR"), "/", $file))
    };
}

/// Placeholder soname compiled into libraries whose soname is the versioned
/// file name (libnvidia-glcore). Must match build.rs.
const SONAME_PLACEHOLDER: &str =
    "GPUCTK_SONAME_PLACEHOLDER_0123456789abcdef0123456789abcdef0123456789abcdef";

pub(crate) const LIBCUDA: &[u8] = embed!("libcuda.so");
pub(crate) const NVIDIA_SMI: &[u8] = embed!("nvidia-smi");
pub(crate) const LIBNVML: &[u8] = embed!("libnvidia-ml.so");
pub(crate) const LIBPTXJIT: &[u8] = embed!("libnvidia-ptxjitcompiler.so");
/// WSL2's dxcore, found in `/usr/lib/wsl/lib`.
pub(crate) const LIBDXCORE: &[u8] = embed!("libdxcore.so");
/// WSL2 driver-store libraries: (file name in the store, bytes).
pub(crate) const WSL_STORE_LIBS: &[(&str, &[u8])] = &[
    ("libcuda_loader.so", embed!("libcuda_loader.so")),
    ("libnvidia-ml_loader.so", embed!("libnvidia-ml_loader.so")),
    ("libnvdxgdmal.so.1", embed!("libnvdxgdmal.so")),
    ("libnvwgf2umx.so", embed!("libnvwgf2umx.so")),
];
/// The container-side probe. Carries no config block: it is host-independent.
pub(crate) const PROBE: &[u8] = embed!("gpuctk-probe");

/// How a library's soname relates to its file name.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Soname {
    /// A fixed soname such as `libcuda.so.1`.
    Fixed(&'static str),
    /// The soname is the versioned file name itself, as libnvidia-glcore has.
    FileName,
}

/// One driver library.
#[derive(Debug)]
pub(crate) struct Library {
    /// File name without `.so.<version>`, e.g. `libcuda`.
    pub(crate) stem: &'static str,
    pub(crate) soname: Soname,
    /// Development symlink `<stem>.so -> <soname>` the installer creates.
    pub(crate) dev_link: bool,
    pub(crate) bytes: &'static [u8],
}

impl Library {
    /// `libcuda.so.570.124.06`.
    pub(crate) fn file_name(&self, driver_version: &str) -> String {
        format!("{}.so.{driver_version}", self.stem)
    }

    pub(crate) fn soname(&self, driver_version: &str) -> String {
        match self.soname {
            Soname::Fixed(s) => s.to_string(),
            Soname::FileName => self.file_name(driver_version),
        }
    }

    /// The file contents for a host: config block filled, soname fixed up.
    pub(crate) fn render(&self, config: &str, driver_version: &str) -> Result<Vec<u8>, Error> {
        let wrap = |source: PatchError| Error::Patch {
            artifact: self.file_name(driver_version),
            source,
        };
        let mut bytes = patch::patch_config(self.bytes, config).map_err(wrap)?;
        if let Soname::FileName = self.soname {
            bytes = patch::patch_placeholder(
                &bytes,
                SONAME_PLACEHOLDER.as_bytes(),
                driver_version.as_bytes(),
            )
            .map_err(wrap)?;
        }
        Ok(bytes)
    }
}

/// Every driver library a mock host gets.
pub(crate) const LIBRARIES: &[Library] = &[
    Library {
        stem: "libcuda",
        soname: Soname::Fixed("libcuda.so.1"),
        dev_link: true,
        bytes: LIBCUDA,
    },
    Library {
        stem: "libnvidia-ml",
        soname: Soname::Fixed("libnvidia-ml.so.1"),
        dev_link: true,
        bytes: LIBNVML,
    },
    Library {
        stem: "libnvidia-ptxjitcompiler",
        soname: Soname::Fixed("libnvidia-ptxjitcompiler.so.1"),
        dev_link: false,
        bytes: LIBPTXJIT,
    },
    Library {
        stem: "libnvidia-nvvm",
        soname: Soname::Fixed("libnvidia-nvvm.so.4"),
        dev_link: false,
        bytes: embed!("libnvidia-nvvm.so"),
    },
    Library {
        stem: "libcudadebugger",
        soname: Soname::Fixed("libcudadebugger.so.1"),
        dev_link: false,
        bytes: embed!("libcudadebugger.so"),
    },
    Library {
        stem: "libnvidia-allocator",
        soname: Soname::Fixed("libnvidia-allocator.so.1"),
        dev_link: false,
        bytes: embed!("libnvidia-allocator.so"),
    },
    Library {
        stem: "libnvidia-cfg",
        soname: Soname::Fixed("libnvidia-cfg.so.1"),
        dev_link: false,
        bytes: embed!("libnvidia-cfg.so"),
    },
    Library {
        stem: "libnvidia-opencl",
        soname: Soname::Fixed("libnvidia-opencl.so.1"),
        dev_link: false,
        bytes: embed!("libnvidia-opencl.so"),
    },
    Library {
        stem: "libnvidia-encode",
        soname: Soname::Fixed("libnvidia-encode.so.1"),
        dev_link: false,
        bytes: embed!("libnvidia-encode.so"),
    },
    Library {
        stem: "libnvcuvid",
        soname: Soname::Fixed("libnvcuvid.so.1"),
        dev_link: false,
        bytes: embed!("libnvcuvid.so"),
    },
    Library {
        stem: "libnvidia-glcore",
        soname: Soname::FileName,
        dev_link: false,
        bytes: embed!("libnvidia-glcore.so"),
    },
    Library {
        stem: "libEGL_nvidia",
        soname: Soname::Fixed("libEGL_nvidia.so.0"),
        dev_link: false,
        bytes: embed!("libEGL_nvidia.so"),
    },
    Library {
        stem: "libGLX_nvidia",
        soname: Soname::Fixed("libGLX_nvidia.so.0"),
        dev_link: false,
        bytes: embed!("libGLX_nvidia.so"),
    },
];

/// One driver executable, installed as `usr/bin/<name>`.
#[derive(Debug)]
pub(crate) struct Binary {
    pub(crate) name: &'static str,
    pub(crate) bytes: &'static [u8],
}

impl Binary {
    pub(crate) fn render(&self, config: &str) -> Result<Vec<u8>, Error> {
        patch::patch_config(self.bytes, config).map_err(|source| Error::Patch {
            artifact: self.name.to_string(),
            source,
        })
    }
}

/// Every driver executable a mock host gets.
pub(crate) const BINARIES: &[Binary] = &[
    Binary {
        name: "nvidia-smi",
        bytes: NVIDIA_SMI,
    },
    Binary {
        name: "nvidia-debugdump",
        bytes: embed!("nvidia-debugdump"),
    },
    Binary {
        name: "nvidia-persistenced",
        bytes: embed!("nvidia-persistenced"),
    },
    Binary {
        name: "nvidia-cuda-mps-control",
        bytes: embed!("nvidia-cuda-mps-control"),
    },
    Binary {
        name: "nvidia-cuda-mps-server",
        bytes: embed!("nvidia-cuda-mps-server"),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_configurable_artifact_has_exactly_one_block() {
        for lib in LIBRARIES {
            assert!(
                patch::find_unique(lib.bytes, patch::CONFIG_MARKER).is_ok(),
                "{}",
                lib.stem
            );
        }
        for bin in BINARIES {
            assert!(
                patch::find_unique(bin.bytes, patch::CONFIG_MARKER).is_ok(),
                "{}",
                bin.name
            );
        }
    }

    #[test]
    fn parses_embedded_artifacts() {
        let cuda = gpuctk_elf::object(LIBCUDA).unwrap();
        assert_eq!(cuda.soname.as_deref(), Some("libcuda.so.1"));
        assert!(cuda.interp.is_none());
        let smi = gpuctk_elf::object(NVIDIA_SMI).unwrap();
        assert!(smi.needed.iter().any(|n| n == "libnvidia-ml.so.1"));
        assert!(smi.interp.is_some());
    }

    #[test]
    fn glcore_soname_becomes_file_name() {
        let lib = LIBRARIES
            .iter()
            .find(|l| l.stem == "libnvidia-glcore")
            .unwrap();
        let bytes = lib.render("driver=1.2;", "570.124.06").unwrap();
        let info = gpuctk_elf::object(&bytes[..]).unwrap();
        assert_eq!(
            info.soname.as_deref(),
            Some("libnvidia-glcore.so.570.124.06")
        );
    }
}
