//! MIG devices and NVML facts for the commands: procfs gives the MIG devices (parent, GPU and
//! compute instance, capability nodes); NVML, asked only by commands that may initialise it
//! (`cdi generate`, `info`, `nvml-query`), adds their UUIDs and each GPU's MIG mode.

use gpuctk_core::mig::{plan_mig, MigEdits};
use gpuctk_host::mig::{attach_uuids, discover_mig, MigDevice};
use gpuctk_host::nvml::{self, NvmlInfo};
use gpuctk_host::Inventory;

/// What NVML said, or the one line saying why it was not used.
pub fn ask_nvml(inv: &Inventory) -> Result<NvmlInfo, String> {
    nvml::library(inv)
        .and_then(nvml::query)
        .map_err(|e| format!("NVML not used ({e}): MIG UUIDs, brand and architecture are unknown"))
}

/// The MIG devices of the host, with UUIDs where `info` has them.
pub fn mig_devices(inv: &Inventory, info: Option<&NvmlInfo>) -> anyhow::Result<Vec<MigDevice>> {
    let mut devices = discover_mig(&inv.roots, &inv.gpus)?;
    if let Some(info) = info {
        attach_uuids(&mut devices, info);
    }
    Ok(devices)
}

/// The plan's MIG edits, and the indices of the GPUs in MIG mode: those NVML says are, and any
/// that procfs shows MIG devices on.
pub fn mig_plan(
    inv: &Inventory,
    devices: &[MigDevice],
    info: Option<&NvmlInfo>,
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
    (plan_mig(inv, devices), gpus)
}
