//! CRI-O: the runtime goes to a drop-in, `<dir of crio.conf>/crio.conf.d/99-nvidia.toml`, which
//! CRI-O reads after the main file; the main file is only read (to copy the default runtime's
//! `runtime_root` and `monitor_*` settings) and never written.
//!
//! The drop-in is ours, but it may hold several runtimes (`configure` run once per runtime name):
//! configure adds or updates its runtime in the drop-in as it is, keeping the others and anything
//! an admin added; unconfigure removes that runtime, and deletes the drop-in once no runtime is
//! left in it.
//!
//! CRI-O loads every file of `crio.conf.d` (and of its subdirectories) in lexical order, whatever
//! its name, so nothing but the drop-in may ever appear there: its backup is kept outside that
//! directory (`crio.conf.d.99-nvidia.toml.bak`), and so is the temp name the new content has for
//! an instant before it is renamed into place (see `gpuctk_atomicfile`). A `.bak` or a temp file
//! inside it would be loaded as configuration (and keep the runtime registered after
//! unconfigure).

use std::path::{Path, PathBuf};

use toml_edit::{DocumentMut, Item, Table, Value};

use crate::tomlutil::{self, TomlError};
use crate::{
    backup_outside_dir, outside_dir, read_drop_in, written_by_us, Edit, EngineError, Options,
    ReadFile, OURS_HEADER,
};

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

    let drop_in = opts
        .drop_in
        .clone()
        .unwrap_or_else(|| drop_in_path(config_path));
    let before = read_drop_in(read, &drop_in)?;
    let mut doc = parse_drop_in(&drop_in, before.as_deref())?.unwrap_or_default();
    let root = doc.as_table_mut();
    if opts.set_as_default {
        let rt = tomlutil::ensure_table(&drop_in, root, &["crio", "runtime"])
            .map_err(CrioError::from)?;
        rt.set_implicit(false);
        tomlutil::set_value(rt, "default_runtime", Value::from(name), literal);
    }
    let runtimes = tomlutil::ensure_table(
        &drop_in,
        doc.as_table_mut(),
        &["crio", "runtime", "runtimes"],
    )
    .map_err(CrioError::from)?;
    match runtimes.get_mut(name) {
        Some(existing) => {
            // Already there (this name configured before): update our two keys in place, so
            // that a second configure is a no-op and what an admin tuned in the table stays.
            let found = existing.type_name();
            let rt = existing.as_table_mut().ok_or_else(|| {
                CrioError::from(TomlError::NotATable {
                    path: drop_in.clone(),
                    key: format!("crio.runtime.runtimes.{name}"),
                    found,
                })
            })?;
            tomlutil::set_value(
                rt,
                "runtime_path",
                Value::from(opts.runtime_path.as_str()),
                literal,
            );
            tomlutil::set_value(rt, "runtime_type", Value::from("oci"), literal);
        }
        None => {
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
            if !runtimes.is_empty() {
                // Another runtime's table is above: a blank line between them.
                ours.decor_mut().set_prefix("\n");
            }
            runtimes.insert(name, Item::Table(ours));
        }
    }

    let mut after = tomlutil::render(&doc);
    if before
        .as_deref()
        .is_none_or(|b| b.iter().all(u8::is_ascii_whitespace))
    {
        let mut text = format!(
            "{OURS_HEADER}: runtimes registered with CRI-O.\n# `gpuctk runtime unconfigure` removes them; removing this file undoes them all.\n\n"
        )
        .into_bytes();
        text.append(&mut after);
        after = text;
    }
    Ok(vec![drop_in_edit(drop_in, before, after, false)])
}

/// The edit of our drop-in, backed up and staged outside `crio.conf.d`.
fn drop_in_edit(drop_in: PathBuf, before: Option<Vec<u8>>, after: Vec<u8>, delete: bool) -> Edit {
    let mut edit = if delete {
        Edit::remove(drop_in.clone(), before)
    } else {
        Edit::write(drop_in.clone(), before, after)
    };
    edit.ours = written_by_us(edit.before.as_deref());
    edit.backup = backup_outside_dir(&drop_in);
    edit.staging = outside_dir(&drop_in);
    edit
}

/// Parse the drop-in's current content; `None` when absent or blank.
fn parse_drop_in(path: &Path, bytes: Option<&[u8]>) -> Result<Option<DocumentMut>, CrioError> {
    match bytes {
        Some(b) if !b.iter().all(u8::is_ascii_whitespace) => Ok(Some(tomlutil::parse(path, b)?)),
        _ => Ok(None),
    }
}

/// Remove our runtime from the drop-in (and the default-runtime setting when it names it); the
/// drop-in is deleted when no runtime and no other setting is left in it.
pub fn unconfigure(
    config_path: &Path,
    _current: Option<&[u8]>,
    opts: &Options,
    read: ReadFile<'_>,
) -> Result<Vec<Edit>, EngineError> {
    let drop_in = opts
        .drop_in
        .clone()
        .unwrap_or_else(|| drop_in_path(config_path));
    let before = read_drop_in(read, &drop_in)?;
    let Ok(Some(mut doc)) = parse_drop_in(&drop_in, before.as_deref()) else {
        // Absent: nothing to do. Blank, or not TOML we understand: removed whole, as every
        // version before did (its backup keeps it).
        let delete = before.is_some();
        return Ok(vec![drop_in_edit(drop_in, before, Vec::new(), delete)]);
    };
    let name = opts.runtime_name.as_str();
    let root = doc.as_table_mut();
    let mut changed = false;
    if let Some(runtimes) = tomlutil::get_table_mut(root, &["crio", "runtime", "runtimes"]) {
        changed |= runtimes.remove(name).is_some();
    }
    if let Some(rt) = tomlutil::get_table_mut(root, &["crio", "runtime"]) {
        if rt.get("default_runtime").and_then(Item::as_str) == Some(name) {
            rt.remove("default_runtime");
            changed = true;
        }
    }
    if !changed {
        let same = before.clone().unwrap_or_default();
        return Ok(vec![drop_in_edit(drop_in, before, same, false)]);
    }
    if holds_no_value(doc.as_table()) {
        return Ok(vec![drop_in_edit(drop_in, before, Vec::new(), true)]);
    }
    // Tables left empty by the removal lose their headers.
    for path in [&["crio", "runtime", "runtimes"][..], &["crio", "runtime"]] {
        if let Some(t) = tomlutil::get_table_mut(doc.as_table_mut(), path) {
            if t.iter().all(|(_, it)| it.is_table()) {
                t.set_implicit(true);
            }
        }
    }
    let after = tomlutil::render(&doc);
    Ok(vec![drop_in_edit(drop_in, before, after, false)])
}

/// True when `t` and its subtables hold no key with a value.
fn holds_no_value(t: &Table) -> bool {
    t.iter().all(|(_, it)| match it {
        Item::Table(sub) => holds_no_value(sub),
        Item::None => true,
        _ => false,
    })
}
