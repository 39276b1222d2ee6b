//! The driver: its kernel module, its user-space libraries (the set containers get, whole and
//! of one version), the loaders' vendor files that name them, and the GSP firmware.

use std::path::Path;

use gpuctk_host::catalog::{self, Capability};
use gpuctk_host::checks;
use gpuctk_host::{
    cuda_version_for_branch, CudaVersion, DiscoverOptions, DriverVersion, Inventory, Roots,
};

use super::{read::list_dir_at_most, report::Checks};

/// The most bytes of `/proc/driver/nvidia/version` doctor reads (it is two lines).
const MAX_PROC_FILE: u64 = 64 << 10;

/// The most entries of a library directory doctor reads (a distribution's `/usr/lib/<triplet>`
/// holds a few thousand).
const MAX_LIB_DIR_ENTRIES: usize = 100_000;

/// The most bytes of a loader's vendor file doctor reads (they are a few hundred).
const MAX_VENDOR_FILE: u64 = 1 << 20;

/// What the driver checks learned, for the later ones.
pub(super) struct HostFacts {
    pub(super) driver: Option<DriverVersion>,
    pub(super) cuda: Option<CudaVersion>,
    /// What discovery found, when it could run (the NVML and MIG checks reuse it).
    pub(super) inventory: Option<Inventory>,
}

pub(super) fn check_driver(roots: &Roots, c: &mut Checks) -> HostFacts {
    const G: &str = "driver";
    let file = roots.proc_root.join("driver/nvidia/version");
    let mut facts = HostFacts {
        driver: None,
        cuda: None,
        inventory: None,
    };
    let version = match crate::capped::read_capped(
        &file,
        MAX_PROC_FILE,
        "the driver's version file",
    ) {
        // Absent: no module. Any other error is said as it is, never taken for "absent".
        Err(e)
            if file
                .symlink_metadata()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) =>
        {
            c.fail(
                G,
                "kernel-module",
                format!("{e:#}: the NVIDIA kernel module is not loaded"),
                "load it (modprobe nvidia, or install the driver and reboot); with a driver container or a procfs elsewhere, point --proc-root at it",
            );
            return facts;
        }
        Err(e) => {
            c.fail(
                G,
                "kernel-module",
                format!("{e:#}"),
                "check the file and --proc-root (it must be the procfs of the NVIDIA module's host)",
            );
            return facts;
        }
        Ok(bytes) => match gpuctk_host::procfs::parse_version(&String::from_utf8_lossy(&bytes)) {
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
    check_library_set(roots, &inv, &version, c);
    check_vendor_files(&inv, c);
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
    facts.inventory = Some(inv);
    facts
}

/// The directories a driver's libraries are looked for in: those of the set found, their
/// parents (Debian splits a driver between `<libdir>` and `<libdir>/nvidia/current`), and the
/// standard ones, as paths inside the driver root.
fn library_dirs(inv: &Inventory) -> Vec<String> {
    let mut dirs: Vec<String> = Vec::new();
    let mut add = |d: &str| {
        if !d.is_empty() && !dirs.iter().any(|x| x == d) {
            dirs.push(d.to_string());
        }
    };
    for l in inv.libraries.iter().filter(|l| !l.is_32bit) {
        if let Some((d, _)) = l.path.rsplit_once('/') {
            add(d);
            if let Some((p, _)) = d.rsplit_once('/') {
                add(p);
            }
        }
    }
    for d in catalog::FALLBACK_LIBRARY_DIRS {
        add(d);
    }
    dirs
}

/// The catalogue's library that `file` is a driver-versioned copy of, with the version
/// (`libnvidia-glcore.so.570.124.06` → (`libnvidia-glcore.so`, 570.124.06)).
fn driver_library(file: &str) -> Option<(&'static str, DriverVersion)> {
    catalog::LIBRARIES
        .iter()
        .filter(|l| !l.own_version && l.capability != Capability::Compat32)
        .find_map(|l| {
            let v = file.strip_prefix(l.name)?.strip_prefix('.')?;
            let v = DriverVersion::parse(v)?;
            Some((l.name, v))
        })
}

/// The set containers get is the driver's whole set of this version: a library of the running
/// driver on disk but not in the set (in a directory `ld.so.cache` does not list, NVIDIA's
/// issue 1908), and libraries of another driver version next to it (an upgrade's leftovers).
fn check_library_set(roots: &Roots, inv: &Inventory, version: &DriverVersion, c: &mut Checks) {
    const G: &str = "driver";
    let in_set = |name: &str| {
        inv.libraries
            .iter()
            .any(|l| !l.is_32bit && l.path.rsplit('/').next() == Some(name))
    };
    let mut outside: Vec<(String, String)> = Vec::new();
    let mut others: Vec<String> = Vec::new();
    for dir in library_dirs(inv) {
        let host = roots.driver_root.join(dir.trim_start_matches('/'));
        let Ok(entries) = list_dir_at_most(&host, MAX_LIB_DIR_ENTRIES) else {
            continue;
        };
        // The versioned names are the files; links to them (sonames) are not counted twice.
        for (file, _) in entries.into_iter().filter(|(_, is_file)| *is_file) {
            let Some((_, v)) = driver_library(&file) else {
                continue;
            };
            let path = format!("{dir}/{file}");
            if v == *version {
                if !in_set(&file) && !outside.iter().any(|(f, _)| *f == file) {
                    outside.push((file, dir.clone()));
                }
            } else if !others.contains(&path) {
                others.push(path);
            }
        }
    }
    // What the set's libraries link against (DT_NEEDED) of this driver version: the GL and EGL
    // front ends need their cores (`libEGL_nvidia` needs `libnvidia-eglcore.so.<v>`, ...), and
    // a core that is not on the host at all fails them everywhere.
    let mut absent: Vec<(String, String)> = Vec::new();
    for l in inv.libraries.iter().filter(|l| !l.is_32bit) {
        let Ok(obj) = std::fs::File::open(&l.host_path)
            .map_err(gpuctk_elf::Error::from)
            .and_then(|f| gpuctk_elf::object(&f))
        else {
            // Discovery read this file; a failure now is said by the libraries check's rerun.
            continue;
        };
        let by = l.path.rsplit('/').next().unwrap_or(&l.path).to_string();
        for needed in obj.needed {
            let ours = driver_library(&needed).is_some_and(|(_, v)| v == *version);
            let known = in_set(&needed)
                || inv
                    .libraries
                    .iter()
                    .any(|x| x.soname.as_deref() == Some(needed.as_str()))
                || outside.iter().any(|(f, _)| *f == needed);
            if ours && !known && !absent.iter().any(|(n, _)| *n == needed) {
                absent.push((needed, by.clone()));
            }
        }
    }
    if outside.is_empty() && absent.is_empty() {
        c.ok(
            G,
            "library-set",
            format!(
                "{} libraries of driver {version}, every one on disk in the set containers get, and every driver library they need",
                inv.libraries.iter().filter(|l| !l.is_32bit).count()
            ),
        );
    } else {
        let mut found = Vec::new();
        let mut fixes = Vec::new();
        if !outside.is_empty() {
            let listed: Vec<String> = outside.iter().map(|(f, d)| format!("{d}/{f}")).collect();
            let mut dirs: Vec<&str> = outside.iter().map(|(_, d)| d.as_str()).collect();
            dirs.sort();
            dirs.dedup();
            let one = listed.len() == 1;
            found.push(format!(
                "{} of driver {version} {} on disk but not in {}, so containers do not get {}: programs that load {} fail in the container",
                listed.join(", "),
                if one { "is" } else { "are" },
                inv.library_source,
                if one { "it" } else { "them" },
                if one { "it" } else { "them" },
            ));
            fixes.push(format!(
                "list {} in a file of /etc/ld.so.conf.d and run ldconfig (in the driver root), then regenerate the CDI spec",
                dirs.join(" and ")
            ));
        }
        if !absent.is_empty() {
            let listed: Vec<String> = absent
                .iter()
                .map(|(n, by)| format!("{n} (needed by {by})"))
                .collect();
            found.push(format!(
                "{} not on the host: the libraries that need {} fail to load, on the host and in every container",
                listed.join(", "),
                if absent.len() == 1 { "it" } else { "them" },
            ));
            fixes.push(format!(
                "install the driver's missing libraries of {version} (reinstall the driver, or its GL/EGL package of this branch, e.g. Ubuntu's libnvidia-gl-{})",
                version.major()
            ));
        }
        c.warn(
            G,
            "library-set",
            format!(
                "the driver's library set is incomplete: {}",
                found.join("; ")
            ),
            fixes.join("; "),
        );
    }
    if !others.is_empty() {
        c.warn(
            G,
            "library-versions",
            format!(
                "libraries of two driver versions mixed: {} next to driver {version}'s: a program that loads one of the old ones fails (\"version mismatch\"), and a spec or a package may pick either",
                others.join(", ")
            ),
            format!("remove the old driver's files (its package, or the .run installer's --uninstall of that version), then run ldconfig; keep only {version}"),
        );
    }
}

/// The library a loader's vendor file names (`ICD.library_path`).
fn vendor_library(path: &Path) -> Result<Option<String>, String> {
    let bytes = crate::capped::read_capped(path, MAX_VENDOR_FILE, "vendor file")
        .map_err(|e| format!("{e:#}"))?;
    let v: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{}: invalid JSON: {e}", path.display()))?;
    Ok(v.pointer("/ICD/library_path")
        .and_then(|p| p.as_str())
        .map(str::to_string))
}

/// The EGL and Vulkan vendor files (what GLVND's EGL and the Vulkan loader read to find the
/// driver): there when the graphics libraries are, and naming a library containers get; the EGL
/// external platform files, when there, too.
fn check_vendor_files(inv: &Inventory, c: &mut Checks) {
    const G: &str = "driver";
    const N: &str = "vendor-files";
    let graphics = |stem: &str| {
        inv.libraries
            .iter()
            .any(|l| !l.is_32bit && l.name.starts_with(stem))
    };
    let wanted = [
        (
            "egl_vendor.d/",
            "EGL",
            graphics("libEGL_nvidia"),
            "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
        ),
        (
            "vulkan/icd.d/",
            "Vulkan",
            graphics("libGLX_nvidia"),
            "/etc/vulkan/icd.d/nvidia_icd.json",
        ),
        // Optional (Wayland, GBM, X11 platforms of EGL); when there, their library must be.
        ("egl_external_platform.d/", "EGL platform", false, ""),
    ];
    let mut bad: Vec<String> = Vec::new();
    let mut good: Vec<String> = Vec::new();
    let mut fixes: Vec<String> = Vec::new();
    for (dir, api, libs, usual) in wanted {
        let files: Vec<&gpuctk_host::HostFile> = inv
            .configs
            .iter()
            .filter(|f| f.path.contains(dir) && f.path.ends_with(".json"))
            .collect();
        if files.is_empty() {
            if libs {
                bad.push(format!("no {api} vendor file ({usual}) although the driver's {api} library is there: {api} programs in containers find no NVIDIA driver"));
                fixes.push(format!("install the driver's {api} vendor file at {usual} (the driver's GL package ships it)"));
            }
            continue;
        }
        for f in files {
            match vendor_library(&f.host_path) {
                Err(e) => {
                    bad.push(e);
                    fixes.push(format!("reinstall {} from the driver", f.path));
                }
                Ok(None) => {
                    bad.push(format!("{}: no ICD.library_path", f.path));
                    fixes.push(format!("reinstall {} from the driver", f.path));
                }
                Ok(Some(lib)) => {
                    let name = lib.rsplit('/').next().unwrap_or(&lib);
                    let found = inv.libraries.iter().any(|l| {
                        !l.is_32bit
                            && (l.soname.as_deref() == Some(name)
                                || l.path.rsplit('/').next() == Some(name)
                                || (lib.starts_with('/') && l.path == lib))
                    });
                    if found {
                        good.push(format!("{} names {lib}", f.path));
                    } else {
                        bad.push(format!(
                            "{} names {lib}, which is not in the set containers get: the {api} loader in the container fails to load the driver",
                            f.path
                        ));
                        fixes.push(format!("install {lib} of the running driver, or reinstall {} to name the driver's library", f.path));
                    }
                }
            }
        }
    }
    if !bad.is_empty() {
        c.warn(G, N, bad.join("; "), fixes.join("; "));
    } else if !good.is_empty() {
        c.ok(G, N, good.join(", "));
    }
}
