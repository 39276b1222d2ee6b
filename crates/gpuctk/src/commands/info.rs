//! `gpuctk info`: the Inventory, for people (`--json` for programs).

use std::fmt::Write as _;
use std::io::Write;
use std::process::ExitCode;

use gpuctk_host::catalog::{self, Capability};
use gpuctk_host::Inventory;

use crate::cli::{InfoArgs, NvmlQueryArgs};

pub fn run(a: InfoArgs) -> anyhow::Result<ExitCode> {
    let inv = a.roots.discover()?;
    // NVML's facts (brand, architecture, MIG), recorded for the runtime when run as root.
    let (nvml, not_recorded) = crate::mig::ask_and_record(
        &inv,
        &a.roots.nvml_helper(),
        a.roots.nvml_cache(&inv.roots).as_deref(),
    );
    for w in nvml.as_ref().err().into_iter().chain(not_recorded.as_ref()) {
        tracing::warn!("{w}");
    }
    let nvml = nvml.ok();
    let migs = crate::mig::mig_devices(&inv, nvml.as_ref())?;
    let text = if a.json {
        // The inventory's fields, and what NVML and procfs said of MIG.
        let mut v = serde_json::to_value(&inv)?;
        if let Some(o) = v.as_object_mut() {
            o.insert("nvml".into(), serde_json::to_value(&nvml)?);
            o.insert("mig_devices".into(), serde_json::to_value(&migs)?);
        }
        let mut s = serde_json::to_string_pretty(&v)?;
        s.push('\n');
        s
    } else {
        let mut s = render(&inv);
        s.push_str(&render_nvml(&inv, nvml.as_ref(), &migs));
        s
    };
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// `nvml-query`: NVML's answers as JSON, or the error that kept NVML from answering.
pub fn nvml_query(a: NvmlQueryArgs) -> anyhow::Result<ExitCode> {
    let inv = a.roots.discover()?;
    let info = crate::mig::ask_nvml(&inv, &a.roots.nvml_helper()).map_err(anyhow::Error::msg)?;
    let mut s = serde_json::to_string_pretty(&info)?;
    s.push('\n');
    std::io::stdout().write_all(s.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// Each GPU's brand, architecture and MIG mode (NVML), and the MIG devices (procfs, with NVML's
/// UUIDs).
fn render_nvml(
    inv: &Inventory,
    nvml: Option<&gpuctk_host::nvml::NvmlInfo>,
    migs: &[gpuctk_host::mig::MigDevice],
) -> String {
    let mut s = String::new();
    if let Some(info) = nvml {
        for g in &info.gpus {
            let Some(h) = inv.gpus.iter().find(|h| h.minor == g.minor) else {
                continue;
            };
            let na = || "unknown".to_string();
            let _ = writeln!(
                s,
                "GPU {}: Brand: {}, Architecture: {} (compute capability {}), MIG {}",
                h.index,
                g.brand.clone().unwrap_or_else(na),
                g.architecture.clone().unwrap_or_else(na),
                g.compute_capability.clone().unwrap_or_else(na),
                if g.mig_enabled { "enabled" } else { "disabled" }
            );
        }
    }
    if !migs.is_empty() {
        let _ = writeln!(s, "MIG devices: {}", migs.len());
        for m in migs {
            let nodes: Vec<String> = m.caps.iter().map(node).collect();
            let _ = writeln!(
                s,
                "  {:>5}  {}  gi {} ci {}  {}",
                m.index_name(),
                m.uuid.as_deref().unwrap_or("(UUID unknown without NVML)"),
                m.gi,
                m.ci,
                nodes.join(", ")
            );
        }
    }
    s
}

fn node(n: &gpuctk_host::DeviceNode) -> String {
    format!("{} ({}:{})", n.path, n.major, n.minor)
}

/// The human-readable inventory.
pub fn render(inv: &Inventory) -> String {
    let mut s = String::new();
    let cuda = inv
        .cuda_version
        .map(|c| format!("CUDA {c}"))
        .unwrap_or_else(|| "CUDA version unknown".to_string());
    let _ = writeln!(
        s,
        "NVIDIA driver {} (supports up to {cuda})",
        inv.driver_version
    );
    let _ = writeln!(
        s,
        "roots: driver {}, dev {}, proc {}",
        inv.roots.driver_root.display(),
        inv.roots.dev_root.display(),
        inv.roots.proc_root.display()
    );
    let _ = writeln!(s, "GPUs: {}", inv.gpus.len());
    for g in &inv.gpus {
        let n = g
            .node
            .as_ref()
            .map(node)
            .unwrap_or_else(|| format!("/dev/nvidia{} MISSING", g.minor));
        let drm: String = g.drm.iter().map(|d| format!(", {}", node(d))).collect();
        let _ = writeln!(
            s,
            "  {:>2}  {}  {}  {}  {n}{drm}",
            g.index, g.uuid, g.bus_id, g.model
        );
    }
    let _ = writeln!(
        s,
        "control nodes: {}",
        inv.control_nodes
            .iter()
            .map(node)
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(s, "libraries (found through {}):", inv.library_source);
    for cap in Capability::ALL {
        let found: Vec<String> = inv
            .libraries
            .iter()
            .filter(|l| l.capability == cap)
            .map(|l| {
                let so = l.soname.as_deref().unwrap_or("no soname");
                format!("{} ({so})", l.path)
            })
            .collect();
        let missing: Vec<&str> = if cap == Capability::Compat32 {
            Vec::new()
        } else {
            catalog::LIBRARIES
                .iter()
                .filter(|spec| spec.capability == cap)
                .filter(|spec| {
                    !inv.libraries
                        .iter()
                        .any(|l| !l.is_32bit && l.name == spec.name)
                })
                .map(|spec| spec.name)
                .collect()
        };
        if found.is_empty() && missing.is_empty() {
            continue;
        }
        let _ = writeln!(s, "  {cap}: {} found", found.len());
        for f in found {
            let _ = writeln!(s, "    {f}");
        }
        if !missing.is_empty() {
            let _ = writeln!(s, "    missing: {}", missing.join(", "));
        }
    }
    for (title, files) in [
        ("binaries", &inv.binaries),
        ("firmware", &inv.firmware),
        ("ipc", &inv.ipc),
        ("vendor files", &inv.configs),
    ] {
        let names: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        let _ = writeln!(
            s,
            "{title}: {}",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        );
    }
    for w in &inv.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    s
}
