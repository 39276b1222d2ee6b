//! `gpuctk info`: the Inventory, for people (`--json` for programs).

use std::fmt::Write as _;
use std::io::Write;
use std::process::ExitCode;

use gpuctk_host::catalog::{self, Capability};
use gpuctk_host::Inventory;

use crate::cli::InfoArgs;

pub fn run(a: InfoArgs) -> anyhow::Result<ExitCode> {
    let inv = a.roots.discover()?;
    let text = if a.json {
        let mut s = serde_json::to_string_pretty(&inv)?;
        s.push('\n');
        s
    } else {
        render(&inv)
    };
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
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
