//! CRI-O: the runtime goes to a drop-in, `<dir of crio.conf>/crio.conf.d/99-nvidia.toml`, which
//! CRI-O reads after the main file; the main file is only read (to copy the default runtime's
//! `runtime_root` and `monitor_*` settings) and never written. unconfigure deletes the drop-in.
//!
//! CRI-O loads every file of `crio.conf.d` in lexical order, whatever its name, so the backup
//! of the drop-in is kept outside that directory (`crio.conf.d.99-nvidia.toml.bak`): a `.bak`
//! inside it would keep the runtime registered after unconfigure.

use std::path::{Path, PathBuf};

use toml_edit::{DocumentMut, Item, Table, Value};

use crate::tomlutil::{self, TomlError};
use crate::{backup_outside_dir, read_drop_in, Edit, EngineError, Options, ReadFile};

/// Why CRI-O's config could not be edited.
#[derive(Debug, thiserror::Error)]
pub enum CrioError {
    /// The main config is not valid TOML.
    #[error(transparent)]
    Toml(#[from] TomlError),
    /// `--cdi.enabled` was given: CRI-O has no switch for it (CDI is always on since 1.23),
    /// and NVIDIA rejects it too.
    #[error("enabling CDI is not supported for crio (CRI-O always has CDI enabled)")]
    CdiNotSupported,
}

/// Our drop-in for the main config at `config_path`.
pub fn drop_in_path(config_path: &Path) -> PathBuf {
    config_path
        .parent()
        .unwrap_or(Path::new("/"))
        .join("crio.conf.d")
        .join("99-nvidia.toml")
}

/// The runtime options worth copying from the default runtime: where runc keeps its state and
/// how conmon is run. The path and type are ours.
fn copied(key: &str) -> bool {
    key == "runtime_root" || key.starts_with("monitor_")
}

/// Register the runtime; see the module docs.
pub fn configure(
    config_path: &Path,
    current: Option<&[u8]>,
    opts: &Options,
    read: ReadFile<'_>,
) -> Result<Vec<Edit>, EngineError> {
    if opts.enable_cdi {
        return Err(CrioError::CdiNotSupported.into());
    }
    let main = match current {
        Some(b) if !b.iter().all(u8::is_ascii_whitespace) => {
            Some(tomlutil::parse(config_path, b).map_err(CrioError::from)?)
        }
        _ => None,
    };
    let literal = main.as_ref().is_some_and(tomlutil::prefers_literal_strings);
    let name = opts.runtime_name.as_str();

    // The runtime to take settings from: CRI-O's default, else runc, else crun.
    let runtimes = main
        .as_ref()
        .and_then(|d| tomlutil::get_table(d.as_table(), &["crio", "runtime", "runtimes"]));
    let default = main
        .as_ref()
        .and_then(|d| tomlutil::get_table(d.as_table(), &["crio", "runtime"]))
        .and_then(|t| t.get("default_runtime"))
        .and_then(Item::as_str);
    let source = [default, Some("runc"), Some("crun")]
        .into_iter()
        .flatten()
        .filter(|n| !n.starts_with("nvidia") && *n != name)
        .find_map(|n| runtimes?.get(n)?.as_table_like());

    let drop_in = drop_in_path(config_path);
    let mut doc = DocumentMut::new();
    let root = doc.as_table_mut();
    if opts.set_as_default {
        let rt = tomlutil::ensure_table(&drop_in, root, &["crio", "runtime"])
            .map_err(CrioError::from)?;
        rt.set_implicit(false);
        tomlutil::set_value(rt, "default_runtime", Value::from(name), literal);
    }
    let mut ours = Table::new();
    tomlutil::set_value(
        &mut ours,
        "runtime_path",
        Value::from(opts.runtime_path.as_str()),
        literal,
    );
    tomlutil::set_value(&mut ours, "runtime_type", Value::from("oci"), literal);
    if let Some(src) = source {
        for (k, it) in src.iter() {
            if let (true, Some(v)) = (copied(k), it.as_value()) {
                tomlutil::set_value(&mut ours, k, v.clone().decorated(" ", ""), literal);
            }
        }
    }
    let runtimes = tomlutil::ensure_table(
        &drop_in,
        doc.as_table_mut(),
        &["crio", "runtime", "runtimes"],
    )
    .map_err(CrioError::from)?;
    runtimes.insert(name, Item::Table(ours));

    let after = tomlutil::render(&doc);
    let before = read_drop_in(read, &drop_in)?;
    let mut edit = Edit::write(drop_in.clone(), before, after);
    edit.backup = backup_outside_dir(&drop_in);
    Ok(vec![edit])
}

/// Delete the drop-in.
pub fn unconfigure(
    config_path: &Path,
    _current: Option<&[u8]>,
    _opts: &Options,
    read: ReadFile<'_>,
) -> Result<Vec<Edit>, EngineError> {
    let drop_in = drop_in_path(config_path);
    let before = read_drop_in(read, &drop_in)?;
    let mut edit = Edit::remove(drop_in.clone(), before);
    edit.backup = backup_outside_dir(&drop_in);
    Ok(vec![edit])
}
