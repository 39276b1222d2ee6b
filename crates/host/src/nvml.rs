//! What only NVML knows, asked once and turned into plain data: each GPU's compute capability,
//! brand and architecture, whether it is in MIG mode, and its MIG devices with their UUIDs.
//!
//! The library is the driver root's own `libnvidia-ml.so.1`, found through the driver root's
//! `ld.so.cache` by discovery (never the caller's library path). With the `nvml` feature,
//! [`query`] opens it with `dlopen` in this process; only commands that can afford NVML's
//! initialisation (`cdi generate`, `info`, `doctor`, `install`, the hidden `nvml-query`) call it,
//! a container's create path never does. Without the feature (the static build, which cannot
//! `dlopen`) the dynamically linked helper `gpuctk-nvml` asks instead and answers [`NvmlInfo`]
//! as JSON, which [`NvmlInfo::check`] vets as outside input.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::inventory::Inventory;

/// Most GPUs we ask about: more is not a real NVML answering.
pub const MAX_GPUS: u32 = 256;
/// Most MIG devices per GPU we ask about.
pub const MAX_MIG: u32 = 64;
/// Longest UUID NVML writes (`NVML_DEVICE_UUID_V2_BUFFER_SIZE`, with its NUL).
const MAX_UUID: usize = 96;
/// Longest brand, architecture or compute capability name we accept from a helper.
const MAX_NAME: usize = 64;

#[cfg(feature = "nvml")]
mod dl;
#[cfg(feature = "nvml")]
pub use dl::query;

/// Everything NVML said.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NvmlInfo {
    /// The GPUs in NVML's order.
    pub gpus: Vec<NvmlGpu>,
    /// `nvmlSystemGetDriverVersion`: on WSL2 the Windows driver's, which procfs does not show.
    #[serde(default)]
    pub driver_version: Option<String>,
    /// `nvmlSystemGetCudaDriverVersion_v2` as `major.minor`.
    #[serde(default)]
    pub cuda_version: Option<String>,
}

/// One GPU as NVML describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvmlGpu {
    /// NVML's index.
    pub index: u32,
    /// Minor of `/dev/nvidia<minor>`.
    pub minor: u32,
    /// `GPU-...`.
    pub uuid: String,
    /// Compute capability, `major.minor`.
    pub compute_capability: Option<String>,
    /// Brand as NVML names it (`Tesla`, `GeForce`, `Nvidia`, ...).
    pub brand: Option<String>,
    /// Architecture (`Ampere`, `Hopper`, ...); `None` before R470's NVML.
    pub architecture: Option<String>,
    /// `nvmlDeviceGetName`.
    #[serde(default)]
    pub name: Option<String>,
    /// `nvmlDeviceGetPciInfo_v3`'s bus id, `00000000:01:00.0`.
    #[serde(default)]
    pub bus_id: Option<String>,
    /// In MIG mode now.
    pub mig_enabled: bool,
    /// Its MIG devices, in NVML's order.
    pub mig: Vec<NvmlMig>,
}

/// One MIG device as NVML describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvmlMig {
    /// Its index among its GPU's MIG devices (NVML's slots without the empty ones).
    pub index: u32,
    /// GPU instance id.
    pub gi: u32,
    /// Compute instance id.
    pub ci: u32,
    /// `MIG-...`.
    pub uuid: String,
    /// Its GPU instance's profile has the graphics attribute (`+gfx`, NVML's
    /// `GPU_INSTANCE_PROFILE_*_SLICE_GFX`): NVIDIA's generator gives such a device its parent's
    /// DRM nodes.
    #[serde(default)]
    pub gfx: bool,
}

/// Why NVML could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum NvmlError {
    /// Discovery found no `libnvidia-ml.so` in the driver root.
    #[error("no libnvidia-ml.so.1 in the driver root's ld.so.cache")]
    NotFound,
    /// `dlopen` failed.
    #[error("{}: {reason}", path.display())]
    Open {
        /// The library.
        path: PathBuf,
        /// `dlerror()`.
        reason: String,
    },
    /// A function every NVML has is missing.
    #[error("{}: no symbol {name}; not an NVML library", path.display())]
    Symbol {
        /// The library.
        path: PathBuf,
        /// The function.
        name: &'static str,
    },
    /// An NVML call failed.
    #[error("{call}: {message} (NVML error {code})")]
    Call {
        /// The function.
        call: &'static str,
        /// Its return code.
        code: i32,
        /// `nvmlErrorString`.
        message: String,
    },
    /// An answer (the helper's JSON) that no NVML gives.
    #[error("{0}")]
    Answer(String),
}

impl NvmlInfo {
    /// Whether this could be NVML's answer: at most [`MAX_GPUS`] GPUs with distinct indices and
    /// minors, at most [`MAX_MIG`] MIG devices each, UUIDs and names of printable ASCII no longer
    /// than NVML writes them. An answer read from a helper is used only after this.
    pub fn check(&self) -> Result<(), NvmlError> {
        let bad = |m: String| Err(NvmlError::Answer(m));
        if self.gpus.len() > MAX_GPUS as usize {
            return bad(format!("{} GPUs, more than {MAX_GPUS}", self.gpus.len()));
        }
        // A GPU's name has spaces (`NVIDIA H100 80GB HBM3`); nothing else does.
        let printable =
            |what: &str, b: u8| b.is_ascii_graphic() || (b == b' ' && what == "GPU name");
        let text = |what: &str, s: &str, max: usize| -> Result<(), NvmlError> {
            if s.is_empty() || s.len() >= max || !s.bytes().all(|b| printable(what, b)) {
                return Err(NvmlError::Answer(format!(
                    "{what} {:?} is not printable ASCII of 1 to {} bytes",
                    s.chars().take(max).collect::<String>(),
                    max - 1
                )));
            }
            Ok(())
        };
        let mut indices = std::collections::BTreeSet::new();
        let mut minors = std::collections::BTreeSet::new();
        for (what, v) in [
            ("driver version", &self.driver_version),
            ("CUDA version", &self.cuda_version),
        ] {
            if let Some(v) = v {
                text(what, v, MAX_NAME)?;
            }
        }
        for g in &self.gpus {
            // Minor 0 for every GPU is WSL2's answer (no device nodes there).
            if !indices.insert(g.index) || (g.minor != 0 && !minors.insert(g.minor)) {
                return bad(format!("GPU index {} or minor {} twice", g.index, g.minor));
            }
            text("GPU UUID", &g.uuid, MAX_UUID)?;
            for (what, v) in [
                ("compute capability", &g.compute_capability),
                ("brand", &g.brand),
                ("architecture", &g.architecture),
                ("GPU name", &g.name),
                ("bus id", &g.bus_id),
            ] {
                if let Some(v) = v {
                    text(what, v, MAX_NAME)?;
                }
            }
            if g.mig.len() > MAX_MIG as usize || (!g.mig_enabled && !g.mig.is_empty()) {
                return bad(format!(
                    "GPU {}: {} MIG devices{}",
                    g.index,
                    g.mig.len(),
                    if g.mig_enabled {
                        ""
                    } else {
                        " without MIG mode"
                    }
                ));
            }
            for m in &g.mig {
                text("MIG UUID", &m.uuid, MAX_UUID)?;
            }
        }
        Ok(())
    }
}

/// The driver root's NVML, as discovery resolved it.
pub fn library(inv: &Inventory) -> Result<&Path, NvmlError> {
    inv.libraries
        .iter()
        .find(|l| l.name == "libnvidia-ml.so" && !l.is_32bit)
        .map(|l| l.host_path.as_path())
        .ok_or(NvmlError::NotFound)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, uuid: &str) -> NvmlGpu {
        NvmlGpu {
            index,
            minor: index + 1,
            uuid: uuid.into(),
            compute_capability: Some("8.0".into()),
            brand: Some("Tesla".into()),
            architecture: Some("Ampere".into()),
            name: Some("NVIDIA A100-SXM4-40GB".into()),
            bus_id: Some("00000000:07:00.0".into()),
            mig_enabled: true,
            mig: vec![NvmlMig {
                index: 0,
                gi: 1,
                ci: 0,
                uuid: "MIG-5c89e6a4-8e1b-5b4e-9f5b-2f3a8f2f6c11".into(),
                gfx: false,
            }],
        }
    }

    #[test]
    fn answers_no_nvml_gives_are_refused() {
        let good = NvmlInfo {
            gpus: vec![gpu(0, "GPU-a"), gpu(1, "GPU-b")],
            driver_version: Some("550.54.14".into()),
            cuda_version: Some("12.4".into()),
        };
        good.check().unwrap();
        let refused = |info: NvmlInfo, says: &str| {
            let e = info.check().unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains('\n'), "{e}");
        };
        let mut i = good.clone();
        i.gpus[1].uuid = "GPU-\u{1b}[2J".into();
        refused(i, "GPU UUID");
        let mut i = good.clone();
        i.gpus[0].mig[0].uuid = "M".repeat(MAX_UUID);
        refused(i, "MIG UUID");
        let mut i = good.clone();
        i.gpus[0].brand = Some(String::new());
        refused(i, "brand");
        let mut i = good.clone();
        i.gpus[1].minor = 1;
        refused(i, "twice");
        // WSL2: no device nodes, every minor 0.
        let mut i = good.clone();
        i.gpus.iter_mut().for_each(|g| g.minor = 0);
        i.check().unwrap();
        let mut i = good.clone();
        i.gpus[0].name = Some("A100\u{7}".into());
        refused(i, "GPU name");
        let mut i = good.clone();
        i.driver_version = Some("550 54".into());
        refused(i, "driver version");
        let mut i = good.clone();
        i.gpus[0].mig_enabled = false;
        refused(i, "without MIG mode");
        let mut i = good.clone();
        i.gpus[0].mig = vec![i.gpus[0].mig[0].clone(); MAX_MIG as usize + 1];
        refused(i, "MIG devices");
        let many = NvmlInfo {
            gpus: (0..=MAX_GPUS).map(|n| gpu(n, "GPU-x")).collect(),
            ..NvmlInfo::default()
        };
        refused(many, "more than 256");
    }
}
