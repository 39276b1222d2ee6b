//! The engines' configs: docker's daemon.json, containerd's config.toml and the drop-ins it
//! imports, CRI-O's config and drop-ins. Is the nvidia runtime registered in every engine that
//! runs containers here, does its binary exist, does the default runtime name one that exists,
//! and which CDI spec dirs each engine reads (for the CDI checks after these).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use gpuctk_engines::containerd::{imports_in, Import, CRI_PLUGINS};
use gpuctk_host::checks;
use toml_edit::{DocumentMut, Item, TableLike};

use super::{read::list_dir, read::MAX_CONFIG, report::Checks};

const G: &str = "engines";

/// What the engines' configs say, for the checks after them.
#[derive(Debug, Default)]
pub(super) struct EngineFacts {
    /// Each configured engine that resolves CDI names itself: its name, the key that sets its
    /// spec dirs (with the file), and the dirs it reads.
    pub(super) cdi_readers: Vec<CdiReader>,
    /// The CRI engines configured here (containerd with its CRI plugin on, CRI-O): Kubernetes
    /// runs pods through them.
    pub(super) cri: Vec<&'static str>,
}

/// One engine's CDI spec dirs.
#[derive(Debug)]
pub(super) struct CdiReader {
    pub(super) engine: &'static str,
    /// `<file>: <key>`, or `<engine>'s default` when the key is not set.
    pub(super) source: String,
    pub(super) dirs: Vec<PathBuf>,
}

/// One engine's findings before the cross-engine line is written.
struct Engine {
    /// The config is there (for containerd: with its CRI plugin on).
    configured: bool,
    /// An nvidia runtime is registered.
    registered: bool,
    /// Where to say what is missing.
    file: String,
    configure: String,
}

impl Engine {
    /// `engine` (also its systemd unit) configured at `path`, nothing found yet.
    fn new(engine: &str, path: &Path) -> Engine {
        Engine {
            configured: false,
            registered: false,
            file: path.display().to_string(),
            configure: format!(
                "nvidia-ctk runtime configure --runtime {engine} --config {} && systemctl restart {engine}",
                path.display()
            ),
        }
    }
}

impl CdiReader {
    /// The dirs `set` names (`<file>: <key>`, the dirs), else `shown`'s default: the CDI
    /// library's, which docker, containerd and CRI-O all use.
    fn new(engine: &'static str, shown: &str, set: Option<(String, Vec<String>)>) -> CdiReader {
        match set {
            Some((source, dirs)) => CdiReader {
                engine,
                source,
                dirs: dirs.into_iter().map(PathBuf::from).collect(),
            },
            None => CdiReader {
                engine,
                source: format!("{shown}'s default"),
                dirs: gpuctk_cdi::registry::default_spec_dirs(),
            },
        }
    }
}

/// Every engine check, docker, containerd, then CRI-O; a runtime registered in one engine but
/// not in another that runs containers here is named on the line of the one without it.
pub(super) fn check_engines(
    docker: &Path,
    containerd: &Path,
    crio: &Path,
    path_env: Option<&OsStr>,
    c: &mut Checks,
) -> EngineFacts {
    let mut facts = EngineFacts::default();
    // Each engine's lines apart, so the cross-engine line goes with its engine's.
    let mut lines = [Checks(Vec::new()), Checks(Vec::new()), Checks(Vec::new())];
    let d = check_docker(docker, path_env, &mut lines[0], &mut facts);
    let k = check_containerd(containerd, path_env, &mut lines[1], &mut facts);
    let o = check_crio(crio, path_env, &mut lines[2], &mut facts);
    let all = [("docker", &d), ("containerd", &k), ("crio", &o)];
    for (i, (name, e)) in all.iter().enumerate() {
        if !e.configured || e.registered {
            continue;
        }
        let elsewhere: Vec<&str> = all
            .iter()
            .filter(|(_, o)| o.configured && o.registered)
            .map(|(n, _)| *n)
            .collect();
        let found = if elsewhere.is_empty() {
            format!("{}: no nvidia runtime registered", e.file)
        } else {
            format!(
                "{}: no nvidia runtime registered, but {} has one: containers that {name} runs (pods, when it is a CRI engine) get no GPU",
                e.file,
                elsewhere.join(" and ")
            )
        };
        let fix = if *name == "docker" {
            format!(
                "{} (docker run --gpus works without it, --runtime nvidia does not)",
                e.configure
            )
        } else {
            e.configure.clone()
        };
        lines[i].warn(G, name, found, fix);
    }
    for l in lines {
        c.0.extend(l.0);
    }
    facts
}

fn engine_registration(
    c: &mut Checks,
    engine: &'static str,
    source: &Path,
    key: &str,
    binary: Option<&str>,
    path_env: Option<&OsStr>,
    configure: &str,
) {
    let name = engine;
    match binary.filter(|b| !b.is_empty()) {
        None => c.fail(
            G,
            name,
            format!("{}: {key} is not set", source.display()),
            configure.to_string(),
        ),
        Some(b) => match checks::which(b, path_env) {
            Some(p) => c.ok(
                G,
                name,
                format!("{}: {key} = {b} ({})", source.display(), p.display()),
            ),
            None => c.fail(
                G,
                name,
                format!(
                    "{}: {key} = {b}, which {}: containers of this runtime fail to start",
                    source.display(),
                    if b.contains('/') {
                        "does not exist or is not executable"
                    } else {
                        "is not an executable in PATH"
                    }
                ),
                format!("install nvidia-container-runtime there, or re-register it: {configure}"),
            ),
        },
    }
}

/// Whether `e` (a read's error chain) says the file is not there: anything else (a folder on
/// its way that cannot be searched) is an error to report, not an engine that is absent.
fn is_not_found(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .any(|io| io.kind() == std::io::ErrorKind::NotFound)
}

/// An engine's drop-in folder listed; `None` when it is absent, and when it cannot be listed
/// (a warning saying so: its drop-ins are then not checked).
fn list_drop_ins(
    c: &mut Checks,
    name: &str,
    dir: &Path,
    engine: &str,
) -> Option<Vec<(String, bool)>> {
    match list_dir(dir) {
        Ok(entries) => Some(entries),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            c.warn(
                G,
                name,
                format!(
                    "{}: cannot list {engine}'s drop-in folder: {e}; its drop-ins are not checked",
                    dir.display()
                ),
                format!("make {} a folder root can read", dir.display()),
            );
            None
        }
    }
}

/// The bytes of an engine's config, `None` when absent (pushing the skip line).
fn read_engine_config(c: &mut Checks, engine: &'static str, path: &Path) -> Option<String> {
    match crate::capped::read_capped(path, MAX_CONFIG, "engine config") {
        Ok(b) => Some(String::from_utf8_lossy(&b).into_owned()),
        Err(e) if is_not_found(&e) => {
            c.ok(
                G,
                engine,
                format!(
                    "{} absent: {engine} not configured here, skipped",
                    path.display()
                ),
            );
            None
        }
        Err(e) => {
            c.fail(G, engine, format!("{e:#}"), "make the file readable");
            None
        }
    }
}

/// The default runtime an engine is told to use must be one it knows; else the engine does not
/// start (dockerd, CRI-O) or its CRI plugin does not (containerd).
#[allow(clippy::too_many_arguments)]
fn check_default_runtime(
    c: &mut Checks,
    engine: &'static str,
    file: &Path,
    key: &str,
    default: Option<&str>,
    known: &[String],
    builtin: &[&str],
    effect: &str,
) {
    let Some(d) = default.filter(|d| !d.is_empty()) else {
        return;
    };
    if known.iter().any(|k| k == d) || builtin.contains(&d) {
        c.ok(
            G,
            "default-runtime",
            format!(
                "{engine}: {}: {key} = {d}, a runtime it knows",
                file.display()
            ),
        );
        return;
    }
    let mut names: Vec<&str> = known.iter().map(String::as_str).collect();
    names.extend(builtin);
    c.fail(
        G,
        "default-runtime",
        format!(
            "{engine}: {}: {key} = {d}, but no runtime of that name is configured (it knows {}): {effect}",
            file.display(),
            names.join(", ")
        ),
        format!("register the runtime {d} (gpuctk runtime configure --runtime {engine} --set-as-default registers nvidia), or set {key} to one of the known runtimes"),
    );
}

fn check_docker(
    path: &Path,
    path_env: Option<&OsStr>,
    c: &mut Checks,
    facts: &mut EngineFacts,
) -> Engine {
    let mut out = Engine::new("docker", path);
    let Some(text) = read_engine_config(c, "docker", path) else {
        return out;
    };
    out.configured = true;
    let v: serde_json::Value = if text.trim().is_empty() {
        serde_json::json!({})
    } else {
        match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                c.fail(
                    G,
                    "docker",
                    format!("{}: invalid JSON: {e}", path.display()),
                    "fix the JSON: dockerd does not start with it",
                );
                out.registered = true;
                return out;
            }
        }
    };
    let all: Vec<(String, Option<String>)> = v
        .get("runtimes")
        .and_then(|r| r.as_object())
        .map(|m| {
            m.iter()
                .map(|(k, r)| {
                    (
                        k.clone(),
                        r.get("path").and_then(|p| p.as_str()).map(str::to_string),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let known: Vec<String> = all.iter().map(|(k, _)| k.clone()).collect();
    check_default_runtime(
        c,
        "docker",
        path,
        "default-runtime",
        v.get("default-runtime").and_then(|d| d.as_str()),
        &known,
        &["runc", "io.containerd.runc.v2"],
        "dockerd does not start",
    );
    let cdi_dirs = v.get("cdi-spec-dirs").and_then(|d| d.as_array()).map(|a| {
        a.iter()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    });
    facts.cdi_readers.push(CdiReader::new(
        "docker",
        "docker",
        cdi_dirs.map(|d| (format!("{}: cdi-spec-dirs", path.display()), d)),
    ));
    for (name, bin) in all.into_iter().filter(|(k, _)| k.starts_with("nvidia")) {
        out.registered = true;
        engine_registration(
            c,
            "docker",
            path,
            &format!("runtimes.{name}.path"),
            bin.as_deref(),
            path_env,
            &out.configure,
        );
    }
    out
}

/// A string array under `item`.
fn strings(item: Option<&Item>) -> Option<Vec<String>> {
    item.and_then(Item::as_array).map(|a| {
        a.iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    })
}

/// The runtimes an engine's files register; a later file overrides an earlier one per name.
#[derive(Default)]
struct Runtimes {
    /// Every name, in the order first seen.
    known: Vec<String>,
    /// The nvidia ones: the file, the key of its binary, the binary.
    nvidia: BTreeMap<String, (PathBuf, String, Option<String>)>,
}

impl Runtimes {
    /// The runtimes table `table` of `file`; `key` names a runtime's binary key, `binary`
    /// reads it from the runtime's table.
    fn add(
        &mut self,
        file: &Path,
        table: &dyn TableLike,
        key: impl Fn(&str) -> String,
        binary: impl Fn(&Item) -> Option<&str>,
    ) {
        for (name, rt) in table.iter() {
            if !self.known.iter().any(|k| k == name) {
                self.known.push(name.to_string());
            }
            if name.starts_with("nvidia") {
                let bin = binary(rt).map(str::to_string);
                self.nvidia
                    .insert(name.to_string(), (file.to_path_buf(), key(name), bin));
            }
        }
    }
}

/// The files an import loads, in name order (containerd globs the same way).
fn import_files(imp: &Import) -> std::io::Result<Vec<PathBuf>> {
    if !imp.is_glob() {
        return Ok(vec![imp.dir.join(&imp.pattern)]);
    }
    Ok(list_dir(&imp.dir)?
        .into_iter()
        .filter(|(n, _)| imp.matches(n))
        .map(|(n, _)| imp.dir.join(n))
        .collect())
}

fn check_containerd(
    path: &Path,
    path_env: Option<&OsStr>,
    c: &mut Checks,
    facts: &mut EngineFacts,
) -> Engine {
    let mut out = Engine::new("containerd", path);
    let Some(text) = read_engine_config(c, "containerd", path) else {
        return out;
    };
    let parse = |file: &Path, text: &str, c: &mut Checks| match text.parse::<DocumentMut>() {
        Ok(d) => Some(d),
        Err(e) => {
            c.fail(
                G,
                "containerd",
                format!("{}: invalid TOML: {}", file.display(), e.message()),
                "fix the TOML: containerd does not start with it",
            );
            None
        }
    };
    let Some(main) = parse(path, &text, c) else {
        out.configured = true;
        out.registered = true;
        return out;
    };
    // docker's packages ship containerd with its CRI plugin off: it then runs docker's
    // containers only, through docker's runtimes, and needs none of its own.
    let disabled = strings(main.get("disabled_plugins")).unwrap_or_default();
    if let Some(off) = disabled.iter().find(|p| CRI_PLUGINS.contains(&p.as_str())) {
        c.ok(
            G,
            "containerd",
            format!(
                "{}: disabled_plugins has {off}: containerd runs no pods here (docker's own), skipped",
                path.display()
            ),
        );
        return out;
    }
    out.configured = true;
    facts.cri.push("containerd");

    // The drop-ins, resolved as `runtime configure` resolves them.
    let imports = imports_in(path, &main);
    let mut docs = vec![(path.to_path_buf(), main)];
    for imp in &imports {
        let files = match import_files(imp) {
            Ok(f) => f,
            // containerd globs a missing directory to nothing, and starts.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                c.warn(
                    G,
                    "containerd-imports",
                    format!(
                        "{}: imports {}/{}, but {}: {e}",
                        path.display(),
                        imp.dir.display(),
                        imp.pattern,
                        imp.dir.display()
                    ),
                    "make the directory readable (containerd skips what it cannot list), or remove the import",
                );
                continue;
            }
        };
        for f in files {
            match crate::capped::read_capped(&f, MAX_CONFIG, "containerd drop-in") {
                Ok(b) => {
                    if let Some(d) = parse(&f, &String::from_utf8_lossy(&b), c) {
                        docs.push((f, d));
                    }
                }
                Err(e) => c.fail(
                    G,
                    "containerd-imports",
                    format!("{}: imports {}: {e:#}", path.display(), f.display()),
                    "create the file, or remove the import: containerd does not start while an import it names cannot be read",
                ),
            }
        }
    }
    // A drop-in next to the config that no import names is never read.
    let conf_d = path.parent().unwrap_or(Path::new("/")).join("conf.d");
    if let Some(entries) = list_drop_ins(c, "containerd-imports", &conf_d, "containerd") {
        let ignored: Vec<String> = entries
            .iter()
            .filter(|(n, _)| n.ends_with(".toml"))
            .filter(|(n, _)| !imports.iter().any(|i| i.dir == conf_d && i.matches(n)))
            .map(|(n, _)| conf_d.join(n).display().to_string())
            .collect();
        if !ignored.is_empty() {
            c.warn(
                G,
                "containerd-imports",
                format!(
                    "{} not imported by {}: containerd ignores it, and whatever it registers",
                    ignored.join(", "),
                    path.display()
                ),
                format!(
                    "add imports = [\"{}/*.toml\"] to {} (runtime configure --drop-in-config does), then systemctl restart containerd",
                    conf_d.display(),
                    path.display()
                ),
            );
        }
    }

    // Later files override earlier ones, per runtime name and per setting.
    let mut runtimes = Runtimes::default();
    let mut default: Option<(PathBuf, String, String)> = None;
    let mut cdi: Option<(PathBuf, String, Vec<String>)> = None;
    for (file, doc) in &docs {
        for plugin in CRI_PLUGINS {
            let Some(cri) = doc.get("plugins").and_then(|p| p.get(plugin)) else {
                continue;
            };
            if let Some(d) = strings(cri.get("cdi_spec_dirs")) {
                cdi = Some((
                    file.clone(),
                    format!("plugins.\"{plugin}\".cdi_spec_dirs"),
                    d,
                ));
            }
            let Some(ctrd) = cri.get("containerd") else {
                continue;
            };
            if let Some(d) = ctrd.get("default_runtime_name").and_then(|d| d.as_str()) {
                default = Some((
                    file.clone(),
                    format!("plugins.\"{plugin}\".containerd.default_runtime_name"),
                    d.to_string(),
                ));
            }
            if let Some(t) = ctrd.get("runtimes").and_then(|r| r.as_table_like()) {
                runtimes.add(
                    file,
                    t,
                    |name| {
                        format!(
                            "plugins.\"{plugin}\".containerd.runtimes.{name}.options.BinaryName"
                        )
                    },
                    |rt| rt.get("options")?.get("BinaryName")?.as_str(),
                );
            }
        }
    }
    if let Some((file, key, d)) = &default {
        check_default_runtime(
            c,
            "containerd",
            file,
            key,
            Some(d),
            &runtimes.known,
            &["runc"],
            "containerd's CRI plugin does not load, and no pod starts",
        );
    }
    facts.cdi_readers.push(CdiReader::new(
        "containerd",
        "containerd",
        cdi.map(|(file, key, d)| (format!("{}: {key}", file.display()), d)),
    ));
    for (_, (file, key, bin)) in runtimes.nvidia {
        out.registered = true;
        engine_registration(
            c,
            "containerd",
            &file,
            &key,
            bin.as_deref(),
            path_env,
            &out.configure,
        );
    }
    out
}

fn check_crio(
    path: &Path,
    path_env: Option<&OsStr>,
    c: &mut Checks,
    facts: &mut EngineFacts,
) -> Engine {
    let drop_dir = path.parent().unwrap_or(Path::new("/")).join("crio.conf.d");
    let mut out = Engine::new("crio", path);
    let mut files = Vec::new();
    // Anything but "not there" is read below, which reports why it cannot be.
    if !std::fs::metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        files.push(path.to_path_buf());
    }
    // CRI-O reads every file of its drop-in dir, in name order.
    if let Some(entries) = list_drop_ins(c, "crio", &drop_dir, "CRI-O") {
        files.extend(
            entries
                .into_iter()
                .filter(|(_, is_file)| *is_file)
                .map(|(n, _)| drop_dir.join(n)),
        );
    }
    if files.is_empty() {
        c.ok(
            G,
            "crio",
            format!(
                "{} and {} absent: CRI-O not configured here, skipped",
                path.display(),
                drop_dir.display()
            ),
        );
        return out;
    }
    out.configured = true;
    facts.cri.push("crio");
    let mut runtimes = Runtimes::default();
    let mut default: Option<(PathBuf, String)> = None;
    let mut cdi: Option<(PathBuf, Vec<String>)> = None;
    for f in &files {
        let Some(text) = read_engine_config(c, "crio", f) else {
            continue;
        };
        let doc = match text.parse::<DocumentMut>() {
            Ok(d) => d,
            Err(e) => {
                c.fail(
                    G,
                    "crio",
                    format!("{}: invalid TOML: {}", f.display(), e.message()),
                    "fix the TOML: CRI-O does not start with it",
                );
                out.registered = true;
                continue;
            }
        };
        let Some(rt) = doc.get("crio").and_then(|p| p.get("runtime")) else {
            continue;
        };
        if let Some(d) = strings(rt.get("cdi_spec_dirs")) {
            cdi = Some((f.clone(), d));
        }
        if let Some(d) = rt.get("default_runtime").and_then(|d| d.as_str()) {
            default = Some((f.clone(), d.to_string()));
        }
        if let Some(t) = rt.get("runtimes").and_then(|r| r.as_table_like()) {
            runtimes.add(
                f,
                t,
                |name| format!("crio.runtime.runtimes.{name}.runtime_path"),
                |rt| rt.get("runtime_path")?.as_str(),
            );
        }
    }
    if let Some((file, d)) = &default {
        check_default_runtime(
            c,
            "crio",
            file,
            "crio.runtime.default_runtime",
            Some(d),
            &runtimes.known,
            &["crun", "runc"],
            "CRI-O does not start",
        );
    }
    facts.cdi_readers.push(CdiReader::new(
        "crio",
        "CRI-O",
        cdi.map(|(file, d)| (format!("{}: crio.runtime.cdi_spec_dirs", file.display()), d)),
    ));
    out.file = format!("{} and {}", path.display(), drop_dir.display());
    for (name, (file, key, bin)) in runtimes.nvidia {
        out.registered = true;
        // CRI-O looks an empty runtime_path up by the runtime's name in PATH.
        let bin = bin.filter(|b| !b.is_empty()).unwrap_or(name);
        engine_registration(c, "crio", &file, &key, Some(&bin), path_env, &out.configure);
    }
    out
}
