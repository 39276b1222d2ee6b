//! MIG devices and NVML facts for the commands: procfs gives the MIG devices (parent, GPU and
//! compute instance, capability nodes); NVML, asked only by commands that may initialise it
//! (`cdi generate`, `info`, `nvml-query`), adds their UUIDs and each GPU's MIG mode. Those
//! commands record NVML's answers ([`record`]) for the runtime, which reads them
//! ([`recorded`]) and never initialises NVML on a container's create path.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use gpuctk_core::mig::{plan_mig, MigEdits};
use gpuctk_host::mig::{attach_uuids, discover_mig, MigDevice};
use gpuctk_host::nvml::{self, NvmlInfo};
use gpuctk_host::Inventory;

/// What NVML said, or the one line saying why it was not used. In this process with the `nvml`
/// feature; without it (the static build) through `helper` (`[gpuctk] nvml-helper`).
pub fn ask_nvml(inv: &Inventory, helper: &Path) -> Result<NvmlInfo, String> {
    let library = nvml::library(inv).map_err(|e| format!("NVML not used ({e})"));
    ask(library, helper).map_err(|e| format!("{e}: MIG UUIDs, brand and architecture are unknown"))
}

/// What the NVML at `lib` said (WSL2's, in the driver store), under the same switch.
pub fn ask_nvml_at(lib: &Path, helper: &Path) -> Result<NvmlInfo, String> {
    ask(Ok(lib), helper)
}

/// NVML's answers from `library` (or why it was not found), unless it is switched off.
fn ask(library: Result<&Path, String>, helper: &Path) -> Result<NvmlInfo, String> {
    // NVML initialising as root makes missing device nodes in this host's /dev, whatever our
    // roots say: an admin (or a test on unpacked driver files) can keep it out.
    if std::env::var_os("GPUCTK_NVML").is_some_and(|v| v == "off") {
        return Err("NVML not used (GPUCTK_NVML=off)".to_string());
    }
    ask_library(library?, helper).map_err(|e| format!("NVML not used ({e})"))
}

/// NVML's answers from `library`: in this process where the build has NVML's code (`nvml`),
/// else through the helper program (the static build).
fn ask_library(library: &Path, helper: &Path) -> Result<NvmlInfo, String> {
    #[cfg(feature = "nvml")]
    {
        let _ = helper;
        nvml::query(library).map_err(|e| e.to_string())
    }
    #[cfg(not(feature = "nvml"))]
    {
        crate::nvml_helper::ask(helper, library).map_err(|e| e.to_string())
    }
}

/// NVML's answers, recorded at `cache` (when given) for the runtime when this process may
/// write there (root); a failure to record is the returned line.
pub fn ask_and_record(
    inv: &Inventory,
    helper: &Path,
    cache: Option<&Path>,
) -> (Result<NvmlInfo, String>, Option<String>) {
    let info = ask_nvml(inv, helper);
    let mut warning = None;
    if let (Ok(i), Some(cache)) = (&info, cache) {
        if crate::capped::euid() == 0 {
            warning = record(cache, inv, i)
                .err()
                .map(|e| format!("NVML's answers not recorded for the runtime: {e}"));
        }
    }
    (info, warning)
}

/// The MIG devices of the host, with UUIDs (and NVML's numbering) when `info` lists exactly them.
pub fn mig_devices(inv: &Inventory, info: Option<&NvmlInfo>) -> anyhow::Result<Vec<MigDevice>> {
    let mut devices = discover_mig(&inv.roots, &inv.gpus)?;
    match info {
        Some(info) if gpuctk_host::mig::same_layout(&devices, info) => {
            attach_uuids(&mut devices, info)
        }
        Some(_) => tracing::warn!(
            "NVML lists other MIG instances than procfs shows (repartitioned meanwhile?): their UUIDs are left out"
        ),
        None => {}
    }
    Ok(devices)
}

/// The plan's MIG edits (by-path link hooks running `hook_path`), and the indices of the GPUs
/// in MIG mode: those NVML says are, and any that procfs shows MIG devices on.
pub fn mig_plan(
    inv: &Inventory,
    devices: &[MigDevice],
    info: Option<&NvmlInfo>,
    hook_path: &str,
) -> (Vec<MigEdits>, Vec<u32>) {
    let mut gpus: Vec<u32> = devices.iter().map(|d| d.gpu).collect();
    if let Some(info) = info {
        for g in info.gpus.iter().filter(|g| g.mig_enabled) {
            if let Some(h) = inv.gpus.iter().find(|h| h.minor == g.minor) {
                gpus.push(h.index);
            }
        }
    }
    gpus.sort_unstable();
    gpus.dedup();
    (plan_mig(inv, devices, hook_path), gpus)
}

/// Largest cache file read: a few hundred bytes per GPU.
const MAX_CACHE: u64 = 1 << 20;

/// What the cache's answers hold for: the running driver, and the very NVML file asked.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct CacheKey {
    driver_version: String,
    library: PathBuf,
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct CacheFile {
    key: CacheKey,
    nvml: NvmlInfo,
}

fn cache_key(inv: &Inventory) -> Option<CacheKey> {
    let lib = nvml::library(inv).ok()?;
    let md = std::fs::metadata(lib).ok()?;
    Some(CacheKey {
        driver_version: inv.driver_version.to_string(),
        // Inside the driver root: `gpuctk install` sees the host under its host root and the
        // runtime at `/`, and the record holds for both (the file is the same by device and
        // inode).
        library: lib
            .strip_prefix(&inv.roots.driver_root)
            .map(|p| Path::new("/").join(p))
            .unwrap_or_else(|_| lib.to_path_buf()),
        dev: md.dev(),
        ino: md.ino(),
        size: md.size(),
        mtime: md.mtime(),
        mtime_nsec: md.mtime_nsec(),
    })
}

/// The record of `info` for this driver and NVML file, as [`record`] writes it.
pub fn record_text(inv: &Inventory, info: &NvmlInfo) -> Result<Vec<u8>, String> {
    let key = cache_key(inv).ok_or("the NVML library cannot be stat'ed")?;
    serde_json::to_vec(&CacheFile {
        key,
        nvml: info.clone(),
    })
    .map_err(|e| e.to_string())
}

/// Record `info` at `path` for the runtime: written whole (renamed into place), mode 0644.
pub fn record(path: &Path, inv: &Inventory, info: &NvmlInfo) -> Result<(), String> {
    let text = record_text(inv, info)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    gpuctk_atomicfile::write(path, &text, Some(0o644))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// What `path` recorded for this driver and NVML file; `Ok(None)` when there is no record or it
/// is for another driver. A record not owned by root, writable by others, or not ours is an
/// `Err` saying so, and is not used.
pub fn recorded(path: &Path, inv: &Inventory) -> Result<Option<NvmlInfo>, String> {
    use crate::capped::{read_owned, OwnedFileError};
    let shown = path.display();
    let text = match read_owned(path, 0, MAX_CACHE) {
        Ok(t) => t,
        Err(OwnedFileError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(OwnedFileError::NotOwned(_)) => {
            return Err(format!(
                "{shown}: not used: it must be a regular file owned by root and writable by root only (run `gpuctk info` as root to rewrite it)"
            ))
        }
        Err(e @ OwnedFileError::Io(_)) => return Err(format!("{shown}: {e}")),
        Err(e) => {
            return Err(format!(
                "{shown}: not used: {e} (run `gpuctk info` as root to rewrite it)"
            ))
        }
    };
    let file: CacheFile = serde_json::from_slice(&text)
        .map_err(|e| format!("{shown}: not used: {e} (run `gpuctk info` as root to rewrite it)"))?;
    Ok((Some(file.key) == cache_key(inv)).then_some(file.nvml))
}
