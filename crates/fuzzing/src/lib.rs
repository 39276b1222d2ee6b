//! The bodies of gpuctk's fuzz targets: one function per parser of outside input, bytes in,
//! properties asserted (never a panic; a round trip where we also write the format).
//!
//! The `cargo fuzz` project in `fuzz/` (nightly, its own workspace) calls these one-liners, and
//! `tests/corpora.rs` replays every committed corpus and regression input through the same
//! functions on stable, so CI checks the corpora without nightly. See `docs/fuzzing.md`.
//!
//! A target panics (through `assert!`) exactly when it found a bug; an input the parser rejects
//! with an error is a pass.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use gpuctk_cdi::{Format, Spec};
use gpuctk_core::{CapabilitySet, Delivery, Devices, Policy};
use gpuctk_engines::{Edit, Engine, Options};
use gpuctk_ldcache::{Cache, Endian};

/// A target body: panics exactly when the input shows a bug.
pub type Target = fn(&[u8]);

/// Every target by name: the name is the `fuzz/fuzz_targets/<name>.rs` file and the
/// `fuzz/corpus/<name>/` folder.
pub const TARGETS: &[(&str, Target)] = &[
    ("ldcache", ldcache),
    ("procfs", procfs),
    ("elf", elf),
    ("cdi_json", cdi_json),
    ("cdi_yaml", cdi_yaml),
    ("request", request),
    ("visible_devices", visible_devices),
    ("capabilities", capabilities),
    ("config_toml", config_toml),
    ("engine_docker", engine_docker),
    ("engine_toml", engine_toml),
];

/// `ld.so.cache`: parse; whatever parses is written back (both byte orders) and re-parsed to
/// the same libraries, and writing is a fixed point after one normalisation (sorting, string
/// sharing, glibc-hwcaps renumbering).
pub fn ldcache(data: &[u8]) {
    let Ok(first) = gpuctk_ldcache::parse(data) else {
        return;
    };
    let bytes = first
        .try_to_bytes(Endian::Little)
        .expect("a parsed cache is smaller than 4 GiB and must serialize");
    let second = gpuctk_ldcache::parse(&bytes)
        .unwrap_or_else(|e| panic!("our own cache does not re-parse: {e}"));

    // The same libraries: in glibc's order, and with the same hwcap when no renumbering was
    // needed (the names were already sorted and unique).
    let names_sorted = first.hwcaps_subdirs.windows(2).all(|w| w[0] < w[1]);
    if names_sorted {
        let mut sorted = first.clone();
        sorted.sort();
        assert!(
            second.entries == sorted.entries,
            "entries changed in a round trip"
        );
        assert_eq!(second.hwcaps_subdirs, first.hwcaps_subdirs);
    } else {
        let key = |c: &Cache| {
            let mut v: Vec<_> = c
                .entries
                .iter()
                .map(|e| (e.flags, e.key.clone(), e.value.clone(), e.osversion))
                .collect();
            v.sort();
            v
        };
        assert!(
            key(&second) == key(&first),
            "entries changed in a round trip"
        );
        let mut names = first.hwcaps_subdirs.clone();
        names.sort();
        names.dedup();
        assert_eq!(second.hwcaps_subdirs, names);
    }
    assert_eq!(
        second.generator.as_deref().map(c_str),
        first.generator.as_deref().map(c_str),
        "generator changed in a round trip"
    );

    // glibc's name order compares digit runs as C ints, which wrap past 2^31: with such a
    // run the order is not transitive (in ldconfig too), and sorting what was sorted can move
    // entries. Short runs make it a total order, and writing then a fixed point.
    if first.entries.iter().all(|e| !long_digit_run(&e.key)) {
        let again = second.try_to_bytes(Endian::Little).expect("serialize");
        assert!(again == bytes, "writing is not a fixed point");
    }
    let big = first
        .try_to_bytes(Endian::Big)
        .expect("serialize big-endian");
    let from_big = gpuctk_ldcache::parse(&big)
        .unwrap_or_else(|e| panic!("our own big-endian cache does not re-parse: {e}"));
    assert!(from_big == second, "big- and little-endian writes differ");

    // Lookups over whatever parsed must not panic either.
    for e in first.entries.iter().take(16) {
        let _ = first.lookup(&e.key, e.flags);
    }
}

/// Whether `s` holds a run of more than 9 digits, which `_dl_cache_libcmp` may overflow.
fn long_digit_run(s: &str) -> bool {
    s.split(|c: char| !c.is_ascii_digit())
        .any(|run| run.len() > 9)
}

/// A string as C sees it: cut at the first NUL.
fn c_str(s: &str) -> &str {
    s.split('\0').next().unwrap_or("")
}

/// The files the NVIDIA kernel module publishes under `/proc` (`driver/nvidia/version`,
/// `driver/nvidia/gpus/*/information`, `devices`): every parser on the same bytes; what
/// parses satisfies the type's own checks.
pub fn procfs(data: &[u8]) {
    use gpuctk_host::procfs::{
        is_bus_id, is_gpu_uuid, parse_char_devices, parse_information, parse_version,
    };
    use gpuctk_host::DriverVersion;

    // Discovery reads `devices` lossily and the other two only when they are UTF-8.
    let _ = parse_char_devices(&String::from_utf8_lossy(data));
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(v) = parse_version(text) {
        assert_eq!(DriverVersion::parse(v.as_str()).as_ref(), Some(&v));
        let _ = v.major();
    }
    if let Ok(info) = parse_information(text) {
        assert!(is_gpu_uuid(&info.uuid), "{info:?}");
        assert!(is_bus_id(&info.bus_id), "{info:?}");
        assert!(info.minor < 255, "{info:?}");
        assert!(!info.model.is_empty(), "{info:?}");
    }
    for (_, name) in parse_char_devices(text) {
        assert!(!name.contains('\n'), "{name:?}");
    }
}

/// ELF: the one reader (`gpuctk-elf`) in each of its uses (host discovery's soname, the mock
/// host's interpreter and `DT_NEEDED`, the container hooks' ABI and note sections) and the note
/// parser on the raw bytes; whatever reads is within the input's bounds.
pub fn elf(data: &[u8]) {
    use gpuctk_container::hooks::CUDA_FWD_COMPAT_SECTION;

    let lib = gpuctk_container::elf::library_info(data);
    if let Ok(info) = &lib {
        let _ = info.cache_flags();
        let _ = info.is_shared_library();
    }
    match gpuctk_elf::object(data) {
        Ok(o) => {
            assert!(
                o.needed.len() <= data.len() / 8,
                "more DT_NEEDED than dynamic entries"
            );
            let strings = o.needed.iter().chain(&o.soname).chain(&o.interp);
            assert!(strings.map(|s| s.len()).max().unwrap_or(0) <= data.len());
            // The soname reader reads a subset of what the full reader reads.
            let info = lib.expect("object() read it, library_info() must too");
            assert_eq!((info.header, info.soname), (o.header, o.soname));
        }
        Err(gpuctk_elf::Error::NotElf) => {
            assert!(matches!(lib, Err(gpuctk_container::elf::ElfError::NotElf)))
        }
        Err(_) => {}
    }
    for section in [CUDA_FWD_COMPAT_SECTION, ".note.ABI-tag", ""] {
        if let Ok(Some(notes)) = gpuctk_elf::note_section(data, section) {
            for n in notes {
                assert!(n.desc.len() <= data.len());
            }
        }
    }
    for (le, align) in [(true, 4), (false, 8)] {
        if let Ok(notes) = gpuctk_elf::parse_notes(data, le, align) {
            assert!(notes.iter().map(|n| n.desc.len()).sum::<usize>() <= data.len());
        }
    }
}

/// A CDI spec as JSON: see [`cdi_spec`].
pub fn cdi_json(data: &[u8]) {
    cdi_spec(data, Format::Json);
}

/// A CDI spec as YAML: see [`cdi_spec`].
pub fn cdi_yaml(data: &[u8]) {
    cdi_spec(data, Format::Yaml);
}

/// Parse a spec in `format`; whatever parses validates without panicking, is written as YAML to
/// serde_norway's bytes, and comes back equal from its own JSON and YAML.
fn cdi_spec(data: &[u8], format: Format) {
    let Ok(spec) = Spec::from_bytes(data, Some(format)) else {
        return;
    };
    let _ = gpuctk_cdi::validate(&spec);
    let _ = gpuctk_cdi::minimum_version(&spec);
    let _ = gpuctk_cdi::version::requirements(&spec);
    let _ = gpuctk_cdi::version::Version::parse(&spec.cdi_version);
    let _ = gpuctk_cdi::names::parse_kind(&spec.kind);
    for d in &spec.devices {
        let _ = gpuctk_cdi::parse_qualified_name(&format!("{}={}", spec.kind, d.name));
    }
    // The direct YAML writer answers with serde_norway's bytes or not at all.
    let norway = serde_norway::to_string(&spec).expect("a parsed spec serializes");
    assert_eq!(
        spec.to_yaml(),
        format!("---\n{norway}"),
        "the two YAML writers differ"
    );
    for out in [Format::Json, Format::Yaml] {
        let text = spec.to_format(out);
        let back = match Spec::from_bytes(text.as_bytes(), Some(out)) {
            Ok(back) => back,
            Err(e) => panic!("our own {out:?} does not re-parse: {e}\n{text}"),
        };
        assert_eq!(back, spec, "{out:?} round trip changed the spec:\n{text}");
        let sniffed = Spec::from_bytes(text.as_bytes(), None)
            .unwrap_or_else(|e| panic!("our own {out:?} is sniffed wrongly: {e}\n{text}"));
        assert_eq!(sniffed, spec);
    }
}

/// The policies a request is read under: NVIDIA's default, and every gate closed (with a
/// driver-capability allow-list) or opened.
fn policies() -> [Policy; 3] {
    let strict = Policy {
        accept_envvar_unprivileged: false,
        accept_volume_mounts: true,
        supported_driver_capabilities: CapabilitySet::parse_supported("utility,video")
            .expect("a valid allow-list"),
        ..Policy::default()
    };
    let open = Policy {
        accept_envvar_unprivileged: true,
        accept_volume_mounts: true,
        swarm_resource: vec!["DOCKER_RESOURCE_GPU".into()],
        annotation_prefixes: vec!["cdi.k8s.io/".into(), "nvidia.cdi.k8s.io/".into()],
        disable_require: true,
        accept_annotations_unprivileged: true,
        supported_driver_capabilities: CapabilitySet::all(),
        ignore_imex_channel_requests: false,
    };
    [Policy::default(), strict, open]
}

/// An OCI `config.json` as the shim and the prestart hook read it: any JSON, under several
/// policies and both deliveries.
pub fn request(data: &[u8]) {
    let Ok(config) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    for policy in policies() {
        for delivery in [Delivery::Shim, Delivery::PrestartHook] {
            let _ = gpuctk_core::parse_request(&config, &policy, delivery);
        }
    }
}

/// `NVIDIA_VISIBLE_DEVICES`: what parses lists each device once, and its rendering parses back
/// to the same list.
pub fn visible_devices(data: &[u8]) {
    let value = String::from_utf8_lossy(data);
    let Ok(devices) = gpuctk_core::request::parse_devices(&value, "NVIDIA_VISIBLE_DEVICES") else {
        return;
    };
    if let Devices::Ids(ids) = &devices {
        assert!(!ids.is_empty(), "{value:?} gave an empty device list");
        let mut seen = std::collections::HashSet::new();
        for id in ids {
            assert!(seen.insert(id), "{id:?} listed twice in {ids:?}");
        }
        let rendered = ids
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let back = gpuctk_core::request::parse_devices(&rendered, "NVIDIA_VISIBLE_DEVICES")
            .unwrap_or_else(|e| panic!("{rendered:?} (from {value:?}) does not re-parse: {e}"));
        assert_eq!(back, devices, "{value:?} rendered as {rendered:?}");
    }
}

/// `NVIDIA_DRIVER_CAPABILITIES`: what parses renders back to the same set.
pub fn capabilities(data: &[u8]) {
    let value = String::from_utf8_lossy(data);
    let Ok(set) = CapabilitySet::parse(&value) else {
        return;
    };
    let rendered = set
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let back = CapabilitySet::parse(&rendered)
        .unwrap_or_else(|e| panic!("{rendered:?} (from {value:?}) does not re-parse: {e}"));
    assert_eq!(back, set, "{value:?} rendered as {rendered:?}");
}

/// `config.toml`: any text gives a config or a one-line error naming the file.
pub fn config_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("/etc/nvidia-container-runtime/config.toml");
    if let Err(e) = gpuctk::parse_config(text, path) {
        let msg = e.to_string();
        assert!(msg.starts_with(path.to_str().unwrap_or_default()), "{msg}");
    }
}

/// Docker's `daemon.json`: see [`engine`].
pub fn engine_docker(data: &[u8]) {
    engine(Engine::Docker, "/etc/docker/daemon.json", data);
}

/// containerd's `config.toml` and CRI-O's `crio.conf` on the same bytes: see [`engine`].
pub fn engine_toml(data: &[u8]) {
    engine(Engine::Containerd, "/etc/containerd/config.toml", data);
    engine(Engine::Crio, "/etc/crio/crio.conf", data);
}

/// `runtime configure` on a config holding `data`: whatever configures re-configures to no
/// change (idempotence), and unconfigures without error.
fn engine(engine: Engine, config_path: &str, data: &[u8]) {
    let config_path = Path::new(config_path);
    let other = Options {
        runtime_name: "gpu".into(),
        runtime_path: "/opt/gpuctk/bin/nvidia-container-runtime".into(),
        set_as_default: true,
        enable_cdi: engine != Engine::Crio,
        // The explicit drop-in (`--drop-in-config`): the main config gains an import.
        drop_in: Some(PathBuf::from(match engine {
            Engine::Crio => "/etc/crio/crio.conf.d/50-gpu.toml",
            _ => "/etc/containerd/conf.d/99-nvidia.toml",
        })),
    };
    for opts in [Options::default(), other] {
        let mut files: HashMap<PathBuf, Vec<u8>> = HashMap::new();
        files.insert(config_path.to_path_buf(), data.to_vec());
        let Ok(edits) = configure_in(engine, config_path, &files, &opts) else {
            continue;
        };
        apply_in(&mut files, &edits);
        let again = configure_in(engine, config_path, &files, &opts)
            .unwrap_or_else(|e| panic!("{engine}: our own edit does not configure again: {e}"));
        for e in &again {
            assert!(
                e.is_noop(),
                "{engine}: configure is not idempotent for {}:\n{}",
                e.path.display(),
                e.unified_diff()
            );
        }
        let current = files.get(config_path).cloned();
        let read = |p: &Path| Ok(files.get(p).cloned());
        gpuctk_engines::unconfigure_with(engine, config_path, current.as_deref(), &opts, &read)
            .unwrap_or_else(|e| panic!("{engine}: our own edit does not unconfigure: {e}"));
    }
}

fn configure_in(
    engine: Engine,
    config_path: &Path,
    files: &HashMap<PathBuf, Vec<u8>>,
    opts: &Options,
) -> Result<Vec<Edit>, gpuctk_engines::EngineError> {
    let read = |p: &Path| Ok(files.get(p).cloned());
    let current = files.get(config_path).map(Vec::as_slice);
    gpuctk_engines::configure_with(engine, config_path, current, opts, &read)
}

fn apply_in(files: &mut HashMap<PathBuf, Vec<u8>>, edits: &[Edit]) {
    for e in edits {
        if e.delete {
            files.remove(&e.path);
        } else {
            files.insert(e.path.clone(), e.after.clone());
        }
    }
}
