//! `toml_edit` helpers shared by the containerd and CRI-O editors: parsing with errors that name
//! the file and line, and inserting keys and tables in the style (indentation, quotes) of the
//! file being edited, so that what we add looks like it was always there.

use std::path::{Path, PathBuf};

use toml_edit::{DocumentMut, Item, Key, Table, Value};

/// Why a TOML config could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TomlError {
    /// Not valid TOML (or not UTF-8).
    #[error("{}:{line}:{column}: invalid TOML: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column (in characters) of the error.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// A key we need to descend into holds something other than a table.
    #[error("{}: `{key}` is a {found}, expected a table", path.display())]
    NotATable {
        /// The file.
        path: PathBuf,
        /// The dotted key.
        key: String,
        /// What it holds.
        found: &'static str,
    },
    /// A key we add to holds something other than an array.
    #[error("{}: `{key}` is a {found}, expected an array of strings (fix or remove it)", path.display())]
    NotAnArray {
        /// The file.
        path: PathBuf,
        /// The dotted key.
        key: String,
        /// What it holds.
        found: &'static str,
    },
}

/// Parse `bytes` (the content of `path`) as an editable document.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<DocumentMut, TomlError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let (line, column) = line_col(&String::from_utf8_lossy(bytes), e.valid_up_to());
        TomlError::Parse {
            path: path.to_path_buf(),
            line,
            column,
            message: "file is not valid UTF-8".to_string(),
        }
    })?;
    text.parse::<DocumentMut>().map_err(|e| {
        let offset = e.span().map(|s| s.start).unwrap_or(0);
        let (line, column) = line_col(text, offset);
        TomlError::Parse {
            path: path.to_path_buf(),
            line,
            column,
            message: e.message().trim().to_string(),
        }
    })
}

/// 1-based line and column of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let upto = &text.as_bytes()[..offset];
    let line = upto.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = upto
        .iter()
        .rposition(|&b| b == b'\n')
        .map(|p| p + 1)
        .unwrap_or(0);
    let column = String::from_utf8_lossy(&upto[line_start..]).chars().count() + 1;
    (line, column)
}

/// Walk `path` from `root`, creating missing tables as implicit (headerless) ones so that only
/// the tables that end up holding keys get a `[header]`.
pub fn ensure_table<'a>(
    file: &Path,
    root: &'a mut Table,
    path: &[&str],
) -> Result<&'a mut Table, TomlError> {
    let mut t = root;
    for (i, k) in path.iter().enumerate() {
        if !t.contains_key(k) {
            let mut nt = Table::new();
            nt.set_implicit(true);
            t.insert(k, Item::Table(nt));
        }
        let item = t.get_mut(k).expect("just inserted");
        let found = item.type_name();
        t = item.as_table_mut().ok_or_else(|| TomlError::NotATable {
            path: file.to_path_buf(),
            key: path[..=i].join("."),
            found,
        })?;
    }
    Ok(t)
}

/// The table at `path`, if every step is a table.
pub fn get_table<'a>(root: &'a Table, path: &[&str]) -> Option<&'a Table> {
    let mut t = root;
    for k in path {
        t = t.get(k)?.as_table()?;
    }
    Some(t)
}

/// Mutable [`get_table`].
pub fn get_table_mut<'a>(root: &'a mut Table, path: &[&str]) -> Option<&'a mut Table> {
    let mut t = root;
    for k in path {
        t = t.get_mut(k)?.as_table_mut()?;
    }
    Some(t)
}

/// The whitespace after the last newline of a decor prefix: the indentation of a line.
fn indent_of(prefix: Option<&str>) -> &str {
    let p = prefix.unwrap_or("");
    let tail = match p.rfind('\n') {
        Some(i) => &p[i + 1..],
        None => p,
    };
    // A prefix can end in a comment line only in malformed decor; keep pure whitespace.
    if tail.chars().all(|c| c == ' ' || c == '\t') {
        tail
    } else {
        ""
    }
}

/// The indentation of the keys of `t` (that of its first key), if it has keys.
pub fn key_indent(t: &Table) -> Option<String> {
    t.iter().find(|(_, it)| it.is_value()).and_then(|(k, _)| {
        t.key(k)
            .map(|key| indent_of(key.leaf_decor().prefix().and_then(|r| r.as_str())).to_string())
    })
}

/// The indentation of `t`'s `[header]` line.
pub fn header_indent(t: &Table) -> String {
    indent_of(t.decor().prefix().and_then(|r| r.as_str())).to_string()
}

/// Does the document write strings with single quotes (containerd 2.x's `config default` does)?
/// Decided by a majority of the string values it holds.
pub fn prefers_literal_strings(doc: &DocumentMut) -> bool {
    fn count(t: &Table, single: &mut usize, double: &mut usize) {
        for (_, it) in t.iter() {
            match it {
                Item::Value(Value::String(s)) => {
                    match s.as_repr().and_then(|r| r.as_raw().as_str()) {
                        Some(r) if r.starts_with('\'') => *single += 1,
                        Some(_) => *double += 1,
                        None => {}
                    }
                }
                Item::Table(sub) => count(sub, single, double),
                _ => {}
            }
        }
    }
    let (mut single, mut double) = (0, 0);
    count(doc.as_table(), &mut single, &mut double);
    single > double
}

/// A string value quoted like the document: a literal `'…'` string when `literal` and the text
/// allows it, else a basic `"…"` string.
pub fn string_value(s: &str, literal: bool) -> Value {
    if literal && !s.contains('\'') && !s.chars().any(|c| c.is_control()) {
        if let Ok(v) = format!("'{s}'").parse::<Value>() {
            return v.decorated(" ", "");
        }
    }
    Value::from(s).decorated(" ", "")
}

/// Is `v` a string written with single quotes?
fn is_literal(v: &Value) -> bool {
    match v {
        Value::String(s) => s
            .as_repr()
            .and_then(|r| r.as_raw().as_str())
            .is_some_and(|r| r.starts_with('\'')),
        _ => false,
    }
}

/// Set `key = value` in `t`. An existing value is replaced in place, keeping its surrounding
/// whitespace and comment, and its quote style for strings; a new key goes after the table's
/// last key, indented like its siblings.
pub fn set_value(t: &mut Table, key: &str, value: Value, doc_literal: bool) {
    if let Some(Item::Value(old)) = t.get_mut(key) {
        let decor = old.decor().clone();
        let mut new = match (&value, old.as_str().is_some()) {
            (Value::String(s), true) => string_value(s.value(), is_literal(old)),
            _ => value,
        };
        *new.decor_mut() = decor;
        *old = new;
        return;
    }
    let indent = key_indent(t).unwrap_or_else(|| {
        // A table without keys of its own: indent its keys one step (two spaces) deeper than
        // its header when the header is indented, as containerd's `config default` does.
        let h = header_indent(t);
        if h.is_empty() {
            h
        } else {
            format!("{h}  ")
        }
    });
    let value = match &value {
        Value::String(s) => string_value(s.value(), doc_literal),
        _ => value.decorated(" ", ""),
    };
    let k = Key::new(key).with_leaf_decor(toml_edit::Decor::new(indent, " "));
    t.insert_formatted(&k, Item::Value(value));
}

/// Make `t` (a copy of another table) ready to be placed elsewhere: forget its position so it
/// is printed where it is inserted, and drop the comments of the original, which describe the
/// original, keeping only indentation and blank-line structure.
pub fn sanitize_copy(t: &mut Table) {
    t.set_position(None);
    let indent = header_indent(t);
    // Keep a blank line before the header only if the original had one.
    let blank = t
        .decor()
        .prefix()
        .and_then(|r| r.as_str())
        .is_some_and(|p| p.split('\n').rev().skip(1).any(|l| l.trim().is_empty()));
    let nl = if blank { "\n" } else { "" };
    *t.decor_mut() = toml_edit::Decor::new(format!("{nl}{indent}"), "");
    let keys: Vec<String> = t.iter().map(|(k, _)| k.to_string()).collect();
    for k in keys {
        if let Some(mut km) = t.key_mut(&k) {
            let ind = indent_of(km.leaf_decor().prefix().and_then(|r| r.as_str())).to_string();
            let suffix = km
                .leaf_decor()
                .suffix()
                .and_then(|r| r.as_str())
                .unwrap_or(" ")
                .to_string();
            *km.leaf_decor_mut() = toml_edit::Decor::new(ind, suffix);
        }
        match t.get_mut(&k) {
            Some(Item::Table(sub)) => sanitize_copy(sub),
            Some(Item::Value(v)) => {
                let prefix = v
                    .decor()
                    .prefix()
                    .and_then(|r| r.as_str())
                    .unwrap_or(" ")
                    .to_string();
                let suffix = v.decor().suffix().and_then(|r| r.as_str()).unwrap_or("");
                let suffix = if suffix.contains('#') {
                    String::new()
                } else {
                    suffix.to_string()
                };
                *v.decor_mut() = toml_edit::Decor::new(prefix, suffix);
            }
            _ => {}
        }
    }
}

/// Render a document, converting to bytes.
pub fn render(doc: &DocumentMut) -> Vec<u8> {
    doc.to_string().into_bytes()
}
