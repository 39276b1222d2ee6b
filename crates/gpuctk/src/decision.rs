//! The deliveries' side of [`gpuctk_core::decide`]: the [`HostView`] it asks, answered by
//! `gpuctk-host` under the configured roots and spec dirs, and the typed operations of a
//! static spec's hooks, decoded by the hook's own command line.

use std::path::Path;

use gpuctk_cdi::registry::Registry;
use gpuctk_cdi::spec::ContainerEdits;
use gpuctk_core::platform::Platform;
use gpuctk_core::request::Delivery;
use gpuctk_core::{Decision, HostView, InRootOp, Injection, Request, Settings, Version};
use gpuctk_host::{
    CapsError, DeviceNode, DiscoverError, DiscoverOptions, DriverVersion, Inventory, MigCapability,
    Roots, RunningDriver, VersionFileError,
};

use crate::config::Config;

/// The host as `cfg` describes it, and the container's root where the delivery sees it.
pub struct LiveHost<'a> {
    cfg: &'a Config,
    rootfs: Option<&'a Path>,
    /// The running driver as the procfs version file says, read once per create (`None`: not
    /// read yet): the platform probe, the static spec's staleness, the snapshot's key and
    /// discovery all take it from here.
    driver: Option<Result<Option<RunningDriver>, VersionFileError>>,
    /// Whether a discovery snapshot may be read (not after one lied).
    read_snapshot: bool,
    /// When the inventory came from a discovery snapshot: the files it vouches for.
    pub snapshot_used: Option<crate::snapshot::Vouched>,
    /// The GPUs (minor, bus id) of the inventory, once discovery (or its snapshot) ran.
    pub gpus: Option<Vec<(u32, String)>>,
    /// The driver libraries of the inventory (soname and ELF ABI each, as discovery read
    /// them), once discovery (or its snapshot) ran.
    pub libraries: Vec<gpuctk_host::Library>,
    /// Where no discovery runs (a static CDI spec): a current snapshot's GPUs and the files
    /// it vouches for, looked for once (`None`: not yet).
    current: Option<Option<Current>>,
    /// NVML's recorded answers, read once per create (`None`: not read yet): both MIG UUIDs
    /// and requirements' facts take them from here.
    nvml_record: Option<Option<gpuctk_host::nvml::NvmlInfo>>,
}

/// A current discovery snapshot's GPUs (minor, bus id) and the files it vouches for.
type Current = (Vec<(u32, String)>, crate::snapshot::Vouched);

impl<'a> LiveHost<'a> {
    /// The host under `cfg`'s roots and spec dirs; `rootfs` is the container's root on the
    /// host, when the delivery knows it.
    pub fn new(cfg: &'a Config, rootfs: Option<&'a Path>) -> LiveHost<'a> {
        LiveHost {
            cfg,
            rootfs,
            driver: None,
            read_snapshot: true,
            snapshot_used: None,
            gpus: None,
            libraries: Vec::new(),
            current: None,
            nvml_record: None,
        }
    }

    /// [`LiveHost::new`] that discovers again, writing a new snapshot, rather than read one.
    pub fn without_snapshot(cfg: &'a Config, rootfs: Option<&'a Path>) -> LiveHost<'a> {
        LiveHost {
            read_snapshot: false,
            ..LiveHost::new(cfg, rootfs)
        }
    }

    /// The running driver, its version file read once: `None` without one; an error naming
    /// it where it cannot be read or names no version.
    fn driver(&mut self) -> Result<Option<&RunningDriver>, VersionFileError> {
        let proc_root = &self.cfg.proc_root;
        match self
            .driver
            .get_or_insert_with(|| crate::snapshot::running_driver(proc_root))
        {
            Ok(d) => Ok(d.as_ref()),
            Err(e) => Err(e.clone()),
        }
    }

    /// The GPUs (minor, bus id) of this create's inventory; where no discovery ran (a static
    /// CDI spec), those of a current discovery snapshot of either shape, so that masking the
    /// other GPUs' procfs folders reads no `information` file (two calls a GPU and a listing,
    /// against a handful of `statx` and one read). `None` where neither is at hand: the
    /// caller reads procfs.
    pub fn known_gpus(&mut self) -> Option<&[(u32, String)]> {
        if self.gpus.is_none() {
            self.gpus = self.current().map(|(gpus, _)| gpus.clone());
        }
        self.gpus.as_deref()
    }

    /// A current discovery snapshot of either shape, looked for once: its GPUs and the files
    /// it vouches for. The full shape (graphics files too) first: that of the spec `cdi
    /// generate` writes, which also writes both snapshots.
    fn current(&mut self) -> Option<&Current> {
        if self.current.is_none() {
            let mut found = None;
            // Without a driver no snapshot holds; a version file that says none is the
            // decision's error to tell (`running_driver`).
            let driver = self.driver().ok().flatten().cloned();
            if let (true, Some(dir), Some(driver)) =
                (self.read_snapshot, self.cfg.snapshot_dir(), driver)
            {
                let roots = roots(self.cfg);
                let shapes = [false, true].map(|skip_graphics| {
                    let opts = DiscoverOptions {
                        skip_graphics,
                        ..Default::default()
                    };
                    crate::snapshot::Snapshot::new(&dir, &roots, &opts)
                });
                found = crate::snapshot::Snapshot::first_current(&shapes, &roots, &driver)
                    .map(|(inv, vouched)| (gpu_ids(&inv), vouched));
            }
            self.current = Some(found);
        }
        self.current.as_ref().and_then(Option::as_ref)
    }

    /// What kind of host this is for the platform modes, as [`gpuctk_host::platform::probe`]
    /// asks it: the driver's version file (read once for the create, so a host with the driver
    /// costs no other call), then WSL2's signs, then the Jetson markers. A sign that is there
    /// but cannot be read, or a version file that names no version, is an error naming it.
    pub fn platform(&mut self) -> anyhow::Result<Platform> {
        use gpuctk_host::PlatformError;
        let driver = self.driver()?.map(|d| d.version.clone());
        let r = roots(self.cfg);
        gpuctk_host::platform::probe(driver.as_ref(), &r.driver_root, &r.dev_root).map_err(|e| {
            match e {
                PlatformError::Tegra(_) => anyhow::anyhow!(
                    "{e}: fix it (on a Jetson, [nvidia-container-runtime] mode = \"csv\" skips this test)"
                ),
                PlatformError::Wsl(_) => anyhow::anyhow!("{e}: fix it"),
            }
        })
    }
}

/// The GPUs of `inv` as masking names them: minor and bus id.
fn gpu_ids(inv: &Inventory) -> Vec<(u32, String)> {
    inv.gpus
        .iter()
        .map(|g| (g.minor, g.bus_id.clone()))
        .collect()
}

/// The driver, device and proc roots of `cfg`.
pub fn roots(cfg: &Config) -> Roots {
    Roots::new(
        cfg.driver_root.clone(),
        cfg.dev_root.clone(),
        cfg.proc_root.clone(),
    )
}

impl HostView for LiveHost<'_> {
    fn inventory(&mut self, graphics: bool) -> Result<Inventory, DiscoverError> {
        let opts = DiscoverOptions {
            skip_graphics: !graphics,
            ..Default::default()
        };
        let roots = roots(self.cfg);
        let driver = self.driver()?.cloned();
        let inv = match (self.cfg.snapshot_dir(), driver) {
            // No snapshot, or no driver (discovery says so, the file not read again).
            (None, driver) | (_, driver @ None) => {
                let version = driver.map(|d| d.version);
                gpuctk_host::Discovery::run_with_driver(&roots, &opts, version.as_ref())?.inventory
            }
            (Some(dir), Some(driver)) => {
                let snapshot = crate::snapshot::Snapshot::new(&dir, &roots, &opts);
                let read = self.read_snapshot;
                let (inv, vouched) = snapshot.inventory(&roots, &opts, &driver, read)?;
                if vouched.is_some() {
                    self.snapshot_used = vouched;
                }
                inv
            }
        };
        self.gpus = Some(gpu_ids(&inv));
        self.libraries = inv.libraries.clone();
        Ok(inv)
    }
    fn registry(&mut self, vendors: &[&str], names: &[&str]) -> Registry {
        // The spec cache lives and is read where the discovery snapshot is.
        match self.cfg.snapshot_dir() {
            None => Registry::load_for_vendors(&self.cfg.spec_dirs, vendors),
            Some(dir) => crate::spec_cache::registry(
                &dir,
                &self.cfg.spec_dirs,
                vendors,
                names,
                self.read_snapshot,
            ),
        }
    }
    fn running_driver(&mut self) -> Result<Option<DriverVersion>, VersionFileError> {
        Ok(self.driver()?.map(|d| d.version.clone()))
    }
    fn first_missing(&mut self, paths: &[(&str, &str)]) -> Option<String> {
        // What a current snapshot vouches for is there: a `stat` of its folders, not of each.
        let vouched = self.current().map(|(_, v)| v);
        gpuctk_host::first_missing(
            paths
                .iter()
                .copied()
                .filter(|(_, p)| vouched.is_none_or(|v| v.kind(Path::new(p)).is_none())),
        )
    }
    fn warn(&mut self, msg: &str) {
        tracing::warn!("{msg}");
    }
    fn image_compat_cuda(
        &mut self,
        driver: &DriverVersion,
        cuda: Option<&Version>,
    ) -> Option<Version> {
        use gpuctk_container::hooks::{judge_cuda_compat, CompatJudgement, DEFAULT_COMPAT_ROOT};
        let root = gpuctk_container::Root::open_container(self.rootfs?).ok()?;
        let cuda = cuda.map(Version::as_str);
        let used = match judge_cuda_compat(&root, Some(driver.as_str()), cuda, DEFAULT_COMPAT_ROOT)
        {
            Ok(CompatJudgement::Use(u)) => u,
            Ok(CompatJudgement::Skip(_)) => return None,
            Err(e) => {
                tracing::warn!("the image's CUDA compat libraries: {e}");
                return None;
            }
        };
        // The note says which CUDA the library provides; without one, its driver branch does.
        used.note_cuda_version
            .and_then(|v| v.parse().ok())
            .or_else(|| {
                let major = used.compat_version.split('.').next()?.parse().ok()?;
                gpuctk_host::cuda_version_known(major).map(Version::from)
            })
    }
    fn mig_capability(
        &mut self,
        cap: MigCapability,
    ) -> Result<(std::path::PathBuf, DeviceNode), CapsError> {
        let roots = roots(self.cfg);
        let node = gpuctk_host::caps::mig_capability(&roots, cap)?;
        Ok((gpuctk_host::caps::caps_proc_dir(&roots), node))
    }
    fn imex_channel(&mut self, id: u32) -> Result<DeviceNode, CapsError> {
        gpuctk_host::caps::imex_channel(&roots(self.cfg), id)
    }
    fn gated(&mut self, mode: gpuctk_host::GatedMode) -> std::io::Result<ContainerEdits> {
        let roots = roots(self.cfg);
        let nodes = gpuctk_host::gated::gated_nodes(&roots.dev_root, mode)?;
        let mounts = if mode == gpuctk_host::GatedMode::Gds && !nodes.is_empty() {
            gpuctk_host::gated::gds_mounts(&roots.driver_root)?
        } else {
            Vec::new()
        };
        Ok(gpuctk_core::gated::gated_edits(&nodes, &mounts))
    }
    fn mig_devices(
        &mut self,
        inv: &Inventory,
    ) -> Result<Vec<gpuctk_host::mig::MigDevice>, gpuctk_host::mig::MigError> {
        let mut devices = gpuctk_host::mig::discover_mig(&inv.roots, &inv.gpus)?;
        // UUIDs only from what `cdi generate` or `info` recorded: NVML is never initialised here.
        if !devices.is_empty() {
            if let Some(info) = self.recorded_nvml(inv) {
                if gpuctk_host::mig::same_layout(&devices, &info) {
                    gpuctk_host::mig::attach_uuids(&mut devices, &info);
                } else {
                    tracing::warn!(
                        "{}: NVML's recorded answers list other MIG instances than procfs shows (repartitioned since): not used; run `gpuctk info` as root to record them again",
                        self.cfg.nvml_cache.display()
                    );
                }
            }
        }
        Ok(devices)
    }
    fn recorded_nvml(&mut self, inv: &Inventory) -> Option<gpuctk_host::nvml::NvmlInfo> {
        // One inventory per decision (a new host where the decision is taken again), so the
        // record read for it holds for the rest of it.
        let cache = &self.cfg.nvml_cache;
        self.nvml_record
            .get_or_insert_with(|| match crate::mig::recorded(cache, inv) {
                Ok(info) => info,
                Err(e) => {
                    tracing::warn!("{e}");
                    None
                }
            })
            .clone()
    }
}

/// The hook binary written into hook entries.
pub fn hook_path(cfg: &Config) -> String {
    cfg.hook_path
        .clone()
        .unwrap_or_else(crate::self_exe::self_path)
}

/// What to do with `request` under `cfg`, for `delivery`; `rootfs` is the container's root on
/// the host (its compat libraries count for its requirements), when the delivery knows it.
/// Every mount source and device node of edits planned from a discovery
/// snapshot is checked (a delivery that does not open them itself), but for those the snapshot
/// vouches for: one that is gone means the snapshot lied, and the decision is taken again on a
/// fresh discovery.
pub fn decide_checked(
    request: &Request,
    cfg: &Config,
    delivery: Delivery,
    host: &mut LiveHost<'_>,
) -> anyhow::Result<Decision> {
    let decision = decide_with(request, cfg, delivery, host)?;
    if let Some(vouched) = &host.snapshot_used {
        if let Decision::Inject(i) = &decision {
            if let Some(gone) = crate::snapshot::first_gone(&i.edits, vouched) {
                tracing::warn!("{}", crate::snapshot::Lied(gone));
                *host = LiveHost::without_snapshot(host.cfg, host.rootfs);
                return decide_with(request, cfg, delivery, host);
            }
        }
    }
    Ok(decision)
}

/// [`decide_checked`], asking `host`, unchecked: the caller opens what the edits name.
pub fn decide_with(
    request: &Request,
    cfg: &Config,
    delivery: Delivery,
    host: &mut LiveHost<'_>,
) -> anyhow::Result<Decision> {
    let hook_path = hook_path(cfg);
    let settings = Settings {
        mode: cfg.mode,
        default_kind: &cfg.default_kind,
        hook_path: &hook_path,
        delivery,
        cuda_compat: cfg.cuda_compat(),
    };
    let mut decision = gpuctk_core::decide(request, &settings, host)?;
    // A static spec is applied as written; planned edits follow the feature flag.
    if let Decision::Inject(i) = &mut decision {
        if cfg.no_additional_gids && i.origin != gpuctk_core::Origin::Registry {
            i.edits.additional_gids.clear();
        }
    }
    Ok(decision)
}

/// Our operations among `edits`' hooks, each with its hook's index: typed already for planned
/// edits, decoded from a static spec's hooks otherwise (createContainer hooks of
/// `nvidia-cdi-hook`, or `nvidia-ctk hook`, that the hook's command line takes). A hook whose
/// values are malformed is left out: it stays a hook, which fails with its own message.
pub fn typed_ops(injection: &Injection) -> Vec<(usize, InRootOp)> {
    if !injection.ops.is_empty() {
        return injection.ops.clone();
    }
    decode_hooks(&injection.edits)
}

/// [`typed_ops`] for edits with text hooks only.
fn decode_hooks(edits: &ContainerEdits) -> Vec<(usize, InRootOp)> {
    let ours = |h: &gpuctk_cdi::spec::Hook| {
        h.hook_name == "createContainer"
            && h.args
                .first()
                .and_then(|a| std::path::Path::new(a).file_name())
                .is_some_and(|n| n == "nvidia-cdi-hook" || n == "nvidia-ctk")
    };
    let mut decoder = None;
    edits
        .hooks
        .iter()
        .enumerate()
        .filter(|(_, h)| ours(h))
        .filter_map(|(i, h)| {
            crate::hook::decode_with(&mut decoder, &h.args)
                .ok()
                .flatten()
                .map(|op| (i, op))
        })
        .collect()
}

/// `request` served by a platform mode's edits (Jetson CSV, WSL2) instead of discovery, as
/// [`gpuctk_core::platform::platform_mode`] decides for the shim and the legacy hook alike:
/// `Ok(None)` where discovery, the registry or the prestart hook serves it (the host is only
/// probed for a request routed just in time, and not at all under `mode = "csv"`, which
/// serves the request as it is asked, unrouted); `Ok(Some(None))` when a container under
/// `mode = "csv"` asks for nothing. `all_csv`: `NVIDIA_REQUIRE_JETPACK=csv-mounts=all`.
pub fn platform_injection(
    request: &Request,
    cfg: &Config,
    delivery: Delivery,
    host: &mut LiveHost<'_>,
    all_csv: bool,
) -> anyhow::Result<Option<Option<Injection>>> {
    use gpuctk_core::platform::{platform_mode, PlatformMode};
    use gpuctk_core::request::Devices;
    use gpuctk_core::route::{route, Mode, Route};
    // The prestart hook serves a legacy-mode request as `auto` would, as `decide` does.
    let mode = match (cfg.mode, delivery) {
        (Mode::Legacy, Delivery::PrestartHook) => Mode::Auto,
        (m, _) => m,
    };
    // The request is routed once; the platform modes plan from its ids.
    let ids = if mode == Mode::Csv {
        match &request.devices {
            Devices::Unrequested => return Ok(Some(None)),
            Devices::NoGpus => Vec::new(),
            Devices::Ids(ids) => ids.clone(),
        }
    } else {
        match route(request, mode, &cfg.default_kind)? {
            Route::JustInTime(ids) => ids,
            _ => return Ok(None),
        }
    };
    Ok(match platform_mode(mode, || host.platform())? {
        None => None,
        Some(PlatformMode::Csv) => Some(Some(csv_injection(request, cfg, &ids, all_csv)?)),
        Some(PlatformMode::Wsl) => Some(Some(wsl_injection(request, cfg, &ids)?)),
    })
}

/// CSV mode (Jetson): the edits for `ids`, `request`'s devices, from the CSV files under
/// `modes.csv.mount-spec-path`, the three base files or, with `all_files`
/// (`NVIDIA_REQUIRE_JETPACK=csv-mounts=all`), every `*.csv` there. No ids (`none`, `void`) get
/// the driver files without device nodes. CSV mode has one device: `0`, `all`, or a CDI name
/// of either.
pub fn csv_injection(
    request: &Request,
    cfg: &Config,
    ids: &[gpuctk_core::request::DeviceId],
    all_files: bool,
) -> anyhow::Result<Injection> {
    let kinds = [cfg.default_kind.as_str(), gpuctk_core::route::RUNTIME_KIND];
    if let Some(bad) = ids
        .iter()
        .find(|d| !gpuctk_core::platform::serves_one_device(d, &kinds))
    {
        anyhow::bail!(
            "{}: device {bad}: mode \"csv\" (Jetson) has one device; ask for 0 or all",
            request.source
        );
    }
    let dir = &cfg.csv_mount_spec_path;
    let files = gpuctk_host::csv::files_in(dir, all_files)?;
    let specs = gpuctk_host::csv::read_files(&files)?;
    let r = roots(cfg);
    let host = gpuctk_host::csv::lookup(&specs, &r.driver_root, &r.dev_root, &[])?;
    let planned = gpuctk_core::platform::csv_edits(&host, &hook_path(cfg));
    if !ids.is_empty() && planned.device.device_nodes.is_empty() {
        anyhow::bail!(
            "{}: mode \"csv\": none of the `dev` entries of the CSV files in {} exists under {}/dev; check [nvidia-container-runtime.modes.csv] mount-spec-path and the dev root",
            request.source,
            dir.display(),
            r.dev_root.display()
        );
    }
    let mut edits = planned.common;
    if !ids.is_empty() {
        edits.device_nodes = planned.device.device_nodes;
    }
    Ok(Injection {
        ops: planned.ops.into_iter().enumerate().collect(),
        edits,
        origin: gpuctk_core::Origin::JustInTime,
    })
}

/// A request routed just in time on a WSL2 host (no NVIDIA kernel driver, `/dev/dxg` or
/// `libdxcore.so` present): the WSL edits for its `ids`, planned as NVIDIA's `jit-cdi` plans
/// them there (`--mode wsl`). No ids (`none`, `void`) get the driver files without
/// `/dev/dxg`. WSL has one device: `all`, `0`, or a CDI name of either.
pub fn wsl_injection(
    request: &Request,
    cfg: &Config,
    ids: &[gpuctk_core::request::DeviceId],
) -> anyhow::Result<Injection> {
    let kinds = [cfg.default_kind.as_str(), gpuctk_core::route::RUNTIME_KIND];
    if let Some(bad) = ids
        .iter()
        .find(|d| !gpuctk_core::platform::serves_one_device(d, &kinds))
    {
        anyhow::bail!(
            "{}: device {bad}: a WSL2 host has one device; ask for all",
            request.source
        );
    }
    let r = roots(cfg);
    let host = gpuctk_host::wsl::discover(&r.driver_root, &r.dev_root)
        .map_err(|e| anyhow::anyhow!("{}: WSL2 host: {e}", request.source))?;
    let planned = gpuctk_core::wsl::wsl_edits(&host, &hook_path(cfg));
    let mut edits = planned.common;
    if !ids.is_empty() {
        edits.device_nodes = planned.device.device_nodes;
    }
    Ok(Injection {
        ops: planned.ops.into_iter().enumerate().collect(),
        edits,
        origin: gpuctk_core::Origin::JustInTime,
    })
}

/// The kind of host under `cfg`'s roots, as [`LiveHost::platform`] tells it, with the running
/// driver (`None`: no version file) as it read it, for a command's discovery to take.
pub fn probe_host(cfg: &Config) -> anyhow::Result<(Platform, Option<RunningDriver>)> {
    let mut host = LiveHost::new(cfg, None);
    let platform = host.platform()?;
    Ok((platform, host.driver()?.cloned()))
}
