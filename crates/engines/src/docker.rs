//! docker `daemon.json`: `runtimes.<name> = {"path", "args": []}`, `default-runtime` and
//! `features.cdi`.
//!
//! The file is parsed into a `serde_json::Value` whose objects keep their key order, so every
//! key we do not own stays where it was; new keys go at the end. The output is pretty JSON with
//! a 4-space indent and a trailing newline, the layout `nvidia-ctk` writes. When nothing changes
//! semantically the original bytes are returned as they are, so a second configure is a no-op
//! whatever the file's layout.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::{Edit, Options};

/// Why `daemon.json` could not be edited.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// Not valid JSON.
    #[error("{}:{line}:{column}: invalid JSON: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// Valid JSON, but a key we need holds the wrong type (or the file is not an object).
    #[error("{}: {what} is not a JSON object", path.display())]
    NotAnObject {
        /// The file.
        path: PathBuf,
        /// Which value (`the top level`, `"runtimes"`, …).
        what: String,
    },
}

/// Parse `daemon.json`; an absent or blank file is `{}`.
pub(crate) fn parse(
    path: &Path,
    current: Option<&[u8]>,
) -> Result<Map<String, Value>, DockerError> {
    let bytes = current.unwrap_or(b"");
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    let v: Value = serde_json::from_slice(bytes).map_err(|e| DockerError::Parse {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: strip_position(&e.to_string()),
    })?;
    match v {
        Value::Object(m) => Ok(m),
        _ => Err(DockerError::NotAnObject {
            path: path.to_path_buf(),
            what: "the top level".to_string(),
        }),
    }
}

/// serde_json's message ends in " at line L column C", which our prefix already says.
fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

/// The object under `key`, created (at the end) when absent.
pub(crate) fn object_mut<'a>(
    path: &Path,
    m: &'a mut Map<String, Value>,
    key: &str,
) -> Result<&'a mut Map<String, Value>, DockerError> {
    m.entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or_else(|| DockerError::NotAnObject {
            path: path.to_path_buf(),
            what: format!("{key:?}"),
        })
}

/// Pretty JSON, 4-space indent, trailing newline: serde_json's pretty layout (`{}` and `[]`
/// for empty containers, `"key": value`) with the indent NVIDIA uses.
pub(crate) fn render(m: &Map<String, Value>) -> Vec<u8> {
    fn write(out: &mut String, v: &Value, depth: usize) {
        let pad = |out: &mut String, d: usize| out.extend(std::iter::repeat_n("    ", d));
        match v {
            Value::Object(m) if !m.is_empty() => {
                out.push_str("{\n");
                for (i, (k, v)) in m.iter().enumerate() {
                    pad(out, depth + 1);
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push_str(": ");
                    write(out, v, depth + 1);
                    out.push_str(if i + 1 < m.len() { ",\n" } else { "\n" });
                }
                pad(out, depth);
                out.push('}');
            }
            Value::Array(a) if !a.is_empty() => {
                out.push_str("[\n");
                for (i, v) in a.iter().enumerate() {
                    pad(out, depth + 1);
                    write(out, v, depth + 1);
                    out.push_str(if i + 1 < a.len() { ",\n" } else { "\n" });
                }
                pad(out, depth);
                out.push(']');
            }
            // Scalars and empty containers print compactly.
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(&mut out, &Value::Object(m.clone()), 0);
    out.push('\n');
    out.into_bytes()
}

/// The edit for `path`: the original bytes when the content did not change.
fn edit(
    path: &Path,
    current: Option<&[u8]>,
    old: &Map<String, Value>,
    new: &Map<String, Value>,
) -> Edit {
    let after = match current {
        Some(b) if old == new => b.to_vec(),
        _ => render(new),
    };
    Edit::write(path.to_path_buf(), current.map(<[u8]>::to_vec), after)
}

/// Register the runtime in `daemon.json`.
pub fn configure(path: &Path, current: Option<&[u8]>, opts: &Options) -> Result<Edit, DockerError> {
    let old = parse(path, current)?;
    let mut m = old.clone();
    let mut entry = Map::new();
    entry.insert("path".into(), Value::String(opts.runtime_path.clone()));
    entry.insert("args".into(), Value::Array(Vec::new()));
    object_mut(path, &mut m, "runtimes")?.insert(opts.runtime_name.clone(), Value::Object(entry));
    if opts.set_as_default {
        m.insert(
            "default-runtime".into(),
            Value::String(opts.runtime_name.clone()),
        );
    }
    if opts.enable_cdi {
        object_mut(path, &mut m, "features")?.insert("cdi".into(), Value::Bool(true));
    }
    Ok(edit(path, current, &old, &m))
}

/// Remove `runtimes.<name>` (and `runtimes` when that empties it) and a `default-runtime`
/// naming it; docker's default is then `runc` again. `features.cdi`, and a `default-runtime`
/// configure replaced, are put back by [`crate::added`] from its ledger before this runs; with no
/// ledger `features.cdi` stays (nothing tells whether configure or the admin set it).
pub fn unconfigure(
    path: &Path,
    current: Option<&[u8]>,
    opts: &Options,
) -> Result<Option<Edit>, DockerError> {
    if current.is_none() {
        // Nothing to remove from a file that is not there; do not create one.
        return Ok(None);
    }
    let old = parse(path, current)?;
    let mut m = old.clone();
    let name = opts.runtime_name.as_str();
    let mut now_empty = false;
    if let Some(Value::Object(rts)) = m.get_mut("runtimes") {
        if rts.shift_remove(name).is_some() {
            now_empty = rts.is_empty();
        }
    }
    if now_empty {
        m.shift_remove("runtimes");
    }
    if m.get("default-runtime").and_then(Value::as_str) == Some(name) {
        m.shift_remove("default-runtime");
    }
    Ok(Some(edit(path, current, &old, &m)))
}
