//! `gpuctk demo`: walks the chain the way the seed document draws it, host first, on the real
//! driver when there is one and on a mock GPU host otherwise, so it always shows something real.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use gpuctk_cdi::registry::Registry;
use gpuctk_cdi::spec::{write_spec, ContainerEdits, Format};
use gpuctk_core::{build_spec, plan, CapabilitySet, PlanOptions, SpecOptions};
use gpuctk_host::{DiscoverOptions, Roots};

use crate::cli::DemoArgs;

struct Workdir {
    path: PathBuf,
    keep: bool,
}

impl Drop for Workdir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

fn step(n: u32, title: &str) {
    println!("\n[{n}] {title}");
}

pub fn run(a: DemoArgs) -> anyhow::Result<ExitCode> {
    let real = Path::new("/proc/driver/nvidia/version").exists() && !a.mock;
    let work = match &a.keep {
        Some(p) => {
            std::fs::create_dir_all(p).with_context(|| format!("--keep {}", p.display()))?;
            Workdir {
                path: p.clone(),
                keep: true,
            }
        }
        None => {
            let p = std::env::temp_dir().join(format!("gpuctk-demo-{}", std::process::id()));
            std::fs::create_dir_all(&p).with_context(|| format!("create {}", p.display()))?;
            Workdir {
                path: p,
                keep: false,
            }
        }
    };

    println!("gpuctk demo: docker run --gpus all <image> nvidia-smi, box by box");
    step(1, "host: NVIDIA driver, device nodes, driver libraries");
    let roots = if real {
        println!("    using this machine's driver (/proc/driver/nvidia/version exists)");
        Roots::default()
    } else {
        let dir = work.path.join("host");
        let mut cfg = gpuctk_mockhost::HostConfig::new("570.124.06", (12, 8));
        cfg.gpus = a.gpus;
        let host =
            gpuctk_mockhost::create_host(&dir, &cfg).context("building the mock GPU host")?;
        println!(
            "    no NVIDIA driver here: built a mock GPU host in {} (real device nodes, real ELF libraries, real ld.so.cache)",
            dir.display()
        );
        Roots {
            driver_root: host.driver_root,
            dev_root: host.dev_root,
            proc_root: host.proc_root,
        }
    };
    let inv = super::discover(&roots, &DiscoverOptions::default())?;
    println!(
        "    driver {} (CUDA up to {}), {} GPU(s), libraries via {}",
        inv.driver_version,
        inv.cuda_version
            .map(|c| c.to_string())
            .unwrap_or_else(|| "?".into()),
        inv.gpus.len(),
        inv.library_source
    );
    for g in &inv.gpus {
        println!(
            "      GPU {}: {} {} at {}",
            g.index, g.model, g.uuid, g.bus_id
        );
    }
    println!(
        "      {} driver libraries, {} binaries, {} firmware files, {} control nodes",
        inv.libraries.len(),
        inv.binaries.len(),
        inv.firmware.len(),
        inv.control_nodes.len()
    );

    step(
        2,
        "gpuctk cdi generate: the CDI spec a container engine reads",
    );
    let plan = plan(
        &inv,
        &PlanOptions {
            hook_path: super::self_path(),
            capabilities: CapabilitySet::all(),
        },
    );
    let spec = build_spec(&inv, &plan, &SpecOptions::default())?;
    let spec_dir = work.path.join("cdi");
    std::fs::create_dir_all(&spec_dir)?;
    let spec_file = spec_dir.join("nvidia.yaml");
    write_spec(&spec_file, &spec, Format::Yaml)?;
    println!(
        "    {}: kind {}, cdiVersion {}, devices {}",
        spec_file.display(),
        spec.kind,
        spec.cdi_version,
        spec.devices
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );

    step(
        3,
        "the container asks for nvidia.com/gpu=all: the edits its config.json gets",
    );
    let reg = Registry::load(std::slice::from_ref(&spec_dir));
    let resolved = reg
        .resolve(&["nvidia.com/gpu=all"])
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let edits = resolved.edits;
    print_edits(&edits);
    println!(
        "\nthe chain holds: {} GPU(s) on the host, {} device node(s) for the container",
        inv.gpus.len(),
        edits.device_nodes.len()
    );
    if work.keep {
        println!("kept: {}", work.path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn print_edits(e: &ContainerEdits) {
    println!("    device nodes:");
    for n in &e.device_nodes {
        println!(
            "      {} ({}:{})",
            n.path,
            n.major.unwrap_or(0),
            n.minor.unwrap_or(0)
        );
    }
    println!("    mounts (read-only binds from the driver root):");
    for m in &e.mounts {
        println!("      {}", m.container_path);
    }
    println!("    createContainer hooks:");
    for h in &e.hooks {
        let args: Vec<&str> = h.args.iter().skip(1).map(String::as_str).collect();
        let shown = if args.len() > 5 {
            format!("{} ... ({} args)", args[..3].join(" "), args.len())
        } else {
            args.join(" ")
        };
        println!("      {shown}");
    }
    println!("    env: {}", e.env.join(" "));
}
