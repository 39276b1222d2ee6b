//! Discovery: builds the `Inventory` from the driver root, the dev root and the proc root.
//!
//! Cheap by design, since the runtime shim calls it on `create`: it reads a few proc files,
//! stats the device nodes, parses the driver root's `ld.so.cache` and reads each library's ELF
//! headers. No NVML, no process spawn, no directory walk of the library dirs: with the driver
//! version known, every candidate file name is known too.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use gpuctk_elf::Error as ElfError;
use gpuctk_ldcache::{flags, NATIVE_FLAGS};

use crate::catalog::{self, Capability};
use crate::cuda::{cuda_version_known, CudaVersion};
use crate::inventory::{DeviceNode, DrmLink, ElfAbi, Gpu, HostFile, Inventory, Library, Roots};
use crate::procfs::{self, DriverVersion, ProcError};
use crate::resolve::{host_path, is_absent, Resolver};

/// Why discovery failed. Each message names the file and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    /// The driver root does not exist.
    #[error("driver root {0} does not exist (it is [nvidia-container-cli] root in config.toml, or --driver-root where the command has one)")]
    DriverRootMissing(PathBuf),
    /// No `driver/nvidia/version` under the proc root.
    #[error("{0} not found: no NVIDIA kernel module is loaded (load it with modprobe nvidia; if procfs is elsewhere, it is [gpuctk] proc-root in config.toml, or --proc-root where the command has one)")]
    NoDriver(PathBuf),
    /// A proc file has unexpected content.
    #[error(
        "{file}: {source}; this does not look like a file written by the NVIDIA kernel module"
    )]
    BadProcFile {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        source: ProcError,
    },
    /// The driver root's `ld.so.cache` cannot be parsed.
    #[error("{file}: {source}; regenerate it with `ldconfig -r {root}` (or remove it to fall back to the standard library directories)")]
    BadLdCache {
        /// The cache file.
        file: PathBuf,
        /// The driver root.
        root: String,
        /// What is wrong.
        source: gpuctk_ldcache::Error,
    },
    /// A driver library is not a valid ELF shared object.
    #[error("{file}: {source}; this driver library is damaged: reinstall the driver")]
    BadElf {
        /// The library.
        file: PathBuf,
        /// What is wrong.
        source: ElfError,
    },
    /// The driver's firmware folder exists but cannot be listed: containers would start
    /// without the GSP firmware the GPUs need, so this is an error, not a silent skip.
    #[error("{}: cannot read the GPU firmware folder: {source}; make it readable (chmod 755 {}) or check the disk, then retry", dir.display(), dir.display())]
    Firmware {
        /// The folder, on the host.
        dir: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A GPU's sysfs `drm` folder exists but cannot be listed: its card and render nodes
    /// would be left out of every spec and container without a word.
    #[error("{}: cannot list the GPU's DRM nodes: {source}; check that sysfs is mounted and readable there (ls {}), then retry", dir.display(), dir.display())]
    Drm {
        /// The folder, on the host.
        dir: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The driver's version file is there but cannot be read, or names no version.
    #[error(transparent)]
    VersionFile(#[from] crate::platform::VersionFileError),
    /// Reading a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

/// Knobs for discovery.
#[derive(Debug, Clone, Default)]
pub struct DiscoverOptions {
    /// Extra directories (inside the driver root) to look for libraries in, before the defaults
    /// (`--library-search-path`).
    pub library_search_paths: Vec<String>,
    /// Directories (inside the driver root) to look for the loaders' vendor files in, instead of
    /// [`catalog::CONFIG_SEARCH_DIRS`] (`--config-search-path`).
    pub config_search_paths: Vec<String>,
    /// Leave out what only `graphics` or `display` selects (each GPU's DRM nodes, the EGL and
    /// Vulkan files, `nvoptix.bin`, the Xorg files): a runtime's just-in-time discovery for a
    /// container that asks for neither, which spares a folder listing per GPU.
    pub skip_graphics: bool,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> DiscoverError + '_ {
    move |source| DiscoverError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Discover the host.
pub fn discover(roots: &Roots, opts: &DiscoverOptions) -> Result<Inventory, DiscoverError> {
    Discovery::run(roots, opts).map(|d| d.inventory)
}

/// One discovery's inventory, with what tells its graphics-only parts apart: the inventory a
/// discovery with [`DiscoverOptions::skip_graphics`] gives is had from it without reading the
/// host again ([`Discovery::without_graphics`]), as `cdi generate` writes both snapshots.
#[derive(Debug, Clone)]
pub struct Discovery {
    /// What discovery found.
    pub inventory: Inventory,
    /// The indices in `inventory.warnings` of the warnings only a discovery with graphics
    /// gives (a GPU's DRM node or by-path link left out), ascending. The text alone cannot
    /// tell them apart.
    graphics_warnings: Vec<usize>,
}

/// A capability only a discovery with graphics looks for files of.
fn graphics_only(c: Capability) -> bool {
    matches!(c, Capability::Graphics | Capability::Display)
}

impl Discovery {
    /// Discover the host, as [`discover`].
    pub fn run(roots: &Roots, opts: &DiscoverOptions) -> Result<Discovery, DiscoverError> {
        discover_marked(roots, opts, None)
    }

    /// [`Discovery::run`] for the running driver the caller read already from the version
    /// file (`None`: absent, no NVIDIA kernel module), which is not read again.
    pub fn run_with_driver(
        roots: &Roots,
        opts: &DiscoverOptions,
        driver: Option<&DriverVersion>,
    ) -> Result<Discovery, DiscoverError> {
        discover_marked(roots, opts, Some(driver))
    }

    /// The inventory [`discover`] gives with `skip_graphics` set (and the same other options),
    /// equal to it: no GPU's DRM nodes nor links, no graphics or display vendor file nor Xorg
    /// module, none of the warnings about those. The rest of discovery does not look at
    /// `skip_graphics`, and what it found does not depend on what the graphics parts found.
    pub fn without_graphics(&self) -> Inventory {
        let mut inv = self.inventory.clone();
        for g in &mut inv.gpus {
            g.drm = Vec::new();
            g.drm_links = Vec::new();
        }
        inv.configs
            .retain(|c| !c.capability.is_some_and(graphics_only));
        let mut skip = self.graphics_warnings.iter().copied().peekable();
        inv.warnings = std::mem::take(&mut inv.warnings)
            .into_iter()
            .enumerate()
            .filter(|(i, _)| skip.next_if_eq(i).is_none())
            .map(|(_, w)| w)
            .collect();
        inv
    }
}

/// Discovery; `known`: the running driver as the caller read it (`None`: read here).
fn discover_marked(
    roots: &Roots,
    opts: &DiscoverOptions,
    known: Option<Option<&DriverVersion>>,
) -> Result<Discovery, DiscoverError> {
    if !roots.driver_root.is_dir() {
        return Err(DiscoverError::DriverRootMissing(roots.driver_root.clone()));
    }
    // Read, not stat'ed first: a file that is not there is the open's ENOENT.
    let version = match known {
        Some(driver) => driver.cloned(),
        None => crate::platform::read_running_driver(&roots.proc_root)?.map(|d| d.version),
    }
    .ok_or_else(|| DiscoverError::NoDriver(crate::platform::version_file(&roots.proc_root)))?;
    let mut warnings = Vec::new();

    let majors = crate::checks::char_majors(&roots.proc_root)
        .map_err(io_err(&roots.proc_root.join("devices")))?;
    let nvidia_major = procfs::nvidia_major(&majors);
    let uvm_major = procfs::uvm_major(&majors);

    let mut graphics_warnings = Vec::new();
    let gpus = discover_gpus(
        roots,
        nvidia_major,
        !opts.skip_graphics,
        &mut warnings,
        &mut graphics_warnings,
    )?;
    let control_nodes = discover_control_nodes(roots, nvidia_major, uvm_major, &mut warnings);
    // Every lookup under the driver root goes through one resolver: the library, binary,
    // firmware and vendor-file lookups share their parent folders.
    let mut res = Resolver::new(&roots.driver_root);
    let (libraries, library_source) = discover_libraries(&mut res, &version, opts, &mut warnings)?;
    let binaries = discover_binaries(&mut res);
    let firmware = discover_firmware(&mut res, &version)?;
    let ipc = discover_ipc(&roots.driver_root);
    let configs = discover_configs(&mut res, &version, &libraries, opts);

    let cuda_version = cuda_version_of(&libraries, version.major(), &mut warnings);
    let inventory = Inventory {
        roots: roots.clone(),
        cuda_version,
        driver_version: version,
        gpus,
        control_nodes,
        libraries,
        binaries,
        firmware,
        ipc,
        configs,
        library_source,
        warnings,
    };
    Ok(Discovery {
        inventory,
        graphics_warnings,
    })
}

/// The CUDA version the driver provides: NVIDIA's branch table where it knows the branch; for
/// a branch newer than the table, the note in the driver's own `libcuda` (575 and later carry
/// one). The note is read only then, so a known driver costs no extra read on the create path.
fn cuda_version_of(
    libraries: &[Library],
    branch: u32,
    warnings: &mut Vec<String>,
) -> Option<CudaVersion> {
    if let Some(known) = cuda_version_known(branch) {
        return Some(known);
    }
    let libcuda = libraries
        .iter()
        .find(|l| l.name == "libcuda.so" && !l.is_32bit)?;
    let note = fs::File::open(&libcuda.host_path)
        .ok()
        .and_then(|f| gpuctk_elf::note_section(&f, ".note.cuda.fwd_compatibility").ok())
        .flatten()
        .and_then(|notes| notes.into_iter().find(|n| n.owner == "NVIDIA Corporation"))
        .and_then(|n| crate::cuda::cuda_version_from_note(&n.desc));
    if note.is_none() {
        warnings.push(format!(
            "{}: driver branch {branch} is newer than gpuctk's CUDA table and its libcuda has no forward-compatibility note: its CUDA version is unknown (cuda requirements are not checked)",
            libcuda.host_path.display()
        ));
    }
    note
}

/// The most entries of a GPU's sysfs `drm` folder looked at (a GPU has a card and a render node).
const MAX_DRM_ENTRIES: usize = 64;

/// The DRM nodes of the GPU at `bus_id`: the `card*` and `renderD*` entries of
/// `<dev_root>/sys/bus/pci/devices/<bus_id>/drm` (sysfs, where `nvidia-drm` lists them), each
/// checked as a character device at `<dev_root>/dev/dri/<name>`, sorted by name. The sysfs of
/// the dev root, not a root of its own: on a host and under the GPU Operator the device view
/// is `/` (`/dev` and `/sys`), and a mock host lays both out under its dev root. No folder (no
/// `nvidia-drm`) is no node; a node that is not there is a warning; a folder that is there but
/// cannot be listed is an error: read as "no display driver", it would give containers no
/// `/dev/dri` without a word.
fn discover_drm(
    dev_root: &Path,
    bus_id: &str,
    warnings: &mut Vec<String>,
) -> Result<Vec<DeviceNode>, DiscoverError> {
    let dir = host_path(
        dev_root,
        &Path::new("/sys/bus/pci/devices")
            .join(bus_id.to_ascii_lowercase())
            .join("drm"),
    );
    let entries = match read_dir_entries_at_most(&dir, MAX_DRM_ENTRIES) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(DiscoverError::Drm { dir, source }),
    };
    let mut names: Vec<String> = entries
        .into_iter()
        .filter_map(|e| e.name.into_string().ok())
        .filter(|n| {
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            n.strip_prefix("card").is_some_and(digits)
                || n.strip_prefix("renderD").is_some_and(digits)
        })
        .collect();
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        match stat_node(dev_root, &format!("dri/{n}")) {
            Ok(node) => out.push(node),
            Err(e) => warnings.push(format!("GPU {bus_id}: DRM node left out: {e}")),
        }
    }
    Ok(out)
}

/// The `/dev/dri/by-path` links udev makes for the GPU at `bus_id` (`pci-<bus id>-card` and
/// `-render`), read at `<dev_root>/dev/dri/by-path`, kept when they lead to one of the GPU's
/// DRM nodes `drm` (as NVIDIA's generator keeps them). No link (no udev, as in many containers)
/// is none; something else there is a warning; a link that cannot be read is an error.
fn discover_drm_links(
    dev_root: &Path,
    bus_id: &str,
    drm: &[DeviceNode],
    warnings: &mut Vec<String>,
) -> Result<Vec<DrmLink>, DiscoverError> {
    let mut out = Vec::new();
    if drm.is_empty() {
        return Ok(out);
    }
    let bus = bus_id.to_ascii_lowercase();
    for kind in ["card", "render"] {
        let link = format!("/dev/dri/by-path/pci-{bus}-{kind}");
        let host = host_path(dev_root, Path::new(&link));
        let target = match fs::read_link(&host) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                warnings.push(format!(
                    "GPU {bus_id}: {} is not a link; left out",
                    host.display()
                ));
                continue;
            }
            Err(e) => return Err(io_err(&host)(e)),
        };
        let Some(target_text) = target.to_str() else {
            continue;
        };
        let dir = host.parent().unwrap_or(Path::new("/"));
        let resolved = lexical_join(dir, &target);
        if drm.iter().any(|n| n.host_path == resolved) {
            out.push(DrmLink {
                link,
                target: target_text.to_string(),
            });
        }
    }
    Ok(out)
}

/// `dir` joined with `rel` and `.`/`..` folded away without touching the disk (what Go's
/// `filepath.Join` gives NVIDIA's generator for a relative link target).
fn lexical_join(dir: &Path, rel: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = if rel.is_absolute() {
        PathBuf::from("/")
    } else {
        dir.to_path_buf()
    };
    for c in rel.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Why a device node is left out (a warning, not an error of discovery).
#[derive(Debug, thiserror::Error)]
enum NodeError {
    /// The node cannot be stat'ed (usually: it does not exist).
    #[error("{}: {source}", path.display())]
    Stat { path: PathBuf, source: io::Error },
    /// Something else sits where the node should be.
    #[error("{} is not a character device", path.display())]
    NotCharDevice { path: PathBuf },
}

fn stat_node(dev_root: &Path, name: &str) -> Result<DeviceNode, NodeError> {
    let container = format!("/dev/{name}");
    let host = host_path(dev_root, Path::new(&container));
    let md = match fs::metadata(&host) {
        Ok(md) => md,
        Err(source) => return Err(NodeError::Stat { path: host, source }),
    };
    if !md.file_type().is_char_device() {
        return Err(NodeError::NotCharDevice { path: host });
    }
    Ok(DeviceNode {
        path: container,
        host_path: host,
        major: libc::major(md.rdev()),
        minor: libc::minor(md.rdev()),
        mode: md.mode() & 0o7777,
        gid: md.gid(),
    })
}

fn discover_gpus(
    roots: &Roots,
    nvidia_major: u32,
    drm: bool,
    warnings: &mut Vec<String>,
    graphics_warnings: &mut Vec<usize>,
) -> Result<Vec<Gpu>, DiscoverError> {
    let dir = roots.proc_root.join("driver/nvidia/gpus");
    let listed = match crate::checks::gpu_informations(&roots.proc_root) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            warnings.push(format!(
                "{} not found: the driver reports no GPUs",
                dir.display()
            ));
            return Ok(Vec::new());
        }
        Err(e) => return Err(io_err(&dir)(e)),
    };
    // Discovery stops at the first file it cannot use; doctor reports each.
    let mut infos = listed
        .into_iter()
        .map(|r| {
            r.map_err(|e| match e {
                crate::checks::InformationError::Read { path, source } => {
                    DiscoverError::Io { path, source }
                }
                crate::checks::InformationError::Parse { path, source } => {
                    DiscoverError::BadProcFile { file: path, source }
                }
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    infos.sort_by(|a, b| a.bus_id.cmp(&b.bus_id));
    let mut gpus = Vec::with_capacity(infos.len());
    for (index, info) in infos.into_iter().enumerate() {
        let node = match stat_node(&roots.dev_root, &format!("nvidia{}", info.minor)) {
            Ok(n) if n.major == nvidia_major && n.minor == info.minor => Some(n),
            Ok(n) => {
                warnings.push(format!(
                    "{} is {}:{}, expected {nvidia_major}:{}; GPU {index} left out",
                    n.host_path.display(),
                    n.major,
                    n.minor,
                    info.minor
                ));
                None
            }
            Err(e) => {
                warnings.push(format!(
                    "GPU {index} ({}) has no device node: {e}",
                    info.uuid
                ));
                None
            }
        };
        let first = warnings.len();
        let drm = if drm {
            discover_drm(&roots.dev_root, &info.bus_id, warnings)?
        } else {
            Vec::new()
        };
        let drm_links = discover_drm_links(&roots.dev_root, &info.bus_id, &drm, warnings)?;
        graphics_warnings.extend(first..warnings.len());
        gpus.push(Gpu {
            index: index as u32,
            minor: info.minor,
            uuid: info.uuid,
            bus_id: info.bus_id,
            model: info.model,
            node,
            drm,
            drm_links,
        });
    }
    Ok(gpus)
}

fn discover_control_nodes(
    roots: &Roots,
    nvidia_major: u32,
    uvm_major: Option<u32>,
    warnings: &mut Vec<String>,
) -> Vec<DeviceNode> {
    let wanted: [(&str, Option<(u32, u32)>); 4] = [
        ("nvidiactl", Some((nvidia_major, 255))),
        ("nvidia-modeset", Some((nvidia_major, 254))),
        ("nvidia-uvm", uvm_major.map(|m| (m, 0))),
        ("nvidia-uvm-tools", uvm_major.map(|m| (m, 1))),
    ];
    let mut out = Vec::new();
    for (name, expected) in wanted {
        match stat_node(&roots.dev_root, name) {
            Ok(n) => match expected {
                Some((maj, min)) if (n.major, n.minor) != (maj, min) => warnings.push(format!(
                    "{} is {}:{} but the driver's is {maj}:{min} (per {}); left out: recreate the node",
                    n.host_path.display(),
                    n.major,
                    n.minor,
                    roots.proc_root.join("devices").display()
                )),
                _ => out.push(n),
            },
            Err(_) if name == "nvidia-modeset" || name == "nvidia-uvm-tools" => {}
            Err(e) => warnings.push(format!("control node missing: {e}")),
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

fn name_matches(key: &str, name: &str) -> bool {
    key.strip_prefix(name)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

fn is_driver_file(file_name: &str, spec: &catalog::LibrarySpec, version: &DriverVersion) -> bool {
    if spec.own_version {
        // `<name>.<numeric version>`: the library's own release, whatever the driver's.
        return file_name
            .strip_prefix(spec.name)
            .and_then(|v| v.strip_prefix('.'))
            .is_some_and(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit() || b == b'.'));
    }
    file_name.starts_with(spec.name) && file_name.ends_with(&format!(".so.{version}"))
}

fn discover_libraries(
    res: &mut Resolver,
    version: &DriverVersion,
    opts: &DiscoverOptions,
    warnings: &mut Vec<String>,
) -> Result<(Vec<Library>, String), DiscoverError> {
    let root = res.root();
    let cache_file = root.join("etc/ld.so.cache");
    let cache = match fs::read(&cache_file) {
        Ok(bytes) => {
            Some(
                gpuctk_ldcache::parse(&bytes).map_err(|source| DiscoverError::BadLdCache {
                    file: cache_file.clone(),
                    root: root.display().to_string(),
                    source,
                })?,
            )
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(&cache_file)(e)),
    };
    let source = if cache.is_some() {
        cache_file.display().to_string()
    } else {
        "standard library directories (no ld.so.cache)".to_string()
    };

    let mut out: Vec<Library> = Vec::new();
    // The ABI byte of this build target's libraries, and i386's (none) for the 32-bit ones.
    let native = NATIVE_FLAGS & flags::FLAG_REQUIRED_MASK;
    for (is_32bit, arch) in [(false, native), (true, flags::FLAG_NONE)] {
        if is_32bit && !cfg!(target_arch = "x86_64") {
            continue;
        }
        let fallback: &[&str] = if is_32bit {
            catalog::FALLBACK_LIBRARY32_DIRS
        } else {
            catalog::FALLBACK_LIBRARY_DIRS
        };
        for spec in catalog::LIBRARIES {
            let mut found = None;
            if let Some(cache) = &cache {
                for e in &cache.entries {
                    // Type FLAG_ELF or FLAG_ELF_LIBC6 (bit 0 set), as ld.so accepts them.
                    if e.flags & flags::FLAG_REQUIRED_MASK != arch
                        || e.flags & flags::FLAG_ELF == 0
                        || !name_matches(&e.key, spec.name)
                    {
                        continue;
                    }
                    if let Ok((p, _)) = res.resolve(Path::new(&e.value)) {
                        if p.file_name()
                            .and_then(|f| f.to_str())
                            .is_some_and(|f| is_driver_file(f, spec, version))
                        {
                            found = Some(p);
                            break;
                        }
                    }
                }
            }
            // A library with its own version has no name to look for outside the cache.
            if found.is_none() && !spec.own_version && (!is_32bit || cache.is_none()) {
                // Where this driver's other libraries are first: a split install keeps them together.
                let mut dirs: Vec<String> = out
                    .iter()
                    .filter(|l| l.is_32bit == is_32bit)
                    .filter_map(|l| l.path.rsplit_once('/').map(|(d, _)| d.to_string()))
                    .collect();
                dirs.dedup();
                dirs.extend(opts.library_search_paths.iter().cloned());
                // With a cache, a library it does not list is only looked for next to the
                // driver's other libraries: trying every standard directory for each of the
                // ~35 catalogue names costs hundreds of stats on the runtime's hot path.
                if cache.is_none() || dirs.is_empty() {
                    dirs.extend(fallback.iter().map(|s| s.to_string()));
                }
                for d in dirs {
                    let candidate = Path::new(&d).join(format!("{}.{version}", spec.name));
                    if let Some(p) = res.regular_file(&candidate) {
                        found = Some(p);
                        break;
                    }
                }
            }
            let Some(resolved) = found else { continue };
            let hp = host_path(root, &resolved);
            // A damaged library is left out with a warning, as NVIDIA's discovery does; what
            // cannot do without it (`cdi generate` without libcuda) says so itself.
            let info = match fs::File::open(&hp)
                .map_err(ElfError::from)
                .and_then(|f| gpuctk_elf::library_info(&f))
            {
                Ok(info) if info.header.e_type == gpuctk_elf::ET_DYN => info,
                Ok(_) => {
                    let source = ElfError::Malformed("not a shared object (e_type is not ET_DYN)");
                    warnings.push(format!(
                        "{}; skipped",
                        DiscoverError::BadElf { file: hp, source }
                    ));
                    continue;
                }
                // A read that fails (EIO, ENOSPC from a flaky filesystem) is not a damaged
                // file: the host is not what it seems, so discovery stops.
                Err(source @ ElfError::Io(_)) => {
                    return Err(DiscoverError::BadElf { file: hp, source })
                }
                Err(source) => {
                    warnings.push(format!(
                        "{}; skipped",
                        DiscoverError::BadElf { file: hp, source }
                    ));
                    continue;
                }
            };
            if info.header.is_64() == is_32bit {
                // A 64-bit file listed as 32-bit (or the reverse) is a broken cache; skip it.
                continue;
            }
            let path = resolved.to_string_lossy().into_owned();
            let dev_link = hp.with_file_name(spec.name);
            out.push(Library {
                name: spec.name.to_string(),
                capability: if is_32bit {
                    Capability::Compat32
                } else {
                    spec.capability
                },
                has_dev_link: fs::symlink_metadata(&dev_link)
                    .is_ok_and(|m| m.file_type().is_symlink()),
                host_path: hp,
                path,
                soname: info.soname,
                is_32bit,
                elf: Some(ElfAbi {
                    machine: info.header.machine,
                    elf64: info.header.is_64(),
                    flags: info.header.e_flags,
                }),
            });
        }
    }
    Ok((out, source))
}

fn discover_binaries(res: &mut Resolver) -> Vec<HostFile> {
    let mut out = Vec::new();
    for spec in catalog::BINARIES {
        for dir in catalog::BINARY_DIRS {
            let p = Path::new(dir).join(spec.name);
            if let Some(hp) = regular_host_file(res, &p) {
                out.push(HostFile {
                    name: spec.name.to_string(),
                    capability: Some(spec.capability),
                    host_path: hp,
                    path: p.to_string_lossy().into_owned(),
                });
                break;
            }
        }
    }
    out
}

/// The file `p` names under the resolver's root, symlinks followed inside it, if it is a
/// regular file: its host path.
fn regular_host_file(res: &mut Resolver, p: &Path) -> Option<PathBuf> {
    let resolved = res.regular_file(p)?;
    Some(host_path(res.root(), &resolved))
}

/// The loaders' vendor files ([`catalog::CONFIGS`]) and the Xorg modules
/// ([`catalog::XORG_MODULES`]): each looked up in order, the first regular file kept. None of
/// them is required: a compute-only install has none.
fn discover_configs(
    res: &mut Resolver,
    version: &DriverVersion,
    libraries: &[Library],
    opts: &DiscoverOptions,
) -> Vec<HostFile> {
    let mut out = Vec::new();
    let search: Vec<&str> = if opts.config_search_paths.is_empty() {
        catalog::CONFIG_SEARCH_DIRS.to_vec()
    } else {
        opts.config_search_paths
            .iter()
            .map(String::as_str)
            .collect()
    };
    // Most of the ~80 candidates sit in folders a host does not have (`/usr/local/share/egl`,
    // `/usr/X11R6/...`): the resolver remembers an absent folder, so its candidates cost one
    // `lstat` in all on the runtime's just-in-time path.
    let skipped = |c: Capability| opts.skip_graphics && graphics_only(c);
    for spec in catalog::CONFIGS.iter().filter(|s| !skipped(s.capability)) {
        let extra = spec.at_driver_root.then_some("/");
        let found = search.iter().copied().chain(extra).find_map(|dir| {
            let p = Path::new(dir).join(spec.rel);
            regular_host_file(res, &p)
        });
        if let Some(hp) = found {
            let base = match spec.target {
                catalog::ConfigTarget::UsrShare => "/usr/share",
                catalog::ConfigTarget::Etc => "/etc",
            };
            out.push(HostFile {
                name: spec.rel.rsplit('/').next().unwrap_or(spec.rel).to_string(),
                capability: Some(spec.capability),
                host_path: hp,
                path: format!("{base}/{}", spec.rel),
            });
        }
    }
    let mut lib_dirs: Vec<&str> = libraries
        .iter()
        .filter(|l| !l.is_32bit)
        .filter_map(|l| l.path.rsplit_once('/').map(|(d, _)| d))
        .collect();
    lib_dirs.sort_unstable();
    lib_dirs.dedup();
    let dirs: Vec<String> = lib_dirs
        .iter()
        .flat_map(|d| {
            catalog::XORG_MODULE_SUBDIRS
                .iter()
                .map(move |s| format!("{d}/{s}"))
        })
        .chain(catalog::XORG_MODULE_DIRS.iter().map(|d| d.to_string()))
        .collect();
    if skipped(Capability::Display) {
        return out;
    }
    for (name, versioned) in catalog::XORG_MODULES {
        let file = if *versioned {
            format!("{name}.{version}")
        } else {
            name.to_string()
        };
        let found = dirs.iter().find_map(|d| {
            let p = Path::new(d).join(&file);
            regular_host_file(res, &p).map(|hp| (p, hp))
        });
        if let Some((p, hp)) = found {
            out.push(HostFile {
                name: file,
                capability: Some(Capability::Display),
                host_path: hp,
                path: p.to_string_lossy().into_owned(),
            });
        }
    }
    out
}

fn discover_firmware(
    res: &mut Resolver,
    version: &DriverVersion,
) -> Result<Vec<HostFile>, DiscoverError> {
    let root = res.root();
    let mut out = Vec::new();
    for base in ["/lib/firmware/nvidia", "/usr/lib/firmware/nvidia"] {
        let dir = Path::new(base).join(version.as_str());
        let firmware_err = |source| DiscoverError::Firmware {
            dir: host_path(root, &dir),
            source,
        };
        let resolved_dir = match res.resolve(&dir) {
            Ok((d, _)) => d,
            Err(e) if is_absent(&e) => continue,
            Err(e) => return Err(firmware_err(e)),
        };
        let host_dir = host_path(root, &resolved_dir);
        let entries = match read_dir_entries(&host_dir) {
            Ok(e) => e,
            // Gone since it was resolved: as absent as before.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(DiscoverError::Firmware {
                    dir: host_dir,
                    source,
                })
            }
        };
        let mut names: Vec<String> = entries
            .into_iter()
            .filter(|e| e.is_file)
            .filter_map(|e| e.name.into_string().ok())
            .filter(|n| n.starts_with("gsp") && n.ends_with(".bin"))
            .collect();
        names.sort();
        for n in names {
            let path = resolved_dir.join(&n);
            if out.iter().any(|f: &HostFile| Path::new(&f.path) == path) {
                continue;
            }
            out.push(HostFile {
                name: n,
                capability: None,
                host_path: host_path(root, &path),
                path: path.to_string_lossy().into_owned(),
            });
        }
    }
    Ok(out)
}

/// The most bytes read of a procfs file the driver writes (`version`, `devices`, a GPU's
/// `information`): each is a few KiB at most.
pub(crate) const MAX_PROC_FILE: u64 = 64 * 1024;

/// The bytes of file `path`, at most `max`: a larger file is an error (`InvalidData`), never
/// read whole nor cut short. The reader of the procfs files, which `--proc-root` may point at
/// any folder.
pub(crate) fn read_capped(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    // Room for a real procfs file: one read, and one that says the end.
    let mut bytes = Vec::with_capacity(4096);
    fs::File::open(path)?
        .take(max + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {max} bytes; not a file the NVIDIA driver writes"),
        ));
    }
    Ok(bytes)
}

/// One entry of a directory listing.
pub struct DirEntry {
    /// The entry's name.
    pub name: std::ffi::OsString,
    /// A regular file, not following a symlink (what `DirEntry::file_type().is_file()` says).
    pub is_file: bool,
}

/// The entries of `dir` (without `.` and `..`), with every error reported: `readdir`'s, and
/// `closedir`'s, which `std::fs::ReadDir` turns into a panic when it is dropped (an EIO from
/// `close` on a failing disk or network filesystem aborts the shim instead of failing it).
pub(crate) fn read_dir_entries(dir: &Path) -> io::Result<Vec<DirEntry>> {
    read_dir_entries_at_most(dir, usize::MAX)
}

/// [`read_dir_entries`], stopping after `max` entries (a folder of a known small size, read
/// capped like every outside input).
pub fn read_dir_entries_at_most(dir: &Path, max: usize) -> io::Result<Vec<DirEntry>> {
    let c_dir = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))?;
    Ok(crate::sys::read_dir(&c_dir, max)?
        .into_iter()
        .map(|e| DirEntry {
            name: e.name,
            is_file: e.is_file,
        })
        .collect())
}

fn discover_ipc(root: &Path) -> Vec<HostFile> {
    let mut out = Vec::new();
    let groups: [(&str, Capability, &[&str]); 3] = [
        (
            "nvidia-persistenced",
            Capability::Utility,
            &[
                "/run/nvidia-persistenced/socket",
                "/var/run/nvidia-persistenced/socket",
            ],
        ),
        (
            "nvidia-fabricmanager",
            Capability::Utility,
            &[
                "/run/nvidia-fabricmanager/socket",
                "/var/run/nvidia-fabricmanager/socket",
            ],
        ),
        ("nvidia-mps", Capability::Compute, &["/tmp/nvidia-mps"]),
    ];
    for (name, cap, candidates) in groups {
        for c in candidates {
            let hp = host_path(root, Path::new(c));
            let Ok(md) = fs::metadata(&hp) else { continue };
            let ok = if name == "nvidia-mps" {
                md.is_dir()
            } else {
                md.file_type().is_socket()
            };
            if ok {
                out.push(HostFile {
                    name: name.to_string(),
                    capability: Some(cap),
                    host_path: hp,
                    path: c.to_string(),
                });
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_version_libraries_take_any_numeric_version() {
        let v = DriverVersion::parse("570.124.06").unwrap();
        let spec = |name| *catalog::LIBRARIES.iter().find(|l| l.name == name).unwrap();
        let wayland = spec("libnvidia-egl-wayland.so");
        assert!(is_driver_file(
            "libnvidia-egl-wayland.so.1.1.13",
            &wayland,
            &v
        ));
        assert!(is_driver_file("libnvidia-egl-wayland.so.1", &wayland, &v));
        for bad in [
            "libnvidia-egl-wayland.so",
            "libnvidia-egl-wayland.so.",
            "libnvidia-egl-wayland.so.old",
            "libnvidia-egl-wayland.so.1.bak",
        ] {
            assert!(!is_driver_file(bad, &wayland, &v), "{bad}");
        }
        let cuda = spec("libcuda.so");
        assert!(is_driver_file("libcuda.so.570.124.06", &cuda, &v));
        assert!(!is_driver_file("libcuda.so.1", &cuda, &v));
    }

    #[test]
    fn prefix_match_respects_dots() {
        assert!(name_matches("libnvidia-ml.so.1", "libnvidia-ml.so"));
        assert!(name_matches("libnvidia-ml.so", "libnvidia-ml.so"));
        assert!(!name_matches("libnvidia-mlx.so.1", "libnvidia-ml.so"));
    }

    /// A by-path link is kept when it leads to one of the GPU's nodes (relative or absolute
    /// target); one to another GPU's node is left out; no link is none; a node in the link's
    /// place is a warning.
    #[test]
    fn drm_links_lead_to_the_gpus_nodes() {
        let d = tempfile::tempdir().unwrap();
        let by_path = d.path().join("dev/dri/by-path");
        fs::create_dir_all(&by_path).unwrap();
        let node = |name: &str| DeviceNode {
            path: format!("/dev/dri/{name}"),
            host_path: d.path().join("dev/dri").join(name),
            major: 226,
            minor: 0,
            mode: 0o660,
            gid: 44,
        };
        let drm = [node("card1"), node("renderD128")];
        let mut w = Vec::new();
        assert!(discover_drm_links(d.path(), "0000:01:00.0", &drm, &mut w)
            .unwrap()
            .is_empty());
        std::os::unix::fs::symlink("../card1", by_path.join("pci-0000:01:00.0-card")).unwrap();
        std::os::unix::fs::symlink(
            d.path().join("dev/dri/renderD128"),
            by_path.join("pci-0000:01:00.0-render"),
        )
        .unwrap();
        std::os::unix::fs::symlink("../card2", by_path.join("pci-0000:02:00.0-card")).unwrap();
        fs::write(by_path.join("pci-0000:02:00.0-render"), b"").unwrap();
        let links = discover_drm_links(d.path(), "0000:01:00.0", &drm, &mut w).unwrap();
        assert_eq!(
            links,
            [
                DrmLink {
                    link: "/dev/dri/by-path/pci-0000:01:00.0-card".into(),
                    target: "../card1".into()
                },
                DrmLink {
                    link: "/dev/dri/by-path/pci-0000:01:00.0-render".into(),
                    target: d.path().join("dev/dri/renderD128").display().to_string()
                }
            ]
        );
        assert!(w.is_empty(), "{w:?}");
        assert!(discover_drm_links(d.path(), "0000:02:00.0", &drm, &mut w)
            .unwrap()
            .is_empty());
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("pci-0000:02:00.0-render is not a link"),
            "{w:?}"
        );
    }

    /// No `drm` folder is no node (no `nvidia-drm`); one that is there but cannot be listed
    /// (here a file where the GPU's sysfs folder should be: ENOTDIR) is an error naming it,
    /// where it used to read as "no node"; the listing stops at its cap.
    #[test]
    fn drm_folder_absent_unreadable_and_capped() {
        let d = tempfile::tempdir().unwrap();
        let devices = d.path().join("sys/bus/pci/devices");
        fs::create_dir_all(&devices).unwrap();
        let mut w = Vec::new();
        assert!(discover_drm(d.path(), "0000:01:00.0", &mut w)
            .unwrap()
            .is_empty());
        fs::write(devices.join("0000:02:00.0"), b"").unwrap();
        let e = discover_drm(d.path(), "0000:02:00.0", &mut w).unwrap_err();
        assert!(
            matches!(&e, DiscoverError::Drm { source, .. }
                if source.raw_os_error() == Some(libc::ENOTDIR)),
            "{e}"
        );
        let msg = e.to_string();
        assert!(msg.contains("0000:02:00.0/drm"), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
        let many = devices.join("0000:03:00.0/drm");
        fs::create_dir_all(&many).unwrap();
        for i in 0..(MAX_DRM_ENTRIES + 10) {
            fs::write(many.join(format!("x{i}")), b"").unwrap();
        }
        assert_eq!(
            read_dir_entries_at_most(&many, MAX_DRM_ENTRIES)
                .unwrap()
                .len(),
            MAX_DRM_ENTRIES
        );
        assert_eq!(read_dir_entries(&many).unwrap().len(), MAX_DRM_ENTRIES + 10);
        assert!(w.is_empty(), "{w:?}");
    }

    fn firmware_root() -> (tempfile::TempDir, PathBuf, DriverVersion) {
        let d = tempfile::tempdir().unwrap();
        let version = DriverVersion::parse("570.124.06").unwrap();
        let dir = d.path().join("lib/firmware/nvidia/570.124.06");
        fs::create_dir_all(&dir).unwrap();
        (d, dir, version)
    }

    #[test]
    fn firmware_files_are_listed_and_links_skipped() {
        let (d, dir, version) = firmware_root();
        fs::write(dir.join("gsp_ga10x.bin"), b"x").unwrap();
        fs::write(dir.join("gsp_tu10x.bin"), b"x").unwrap();
        fs::write(dir.join("readme.txt"), b"x").unwrap();
        std::os::unix::fs::symlink("gsp_ga10x.bin", dir.join("gsp_link.bin")).unwrap();
        let names: Vec<String> = discover_firmware(&mut Resolver::new(d.path()), &version)
            .unwrap()
            .into_iter()
            .map(|f| f.path)
            .collect();
        assert_eq!(
            names,
            [
                "/lib/firmware/nvidia/570.124.06/gsp_ga10x.bin",
                "/lib/firmware/nvidia/570.124.06/gsp_tu10x.bin"
            ]
        );
        // No folder at all is no firmware, not an error.
        let empty = tempfile::tempdir().unwrap();
        assert!(
            discover_firmware(&mut Resolver::new(empty.path()), &version)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn firmware_folder_that_is_a_file_is_an_error() {
        let (d, dir, version) = firmware_root();
        fs::remove_dir(&dir).unwrap();
        fs::write(&dir, b"not a folder").unwrap();
        let e = discover_firmware(&mut Resolver::new(d.path()), &version)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&*dir.to_string_lossy()) && e.contains("firmware"),
            "{e}"
        );
    }

    /// Before: an unreadable firmware folder was skipped and discovery succeeded without the
    /// firmware. Root reads any folder, so the listing runs in a thread whose own credentials
    /// (raw setresuid: per thread, unlike glibc's wrapper) are those of `nobody`.
    #[test]
    fn unreadable_firmware_folder_is_an_error_naming_it() {
        use std::os::unix::fs::PermissionsExt;
        let (d, dir, version) = firmware_root();
        fs::write(dir.join("gsp_ga10x.bin"), b"x").unwrap();
        for p in [d.path().to_path_buf(), d.path().join("lib/firmware/nvidia")] {
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        }
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o000)).unwrap();
        let root = d.path().to_path_buf();
        let result = std::thread::spawn(move || {
            if rustix::process::getuid().is_root() {
                // This thread's credentials only (the raw system calls, not libc's
                // process-wide ones); it ends right after the listing.
                use rustix::thread::{set_thread_res_gid, set_thread_res_uid};
                let (uid, gid) = (
                    rustix::fs::Uid::from_raw(65534),
                    rustix::fs::Gid::from_raw(65534),
                );
                set_thread_res_gid(gid, gid, gid).unwrap();
                set_thread_res_uid(uid, uid, uid).unwrap();
            }
            discover_firmware(&mut Resolver::new(&root), &version).map(|f| f.len())
        })
        .join()
        .unwrap();
        let e = result.unwrap_err();
        assert!(
            matches!(&e, DiscoverError::Firmware { source, .. }
                if source.kind() == io::ErrorKind::PermissionDenied),
            "{e}"
        );
        let msg = e.to_string();
        assert!(msg.contains(&*dir.to_string_lossy()), "{msg}");
        assert!(msg.contains("chmod 755"), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
    }

    #[test]
    fn missing_roots_are_named() {
        let d = tempfile::tempdir().unwrap();
        let roots = Roots {
            driver_root: d.path().join("nope"),
            dev_root: d.path().to_path_buf(),
            proc_root: d.path().join("proc"),
        };
        let e = discover(&roots, &DiscoverOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("nope") && e.contains("does not exist"), "{e}");
        let roots = Roots {
            driver_root: d.path().to_path_buf(),
            ..roots
        };
        let e = discover(&roots, &DiscoverOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("driver/nvidia/version not found"), "{e}");
    }

    /// The first search directory holding a vendor file wins, a link (Debian's alternatives) is
    /// followed inside the root, the target is NVIDIA's (`/usr/share/...` for EGL, `/etc/...` for
    /// Vulkan and OpenCL), and the Xorg modules keep their path.
    #[test]
    fn vendor_files_and_xorg_modules() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        let version = DriverVersion::parse("570.124.06").unwrap();
        let put = |rel: &str, body: &str| {
            let p = r.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, body).unwrap();
        };
        put("etc/glvnd/egl_vendor.d/10_nvidia.json", "etc");
        put("usr/share/glvnd/egl_vendor.d/10_nvidia.json", "share");
        put("usr/lib/nvidia/current/nvidia_icd.json", "icd");
        fs::create_dir_all(r.join("usr/share/vulkan/icd.d")).unwrap();
        std::os::unix::fs::symlink(
            "/usr/lib/nvidia/current/nvidia_icd.json",
            r.join("usr/share/vulkan/icd.d/nvidia_icd.json"),
        )
        .unwrap();
        put("etc/OpenCL/vendors/nvidia.icd", "libnvidia-opencl.so.1\n");
        put("usr/lib/x86_64-linux-gnu/nvidia/xorg/nvidia_drv.so", "drv");
        put(
            "usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.570.124.06",
            "glx",
        );
        put(
            "usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.1.0.0",
            "other",
        );
        let lib = Library {
            name: "libcuda.so".into(),
            capability: Capability::Compute,
            host_path: r.join("usr/lib/x86_64-linux-gnu/libcuda.so.570.124.06"),
            path: "/usr/lib/x86_64-linux-gnu/libcuda.so.570.124.06".into(),
            soname: None,
            is_32bit: false,
            has_dev_link: false,
            elf: None,
        };
        let found = |opts: &DiscoverOptions| -> Vec<(String, String, Option<Capability>)> {
            discover_configs(
                &mut Resolver::new(r),
                &version,
                std::slice::from_ref(&lib),
                opts,
            )
            .into_iter()
            .map(|f| {
                let host = f.host_path.strip_prefix(r).unwrap().display().to_string();
                (f.path, host, f.capability)
            })
            .collect()
        };
        assert_eq!(
            found(&DiscoverOptions::default()),
            [
                (
                    "/usr/share/glvnd/egl_vendor.d/10_nvidia.json".to_string(),
                    "etc/glvnd/egl_vendor.d/10_nvidia.json".to_string(),
                    Some(Capability::Graphics)
                ),
                (
                    "/etc/OpenCL/vendors/nvidia.icd".into(),
                    "etc/OpenCL/vendors/nvidia.icd".into(),
                    Some(Capability::Compute)
                ),
                (
                    "/etc/vulkan/icd.d/nvidia_icd.json".into(),
                    "usr/lib/nvidia/current/nvidia_icd.json".into(),
                    Some(Capability::Graphics)
                ),
                (
                    "/usr/lib/x86_64-linux-gnu/nvidia/xorg/nvidia_drv.so".into(),
                    "usr/lib/x86_64-linux-gnu/nvidia/xorg/nvidia_drv.so".into(),
                    Some(Capability::Display)
                ),
                (
                    "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.570.124.06".into(),
                    "usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.570.124.06".into(),
                    Some(Capability::Display)
                ),
            ]
        );
        // Given search directories replace the defaults.
        let only_share = DiscoverOptions {
            config_search_paths: vec!["/usr/share".into()],
            ..Default::default()
        };
        let got = found(&only_share);
        assert_eq!(got[0].1, "usr/share/glvnd/egl_vendor.d/10_nvidia.json");
        assert!(!got.iter().any(|f| f.0.contains("OpenCL")), "{got:?}");
        // A runtime's discovery for a container without graphics or display: the OpenCL ICD only.
        let compute = DiscoverOptions {
            skip_graphics: true,
            ..Default::default()
        };
        let got = found(&compute);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, "/etc/OpenCL/vendors/nvidia.icd");
    }
}
