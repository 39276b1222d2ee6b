//! NVML as the runtime loads it, the MIG devices procfs shows, and the runtime's record of
//! NVML's answers for them.

use gpuctk_host::Inventory;

use super::report::Checks;
use crate::config::Config;

/// NVML (loaded here, as `info` does), the MIG devices procfs shows, and whether the runtime has a
/// current record of NVML's answers for them (without one, `MIG-<uuid>` requests fail). Returns
/// the MIG devices' `N:M` names procfs shows, when it could be read.
pub(super) fn check_nvml_and_mig(
    inv: Option<&Inventory>,
    cfg: &Config,
    c: &mut Checks,
) -> Option<Vec<String>> {
    const G: &str = "devices";
    // Discovery's own failures are the driver checks'; nothing to add here then.
    let inv = inv?;
    let nvml = match crate::mig::ask_nvml(inv, &cfg.nvml_helper) {
        Ok(info) => {
            let mig_mode: Vec<String> = info
                .gpus
                .iter()
                .filter(|g| g.mig_enabled)
                .map(|g| g.index.to_string())
                .collect();
            c.ok(
                G,
                "nvml",
                format!(
                    "{}: {} GPU(s){}",
                    gpuctk_host::nvml::library(inv)
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                    info.gpus.len(),
                    if mig_mode.is_empty() {
                        String::new()
                    } else {
                        format!(", MIG mode on GPU {}", mig_mode.join(", "))
                    }
                ),
            );
            Some(info)
        }
        Err(why) => {
            c.warn(
                G,
                "nvml",
                why,
                "install the driver's libnvidia-ml (its utility libraries) in the driver root; only MIG UUIDs and the arch and brand requirements need it",
            );
            None
        }
    };
    let devices = match crate::mig::mig_devices(inv, nvml.as_ref()) {
        Ok(d) => d,
        Err(e) => {
            c.fail(
                G,
                "mig-devices",
                format!("{e:#}"),
                "create the capability node as the line says (nvidia-modprobe makes them)",
            );
            return None;
        }
    };
    let names: Vec<String> = devices.iter().map(|d| d.index_name()).collect();
    if devices.is_empty() {
        return Some(names);
    }
    c.ok(
        G,
        "mig-devices",
        format!("{} MIG device(s): {}", devices.len(), names.join(", ")),
    );
    let record = cfg.nvml_cache.display();
    match crate::mig::recorded(&cfg.nvml_cache, inv) {
        Ok(Some(info)) if !gpuctk_host::mig::same_layout(&devices, &info) => c.warn(
            G,
            "nvml-record",
            format!("{record}: lists other MIG instances than procfs shows (repartitioned since): not used, and MIG-<uuid> requests fail"),
            "run `gpuctk info` (or `gpuctk cdi generate`) as root",
        ),
        Ok(Some(_)) => c.ok(G, "nvml-record", format!("{record}: current")),
        Ok(None) => c.warn(
            G,
            "nvml-record",
            format!("{record}: no record of NVML's answers for this driver: containers asking for a MIG device by MIG-<uuid> fail"),
            "run `gpuctk info` (or `gpuctk cdi generate`) as root, again after repartitioning",
        ),
        Err(e) => c.warn(
            G,
            "nvml-record",
            e,
            "run `gpuctk info` as root to rewrite it",
        ),
    }
    Some(names)
}
