//! MIG devices as procfs shows them, without NVML: each GPU in MIG mode has
//! `driver/nvidia/capabilities/gpu<minor>/mig/gi<G>/access` per GPU instance and
//! `…/gi<G>/ci<C>/access` per compute instance, each naming the minor of the
//! `/dev/nvidia-caps/nvidia-cap<N>` node that grants it. A MIG device is a compute instance: its
//! parent's `/dev/nvidia<minor>`, the two capability nodes, and the two files (the
//! `/proc/driver/nvidia/capabilities` view libnvidia-container gives a container). Their UUIDs
//! come only from NVML ([`crate::nvml`]).

use std::io;
use std::path::{Path, PathBuf};

use crate::caps::{self, CapsError, CAPS_MAJOR_NAME, CAPS_PROC_DIR};
use crate::inventory::{DeviceNode, Gpu, Roots};

/// Most GPU instances a GPU has (`gi0` to `gi14` in the driver's table).
const MAX_GIS: usize = 15;
/// Most compute instances a GPU instance has (`ci0` to `ci7`).
const MAX_CIS: usize = 8;

/// A capability file of a MIG device: where it is on the host and where a container sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CapView {
    /// The file under the proc root.
    pub host_path: PathBuf,
    /// `/proc/driver/nvidia/capabilities/gpu<m>/mig/gi<G>[/ci<C>]/access`.
    pub path: String,
}

/// One MIG device (a compute instance of a GPU instance).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MigDevice {
    /// The parent GPU's index.
    pub gpu: u32,
    /// The parent GPU's minor.
    pub gpu_minor: u32,
    /// Its index among the parent's MIG devices, in (GPU instance, compute instance) order, the
    /// `M` of a `N:M` request.
    pub index: u32,
    /// GPU instance id.
    pub gi: u32,
    /// Compute instance id.
    pub ci: u32,
    /// The GPU instance's and the compute instance's capability nodes.
    pub caps: Vec<DeviceNode>,
    /// The two capability files.
    pub proc_files: Vec<CapView>,
    /// `MIG-...` from NVML, `None` where NVML was not asked or not there.
    pub uuid: Option<String>,
}

impl MigDevice {
    /// `N:M`, how NVIDIA names it by index.
    pub fn index_name(&self) -> String {
        format!("{}:{}", self.gpu, self.index)
    }
}

/// Why the MIG devices could not be read; each names the file or folder.
#[derive(Debug, thiserror::Error)]
pub enum MigError {
    /// A capability file or node is wrong.
    #[error(transparent)]
    Caps(#[from] CapsError),
    /// A folder cannot be listed.
    #[error("{}: {source}", path.display())]
    List {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// The numeric suffix of `gi<N>` / `ci<N>` entry names, below `max`.
fn ids(dir: &Path, prefix: &str, max: usize) -> Result<Vec<u32>, MigError> {
    // More entries than the driver makes is not the driver's folder: stop reading there.
    let entries = crate::discover::read_dir_entries_at_most(dir, 4 * max).map_err(|source| {
        MigError::List {
            path: dir.to_path_buf(),
            source,
        }
    })?;
    let mut out: Vec<u32> = entries
        .iter()
        .filter_map(|e| e.name.to_str()?.strip_prefix(prefix)?.parse::<u32>().ok())
        .filter(|n| (*n as usize) < max)
        .collect();
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Every MIG device of `gpus` procfs shows, in GPU order then (GPU instance, compute instance)
/// order; a GPU without a `gpu<minor>/mig` folder has none. The capability nodes are checked
/// on the host.
pub fn discover_mig(roots: &Roots, gpus: &[Gpu]) -> Result<Vec<MigDevice>, MigError> {
    let base = roots.proc_root.join(CAPS_PROC_DIR);
    let mut out = Vec::new();
    let mut major = None;
    for g in gpus {
        let rel = format!("gpu{}/mig", g.minor);
        let mig_dir = base.join(&rel);
        let gis = match ids(&mig_dir, "gi", MAX_GIS) {
            Ok(v) => v,
            Err(MigError::List { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                continue
            }
            Err(e) => return Err(e),
        };
        let mut index = 0;
        for gi in gis {
            let gi_rel = format!("{rel}/gi{gi}");
            let gi_file = format!("{gi_rel}/access");
            for ci in ids(&base.join(&gi_rel), "ci", MAX_CIS)? {
                let ci_file = format!("{gi_rel}/ci{ci}/access");
                let major = match major {
                    Some(m) => m,
                    None => *major.insert(caps::major_of(roots, CAPS_MAJOR_NAME)?),
                };
                let mut caps_nodes = Vec::new();
                let mut proc_files = Vec::new();
                for file in [&gi_file, &ci_file] {
                    let host_path = base.join(file);
                    let cap = caps::read_cap_file(host_path.clone())?;
                    caps_nodes.push(caps::node(
                        roots,
                        format!("/dev/nvidia-caps/nvidia-cap{}", cap.minor),
                        major,
                        cap.minor,
                        cap.mode,
                    )?);
                    proc_files.push(CapView {
                        host_path,
                        path: format!("/proc/{CAPS_PROC_DIR}/{file}"),
                    });
                }
                out.push(MigDevice {
                    gpu: g.index,
                    gpu_minor: g.minor,
                    index,
                    gi,
                    ci,
                    caps: caps_nodes,
                    proc_files,
                    uuid: None,
                });
                index += 1;
            }
        }
    }
    Ok(out)
}

/// Fill in the UUIDs NVML reported, matching by parent minor, GPU and compute instance.
pub fn attach_uuids(devices: &mut [MigDevice], info: &crate::nvml::NvmlInfo) {
    for d in devices {
        d.uuid = info
            .gpus
            .iter()
            .filter(|g| g.minor == d.gpu_minor)
            .flat_map(|g| &g.mig)
            .find(|m| m.gi == d.gi && m.ci == d.ci)
            .map(|m| m.uuid.clone());
    }
}
