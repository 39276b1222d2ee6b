//! The engines' configs: docker's daemon.json, containerd's config.toml and its imports,
//! CRI-O's config and drop-ins: is the nvidia runtime registered, and does its binary exist.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use gpuctk_host::checks;

use super::Checks;

pub(super) fn engine_registration(
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
            "engines",
            name,
            format!("{}: {key} is not set", source.display()),
            configure.to_string(),
        ),
        Some(b) => match checks::which(b, path_env) {
            Some(p) => c.ok(
                "engines",
                name,
                format!("{}: {key} = {b} ({})", source.display(), p.display()),
            ),
            None => c.fail(
                "engines",
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

/// The bytes of an engine's config, `None` when absent (pushing the skip line).
pub(super) fn read_engine_config(
    c: &mut Checks,
    engine: &'static str,
    path: &Path,
) -> Option<String> {
    match super::read_capped(path, 16 << 20, "engine config") {
        Ok(b) => Some(String::from_utf8_lossy(&b).into_owned()),
        Err(_) if !path.exists() => {
            c.ok(
                "engines",
                engine,
                format!(
                    "{} absent: {engine} not configured here, skipped",
                    path.display()
                ),
            );
            None
        }
        Err(e) => {
            c.fail(
                "engines",
                engine,
                format!("{e:#}"),
                "make the file readable",
            );
            None
        }
    }
}

pub(super) fn check_docker(path: &Path, path_env: Option<&OsStr>, c: &mut Checks) {
    let Some(text) = read_engine_config(c, "docker", path) else {
        return;
    };
    let configure = format!(
        "nvidia-ctk runtime configure --runtime docker --config {} && systemctl restart docker",
        path.display()
    );
    let v: serde_json::Value = if text.trim().is_empty() {
        serde_json::json!({})
    } else {
        match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                c.fail(
                    "engines",
                    "docker",
                    format!("{}: invalid JSON: {e}", path.display()),
                    "fix the JSON: dockerd does not start with it",
                );
                return;
            }
        }
    };
    let runtimes: Vec<(String, Option<String>)> = v
        .get("runtimes")
        .and_then(|r| r.as_object())
        .map(|m| {
            m.iter()
                .filter(|(k, _)| k.starts_with("nvidia"))
                .map(|(k, r)| {
                    (
                        k.clone(),
                        r.get("path").and_then(|p| p.as_str()).map(str::to_string),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if runtimes.is_empty() {
        c.warn(
            "engines",
            "docker",
            format!("{}: no nvidia runtime registered", path.display()),
            format!("{configure} (docker run --gpus works without it, --runtime nvidia does not)"),
        );
    }
    for (name, bin) in runtimes {
        engine_registration(
            c,
            "docker",
            path,
            &format!("runtimes.{name}.path"),
            bin.as_deref(),
            path_env,
            &configure,
        );
    }
}

/// `*` and `?` glob match on a file name.
pub(super) fn glob(pat: &[u8], name: &[u8]) -> bool {
    match (pat.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => glob(&pat[1..], name) || (!name.is_empty() && glob(pat, &name[1..])),
        (Some(b'?'), Some(_)) => glob(&pat[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => glob(&pat[1..], &name[1..]),
        _ => false,
    }
}

/// The files an `imports` entry names, in name order.
pub(super) fn import_files(base: &Path, imp: &str) -> Vec<PathBuf> {
    let full = if Path::new(imp).is_absolute() {
        PathBuf::from(imp)
    } else {
        base.join(imp)
    };
    let (Some(dir), Some(pat)) = (full.parent(), full.file_name().and_then(|f| f.to_str())) else {
        return Vec::new();
    };
    if !pat.contains(['*', '?']) {
        return vec![full];
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter(|e| glob(pat.as_bytes(), e.file_name().as_encoded_bytes()))
                .map(|e| e.path())
                .take(1000)
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

pub(super) fn check_containerd(path: &Path, path_env: Option<&OsStr>, c: &mut Checks) {
    let Some(text) = read_engine_config(c, "containerd", path) else {
        return;
    };
    let configure = format!(
        "nvidia-ctk runtime configure --runtime containerd --config {} && systemctl restart containerd",
        path.display()
    );
    let parse =
        |file: &Path, text: &str, c: &mut Checks| match text.parse::<toml_edit::DocumentMut>() {
            Ok(d) => Some(d),
            Err(e) => {
                c.fail(
                    "engines",
                    "containerd",
                    format!("{}: invalid TOML: {}", file.display(), e.message()),
                    "fix the TOML: containerd does not start with it",
                );
                None
            }
        };
    let Some(main) = parse(path, &text, c) else {
        return;
    };
    let mut docs = vec![(path.to_path_buf(), main.clone())];
    let base = path.parent().unwrap_or(Path::new("/"));
    if let Some(imports) = main.get("imports").and_then(|i| i.as_array()) {
        for imp in imports.iter().filter_map(|v| v.as_str()) {
            for f in import_files(base, imp) {
                if let Ok(b) = super::read_capped(&f, 16 << 20, "containerd drop-in") {
                    if let Some(d) = parse(&f, &String::from_utf8_lossy(&b), c) {
                        docs.push((f, d));
                    }
                }
            }
        }
    }
    // Later files override earlier ones, per runtime name.
    let mut found: BTreeMap<String, (PathBuf, String, Option<String>)> = BTreeMap::new();
    for (file, doc) in &docs {
        for plugin in [
            "cri",
            "io.containerd.grpc.v1.cri",
            "io.containerd.cri.v1.runtime",
        ] {
            let Some(runtimes) = doc
                .get("plugins")
                .and_then(|p| p.get(plugin))
                .and_then(|p| p.get("containerd"))
                .and_then(|p| p.get("runtimes"))
                .and_then(|r| r.as_table_like())
            else {
                continue;
            };
            for (name, rt) in runtimes.iter().filter(|(k, _)| k.starts_with("nvidia")) {
                let bin = rt
                    .get("options")
                    .and_then(|o| o.get("BinaryName"))
                    .and_then(|b| b.as_str())
                    .map(str::to_string);
                found.insert(
                    name.to_string(),
                    (
                        file.clone(),
                        format!(
                            "plugins.\"{plugin}\".containerd.runtimes.{name}.options.BinaryName"
                        ),
                        bin,
                    ),
                );
            }
        }
    }
    if found.is_empty() {
        c.warn(
            "engines",
            "containerd",
            format!("{}: no nvidia runtime registered", path.display()),
            configure,
        );
        return;
    }
    for (_, (file, key, bin)) in found {
        engine_registration(
            c,
            "containerd",
            &file,
            &key,
            bin.as_deref(),
            path_env,
            &configure,
        );
    }
}

pub(super) fn check_crio(path: &Path, path_env: Option<&OsStr>, c: &mut Checks) {
    let drop_dir = path.parent().unwrap_or(Path::new("/")).join("crio.conf.d");
    let mut files = Vec::new();
    if path.exists() {
        files.push(path.to_path_buf());
    }
    if let Ok(rd) = std::fs::read_dir(&drop_dir) {
        let mut d: Vec<PathBuf> = rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .take(1000)
            .collect();
        d.sort();
        files.extend(d);
    }
    if files.is_empty() {
        c.ok(
            "engines",
            "crio",
            format!(
                "{} and {} absent: CRI-O not configured here, skipped",
                path.display(),
                drop_dir.display()
            ),
        );
        return;
    }
    let configure = format!(
        "nvidia-ctk runtime configure --runtime crio --config {} && systemctl restart crio",
        path.display()
    );
    let mut found: BTreeMap<String, (PathBuf, Option<String>)> = BTreeMap::new();
    for f in &files {
        let Some(text) = read_engine_config(c, "crio", f) else {
            continue;
        };
        let doc = match text.parse::<toml_edit::DocumentMut>() {
            Ok(d) => d,
            Err(e) => {
                c.fail(
                    "engines",
                    "crio",
                    format!("{}: invalid TOML: {}", f.display(), e.message()),
                    "fix the TOML: CRI-O does not start with it",
                );
                continue;
            }
        };
        let Some(runtimes) = doc
            .get("crio")
            .and_then(|p| p.get("runtime"))
            .and_then(|p| p.get("runtimes"))
            .and_then(|r| r.as_table_like())
        else {
            continue;
        };
        for (name, rt) in runtimes.iter().filter(|(k, _)| k.starts_with("nvidia")) {
            let bin = rt
                .get("runtime_path")
                .and_then(|b| b.as_str())
                .map(str::to_string);
            found.insert(name.to_string(), (f.clone(), bin));
        }
    }
    if found.is_empty() {
        c.warn(
            "engines",
            "crio",
            "no nvidia runtime registered in CRI-O's config or drop-ins".to_string(),
            configure,
        );
        return;
    }
    for (name, (file, bin)) in found {
        // CRI-O looks an empty runtime_path up by the runtime's name in PATH.
        let bin = bin.filter(|b| !b.is_empty()).unwrap_or(name.clone());
        engine_registration(
            c,
            "crio",
            &file,
            &format!("crio.runtime.runtimes.{name}.runtime_path"),
            Some(&bin),
            path_env,
            &configure,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob(b"*.toml", b"99-nvidia.toml"));
        assert!(!glob(b"*.toml", b"99-nvidia.toml.bak"));
        assert!(glob(b"9?-*", b"99-x"));
    }
}
