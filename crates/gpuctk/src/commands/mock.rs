//! `gpuctk mock-host create | rootfs`: the fake GPU host and a container rootfs to go with it.

use std::process::ExitCode;

use anyhow::{anyhow, Context};
use gpuctk_host::{cuda_version_for_branch, DriverVersion};
use gpuctk_mockhost::{Arch, HostConfig, Layout, RootfsConfig};

use crate::cli::{ArchArg, LayoutArg, MockCreateArgs, MockRootfsArgs};

/// The mock host config these arguments ask for.
pub fn host_config(a: &MockCreateArgs) -> anyhow::Result<HostConfig> {
    if !(1..=64).contains(&a.gpus) {
        anyhow::bail!("--gpus {}: a mock host has 1 to 64 GPUs", a.gpus);
    }
    let version = DriverVersion::parse(&a.driver_version).ok_or_else(|| {
        anyhow!(
            "--driver-version {:?}: expected a driver version such as 570.124.06",
            a.driver_version
        )
    })?;
    let cuda = cuda_version_for_branch(version.major()).ok_or_else(|| {
        anyhow!(
            "--driver-version {}: branch {} is older than any CUDA 10.1 driver; use 418 or newer",
            a.driver_version,
            version.major()
        )
    })?;
    let mut cfg = HostConfig::new(&a.driver_version, (cuda.major, cuda.minor));
    cfg.gpus = a.gpus;
    cfg.layout = match a.layout {
        LayoutArg::Debian => Layout::Debian,
        LayoutArg::Rhel => Layout::Rhel,
        LayoutArg::DriverContainer => Layout::DriverContainer,
        LayoutArg::Tegra => {
            anyhow::bail!("--layout tegra: built by create, not from a host config")
        }
        LayoutArg::Wsl => {
            anyhow::bail!("--layout wsl: built by create, not from a host config")
        }
    };
    cfg.model = a.model.clone();
    cfg.ldconfig = a.ldconfig.clone();
    cfg.ldconfig_via = a.ldconfig_via.clone();
    if let Some(arch) = a.arch {
        cfg.arch = match arch {
            ArchArg::Amd64 => Arch::Amd64,
            ArchArg::Arm64 => Arch::Arm64,
        };
    }
    cfg.imex_channels = a.imex_channels;
    cfg.gated = gpuctk_mockhost::GatedDevices {
        gds: a.gds,
        mofed: a.mofed,
        gdrcopy: a.gdrcopy,
        nvswitches: a.nvswitches,
    };
    for m in &a.mig {
        cfg.mig
            .push(gpuctk_mockhost::parse_mig_arg(m).map_err(|e| anyhow!("--mig: {e}"))?);
    }
    Ok(cfg)
}

pub fn create(a: MockCreateArgs) -> anyhow::Result<ExitCode> {
    // Neither Jetson's iGPU nor WSL2's GPU-PV has MIG: refuse rather than ignore the flag.
    if !a.mig.is_empty() && matches!(a.layout, LayoutArg::Tegra | LayoutArg::Wsl) {
        anyhow::bail!("--mig: not with --layout tegra or wsl (they have no MIG); drop one of them");
    }
    if matches!(a.layout, LayoutArg::Tegra) {
        return create_tegra(&a);
    }
    if matches!(a.layout, LayoutArg::Wsl) {
        return create_wsl(&a);
    }
    let cfg = host_config(&a)?;
    let host = gpuctk_mockhost::create_host(&a.dir, &cfg)
        .with_context(|| format!("mock-host create {}", a.dir.display()))?;
    println!(
        "mock GPU host in {}: driver {} (CUDA {}), {} x {}, layout {}, {}",
        host.root.display(),
        host.driver_version,
        host.cuda_version,
        host.gpus.len(),
        host.model,
        host.layout,
        host.arch
    );
    for g in host.gpus.iter().filter(|g| g.mig_enabled()) {
        let profiles: Vec<&str> = g.mig.iter().map(|m| m.profile.as_str()).collect();
        println!("GPU {} in MIG mode: {}", g.index, profiles.join(", "));
    }
    println!(
        "use: --driver-root {} --dev-root {} --proc-root {}",
        host.driver_root.display(),
        host.dev_root.display(),
        host.proc_root.display()
    );
    Ok(ExitCode::SUCCESS)
}

pub fn rootfs(a: MockRootfsArgs) -> anyhow::Result<ExitCode> {
    let cfg = RootfsConfig {
        busybox: a.busybox.clone(),
        ldconfig: a.ldconfig.clone(),
    };
    gpuctk_mockhost::create_rootfs(&a.dir, &cfg)
        .with_context(|| format!("mock-host rootfs {}", a.dir.display()))?;
    println!(
        "container rootfs in {} (probe: /usr/bin/gpuctk-probe)",
        a.dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `mock-host create --layout tegra`: a Jetson, with `mock-host.json` naming its roots.
fn create_tegra(a: &MockCreateArgs) -> anyhow::Result<ExitCode> {
    let host = gpuctk_mockhost::create_tegra_host(&a.dir)
        .with_context(|| format!("mock-host create {}", a.dir.display()))?;
    let manifest = serde_json::json!({
        "layout": "tegra",
        "driver_root": host.root,
        "dev_root": host.root,
        "proc_root": host.proc_root,
        "csv_dir": host.csv_dir,
        "gpus": [],
    });
    std::fs::write(
        host.root.join(gpuctk_mockhost::HOST_JSON),
        serde_json::to_vec_pretty(&manifest)?,
    )
    .with_context(|| format!("mock-host create {}: write the manifest", a.dir.display()))?;
    println!(
        "mock Jetson host in {}: L4T driver {}, CSV files in {}",
        host.root.display(),
        gpuctk_mockhost::TEGRA_DRIVER_VERSION,
        host.csv_dir.display()
    );
    println!(
        "use: --driver-root {} --dev-root {} --proc-root {}",
        host.root.display(),
        host.root.display(),
        host.proc_root.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `mock-host create --layout wsl`: a WSL2 host, with `mock-host.json` naming its roots.
fn create_wsl(a: &MockCreateArgs) -> anyhow::Result<ExitCode> {
    let host = gpuctk_mockhost::create_wsl_host(&a.dir)
        .with_context(|| format!("mock-host create {}", a.dir.display()))?;
    let manifest = serde_json::json!({
        "layout": "wsl",
        "driver_root": host.root,
        "dev_root": host.root,
        "proc_root": host.proc_root,
        "driver_store": gpuctk_mockhost::WSL_STORE_DIR,
        "gpus": [],
    });
    std::fs::write(
        host.root.join(gpuctk_mockhost::HOST_JSON),
        serde_json::to_vec_pretty(&manifest)?,
    )
    .with_context(|| format!("mock-host create {}: write the manifest", a.dir.display()))?;
    println!(
        "mock WSL2 host in {}: Windows driver {}, driver store {}",
        host.root.display(),
        gpuctk_mockhost::WSL_DRIVER_VERSION,
        gpuctk_mockhost::WSL_STORE_DIR
    );
    println!(
        "use: --driver-root {} --dev-root {} --proc-root {}",
        host.root.display(),
        host.root.display(),
        host.proc_root.display()
    );
    Ok(ExitCode::SUCCESS)
}
