//! The driver: its kernel module, its user-space libraries (the set and their versions) and
//! the GSP firmware.

use gpuctk_host::checks;
use gpuctk_host::{cuda_version_for_branch, CudaVersion, DiscoverOptions, DriverVersion, Roots};

use super::Checks;

/// What the driver checks learned, for the later ones.
pub(super) struct HostFacts {
    pub(super) driver: Option<DriverVersion>,
    pub(super) cuda: Option<CudaVersion>,
}

pub(super) fn check_driver(roots: &Roots, c: &mut Checks) -> HostFacts {
    const G: &str = "driver";
    let file = roots.proc_root.join("driver/nvidia/version");
    let mut facts = HostFacts {
        driver: None,
        cuda: None,
    };
    let version = match std::fs::read_to_string(&file) {
        Err(e) => {
            c.fail(
                G,
                "kernel-module",
                format!("{}: {e}: the NVIDIA kernel module is not loaded", file.display()),
                "load it (modprobe nvidia, or install the driver and reboot); with a driver container or a procfs elsewhere, point --proc-root at it",
            );
            return facts;
        }
        Ok(text) => match gpuctk_host::procfs::parse_version(&text) {
            Ok(v) => v,
            Err(e) => {
                c.fail(
                    G,
                    "kernel-module",
                    format!("{}: {e}", file.display()),
                    "this is not the NVIDIA module's file: check --proc-root",
                );
                return facts;
            }
        },
    };
    // The branch table until discovery reads libcuda (whose note may say more).
    facts.cuda = cuda_version_for_branch(version.major());
    c.ok(G, "kernel-module", format!("NVIDIA {version} loaded"));
    facts.driver = Some(version.clone());

    let inv = match gpuctk_host::discover(roots, &DiscoverOptions::default()) {
        Ok(inv) => inv,
        Err(e) => {
            c.fail(
                G,
                "libraries",
                format!("discovery failed: {e}"),
                "fix what the message names, then run gpuctk info to see the driver files",
            );
            return facts;
        }
    };
    facts.cuda = inv.cuda_version.or(facts.cuda);
    let mut found = Vec::new();
    let mut problems = Vec::new();
    for name in ["libcuda.so", "libnvidia-ml.so"] {
        if let Some(l) = inv.libraries.iter().find(|l| !l.is_32bit && l.name == name) {
            found.push(l.path.clone());
            continue;
        }
        let installed = checks::installed_library_versions(&roots.driver_root, name);
        if installed.is_empty() {
            problems.push(format!("no {name} of any version"));
        } else {
            let list: Vec<String> = installed
                .iter()
                .map(|l| match &l.version {
                    Some(v) => format!("{v} ({})", l.path),
                    None => l.path.clone(),
                })
                .collect();
            problems.push(format!("{name} is {}, not {version}", list.join(", ")));
        }
    }
    if problems.is_empty() {
        c.ok(
            G,
            "libraries",
            format!(
                "{} match the module (found through {}); CUDA {}",
                found.join(", "),
                inv.library_source,
                facts
                    .cuda
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "version unknown".into())
            ),
        );
    } else {
        c.fail(
            G,
            "libraries",
            format!(
                "kernel module {version}, but {}: CUDA and nvidia-smi would fail with \"Failed to initialize NVML: Driver/library version mismatch\"",
                problems.join("; ")
            ),
            format!(
                "install the user-space driver of the running module ({version}), or reboot so that the module of the installed libraries is loaded; with a driver container, check --driver-root"
            ),
        );
    }
    if inv.firmware.is_empty() {
        c.warn(
            G,
            "gsp-firmware",
            format!("no gsp*.bin under /lib/firmware/nvidia/{version} in the driver root"),
            format!("install the firmware of driver {version} (the nvidia-firmware package of this branch): GPUs that run GSP firmware (Turing and later with the open module) fail to initialise without it"),
        );
    } else {
        let dir = inv.firmware[0]
            .path
            .rsplit_once('/')
            .map(|(d, _)| d.to_string())
            .unwrap_or_default();
        c.ok(
            G,
            "gsp-firmware",
            format!("{} file(s) in {dir}", inv.firmware.len()),
        );
    }
    facts
}
