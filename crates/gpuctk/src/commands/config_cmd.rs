//! `gpuctk config` (`nvidia-ctk config`): print the default config.toml, or change keys of an
//! existing one, keeping every other byte (comments, order) as it was. What is written must
//! load without an error or an unknown key, or nothing is written.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use toml_edit::{Array, DocumentMut, Item, Table, Value};

use crate::cli::{ConfigCmdArgs, ConfigCommand};
use crate::config::{self, Config};

fn quoted(v: &[String]) -> String {
    let items: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", items.join(", "))
}

/// The default config.toml: NVIDIA's layout and keys with gpuctk's defaults; a commented key
/// holds its default, and NVIDIA's libnvidia-container settings, which gpuctk does not apply,
/// are named in a comment rather than set (they would only draw a warning).
pub fn default_text() -> String {
    let c = Config::default();
    let caps = "compat32,compute,display,graphics,ngx,utility,video";
    format!(
        r#"# config.toml of gpuctk, read by nvidia-container-runtime, nvidia-container-runtime-hook and
# nvidia-container-cli (the NVIDIA Container Toolkit's keys). A commented key holds its default.

#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "{caps}"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
#no-cgroups = false
#root = "/run/nvidia/driver"
# path, environment, debug, ldcache, load-kmods, no-pivot, user and ldconfig configure
# libnvidia-container; gpuctk injects natively and does not apply them.

[nvidia-container-runtime]
#debug = "/var/log/nvidia-container-runtime.log"
log-level = "{log_level}"
mode = "auto"
runtimes = {runtimes}

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = {prefixes}
default-kind = "{kind}"
spec-dirs = {dirs}

[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = "ldconfig"

[gpuctk]
#accept-cdi-annotations-when-unprivileged = false
#dev-root = "/"
#hook-path = "/usr/bin/nvidia-cdi-hook"
#hooks-in-shim = true
#proc-root = "/proc"
"#,
        log_level = c.log_level,
        runtimes = quoted(&c.runtimes),
        prefixes = quoted(&c.policy.annotation_prefixes),
        kind = c.default_kind,
        dirs = quoted(
            &c.spec_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
        ),
    )
}

/// The TOML value `--set KEY=VALUE` gives.
fn value_for(key: &str, value: Option<&str>, separator: &str) -> anyhow::Result<Value> {
    let kind = config::key_kind(key);
    if kind == Some(config::Kind::List) {
        let Some(v) = value else {
            bail!("--set {key}: a list key needs a value, items separated by {separator:?}");
        };
        let mut a = Array::new();
        for item in v.split(separator).filter(|s| !s.is_empty()) {
            a.push(item);
        }
        return Ok(Value::Array(a));
    }
    if kind == Some(config::Kind::Bool) {
        return match value {
            None | Some("true") => Ok(Value::from(true)),
            Some("false") => Ok(Value::from(false)),
            Some(other) => bail!("--set {key}={other}: expected true or false"),
        };
    }
    match value {
        Some(v) => Ok(Value::from(v)),
        None => bail!("--set {key}: give a value, {key}=VALUE (only true/false keys may be bare)"),
    }
}

/// Set dotted `key` in `doc`, creating tables on the way.
pub fn set(doc: &mut DocumentMut, key: &str, value: Value) -> anyhow::Result<()> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        bail!("--set {key}: not a key (dotted names such as nvidia-container-cli.root)");
    }
    let (last, tables) = parts.split_last().expect("split gives one part");
    let mut t: &mut Table = doc.as_table_mut();
    for (i, p) in tables.iter().enumerate() {
        let entry = t.entry(p).or_insert_with(|| {
            let mut n = Table::new();
            n.set_implicit(i + 1 < tables.len());
            Item::Table(n)
        });
        t = entry
            .as_table_mut()
            .with_context(|| format!("--set {key}: {} is not a table", parts[..=i].join(".")))?;
    }
    match t.get_mut(last).and_then(Item::as_value_mut) {
        // Keep the key's place and its comments.
        Some(v) => {
            let decor = v.decor().clone();
            *v = value;
            *v.decor_mut() = decor;
        }
        None => {
            t.insert(last, Item::Value(value));
        }
    }
    Ok(())
}

fn write_out(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| {
            format!(
                "{}: cannot create directory {}",
                path.display(),
                dir.display()
            )
        })?;
    }
    gpuctk_atomicfile::replace(path, text.as_bytes(), &Default::default())
        .with_context(|| format!("{}: cannot write", path.display()))
}

pub fn run(a: ConfigCmdArgs) -> anyhow::Result<ExitCode> {
    if let Some(ConfigCommand::Default { output }) = a.command {
        let text = default_text();
        match output {
            Some(p) => write_out(&p, &text)?,
            None => std::io::stdout().write_all(text.as_bytes())?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    let path: PathBuf = match &a.config_file {
        Some(p) => p.clone(),
        None => config::config_path(&|k| std::env::var(k).ok())?.0,
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => default_text(),
        Err(e) => bail!("{}: cannot read it: {e}", path.display()),
    };
    // The file as it is must load: an edit is not the place to find out it never did.
    config::parse(&text, &path)?;
    let mut doc: DocumentMut = text
        .parse()
        .with_context(|| format!("{}: not TOML", path.display()))?;
    for s in &a.set {
        let (key, value) = match s.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v)),
            None => (s.trim(), None),
        };
        set(&mut doc, key, value_for(key, value, &a.set_list_separator)?)?;
    }
    let out = doc.to_string();
    let cfg = config::parse(&out, &path)
        .with_context(|| format!("--set {}: nothing was written", a.set.join(" --set ")))?;
    if let Some(k) = cfg.unknown_keys.first() {
        bail!("--set: unknown key {k}; nothing was written");
    }
    crate::logging::warn_config_keys(&cfg);
    // Said here and by `doctor`, once, never by the runtime for every container.
    if !cfg.at_default.is_empty() {
        writeln!(
            std::io::stderr(),
            "{}: {} hold NVIDIA's defaults for settings gpuctk does not apply (it injects natively); harmless",
            path.display(),
            cfg.at_default.join(", ")
        )?;
    }
    match (&a.output, a.in_place) {
        (Some(p), _) => write_out(p, &out)?,
        (None, true) => write_out(&path, &out)?,
        (None, false) => std::io::stdout().write_all(out.as_bytes())?,
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_loads_clean_and_is_the_default() {
        let c = config::parse(&default_text(), Path::new("/d.toml")).unwrap();
        assert!(c.unknown_keys.is_empty(), "{:?}", c.unknown_keys);
        assert!(c.not_applied.is_empty(), "{:?}", c.not_applied);
        let d = Config::default();
        assert_eq!(c.runtimes, d.runtimes);
        assert_eq!(c.spec_dirs, d.spec_dirs);
        assert_eq!(c.mode, d.mode);
        assert_eq!(c.policy, d.policy);
    }

    #[test]
    fn set_keeps_the_rest_and_types_values() {
        let text = "# mine\n[nvidia-container-runtime]\n# which runtimes\nruntimes = [\"runc\"]\nmode = \"auto\" # keep\n";
        let mut doc: DocumentMut = text.parse().unwrap();
        let sep = ":";
        for (k, v) in [
            ("nvidia-container-runtime.runtimes", Some("crun:runc")),
            ("nvidia-container-runtime.mode", Some("cdi")),
            ("nvidia-container-cli.no-cgroups", None),
            (
                "nvidia-container-runtime.modes.legacy.cuda-compat-mode",
                Some("disabled"),
            ),
        ] {
            set(&mut doc, k, value_for(k, v, sep).unwrap()).unwrap();
        }
        let out = doc.to_string();
        assert!(out.starts_with("# mine\n[nvidia-container-runtime]\n# which runtimes\nruntimes = [\"crun\", \"runc\"]\nmode = \"cdi\" # keep\n"), "{out}");
        let c = config::parse(&out, Path::new("/c.toml")).unwrap();
        assert!(c.no_cgroups);
        assert_eq!(c.runtimes, ["crun", "runc"]);
        assert!(!c.cuda_compat());
        assert!(value_for("nvidia-container-cli.root", None, sep).is_err());
        assert!(value_for("disable-require", Some("yes"), sep).is_err());
    }
}
