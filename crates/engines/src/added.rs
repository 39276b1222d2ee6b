//! The ledger of settings `runtime configure` changed outside its own runtime entry (docker's
//! `default-runtime` and `features.cdi`, containerd's `default_runtime_name` and `enable_cdi`),
//! so that `runtime unconfigure` puts back exactly what was there and leaves the user's own
//! settings alone.
//!
//! The config file itself cannot say who set a value (JSON has no comments, and a `.bak` is the
//! user's original only until the user edits the file again), so configure keeps a small JSON
//! file beside the main config, `<config>.gpuctk-added.json`: for each setting it changed, the
//! value it wrote, the value that was there before (or none), and the runtime names that asked
//! for it. A setting that already held our value is the user's and gets no record, but a record
//! that exists gains the new name, so CDI turned on by two runtimes stays on until both are
//! unconfigured. Unconfigure of a name drops it from every record; a record left with no name
//! is undone when the file still holds the value we wrote (if someone changed it since, their
//! value stays), and a later record whose "before" was our value inherits our "before" (default
//! A, then default B, then unconfigure A: unconfiguring B must go back to what preceded A).
//!
//! Crashes and concurrent runs: the ledger is one more [`Edit`] of the same `apply`, under the
//! same lock and the same "unchanged since read" check. Configure writes it before the config,
//! unconfigure after: a crash in between leaves a record whose value the file does not hold
//! (ignored, then dropped) or a setting already restored (found so, and dropped); never a
//! setting of ours without its record. Without a ledger (a config configured by an older
//! version), unconfigure does what it always did.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value as Json};
use toml_edit::{DocumentMut, Item};

use crate::{containerd, docker, read_drop_in, tomlutil, Edit, Engine, EngineError, Options};

/// What the ledger's name adds to the config file's.
pub const LEDGER_SUFFIX: &str = ".gpuctk-added.json";

/// The ledger of the config at `config_path`.
pub fn ledger_path(config_path: &Path) -> PathBuf {
    let mut s = config_path.as_os_str().to_os_string();
    s.push(LEDGER_SUFFIX);
    PathBuf::from(s)
}

/// Why the ledger could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// Not the JSON this module writes.
    #[error("{}: not a gpuctk ledger ({why}); remove it to go on (unconfigure then leaves default-runtime and CDI settings as they are)", path.display())]
    Invalid {
        /// The ledger.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

/// A setting configure may change besides the runtime entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setting {
    DefaultRuntime,
    Cdi,
}

impl Setting {
    fn name(self) -> &'static str {
        match self {
            Setting::DefaultRuntime => "default-runtime",
            Setting::Cdi => "cdi",
        }
    }

    fn from_name(s: &str) -> Option<Setting> {
        [Setting::DefaultRuntime, Setting::Cdi]
            .into_iter()
            .find(|x| x.name() == s)
    }
}

/// One setting configure changed.
#[derive(Debug, Clone, PartialEq)]
struct Record {
    setting: Setting,
    /// What configure wrote.
    value: Json,
    /// What the file held before (`None`: the key was absent).
    previous: Option<Json>,
    /// The runtime names that asked for it.
    by: Vec<String>,
    /// The table (object) holding the key was not there either: undoing removes it too, once
    /// empty, where a table the user wrote stays even when empty.
    created_table: bool,
}

fn parse_ledger(path: &Path, bytes: Option<&[u8]>) -> Result<Vec<Record>, LedgerError> {
    let Some(bytes) = bytes else {
        return Ok(Vec::new());
    };
    let bad = |why: &str| LedgerError::Invalid {
        path: path.to_path_buf(),
        why: why.to_string(),
    };
    let v: Json = serde_json::from_slice(bytes).map_err(|e| bad(&e.to_string()))?;
    let list = v
        .get("settings")
        .and_then(Json::as_array)
        .ok_or_else(|| bad("no \"settings\" list"))?;
    list.iter()
        .map(|r| {
            let setting = r
                .get("setting")
                .and_then(Json::as_str)
                .and_then(Setting::from_name)
                .ok_or_else(|| bad("a record without a known \"setting\""))?;
            let value = r
                .get("value")
                .cloned()
                .ok_or_else(|| bad("a record without \"value\""))?;
            let by = r
                .get("by")
                .and_then(Json::as_array)
                .and_then(|a| a.iter().map(|n| n.as_str().map(str::to_string)).collect())
                .ok_or_else(|| bad("a record without a \"by\" list of names"))?;
            Ok(Record {
                setting,
                value,
                previous: r.get("previous").cloned(),
                by,
                created_table: r.get("created_table").and_then(Json::as_bool) == Some(true),
            })
        })
        .collect()
}

fn render_ledger(config_path: &Path, records: &[Record]) -> Vec<u8> {
    let list: Vec<Json> = records
        .iter()
        .map(|r| {
            let mut m = Map::new();
            m.insert("setting".into(), r.setting.name().into());
            m.insert("value".into(), r.value.clone());
            if let Some(p) = &r.previous {
                m.insert("previous".into(), p.clone());
            }
            m.insert(
                "by".into(),
                Json::Array(r.by.iter().map(|n| Json::from(n.as_str())).collect()),
            );
            if r.created_table {
                m.insert("created_table".into(), Json::Bool(true));
            }
            Json::Object(m)
        })
        .collect();
    let mut top = Map::new();
    top.insert(
        "about".into(),
        format!(
            "Settings `gpuctk runtime configure` changed in {} besides its runtimes, and what they were before; `gpuctk runtime unconfigure` reads this to put them back.",
            config_path.display()
        )
        .into(),
    );
    top.insert("settings".into(), Json::Array(list));
    let mut out = serde_json::to_vec_pretty(&Json::Object(top)).expect("JSON values serialize");
    out.push(b'\n');
    out
}

/// A config file whose two settings can be read and written.
enum Doc {
    Json(Map<String, Json>),
    /// containerd's TOML, with the CRI plugin's table name for the config's version.
    Toml(DocumentMut, &'static str),
}

impl Doc {
    fn parse(
        engine: Engine,
        path: &Path,
        bytes: Option<&[u8]>,
        plugin: &'static str,
    ) -> Result<Doc, EngineError> {
        Ok(match engine {
            Engine::Docker => Doc::Json(docker::parse(path, bytes)?),
            _ => Doc::Toml(
                match bytes {
                    Some(b) if !b.iter().all(u8::is_ascii_whitespace) => {
                        tomlutil::parse(path, b).map_err(containerd::ContainerdError::from)?
                    }
                    _ => DocumentMut::new(),
                },
                plugin,
            ),
        })
    }

    /// The table and key of a containerd setting.
    fn toml_place(s: Setting, plugin: &'static str) -> (Vec<&'static str>, &'static str) {
        match s {
            Setting::DefaultRuntime => (
                vec!["plugins", plugin, "containerd"],
                "default_runtime_name",
            ),
            Setting::Cdi => (vec!["plugins", plugin], "enable_cdi"),
        }
    }

    /// Whether the table (object) that holds `s` is there: with a header or keys of its own.
    fn has_table(&self, s: Setting) -> bool {
        match self {
            Doc::Json(m) => match s {
                Setting::DefaultRuntime => true,
                Setting::Cdi => m.contains_key("features"),
            },
            Doc::Toml(doc, plugin) => {
                let (table, _) = Doc::toml_place(s, plugin);
                tomlutil::get_table(doc.as_table(), &table).is_some_and(|t| {
                    !t.is_implicit() || t.iter().any(|(_, it)| !matches!(it, Item::Table(_)))
                })
            }
        }
    }

    fn get(&self, s: Setting) -> Option<Json> {
        match self {
            Doc::Json(m) => match s {
                Setting::DefaultRuntime => m.get("default-runtime").cloned(),
                Setting::Cdi => m.get("features")?.get("cdi").cloned(),
            },
            Doc::Toml(doc, plugin) => {
                let (table, key) = Doc::toml_place(s, plugin);
                let v = tomlutil::get_table(doc.as_table(), &table)?
                    .get(key)?
                    .as_value()?;
                if let Some(b) = v.as_bool() {
                    Some(Json::Bool(b))
                } else if let Some(i) = v.as_integer() {
                    Some(Json::from(i))
                } else {
                    v.as_str().map(Json::from)
                }
            }
        }
    }

    /// Put `v` back (`None`: remove the key, and with `drop_table` its table once empty).
    fn restore(
        &mut self,
        path: &Path,
        s: Setting,
        v: Option<&Json>,
        drop_table: bool,
    ) -> Result<(), EngineError> {
        match self {
            Doc::Json(m) => match (s, v) {
                (Setting::DefaultRuntime, Some(v)) => {
                    m.insert("default-runtime".into(), v.clone());
                }
                (Setting::DefaultRuntime, None) => {
                    m.shift_remove("default-runtime");
                }
                (Setting::Cdi, Some(v)) => {
                    docker::object_mut(path, m, "features")?.insert("cdi".into(), v.clone());
                }
                (Setting::Cdi, None) => {
                    if let Some(f) = m.get_mut("features").and_then(Json::as_object_mut) {
                        f.shift_remove("cdi");
                        if f.is_empty() && drop_table {
                            m.shift_remove("features");
                        }
                    }
                }
            },
            Doc::Toml(doc, plugin) => {
                let (table, key) = Doc::toml_place(s, plugin);
                let literal = tomlutil::prefers_literal_strings(doc);
                match v {
                    Some(v) => {
                        let value = match v {
                            Json::Bool(b) => toml_edit::Value::from(*b),
                            Json::String(s) => toml_edit::Value::from(s.as_str()),
                            Json::Number(n) if n.is_i64() => {
                                toml_edit::Value::from(n.as_i64().expect("checked"))
                            }
                            // Only bools, strings and integers are ever recorded.
                            _ => return Ok(()),
                        };
                        let t = tomlutil::ensure_table(path, doc.as_table_mut(), &table)
                            .map_err(containerd::ContainerdError::from)?;
                        t.set_implicit(false);
                        tomlutil::set_value(t, key, value, literal);
                    }
                    None => {
                        if let Some(t) = tomlutil::get_table_mut(doc.as_table_mut(), &table) {
                            t.remove(key);
                            // A table configure created, left without values, loses its header.
                            if drop_table && t.iter().all(|(_, it)| matches!(it, Item::Table(_))) {
                                t.set_implicit(true);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn render(&self) -> Vec<u8> {
        match self {
            Doc::Json(m) => docker::render(m),
            Doc::Toml(doc, _) => tomlutil::render(doc),
        }
    }
}

/// The CRI plugin table name for containerd's main config `current` (a missing one is written
/// as version 2); unused for docker.
fn plugin_of(
    engine: Engine,
    path: &Path,
    current: Option<&[u8]>,
) -> Result<&'static str, EngineError> {
    if engine != Engine::Containerd {
        return Ok("");
    }
    Ok(containerd::cri_plugin(containerd::version_of(
        path, current,
    )?))
}

/// The edit of the ledger from `before` to `records`: removed when no record is left.
fn ledger_edit(config_path: &Path, before: Option<Vec<u8>>, records: &[Record]) -> Edit {
    let path = ledger_path(config_path);
    let mut e = if records.is_empty() {
        Edit::remove(path, before)
    } else {
        Edit::write(path, before, render_ledger(config_path, records))
    };
    // Ours from the start: no user original to keep.
    e.ours = true;
    e
}

/// Record what the configure `edits` (one edit, of the file that holds the settings) change
/// among the settings `opts` asks for; the ledger edit goes first.
pub(crate) fn on_configure(
    engine: Engine,
    config_path: &Path,
    current: Option<&[u8]>,
    opts: &Options,
    read: crate::ReadFile<'_>,
    mut edits: Vec<Edit>,
) -> Result<Vec<Edit>, EngineError> {
    let wanted: Vec<(Setting, Json)> = [
        (
            opts.set_as_default,
            Setting::DefaultRuntime,
            Json::from(opts.runtime_name.as_str()),
        ),
        (opts.enable_cdi, Setting::Cdi, Json::Bool(true)),
    ]
    .into_iter()
    .filter(|(on, _, _)| *on)
    .map(|(_, s, v)| (s, v))
    .collect();
    let Some(edit) = edits.first() else {
        return Ok(edits);
    };
    if wanted.is_empty() || engine == Engine::Crio {
        return Ok(edits);
    }
    let plugin = plugin_of(engine, config_path, current)?;
    // A new containerd drop-in starts as a copy of the main file's CRI table, so the value
    // before is the main file's.
    let before_bytes = match (&edit.before, edit.path != config_path) {
        (Some(b), _) => Some(b.as_slice()),
        (None, true) => current,
        (None, false) => None,
    };
    let before = Doc::parse(engine, &edit.path, before_bytes, plugin)?;
    let lpath = ledger_path(config_path);
    let lbefore = read_drop_in(read, &lpath)?;
    let mut records = parse_ledger(&lpath, lbefore.as_deref())?;
    let old = records.clone();
    let name = opts.runtime_name.as_str();
    for (s, v) in wanted {
        let cur = before.get(s);
        match records.iter_mut().find(|r| r.setting == s && r.value == v) {
            Some(r) => {
                if cur.as_ref() != Some(&v) {
                    // Changed since we wrote it (by someone, or a crash before the config was
                    // written): what is there now is what to go back to.
                    r.previous = cur;
                }
                if !r.by.iter().any(|n| n == name) {
                    r.by.push(name.to_string());
                }
            }
            None if cur.as_ref() == Some(&v) => {}
            None => records.push(Record {
                setting: s,
                value: v,
                previous: cur,
                by: vec![name.to_string()],
                created_table: !before.has_table(s),
            }),
        }
    }
    if records != old {
        edits.insert(0, ledger_edit(config_path, lbefore, &records));
    }
    Ok(edits)
}

/// What the ledger of containerd's main config says configure set: the default runtime names
/// and whether it turned CDI on. A drop-in refreshed from the main config keeps those.
pub(crate) struct Recorded {
    /// `default_runtime_name` values configure wrote.
    pub(crate) defaults: Vec<String>,
    /// configure turned `enable_cdi` on.
    pub(crate) cdi: bool,
}

/// The ledger's records for containerd's main config at `config_path`.
pub(crate) fn containerd_recorded(
    config_path: &Path,
    read: crate::ReadFile<'_>,
) -> Result<Recorded, EngineError> {
    let lpath = ledger_path(config_path);
    let bytes = read_drop_in(read, &lpath)?;
    let records = parse_ledger(&lpath, bytes.as_deref())?;
    Ok(Recorded {
        defaults: records
            .iter()
            .filter(|r| r.setting == Setting::DefaultRuntime)
            .filter_map(|r| r.value.as_str().map(str::to_string))
            .collect(),
        cdi: records
            .iter()
            .any(|r| r.setting == Setting::Cdi && r.value == Json::Bool(true)),
    })
}

/// An engine's own unconfigure, from the main config's content and a drop-in reader.
pub(crate) type EngineUnconfigure<'a> =
    &'a dyn Fn(Option<&[u8]>, crate::ReadFile<'_>) -> Result<Vec<Edit>, EngineError>;

/// Unconfigure `opts.runtime_name` with the settings it alone recorded put back first, so the
/// engine's own unconfigure then finds them not naming it. `unconfigure` is the engine's.
pub(crate) fn unconfigure(
    engine: Engine,
    config_path: &Path,
    current: Option<&[u8]>,
    opts: &Options,
    read: crate::ReadFile<'_>,
    unconfigure: EngineUnconfigure<'_>,
) -> Result<Vec<Edit>, EngineError> {
    let lpath = ledger_path(config_path);
    let lbefore = read_drop_in(read, &lpath)?;
    let name = opts.runtime_name.as_str();
    let mut records = parse_ledger(&lpath, lbefore.as_deref())?;
    if engine == Engine::Crio || !records.iter().any(|r| r.by.iter().any(|n| n == name)) {
        return unconfigure(current, read);
    }
    // The file holding the settings: containerd's drop-in when the main file imports one.
    let plugin = plugin_of(engine, config_path, current)?;
    let settings_path = match engine {
        Engine::Containerd => containerd::drop_in_of(config_path, current)?,
        _ => None,
    }
    .unwrap_or_else(|| config_path.to_path_buf());
    let original = if settings_path == config_path {
        current.map(<[u8]>::to_vec)
    } else {
        read_drop_in(read, &settings_path)?
    };
    let mut doc = Doc::parse(engine, &settings_path, original.as_deref(), plugin)?;
    let mut restored = false;
    let mut i = 0;
    while i < records.len() {
        let r = &mut records[i];
        r.by.retain(|n| n != name);
        if !r.by.is_empty() {
            i += 1;
            continue;
        }
        let r = records.remove(i);
        if original.is_some() && doc.get(r.setting).as_ref() == Some(&r.value) {
            doc.restore(
                &settings_path,
                r.setting,
                r.previous.as_ref(),
                r.created_table,
            )?;
            restored = true;
        }
        for later in records.iter_mut().filter(|l| l.setting == r.setting) {
            if later.previous.as_ref() == Some(&r.value) {
                later.previous = r.previous.clone();
                later.created_table |= r.created_table;
            }
        }
    }
    let patched = restored.then(|| doc.render());
    let mut edits = if settings_path == config_path {
        unconfigure(patched.as_deref().or(current), read)?
    } else {
        let via = |p: &Path| {
            if p == settings_path {
                if let Some(b) = &patched {
                    return Ok(Some(b.clone()));
                }
            }
            read(p)
        };
        unconfigure(current, &via)?
    };
    // The edits were computed from the restored content; what is on disk is the original.
    for e in edits.iter_mut().filter(|e| e.path == settings_path) {
        e.before = original.clone();
    }
    edits.push(ledger_edit(config_path, lbefore, &records));
    Ok(edits)
}
