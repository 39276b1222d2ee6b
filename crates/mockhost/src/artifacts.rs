//! The fake driver's compiled files, embedded at build time (see build.rs),
//! and how each is named and patched when written into a host.

use crate::patch::{self, PatchError};
use crate::{Arch, Error};

macro_rules! embed {
    ($file:literal) => {
        include_bytes!(concat!(env!("OUT_DIR"), "/", $file))
    };
}

/// The other architecture's build of the same file (empty when build.rs found no cross
/// compiler for it).
macro_rules! foreign {
    ($file:literal) => {
        include_bytes!(concat!(env!("OUT_DIR"), "/foreign/", $file))
    };
}

/// `bytes` for this build's architecture, `foreign` for the other; an empty foreign build is
/// an error naming what to install.
fn pick(arch: Arch, bytes: &'static [u8], foreign: &'static [u8]) -> Result<&'static [u8], Error> {
    if arch == Arch::native() {
        Ok(bytes)
    } else if foreign.is_empty() {
        Err(Error::ArchNotBuilt { arch })
    } else {
        Ok(foreign)
    }
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
    /// The other architecture's build.
    pub(crate) foreign: &'static [u8],
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
    pub(crate) fn render(
        &self,
        arch: Arch,
        config: &str,
        driver_version: &str,
    ) -> Result<Vec<u8>, Error> {
        let wrap = |source: PatchError| Error::Patch {
            artifact: self.file_name(driver_version),
            source,
        };
        let mut bytes =
            patch::patch_config(pick(arch, self.bytes, self.foreign)?, config).map_err(wrap)?;
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
        foreign: foreign!("libcuda.so"),
    },
    Library {
        stem: "libnvidia-ml",
        soname: Soname::Fixed("libnvidia-ml.so.1"),
        dev_link: true,
        bytes: LIBNVML,
        foreign: foreign!("libnvidia-ml.so"),
    },
    Library {
        stem: "libnvidia-ptxjitcompiler",
        soname: Soname::Fixed("libnvidia-ptxjitcompiler.so.1"),
        dev_link: false,
        bytes: LIBPTXJIT,
        foreign: foreign!("libnvidia-ptxjitcompiler.so"),
    },
    Library {
        stem: "libnvidia-nvvm",
        soname: Soname::Fixed("libnvidia-nvvm.so.4"),
        dev_link: false,
        bytes: embed!("libnvidia-nvvm.so"),
        foreign: foreign!("libnvidia-nvvm.so"),
    },
    Library {
        stem: "libcudadebugger",
        soname: Soname::Fixed("libcudadebugger.so.1"),
        dev_link: false,
        bytes: embed!("libcudadebugger.so"),
        foreign: foreign!("libcudadebugger.so"),
    },
    Library {
        stem: "libnvidia-allocator",
        soname: Soname::Fixed("libnvidia-allocator.so.1"),
        dev_link: false,
        bytes: embed!("libnvidia-allocator.so"),
        foreign: foreign!("libnvidia-allocator.so"),
    },
    Library {
        stem: "libnvidia-cfg",
        soname: Soname::Fixed("libnvidia-cfg.so.1"),
        dev_link: false,
        bytes: embed!("libnvidia-cfg.so"),
        foreign: foreign!("libnvidia-cfg.so"),
    },
    Library {
        stem: "libnvidia-opencl",
        soname: Soname::Fixed("libnvidia-opencl.so.1"),
        dev_link: false,
        bytes: embed!("libnvidia-opencl.so"),
        foreign: foreign!("libnvidia-opencl.so"),
    },
    Library {
        stem: "libnvidia-encode",
        soname: Soname::Fixed("libnvidia-encode.so.1"),
        dev_link: false,
        bytes: embed!("libnvidia-encode.so"),
        foreign: foreign!("libnvidia-encode.so"),
    },
    Library {
        stem: "libnvcuvid",
        soname: Soname::Fixed("libnvcuvid.so.1"),
        dev_link: false,
        bytes: embed!("libnvcuvid.so"),
        foreign: foreign!("libnvcuvid.so"),
    },
    Library {
        stem: "libnvidia-glcore",
        soname: Soname::FileName,
        dev_link: false,
        bytes: embed!("libnvidia-glcore.so"),
        foreign: foreign!("libnvidia-glcore.so"),
    },
    Library {
        stem: "libEGL_nvidia",
        soname: Soname::Fixed("libEGL_nvidia.so.0"),
        dev_link: false,
        bytes: embed!("libEGL_nvidia.so"),
        foreign: foreign!("libEGL_nvidia.so"),
    },
    Library {
        stem: "libGLX_nvidia",
        soname: Soname::Fixed("libGLX_nvidia.so.0"),
        dev_link: false,
        bytes: embed!("libGLX_nvidia.so"),
        foreign: foreign!("libGLX_nvidia.so"),
    },
];

/// One driver executable, installed as `usr/bin/<name>`.
#[derive(Debug)]
pub(crate) struct Binary {
    pub(crate) name: &'static str,
    pub(crate) bytes: &'static [u8],
    /// The other architecture's build.
    pub(crate) foreign: &'static [u8],
}

impl Binary {
    pub(crate) fn render(&self, arch: Arch, config: &str) -> Result<Vec<u8>, Error> {
        patch::patch_config(pick(arch, self.bytes, self.foreign)?, config).map_err(|source| {
            Error::Patch {
                artifact: self.name.to_string(),
                source,
            }
        })
    }
}

/// Every driver executable a mock host gets.
pub(crate) const BINARIES: &[Binary] = &[
    Binary {
        name: "nvidia-smi",
        bytes: NVIDIA_SMI,
        foreign: foreign!("nvidia-smi"),
    },
    Binary {
        name: "nvidia-debugdump",
        bytes: embed!("nvidia-debugdump"),
        foreign: foreign!("nvidia-debugdump"),
    },
    Binary {
        name: "nvidia-persistenced",
        bytes: embed!("nvidia-persistenced"),
        foreign: foreign!("nvidia-persistenced"),
    },
    Binary {
        name: "nvidia-cuda-mps-control",
        bytes: embed!("nvidia-cuda-mps-control"),
        foreign: foreign!("nvidia-cuda-mps-control"),
    },
    Binary {
        name: "nvidia-cuda-mps-server",
        bytes: embed!("nvidia-cuda-mps-server"),
        foreign: foreign!("nvidia-cuda-mps-server"),
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

    /// The other architecture's files, when built: the other ELF machine, the same sonames.
    #[test]
    fn foreign_artifacts_are_the_other_machine() {
        let (native, other) = if cfg!(target_arch = "aarch64") {
            (gpuctk_elf::EM_AARCH64, gpuctk_elf::EM_X86_64)
        } else {
            (gpuctk_elf::EM_X86_64, gpuctk_elf::EM_AARCH64)
        };
        for lib in LIBRARIES {
            assert_eq!(gpuctk_elf::header(lib.bytes).unwrap().machine, native);
            if lib.foreign.is_empty() {
                continue;
            }
            let h = gpuctk_elf::header(lib.foreign).unwrap();
            assert_eq!(h.machine, other, "{}", lib.stem);
            let a = gpuctk_elf::object(lib.bytes).unwrap();
            let b = gpuctk_elf::object(lib.foreign).unwrap();
            assert_eq!(a.soname, b.soname, "{}", lib.stem);
        }
        for bin in BINARIES.iter().filter(|b| !b.foreign.is_empty()) {
            assert_eq!(gpuctk_elf::header(bin.foreign).unwrap().machine, other);
        }
    }

    #[test]
    fn glcore_soname_becomes_file_name() {
        let lib = LIBRARIES
            .iter()
            .find(|l| l.stem == "libnvidia-glcore")
            .unwrap();
        let bytes = lib
            .render(Arch::native(), "driver=1.2;", "570.124.06")
            .unwrap();
        let info = gpuctk_elf::object(&bytes[..]).unwrap();
        assert_eq!(
            info.soname.as_deref(),
            Some("libnvidia-glcore.so.570.124.06")
        );
    }
}
