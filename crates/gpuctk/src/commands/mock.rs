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
    Ok(cfg)
}

pub fn create(a: MockCreateArgs) -> anyhow::Result<ExitCode> {
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
