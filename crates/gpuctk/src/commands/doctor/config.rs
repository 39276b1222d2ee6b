//! The toolkit's own settings: config.toml as the runtime loads it and the low-level runtime
//! it hands containers to.

use std::ffi::OsStr;

use super::report::Checks;
use crate::cli::DoctorArgs;
use crate::config::{self, Config};

/// Load the config as the runtime does (or the file `--config` names); its check is pushed.
pub(super) fn check_config(a: &DoctorArgs, c: &mut Checks) -> Config {
    const G: &str = "toolkit";
    let found = match &a.config {
        Some(p) => Ok((p.clone(), false)),
        None => config::config_path(&|k| std::env::var(k).ok()),
    };
    let loaded = found.and_then(|(path, required)| {
        let exists = path.exists();
        config::load(&path, required).map(|cfg| (path, exists, cfg))
    });
    match loaded {
        Err(e) => {
            c.fail(
                G,
                "config",
                e.to_string(),
                "fix the file as the message says; until then the runtime refuses to start containers",
            );
            Config::default()
        }
        Ok((path, exists, cfg)) if !exists => {
            c.ok(
                G,
                "config",
                format!("{} absent: the defaults apply", path.display()),
            );
            cfg
        }
        Ok((path, _, cfg)) if !cfg.unknown_keys.is_empty() => {
            c.warn(
                G,
                "config",
                format!(
                    "{}: unknown key(s) {}, ignored",
                    path.display(),
                    cfg.unknown_keys.join(", ")
                ),
                "correct the spelling or remove the key(s): a misspelt setting silently keeps its default",
            );
            cfg
        }
        Ok((path, _, cfg)) if !cfg.not_applied.is_empty() => {
            c.warn(
                G,
                "config",
                format!(
                    "{}: NVIDIA key(s) gpuctk does not apply: {}{}",
                    path.display(),
                    cfg.not_applied.join(", "),
                    at_defaults(&cfg)
                ),
                "remove them, or see docs/compat.md for what gpuctk does instead: they have no effect here",
            );
            cfg
        }
        Ok((path, _, cfg)) if !cfg.at_default.is_empty() => {
            c.ok(
                G,
                "config",
                format!(
                    "{} parses, every key applied but those at NVIDIA's defaults, which change nothing (gpuctk injects natively): {}",
                    path.display(),
                    cfg.at_default.join(", ")
                ),
            );
            cfg
        }
        Ok((path, _, cfg)) => {
            c.ok(
                G,
                "config",
                format!("{} parses, every key applied", path.display()),
            );
            cfg
        }
    }
}

/// The keys at NVIDIA's defaults that gpuctk does not apply, for the config line: the runtime
/// never names them (they change nothing), so doctor says it, once.
pub(super) fn at_defaults(cfg: &Config) -> String {
    if cfg.at_default.is_empty() {
        return String::new();
    }
    format!(
        "; at NVIDIA's defaults, so changing nothing: {}",
        cfg.at_default.join(", ")
    )
}

pub(super) fn check_low_level_runtime(cfg: &Config, path_env: Option<&OsStr>, c: &mut Checks) {
    match crate::runc::find_runtime(&cfg.runtimes, path_env) {
        Ok(p) => c.ok(
            "toolkit",
            "low-level-runtime",
            format!("{} (of {:?})", p.display(), cfg.runtimes),
        ),
        Err(e) => c.fail(
            "toolkit",
            "low-level-runtime",
            e.to_string(),
            "install runc or crun, or set [nvidia-container-runtime] runtimes in config.toml to its path",
        ),
    }
}
