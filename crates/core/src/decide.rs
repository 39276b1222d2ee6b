//! The one decision every delivery (the shim, the legacy prestart hook, `nvidia-container-cli`)
//! takes for a gated [`Request`]: leave the container alone, add the prestart hook, or inject
//! these edits and in-root operations. Routing by mode, resolving CDI names, judging a static
//! spec stale and falling back to just-in-time edits all happen here, so no delivery chooses on
//! its own.
//!
//! Still pure: what the host has is asked of a [`HostView`] the delivery implements with
//! `gpuctk-host` (discovery, procfs, the spec dirs), and only for the route taken, so a static
//! spec costs no discovery and a container that asks for nothing costs no IO at all.

use gpuctk_cdi::registry::{Registry, ResolveError};
use gpuctk_cdi::spec::ContainerEdits;
use gpuctk_host::mig::{MigDevice, MigError};
use gpuctk_host::{
    CapsError, DeviceNode, DiscoverError, DriverVersion, Inventory, MigCapability, VersionFileError,
};

use crate::ops::InRootOp;
use crate::request::{Delivery, DeviceId, Devices, Request};
use crate::require::{self, DeviceFacts, Facts, RequireError, Version};
use crate::route::{route, stale_reason, Mode, Route, RouteError};
use crate::select::{select_gpus, SelectError};
use crate::spec::spec_driver_version;
use crate::{plan, PlanOptions};

/// What the decision may ask of the host; each method is called only when the route needs it.
pub trait HostView {
    /// Discovery of the driver and GPUs, for just-in-time edits; with `graphics` false the
    /// caller needs nothing that only `graphics` or `display` selects (DRM nodes, the EGL and
    /// Vulkan files, the Xorg modules), and discovery may leave them out.
    fn inventory(&mut self, graphics: bool) -> Result<Inventory, DiscoverError>;
    /// The CDI specs in the spec dirs that may define devices of these vendors, to resolve
    /// `names` (qualified device names) with: a registry may hold the edits of those devices
    /// only (`Registry::from_cached`).
    fn registry(&mut self, vendors: &[&str], names: &[&str]) -> Registry;
    /// The running driver's version (procfs), to tell a stale static spec: `None` without
    /// the version file; an error naming it where it is there but says no version.
    fn running_driver(&mut self) -> Result<Option<DriverVersion>, VersionFileError>;
    /// The first of these host paths (each with what it is) that is gone, as "what path".
    fn first_missing(&mut self, paths: &[(&str, &str)]) -> Option<String>;
    /// A remark worth a line in the log (a spec file that failed to load, a stale spec).
    fn warn(&mut self, msg: &str);
    /// The CUDA version of the image's forward-compat `libcuda`, when `enable-cuda-compat`
    /// would use it on a host with this driver and CUDA version; `None` when the image has
    /// none, it is not usable here, or the delivery cannot see the image.
    fn image_compat_cuda(
        &mut self,
        driver: &DriverVersion,
        cuda: Option<&Version>,
    ) -> Option<Version>;
    /// The host's MIG capabilities directory and the node that grants `cap`.
    fn mig_capability(
        &mut self,
        cap: MigCapability,
    ) -> Result<(std::path::PathBuf, DeviceNode), CapsError>;
    /// The node of IMEX channel `id`.
    fn imex_channel(&mut self, id: u32) -> Result<DeviceNode, CapsError>;
    /// The edits of gated `mode` on this host ([`crate::gated::gated_edits`]): empty when the
    /// host has none of its nodes.
    fn gated(&mut self, mode: gpuctk_host::GatedMode) -> std::io::Result<ContainerEdits>;
    /// The MIG devices of `inv`'s GPUs (procfs), with the UUIDs NVML's recorded answers give;
    /// asked only when a request names a MIG device or `all`.
    fn mig_devices(&mut self, inv: &Inventory) -> Result<Vec<MigDevice>, MigError>;
    /// What NVML said of `inv`'s GPUs, as `cdi generate` or `info` recorded it (each GPU's
    /// compute capability and brand, for `arch` and `brand` requirements); `None` when nothing
    /// current is recorded. Never NVML itself.
    fn recorded_nvml(&mut self, inv: &Inventory) -> Option<gpuctk_host::nvml::NvmlInfo>;
}

/// The configuration the decision depends on.
#[derive(Debug, Clone)]
pub struct Settings<'a> {
    /// `[nvidia-container-runtime] mode`.
    pub mode: Mode,
    /// `modes.cdi.default-kind`.
    pub default_kind: &'a str,
    /// The hook binary written into hook entries.
    pub hook_path: &'a str,
    /// Who delivers: the prestart hook itself serves a legacy-mode request as `auto` does.
    pub delivery: Delivery,
    /// Plan the `enable-cuda-compat` operation (off with `cuda-compat-mode = "disabled"` or
    /// `features.disable-cuda-compat-lib-hook`).
    pub cuda_compat: bool,
}

/// Where the edits came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Planned from discovery.
    JustInTime,
    /// Resolved from static CDI specs.
    Registry,
    /// Planned from discovery because the static spec no longer fits (the reason).
    StaleFallback(String),
}

/// Edits to inject.
#[derive(Debug, Clone, PartialEq)]
pub struct Injection {
    /// The CDI container edits, hooks included (encoded from `ops` for just-in-time edits, as
    /// the spec has them for static ones).
    pub edits: ContainerEdits,
    /// Our in-root operations, typed, each with the index of the hook in `edits.hooks` that
    /// encodes it. Empty for static specs: their hooks are text, for the delivery to decode.
    pub ops: Vec<(usize, InRootOp)>,
    /// Where they came from.
    pub origin: Origin,
}

/// What to do with the container.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Nothing was asked: leave it exactly as it is.
    Untouched,
    /// Legacy mode: add the prestart hook, which decides again in the live container.
    PrestartHook,
    /// Inject these edits.
    Inject(Box<Injection>),
}

/// Why a request cannot be served. Each message names the request's source and the fix.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    /// The request mixes forms no route serves.
    #[error(transparent)]
    Route(#[from] RouteError),
    /// CDI names that no spec defines.
    #[error("{from}: {source}")]
    Unresolved {
        /// Where the request came from.
        from: String,
        /// The names that failed.
        source: ResolveError,
    },
    /// The static spec is stale and the mode forbids planning instead.
    #[error("{why}; run `gpuctk cdi generate` to refresh it")]
    Stale {
        /// Why it is stale.
        why: String,
    },
    /// The static spec is stale and names devices only it defines.
    #[error(
        "{why}, and {from} names devices gpuctk cannot plan itself; run `gpuctk cdi generate`"
    )]
    StaleNoFallback {
        /// Why it is stale.
        why: String,
        /// Where the request came from.
        from: String,
    },
    /// Discovery failed.
    #[error(transparent)]
    Discover(#[from] DiscoverError),
    /// A MIG capability or IMEX channel the host does not have.
    #[error(transparent)]
    Caps(#[from] CapsError),
    /// A gated mode's nodes cannot be listed.
    #[error("{var}=enabled: {source}")]
    Gated {
        /// The variable that asked.
        var: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The global MIG capabilities with MIG devices selected, which libnvidia-container refuses.
    #[error("{from}: {item} is a MIG device; the global MIG capabilities (MIG config, MIG monitor) go with whole GPUs only: select the GPU, or drop the MIG capability request")]
    MigWithMigDevices {
        /// Where the device request came from.
        from: String,
        /// The MIG device.
        item: String,
    },
    /// A device id names no GPU here.
    #[error(transparent)]
    Select(#[from] SelectError),
    /// A MIG id names no MIG device here.
    #[error(transparent)]
    MigSelect(#[from] crate::mig::MigSelectError),
    /// The MIG devices could not be read.
    #[error(transparent)]
    MigDiscover(#[from] MigError),
    /// The image's requirements (`NVIDIA_REQUIRE_*`, `CUDA_VERSION`, `--require`) are not met,
    /// or malformed.
    #[error(transparent)]
    Require(#[from] RequireError),
}

/// Decides for `request`.
pub fn decide(
    request: &Request,
    settings: &Settings<'_>,
    host: &mut dyn HostView,
) -> Result<Decision, DecideError> {
    let mode = match (settings.mode, settings.delivery) {
        (Mode::Legacy, Delivery::PrestartHook) => Mode::Auto,
        (m, _) => m,
    };
    let from = request.source.to_string();
    let (names, fallback) = match route(request, mode, settings.default_kind)? {
        Route::Untouched => return Ok(Decision::Untouched),
        Route::PrestartHook => return Ok(Decision::PrestartHook),
        Route::JustInTime(ids) => {
            return jit(request, &ids, settings, host, Origin::JustInTime)
                .map(|i| Decision::Inject(Box::new(i)))
        }
        Route::Registry { names, fallback } => (names, fallback),
    };
    // Only specs that can define the requested kinds are parsed (a hostile file of another
    // vendor in a shared spec dir must not slow this container down).
    let mut vendors: Vec<&str> = names.iter().map(|n| n.vendor.as_str()).collect();
    vendors.sort_unstable();
    vendors.dedup();
    // The registry resolves names as the CDI library does, as text.
    let texts: Vec<String> = names.iter().map(ToString::to_string).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let reg = host.registry(&vendors, &refs);
    for (p, e) in reg.errors() {
        host.warn(&format!("{}: {e}", p.display()));
    }
    let resolved = reg
        .resolve(&refs)
        .map_err(|source| DecideError::Unresolved {
            from: from.clone(),
            source,
        })?;
    // The running driver, read once: for staleness and for the requirements.
    let running = host.running_driver().map_err(DiscoverError::from)?;
    match stale(
        &reg,
        &resolved.spec_paths,
        &resolved.edits,
        running.as_ref().map(DriverVersion::as_str),
        host,
    ) {
        None => {
            // The CUDA version the running driver provides, without discovery: `None` when it
            // is not known exactly.
            let cuda = running
                .as_ref()
                .and_then(|d| gpuctk_host::cuda_version_known(d.major()))
                .map(Version::from);
            check_requirements(
                request,
                settings,
                host,
                running.as_ref(),
                cuda,
                resolved
                    .devices
                    .iter()
                    .map(|id| DeviceFacts {
                        id: id.clone(),
                        arch: None,
                        brand: None,
                    })
                    .collect(),
            )?;
            let mut edits = resolved.edits;
            edits.append(&extra_edits(
                request,
                settings,
                host,
                resolved.devices.len(),
            )?);
            Ok(Decision::Inject(Box::new(Injection {
                edits,
                ops: Vec::new(),
                origin: Origin::Registry,
            })))
        }
        Some(why) if mode == Mode::Auto => {
            host.warn(&format!(
                "{why}; using just-in-time edits instead (refresh it with `gpuctk cdi generate`)"
            ));
            let Some(mapped) = fallback else {
                return Err(DecideError::StaleNoFallback { why, from });
            };
            jit(request, &mapped, settings, host, Origin::StaleFallback(why))
                .map(|i| Decision::Inject(Box::new(i)))
        }
        Some(why) => Err(DecideError::Stale { why }),
    }
}

/// Just-in-time edits for `ids` (empty: the driver only) from discovery.
fn jit(
    request: &Request,
    ids: &[DeviceId],
    settings: &Settings<'_>,
    host: &mut dyn HostView,
    origin: Origin,
) -> Result<Injection, DecideError> {
    let inv = host.inventory(crate::plan::wants_graphics(&request.capabilities))?;
    for w in &inv.warnings {
        host.warn(w);
    }
    if !request.mig.is_empty() && settings.delivery == Delivery::PrestartHook {
        if let Some(mig) = ids
            .iter()
            .find(|i| matches!(i, DeviceId::Mig(..) | DeviceId::MigUuid(_)))
        {
            return Err(DecideError::MigWithMigDevices {
                from: request.source.to_string(),
                item: mig.to_string(),
            });
        }
    }
    // MIG ids select MIG devices (and their parents' nodes), as libnvidia-container does;
    // `all` is every GPU and every MIG device.
    let (mig_ids, gpu_ids): (Vec<DeviceId>, Vec<DeviceId>) =
        ids.iter().cloned().partition(crate::mig::is_mig_id);
    let selected = match &request.devices {
        Devices::Ids(_) => select_gpus(&inv, &gpu_ids, &request.source.to_string())?,
        Devices::NoGpus | Devices::Unrequested => Vec::new(),
    };
    let mut mig_edits = ContainerEdits::default();
    let mut mig_links = Vec::new();
    let mut mig_parents: Vec<u32> = Vec::new();
    let wants_all = ids.iter().any(|i| matches!(i, DeviceId::All));
    if matches!(request.devices, Devices::Ids(_)) && (!mig_ids.is_empty() || wants_all) {
        let migs = crate::mig::plan_mig(&inv, &host.mig_devices(&inv)?, settings.hook_path);
        let mut chosen: Vec<&crate::mig::MigEdits> = Vec::new();
        for id in &mig_ids {
            chosen.push(crate::mig::select_mig(
                &inv,
                &migs,
                id,
                &request.source.to_string(),
            )?);
        }
        if wants_all {
            chosen.extend(migs.iter());
        }
        // The global MIG capabilities bind the whole capabilities folder instead of each
        // device's files (libnvidia-container: "unless mig-config/monitor=all").
        let proc_view = settings.delivery == Delivery::PrestartHook && request.mig.is_empty();
        let mut given: Vec<(u32, u32)> = Vec::new();
        for m in chosen {
            if given.contains(&(m.gpu, m.index)) {
                continue;
            }
            given.push((m.gpu, m.index));
            if !mig_parents.contains(&m.gpu) {
                mig_parents.push(m.gpu);
            }
            mig_edits.append(&m.edits);
            // A graphics profile's DRM nodes as a whole GPU's, for `graphics` or `display`; not
            // through the prestart hook (NVIDIA's legacy graphics modifier matches GPUs only).
            if settings.delivery != Delivery::PrestartHook
                && crate::plan::wants_graphics(&request.capabilities)
            {
                let mut g = m.graphics.clone();
                g.hooks.clear();
                mig_edits.append(&g);
                mig_links.extend(m.links.iter().cloned());
            }
            if proc_view {
                mig_edits.mounts.extend(m.proc_mounts.iter().cloned());
            }
        }
    }
    // Parents not selected whole.
    mig_parents.retain(|p| !selected.contains(p));
    let mut p = plan(
        &inv,
        &PlanOptions {
            hook_path: settings.hook_path.to_string(),
            capabilities: request.capabilities.clone(),
        },
    );
    if !settings.cuda_compat {
        p.retain_ops(
            |o| !matches!(o, InRootOp::EnableCudaCompat { .. }),
            settings.hook_path,
        );
    }
    let facts = device_facts(
        request,
        host,
        &inv,
        selected.iter().chain(mig_parents.iter()),
    );
    check_requirements(
        request,
        settings,
        host,
        Some(&inv.driver_version),
        inv.cuda_version.map(Version::from),
        facts,
    )?;
    let mut edits = p.common;
    let mut links = Vec::new();
    for idx in &selected {
        if let Some(g) = p.gpus.iter().find(|g| g.index == *idx) {
            // Its by-path link hook becomes one typed operation for all GPUs, below.
            let mut e = g.edits.clone();
            e.hooks.clear();
            edits.append(&e);
            links.extend(g.links.iter().cloned());
        }
    }
    for l in mig_links {
        if !links.contains(&l) {
            links.push(l);
        }
    }
    if !mig_edits.device_nodes.is_empty() {
        edits.append(&mig_edits);
        // A parent given whole and through its MIG devices, or shared by several, once.
        crate::plan::dedup_edits(&mut edits);
    }
    edits.append(&extra_edits(
        request,
        settings,
        host,
        selected.len() + mig_parents.len(),
    )?);
    // The common hooks keep their indices; the links' hook comes after them.
    let mut ops: Vec<(usize, InRootOp)> = p.ops.into_iter().enumerate().collect();
    if !links.is_empty() {
        let op = InRootOp::CreateSymlinks { links };
        ops.push((edits.hooks.len(), op.clone()));
        edits.hooks.push(op.to_hook(settings.hook_path));
    }
    Ok(Injection { edits, ops, origin })
}

/// The edits for the MIG capabilities and IMEX channels `request` was granted, in a container
/// that gets `gpus` GPUs. The MIG capabilities are served by the prestart hook only (NVIDIA's
/// toolkit reads `NVIDIA_MIG_*_DEVICES` in legacy mode only) and with at least one GPU, as
/// libnvidia-container gives them; IMEX channels by every delivery.
fn extra_edits(
    request: &Request,
    settings: &Settings<'_>,
    host: &mut dyn HostView,
    gpus: usize,
) -> Result<ContainerEdits, DecideError> {
    let mut edits = ContainerEdits::default();
    if !request.mig.is_empty() {
        let names: Vec<&str> = request
            .mig
            .iter()
            .map(|c| match c {
                MigCapability::Config => "MIG config",
                MigCapability::Monitor => "MIG monitor",
            })
            .collect();
        if settings.delivery == Delivery::Shim {
            host.warn(&format!(
                "{} ignored: served in legacy mode only (by the prestart hook), as NVIDIA's toolkit does",
                names.join(", ")
            ));
        } else if gpus == 0 {
            host.warn(&format!(
                "{} ignored: no GPU selected (libnvidia-container gives them with a GPU only)",
                names.join(", ")
            ));
        } else {
            let mut dir = std::path::PathBuf::new();
            let mut nodes = Vec::new();
            for cap in &request.mig {
                let (d, n) = host.mig_capability(*cap)?;
                dir = d;
                nodes.push(n);
            }
            edits.append(&crate::plan::mig_edits(&dir, &nodes));
        }
    }
    if !request.imex_channels.is_empty() {
        let nodes = request
            .imex_channels
            .iter()
            .map(|id| host.imex_channel(*id))
            .collect::<Result<Vec<_>, _>>()?;
        edits.append(&crate::plan::imex_edits(&nodes));
    }
    // NVIDIA's gated modes, with a device request only (its modifiers add nothing without).
    if request.wants_gpus() {
        for m in &request.gated {
            let e = host.gated(*m).map_err(|source| DecideError::Gated {
                var: m.env_var(),
                source,
            })?;
            if e.device_nodes.is_empty() {
                host.warn(&format!(
                    "{}=enabled: this host has no {}; nothing added",
                    m.env_var(),
                    m.what()
                ));
            }
            edits.append(&e);
        }
    }
    Ok(edits)
}

/// Checks the request's requirements, if it has any, against the driver, its CUDA version and
/// the selected devices (`devices`, as messages name them; arch and brand unknown without
/// NVML), counting the image's compat `libcuda` when the compat operation is planned and it
/// would be used on this host.
fn check_requirements(
    request: &Request,
    settings: &Settings<'_>,
    host: &mut dyn HostView,
    driver: Option<&DriverVersion>,
    cuda: Option<Version>,
    devices: Vec<DeviceFacts>,
) -> Result<(), DecideError> {
    if request.active_requirements().is_empty() {
        return Ok(());
    }
    let compat_cuda = match driver {
        Some(d) if settings.cuda_compat => host.image_compat_cuda(d, cuda.as_ref()),
        _ => None,
    };
    let facts = Facts {
        cuda,
        driver: driver.and_then(|d| d.as_str().parse().ok()),
        compat_cuda,
        devices,
    };
    for w in require::check(request.active_requirements(), &facts)? {
        host.warn(&w);
    }
    Ok(())
}

/// The facts of the GPUs `indices` of `inv` (a MIG device's: its parent's), with the compute
/// capability and brand NVML's recorded answers give; asked only when `request` has
/// requirements, since reading the record is IO the create path otherwise skips.
fn device_facts<'a>(
    request: &Request,
    host: &mut dyn HostView,
    inv: &Inventory,
    indices: impl Iterator<Item = &'a u32>,
) -> Vec<DeviceFacts> {
    let indices: Vec<u32> = indices.copied().collect();
    let nvml = if request.active_requirements().is_empty() || indices.is_empty() {
        None
    } else {
        host.recorded_nvml(inv)
    };
    indices
        .into_iter()
        .map(|i| {
            let g = inv
                .gpus
                .iter()
                .find(|g| g.index == i)
                .and_then(|g| nvml.as_ref()?.gpus.iter().find(|n| n.minor == g.minor));
            DeviceFacts {
                id: format!("GPU {i}"),
                arch: g
                    .and_then(|g| g.compute_capability.as_deref())
                    .and_then(|c| c.parse().ok()),
                brand: g.and_then(|g| g.brand.clone()),
            }
        })
        .collect()
}

/// Whether the static specs used still fit this host ([`stale_reason`]).
fn stale(
    reg: &Registry,
    specs: &[std::path::PathBuf],
    edits: &ContainerEdits,
    running: Option<&str>,
    host: &mut dyn HostView,
) -> Option<String> {
    let made_for: Vec<(String, Option<String>)> = specs
        .iter()
        .filter_map(|p| {
            let spec = reg.spec_for_path(p)?;
            Some((p.display().to_string(), spec_driver_version(spec)))
        })
        .collect();
    let paths: Vec<(&str, &str)> = edits
        .mounts
        .iter()
        .filter(|m| m.host_path.starts_with('/'))
        .map(|m| ("mount source", m.host_path.as_str()))
        .chain(
            edits
                .device_nodes
                .iter()
                .map(|n| ("device node", n.host_path.as_deref().unwrap_or(&n.path))),
        )
        .collect();
    let missing = host.first_missing(&paths);
    stale_reason(&made_for, running, missing.as_deref())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use gpuctk_cdi::registry::LoadedSpec;
    use gpuctk_cdi::spec::Spec;
    use gpuctk_host::{Capability, DeviceNode, DriverVersion, Gpu, Library, Roots};

    use super::*;
    use crate::request::Source;
    use crate::CapabilitySet;

    const KIND: &str = "nvidia.com/gpu";

    /// A host with two GPUs and libcuda, and one static spec made for `spec_driver`; counts
    /// what the decision asked.
    struct Fake {
        running: &'static str,
        spec_driver: &'static str,
        missing: Option<&'static str>,
        discovered: usize,
        registries: usize,
        warnings: Vec<String>,
        compat: Option<&'static str>,
    }

    fn fake() -> Fake {
        Fake {
            running: "570.124.06",
            spec_driver: "570.124.06",
            missing: None,
            discovered: 0,
            registries: 0,
            warnings: Vec::new(),
            compat: None,
        }
    }

    fn node(path: &str, minor: u32) -> DeviceNode {
        DeviceNode {
            path: path.into(),
            host_path: PathBuf::from(path),
            major: 195,
            minor,
            mode: 0o666,
            gid: 0,
        }
    }

    impl HostView for Fake {
        fn inventory(&mut self, _graphics: bool) -> Result<Inventory, DiscoverError> {
            self.discovered += 1;
            Ok(Inventory {
                roots: Roots::default(),
                driver_version: DriverVersion::parse(self.running).unwrap(),
                cuda_version: Some(gpuctk_host::CudaVersion {
                    major: 12,
                    minor: 8,
                }),
                gpus: (0..2)
                    .map(|i| Gpu {
                        index: i,
                        minor: i,
                        uuid: format!("GPU-{i}"),
                        bus_id: format!("0000:0{i}:00.0"),
                        model: "Mock".into(),
                        node: Some(node(&format!("/dev/nvidia{i}"), i)),
                        drm: Vec::new(),
                        drm_links: Vec::new(),
                    })
                    .collect(),
                control_nodes: vec![node("/dev/nvidiactl", 255)],
                libraries: vec![Library {
                    name: "libcuda.so".into(),
                    capability: Capability::Compute,
                    host_path: PathBuf::from("/usr/lib/x86_64-linux-gnu/libcuda.so.570.124.06"),
                    path: "/usr/lib/x86_64-linux-gnu/libcuda.so.570.124.06".into(),
                    soname: Some("libcuda.so.1".into()),
                    is_32bit: false,
                    has_dev_link: false,
                    elf: None,
                }],
                binaries: Vec::new(),
                firmware: Vec::new(),
                ipc: Vec::new(),
                configs: Vec::new(),
                library_source: "test".into(),
                warnings: Vec::new(),
            })
        }
        fn registry(&mut self, _vendors: &[&str], _names: &[&str]) -> Registry {
            self.registries += 1;
            let yaml = format!(
                r#"cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
containerEdits:
  deviceNodes:
  - path: /dev/nvidiactl
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args: [nvidia-cdi-hook, enable-cuda-compat, --host-driver-version={}]
"#,
                self.spec_driver
            );
            let path = PathBuf::from("/etc/cdi/nvidia.yaml");
            let spec = Spec::from_bytes_valid(&path, yaml.as_bytes()).unwrap();
            Registry::from_specs(vec![LoadedSpec {
                path,
                priority: 0,
                spec,
            }])
        }
        fn running_driver(&mut self) -> Result<Option<DriverVersion>, VersionFileError> {
            // `running` is what the version file says: "" for no file, else a version.
            if self.running.is_empty() {
                return Ok(None);
            }
            DriverVersion::parse(self.running)
                .map(Some)
                .ok_or_else(|| VersionFileError {
                    file: "/proc/driver/nvidia/version".into(),
                    why: format!("no version in {:?}", self.running),
                })
        }
        fn first_missing(&mut self, _paths: &[(&str, &str)]) -> Option<String> {
            self.missing.map(|p| format!("device node {p}"))
        }
        fn warn(&mut self, msg: &str) {
            self.warnings.push(msg.into());
        }
        fn image_compat_cuda(
            &mut self,
            _driver: &DriverVersion,
            _cuda: Option<&Version>,
        ) -> Option<Version> {
            self.compat.map(|c| c.parse().unwrap())
        }
        fn mig_devices(&mut self, _inv: &Inventory) -> Result<Vec<MigDevice>, MigError> {
            Ok(Vec::new())
        }
        fn recorded_nvml(&mut self, _inv: &Inventory) -> Option<gpuctk_host::nvml::NvmlInfo> {
            None
        }
        fn mig_capability(
            &mut self,
            cap: MigCapability,
        ) -> Result<(PathBuf, DeviceNode), CapsError> {
            let minor = match cap {
                MigCapability::Config => 1,
                MigCapability::Monitor => 2,
            };
            let mut n = node(&format!("/dev/nvidia-caps/nvidia-cap{minor}"), minor);
            n.major = 237;
            Ok((PathBuf::from("/proc/driver/nvidia/capabilities"), n))
        }
        fn imex_channel(&mut self, id: u32) -> Result<DeviceNode, CapsError> {
            if id > 7 {
                return Err(CapsError::ChannelRange { id });
            }
            let mut n = node(&format!("/dev/nvidia-caps-imex-channels/channel{id}"), id);
            n.major = 238;
            Ok(n)
        }
        fn gated(&mut self, mode: gpuctk_host::GatedMode) -> std::io::Result<ContainerEdits> {
            if mode != gpuctk_host::GatedMode::Gds {
                return Ok(ContainerEdits::default());
            }
            let mut n = node("/dev/nvidia-fs0", 0);
            n.major = 239;
            Ok(crate::gated::gated_edits(&[n], &[]))
        }
    }

    /// The global MIG capabilities: the prestart hook gives the proc directory and the nodes
    /// with a GPU; the shim (NVIDIA serves them in legacy mode only) and a GPU-less container
    /// get a warning; with a MIG device selected they are refused. IMEX channels go everywhere.
    #[test]
    fn mig_capabilities_and_imex_channels() {
        let mut r = req(Devices::Ids(vec![DeviceId::Index(0)]));
        r.mig = vec![MigCapability::Config, MigCapability::Monitor];
        r.imex_channels = vec![3];
        let mut h = fake();
        let d = decide(&r, &settings(Mode::Auto, Delivery::PrestartHook), &mut h).unwrap();
        assert_eq!(
            nodes(&d),
            [
                "/dev/nvidiactl",
                "/dev/nvidia0",
                "/dev/nvidia-caps/nvidia-cap1",
                "/dev/nvidia-caps/nvidia-cap2",
                "/dev/nvidia-caps-imex-channels/channel3"
            ]
        );
        let Decision::Inject(i) = &d else { panic!() };
        let m = i.edits.mounts.last().unwrap();
        assert_eq!(m.container_path, "/proc/driver/nvidia/capabilities");
        assert!(m.options.iter().any(|o| o == "ro"));

        let mut h = fake();
        let d = decide(&r, &settings(Mode::Auto, Delivery::Shim), &mut h).unwrap();
        assert_eq!(
            nodes(&d),
            [
                "/dev/nvidiactl",
                "/dev/nvidia0",
                "/dev/nvidia-caps-imex-channels/channel3"
            ]
        );
        assert!(
            h.warnings[0].contains("MIG config, MIG monitor ignored: served in legacy mode only"),
            "{:?}",
            h.warnings
        );

        let mut none = r.clone();
        none.devices = Devices::NoGpus;
        let mut h = fake();
        let d = decide(&none, &settings(Mode::Auto, Delivery::PrestartHook), &mut h).unwrap();
        assert!(!nodes(&d).iter().any(|n| n.contains("nvidia-cap1")));
        assert!(
            h.warnings[0].contains("no GPU selected"),
            "{:?}",
            h.warnings
        );

        let mut mig = r.clone();
        mig.devices = Devices::Ids(vec![DeviceId::Index(0), DeviceId::Mig(0, 1)]);
        let e = decide(
            &mig,
            &settings(Mode::Auto, Delivery::PrestartHook),
            &mut fake(),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("NVIDIA_VISIBLE_DEVICES: 0:1 is a MIG device; the global MIG"),
            "{e}"
        );

        let mut bad = r.clone();
        bad.imex_channels = vec![9];
        let e = decide(&bad, &settings(Mode::Auto, Delivery::Shim), &mut fake()).unwrap_err();
        assert!(e.to_string().contains("IMEX channel 9"), "{e}");
    }

    /// `NVIDIA_GDS=enabled` adds the host's nodes of the mode with a device request (`none`
    /// too), nothing without one; a mode the host has no node of is a warning.
    #[test]
    fn gated_modes_come_with_a_device_request() {
        let nodes = |d: &Decision| match d {
            Decision::Inject(i) => i
                .edits
                .device_nodes
                .iter()
                .map(|n| n.path.clone())
                .collect::<Vec<_>>(),
            _ => Vec::new(),
        };
        let mut r = req(Devices::NoGpus);
        r.gated = vec![gpuctk_host::GatedMode::Gds, gpuctk_host::GatedMode::Mofed];
        let mut host = fake();
        let d = decide(&r, &settings(Mode::Auto, Delivery::Shim), &mut host).unwrap();
        assert!(nodes(&d).contains(&"/dev/nvidia-fs0".to_string()), "{d:?}");
        assert!(
            host.warnings
                .iter()
                .any(|w| w.starts_with("NVIDIA_MOFED=enabled")),
            "{:?}",
            host.warnings
        );
        let mut r = req(Devices::Unrequested);
        r.gated = vec![gpuctk_host::GatedMode::Gds];
        let d = decide(&r, &settings(Mode::Auto, Delivery::Shim), &mut fake()).unwrap();
        assert!(!nodes(&d).contains(&"/dev/nvidia-fs0".to_string()), "{d:?}");
    }

    fn req(devices: Devices) -> Request {
        Request {
            devices,
            source: Source::Env("NVIDIA_VISIBLE_DEVICES".into()),
            capabilities: CapabilitySet::default_set(),
            requirements: Vec::new(),
            disable_require: false,
            legacy_image: false,
            privileged: false,
            mig: Vec::new(),
            imex_channels: Vec::new(),
            gated: Vec::new(),
            ignored: Vec::new(),
        }
    }

    fn settings(mode: Mode, delivery: Delivery) -> Settings<'static> {
        Settings {
            mode,
            default_kind: KIND,
            hook_path: "/usr/bin/nvidia-cdi-hook",
            delivery,
            cuda_compat: true,
        }
    }

    fn nodes(d: &Decision) -> Vec<String> {
        match d {
            Decision::Inject(i) => i
                .edits
                .device_nodes
                .iter()
                .map(|n| n.path.clone())
                .collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn nothing_asked_costs_nothing() {
        for mode in [Mode::Auto, Mode::Cdi, Mode::JitCdi, Mode::Legacy] {
            let mut h = fake();
            let d = decide(
                &req(Devices::Unrequested),
                &settings(mode, Delivery::Shim),
                &mut h,
            )
            .unwrap();
            assert_eq!(d, Decision::Untouched);
            assert_eq!((h.discovered, h.registries), (0, 0));
        }
    }

    #[test]
    fn legacy_mode_adds_the_hook_which_then_serves_as_auto() {
        let r = req(Devices::Ids(vec![DeviceId::Index(1)]));
        let mut h = fake();
        let d = decide(&r, &settings(Mode::Legacy, Delivery::Shim), &mut h).unwrap();
        assert_eq!(d, Decision::PrestartHook);
        assert_eq!(h.discovered, 0);
        let d = decide(&r, &settings(Mode::Legacy, Delivery::PrestartHook), &mut h).unwrap();
        assert_eq!(nodes(&d), ["/dev/nvidiactl", "/dev/nvidia1"]);
    }

    #[test]
    fn just_in_time_ops_are_typed_and_match_their_hooks() {
        let mut h = fake();
        let d = decide(
            &req(Devices::Ids(vec![DeviceId::Index(0)])),
            &settings(Mode::Auto, Delivery::Shim),
            &mut h,
        )
        .unwrap();
        let Decision::Inject(i) = d else {
            panic!("{d:?}")
        };
        assert_eq!(i.origin, Origin::JustInTime);
        assert_eq!((h.discovered, h.registries), (1, 0));
        // create-symlinks, enable-cuda-compat, update-ldcache and NVIDIA 1.20's two guards.
        assert_eq!(i.ops.len(), 5, "{:?}", i.ops);
        for (idx, op) in &i.ops {
            assert_eq!(i.edits.hooks[*idx].args[1..], op.to_args()[..]);
        }
        assert!(matches!(
            i.ops[1].1,
            InRootOp::EnableCudaCompat { ref host_driver_version, .. }
                if host_driver_version.as_deref() == Some("570.124.06")
        ));
    }

    #[test]
    fn requirements_are_enforced_on_every_route() {
        let need = |expr: &str, devices: Devices| {
            let mut r = req(devices);
            r.requirements = vec![("NVIDIA_REQUIRE_CUDA".into(), expr.into())];
            r
        };
        let gpu0 = || Devices::Ids(vec![DeviceId::Index(0)]);
        let cdi0 = || Devices::Ids(vec![DeviceId::Cdi("nvidia.com/gpu=0".parse().unwrap())]);
        for (mode, devices) in [
            (Mode::Auto, gpu0()),
            (Mode::Auto, cdi0()),
            (Mode::Cdi, cdi0()),
        ] {
            for delivery in [Delivery::Shim, Delivery::PrestartHook] {
                let s = settings(mode, delivery);
                // The mock driver gives CUDA 12.8.
                assert!(decide(&need("cuda>=12.8", devices.clone()), &s, &mut fake()).is_ok());
                let e = decide(&need("cuda>=12.9", devices.clone()), &s, &mut fake()).unwrap_err();
                assert!(matches!(e, DecideError::Require(_)), "{e}");
                let m = e.to_string();
                assert!(
                    m.starts_with("NVIDIA_REQUIRE_CUDA: cuda>=12.9 not met"),
                    "{m}"
                );
                // The image's compat libcuda, usable here, counts.
                let mut h = fake();
                h.compat = Some("12.9");
                assert!(decide(&need("cuda>=12.9", devices.clone()), &s, &mut h).is_ok());
                // ...unless compat is turned off.
                let off = Settings {
                    cuda_compat: false,
                    ..s.clone()
                };
                assert!(decide(&need("cuda>=12.9", devices.clone()), &off, &mut h).is_err());
                // NVIDIA_DISABLE_REQUIRE (or disable-require) turns the check off.
                let mut r = need("cuda>=12.9", devices.clone());
                r.disable_require = true;
                assert!(decide(&r, &s, &mut fake()).is_ok());
                // A malformed requirement is an error that names it.
                let e = decide(&need("cuda>>12", devices.clone()), &s, &mut fake()).unwrap_err();
                assert!(e.to_string().contains("NVIDIA_REQUIRE_CUDA"), "{e}");
            }
        }
    }

    #[test]
    fn compat_can_be_turned_off() {
        let r = req(Devices::Ids(vec![DeviceId::Index(0)]));
        let s = Settings {
            cuda_compat: false,
            ..settings(Mode::Auto, Delivery::Shim)
        };
        let Decision::Inject(i) = decide(&r, &s, &mut fake()).unwrap() else {
            panic!()
        };
        assert_eq!(i.ops.len(), 4, "{:?}", i.ops);
        assert!(i.ops.iter().all(|(_, o)| o.name() != "enable-cuda-compat"));
        for (idx, op) in &i.ops {
            assert_eq!(i.edits.hooks[*idx].args[1..], op.to_args()[..]);
        }
        assert_eq!(i.edits.hooks.len(), 4);
    }

    #[test]
    fn static_spec_costs_no_discovery_and_stale_falls_back_only_in_auto() {
        let cdi = req(Devices::Ids(vec![DeviceId::Cdi(
            "nvidia.com/gpu=0".parse().unwrap(),
        )]));
        let mut h = fake();
        let d = decide(&cdi, &settings(Mode::Auto, Delivery::Shim), &mut h).unwrap();
        assert!(
            matches!(&d, Decision::Inject(i) if i.origin == Origin::Registry && i.ops.is_empty())
        );
        assert_eq!((h.discovered, h.registries), (0, 1));
        assert_eq!(nodes(&d), ["/dev/nvidiactl", "/dev/nvidia0"]);

        // Driver upgraded since the spec was generated.
        let mut h = fake();
        h.running = "575.51.03";
        let d = decide(&cdi, &settings(Mode::Auto, Delivery::Shim), &mut h).unwrap();
        assert!(
            matches!(&d, Decision::Inject(i) if matches!(&i.origin, Origin::StaleFallback(w) if w.contains("575.51.03"))),
            "{d:?}"
        );
        assert_eq!(h.discovered, 1);
        assert!(
            h.warnings.iter().any(|w| w.contains("just-in-time")),
            "{:?}",
            h.warnings
        );
        let e = decide(&cdi, &settings(Mode::Cdi, Delivery::Shim), &mut h).unwrap_err();
        assert!(e.to_string().contains("cdi generate"), "{e}");

        // A node the spec names is gone.
        let mut h = fake();
        h.missing = Some("/dev/nvidia0");
        let e = decide(&cdi, &settings(Mode::Cdi, Delivery::Shim), &mut h).unwrap_err();
        assert!(e.to_string().contains("/dev/nvidia0"), "{e}");

        // A name no spec defines.
        let mut h = fake();
        let other = req(Devices::Ids(vec![DeviceId::Cdi(
            "nvidia.com/gpu=7".parse().unwrap(),
        )]));
        let e = decide(&other, &settings(Mode::Auto, Delivery::Shim), &mut h).unwrap_err();
        assert!(matches!(e, DecideError::Unresolved { .. }), "{e}");
        assert!(e.to_string().starts_with("NVIDIA_VISIBLE_DEVICES"), "{e}");

        // A version file that names no version is an error naming it, not "no driver" (which
        // would skip the staleness check); no version file at all is no driver.
        let mut h = fake();
        h.running = "garbage";
        let e = decide(&cdi, &settings(Mode::Auto, Delivery::Shim), &mut h).unwrap_err();
        assert!(
            e.to_string().starts_with("/proc/driver/nvidia/version: "),
            "{e}"
        );
        let mut h = fake();
        h.running = "";
        let d = decide(&cdi, &settings(Mode::Auto, Delivery::Shim), &mut h).unwrap();
        assert!(matches!(&d, Decision::Inject(i) if i.origin == Origin::Registry));
    }

    #[test]
    fn mode_matrix_over_deliveries() {
        // (mode, request, delivery) -> nodes injected, or None for an error.
        let idx = |i| req(Devices::Ids(vec![DeviceId::Index(i)]));
        let cdi = |n: &str| req(Devices::Ids(vec![DeviceId::Cdi(n.parse().unwrap())]));
        let rt = cdi("runtime.nvidia.com/gpu=1");
        let cases: Vec<(Mode, Request, Option<&[&str]>)> = vec![
            (
                Mode::Auto,
                idx(1),
                Some(&["/dev/nvidiactl", "/dev/nvidia1"]),
            ),
            (
                Mode::JitCdi,
                idx(1),
                Some(&["/dev/nvidiactl", "/dev/nvidia1"]),
            ),
            // cdi mode qualifies bare ids with the default kind: only GPU 0 is in the spec.
            (Mode::Cdi, idx(0), Some(&["/dev/nvidiactl", "/dev/nvidia0"])),
            (Mode::Cdi, idx(1), None),
            (
                Mode::JitCdi,
                cdi("nvidia.com/gpu=1"),
                Some(&["/dev/nvidiactl", "/dev/nvidia1"]),
            ),
            (
                Mode::Cdi,
                rt.clone(),
                Some(&["/dev/nvidiactl", "/dev/nvidia1"]),
            ),
            (Mode::Auto, rt, Some(&["/dev/nvidiactl", "/dev/nvidia1"])),
            (Mode::Auto, req(Devices::NoGpus), Some(&["/dev/nvidiactl"])),
            (Mode::Cdi, req(Devices::NoGpus), Some(&["/dev/nvidiactl"])),
            (Mode::Auto, idx(5), None),
        ];
        for delivery in [Delivery::Shim, Delivery::PrestartHook] {
            for (mode, r, want) in &cases {
                let got = decide(r, &settings(*mode, delivery), &mut fake());
                match (want, got) {
                    (Some(w), Ok(d)) => assert_eq!(nodes(&d), *w, "{mode:?} {:?}", r.devices),
                    (None, Err(_)) => {}
                    (w, g) => panic!(
                        "{mode:?} {:?} {delivery:?}: want {w:?}, got {g:?}",
                        r.devices
                    ),
                }
            }
        }
    }
}
