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
    /// Its index among the parent's MIG devices, the `M` of a `N:M` request: NVML's where its
    /// answers are known ([`attach_uuids`]), else the (GPU instance, compute instance) order.
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
    /// Its GPU instance profile has the graphics attribute (`+gfx`), as NVML told it; `false`
    /// where NVML was not asked (procfs does not say).
    pub gfx: bool,
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

/// Whether `mig_dir` may hold GPU instance folders: the driver makes `gpu<minor>/mig` for every
/// GPU it has attached, MIG mode or not (its `osRmCapRegisterGpu`), so that it is there says
/// nothing. procfs keeps a folder's link count at 2 plus its sub-folders, so one `stat` says
/// that a folder of 2 links holds none, instead of a listing of each GPU's; a file system that
/// counts otherwise (btrfs: always 1) is listed.
fn may_hold_instances(mig_dir: &Path) -> Result<bool, MigError> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(mig_dir) {
        Ok(md) => Ok(!(md.is_dir() && md.nlink() == 2)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(MigError::List {
            path: mig_dir.to_path_buf(),
            source,
        }),
    }
}

/// Every MIG device of `gpus` procfs shows, in GPU order then (GPU instance, compute instance)
/// order; a GPU without a `gpu<minor>/mig` folder, or with one holding no GPU instance folder,
/// has none. The capability nodes are checked on the host.
pub fn discover_mig(roots: &Roots, gpus: &[Gpu]) -> Result<Vec<MigDevice>, MigError> {
    let base = roots.proc_root.join(CAPS_PROC_DIR);
    let mut out = Vec::new();
    let mut major = None;
    for g in gpus {
        let rel = format!("gpu{}/mig", g.minor);
        let mig_dir = base.join(&rel);
        if !may_hold_instances(&mig_dir)? {
            continue;
        }
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
                    gfx: false,
                });
                index += 1;
            }
        }
    }
    Ok(out)
}

/// Whether `info` lists exactly the MIG devices procfs shows (by parent minor, GPU and compute
/// instance): NVML's recorded answers predate a repartitioning otherwise, and their UUIDs and
/// numbering must not be used.
pub fn same_layout(devices: &[MigDevice], info: &crate::nvml::NvmlInfo) -> bool {
    let mut a: Vec<(u32, u32, u32)> = devices.iter().map(|d| (d.gpu_minor, d.gi, d.ci)).collect();
    let mut b: Vec<(u32, u32, u32)> = info
        .gpus
        .iter()
        .flat_map(|g| g.mig.iter().map(move |m| (g.minor, m.gi, m.ci)))
        .collect();
    a.sort_unstable();
    b.sort_unstable();
    a == b
}

/// Fill in the UUIDs NVML reported, matching by parent minor, GPU and compute instance, and
/// take NVML's numbering for `N:M` (libnvidia-container's), which procfs order only stands in
/// for. A device NVML does not list keeps its procfs index and has no UUID.
pub fn attach_uuids(devices: &mut [MigDevice], info: &crate::nvml::NvmlInfo) {
    for d in devices.iter_mut() {
        let found = info
            .gpus
            .iter()
            .filter(|g| g.minor == d.gpu_minor)
            .flat_map(|g| &g.mig)
            .find(|m| m.gi == d.gi && m.ci == d.ci);
        d.uuid = found.map(|m| m.uuid.clone());
        d.gfx = found.is_some_and(|m| m.gfx);
        if let Some(m) = found {
            d.index = m.index;
        }
    }
    devices.sort_by_key(|d| (d.gpu, d.index));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, minor: u32) -> Gpu {
        Gpu {
            index,
            minor,
            uuid: format!("GPU-{index}"),
            bus_id: String::new(),
            model: String::new(),
            node: None,
            drm: Vec::new(),
            drm_links: Vec::new(),
        }
    }

    fn cap(dir: &Path, rel: &str, minor: u32) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(
            p,
            format!("DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"),
        )
        .unwrap();
    }

    #[test]
    fn no_mig_folder_is_no_devices_and_bad_nodes_and_files_are_named() {
        let t = tempfile::tempdir().unwrap();
        let roots = Roots {
            driver_root: t.path().into(),
            dev_root: t.path().into(),
            proc_root: t.path().join("proc"),
        };
        let base = t.path().join("proc").join(CAPS_PROC_DIR);
        // No mig folder: not in MIG mode, no error.
        assert!(discover_mig(&roots, &[gpu(0, 0)]).unwrap().is_empty());
        // The folder the driver makes for every GPU, with no GPU instance folder in it (a file
        // named as one is not one): no devices, and it is not listed (`gi0` would fail as a
        // folder to list).
        std::fs::create_dir_all(base.join("gpu0/mig")).unwrap();
        std::fs::write(base.join("gpu0/mig/gi0"), "").unwrap();
        assert!(discover_mig(&roots, &[gpu(0, 0)]).unwrap().is_empty());
        std::fs::create_dir_all(t.path().join("proc")).unwrap();
        std::fs::write(
            t.path().join("proc/devices"),
            "Character devices:\n195 nvidia\n237 nvidia-caps\n",
        )
        .unwrap();
        cap(&base, "gpu1/mig/gi8/access", 147);
        cap(&base, "gpu1/mig/gi8/ci0/access", 148);
        // Names the driver never makes are not instances.
        std::fs::create_dir_all(base.join("gpu1/mig/gi99")).unwrap();
        std::fs::create_dir_all(base.join("gpu1/mig/junk")).unwrap();
        let e = discover_mig(&roots, &[gpu(0, 0), gpu(1, 1)])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("mknod -m 444 /dev/nvidia-caps/nvidia-cap147 c 237 147"),
            "{e}"
        );
        // A capability file not in the driver's format is named.
        cap(&base, "gpu1/mig/gi2/ci1/access", 22);
        std::fs::write(base.join("gpu1/mig/gi2/access"), "DeviceFileMinor: x\n").unwrap();
        let e = discover_mig(&roots, &[gpu(1, 1)]).unwrap_err().to_string();
        assert!(e.contains("gpu1/mig/gi2/access: DeviceFileMinor"), "{e}");
    }
}
