//! containerd `config.toml`: register the runtime in the CRI plugin, for config versions 1
//! (`plugins.cri`), 2 (`plugins."io.containerd.grpc.v1.cri"`) and 3
//! (`plugins."io.containerd.cri.v1.runtime"`).
//!
//! The file is edited with `toml_edit`: only the keys we own change, and every other byte
//! (comments, order, indentation, quote style) stays as it was. When the main config imports a
//! directory glob that matches `99-nvidia.toml`, our settings go to that drop-in instead and the
//! main file is left untouched.
//!
//! containerd 1.x merges an imported file per plugin section (a plugin's table in a later file
//! replaces the earlier one whole), so a drop-in holding only our runtime would silently drop
//! every other CRI setting of the main file (`SystemdCgroup`, `sandbox_image`, registry
//! mirrors…). The drop-in therefore repeats the main file's CRI plugin table, as NVIDIA's does;
//! with containerd 2.x's deeper merge the copy is redundant but harmless. The copy is taken
//! again each time our drop-in is written, keeping only what is ours from the old one (see
//! `refreshed`), so a later edit of the main file's table is not shadowed by a stale copy.
//!
//! An existing drop-in of ours keeps what earlier runs put there: configure adds its runtime
//! next to those of earlier runs (other runtime names), and unconfigure removes only its own,
//! deleting the drop-in once none of ours is left (a runtime of the main file's copied table is
//! not ours).

use std::path::{Path, PathBuf};

use toml_edit::{DocumentMut, Item, Key, Table, Value};

use crate::tomlutil::{self, TomlError};
use crate::{
    backup_outside_dir, outside_dir, read_drop_in, written_by_us, Edit, EngineError, Options,
    ReadFile, OURS_HEADER,
};

/// The drop-in we own in an imported directory.
pub const DROP_IN_NAME: &str = "99-nvidia.toml";

/// The comment after an `imports` key that `--drop-in-config` created.
const IMPORTS_MARK: &str = "# added by `gpuctk runtime configure --drop-in-config`";

/// The shim containerd uses for runc-compatible runtimes.
const RUNC_V2: &str = "io.containerd.runc.v2";

/// The CRI hands a container's annotations to the runtime only when they match the runtime's
/// `container_annotations`; without this pattern the device plugin's CDI requests
/// (`cdi.k8s.io/<plugin>_<id>`, its `cdi-annotations` strategy) never reach our shim, which
/// reads them. NVIDIA's toolkit installer adds the same pattern.
pub const CDI_ANNOTATIONS: &str = "cdi.k8s.io/*";

/// Why containerd's config could not be edited.
#[derive(Debug, thiserror::Error)]
pub enum ContainerdError {
    /// Invalid TOML, or a key holding a non-table where we need a table.
    #[error(transparent)]
    Toml(#[from] TomlError),
    /// `version` is not 1, 2 or 3.
    #[error("{}: unsupported containerd config version {version}", path.display())]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version as written.
        version: String,
    },
}

/// The CRI plugin's table name of config versions 1, 2 and 3.
pub const CRI_PLUGINS: [&str; 3] = [
    "cri",
    "io.containerd.grpc.v1.cri",
    "io.containerd.cri.v1.runtime",
];

/// The CRI plugin's table name for a config version.
pub(crate) fn cri_plugin(version: i64) -> &'static str {
    match version {
        1 => CRI_PLUGINS[0],
        2 => CRI_PLUGINS[1],
        _ => CRI_PLUGINS[2],
    }
}

/// The config version: `version = N` at the top, 1 when absent.
fn config_version(path: &Path, doc: &DocumentMut) -> Result<i64, ContainerdError> {
    match doc.get("version") {
        None => Ok(1),
        Some(it) => match it.as_integer() {
            Some(v @ 1..=3) => Ok(v),
            _ => Err(ContainerdError::UnsupportedVersion {
                path: path.to_path_buf(),
                version: it.to_string().trim().to_string(),
            }),
        },
    }
}

/// The config version of the main config `current`: 2 for an absent or blank file, the version
/// configure writes then.
pub(crate) fn version_of(path: &Path, current: Option<&[u8]>) -> Result<i64, ContainerdError> {
    match parse_main(path, current)? {
        Some(doc) => config_version(path, &doc),
        None => Ok(2),
    }
}

/// Our drop-in, when the main config `current` imports a directory it would go to.
pub(crate) fn drop_in_of(
    path: &Path,
    current: Option<&[u8]>,
) -> Result<Option<PathBuf>, ContainerdError> {
    Ok(parse_main(path, current)?.and_then(|doc| drop_in_target(path, &doc).map(|t| t.path)))
}

/// Parse the main config; `None` for an absent or blank file.
fn parse_main(path: &Path, current: Option<&[u8]>) -> Result<Option<DocumentMut>, ContainerdError> {
    match current {
        None => Ok(None),
        Some(b) if b.iter().all(u8::is_ascii_whitespace) => Ok(None),
        Some(b) => Ok(Some(tomlutil::parse(path, b)?)),
    }
}

/// A minimal glob matcher for the file-name part of an import (`*`, `?`, `[...]`), enough for
/// the patterns containerd users write (`*.toml`).
fn glob_match(pat: &[u8], name: &[u8]) -> bool {
    match (pat.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            glob_match(&pat[1..], name) || (!name.is_empty() && glob_match(pat, &name[1..]))
        }
        (Some(b'?'), Some(_)) => glob_match(&pat[1..], &name[1..]),
        (Some(b'['), Some(&c)) => {
            let Some(end) = pat.iter().skip(1).position(|&b| b == b']').map(|p| p + 1) else {
                return c == b'[' && glob_match(&pat[1..], &name[1..]);
            };
            let class = &pat[1..end];
            let (negate, class) = match class.first() {
                Some(b'^') | Some(b'!') => (true, &class[1..]),
                _ => (false, class),
            };
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == b'-' {
                    hit |= class[i] <= c && c <= class[i + 2];
                    i += 3;
                } else {
                    hit |= class[i] == c;
                    i += 1;
                }
            }
            hit != negate && glob_match(&pat[end + 1..], &name[1..])
        }
        (Some(&p), Some(&c)) => p == c && glob_match(&pat[1..], &name[1..]),
        _ => false,
    }
}

fn has_meta(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Where our drop-in goes and how it is written.
struct DropIn {
    path: PathBuf,
    backup: PathBuf,
    /// Where its temp name lives while it is replaced, when the import pattern would match a
    /// temp name in its own directory.
    staging: Option<PathBuf>,
}

impl DropIn {
    fn edit(&self, before: Option<Vec<u8>>, after: Vec<u8>, delete: bool) -> Edit {
        let mut e = if delete {
            Edit::remove(self.path.clone(), before)
        } else {
            Edit::write(self.path.clone(), before, after)
        };
        e.ours = written_by_us(e.before.as_deref());
        e.backup = self.backup.clone();
        e.staging = self.staging.clone();
        e
    }
}

/// Every import of the main config as (directory, file-name pattern); relative imports are
/// relative to the main config's directory, as in containerd. Imports with a pattern in the
/// directory part are skipped (we never write there).
fn imports(config_path: &Path, doc: &DocumentMut) -> Vec<(PathBuf, String)> {
    let Some(list) = doc.get("imports").and_then(Item::as_array) else {
        return Vec::new();
    };
    let base = config_path.parent().unwrap_or(Path::new("/"));
    list.iter()
        .filter_map(Value::as_str)
        .filter_map(|imp| {
            let full = lexical(&if Path::new(imp).is_absolute() {
                PathBuf::from(imp)
            } else {
                base.join(imp)
            });
            let dir = full.parent()?;
            let pat = full.file_name()?.to_str()?;
            (!has_meta(&dir.to_string_lossy())).then(|| (dir.to_path_buf(), pat.to_string()))
        })
        .collect()
}

/// One `imports` entry of a main config as containerd resolves it: relative to the main
/// config's directory, `.` and `..` resolved lexically; the file-name part may be a glob
/// (`*`, `?`, `[...]`). The resolver `runtime configure` uses, public so that `doctor` agrees
/// with it on which drop-ins containerd loads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    /// The directory the entry names.
    pub dir: PathBuf,
    /// The file-name part, a glob or a plain name.
    pub pattern: String,
}

impl Import {
    /// Whether containerd loads the file `name` of [`Import::dir`] through this entry.
    pub fn matches(&self, name: &str) -> bool {
        glob_match(self.pattern.as_bytes(), name.as_bytes())
    }

    /// Whether the file-name part is a glob (else it names one file, which must exist).
    pub fn is_glob(&self) -> bool {
        has_meta(&self.pattern)
    }
}

/// The `imports` of the main config `text` at `config_path` (none for a blank file or one
/// without the key). Entries with a glob in their directory part are left out, as configure
/// leaves them: neither writes nor looks there.
pub fn imports_of(config_path: &Path, text: &[u8]) -> Result<Vec<Import>, ContainerdError> {
    Ok(match parse_main(config_path, Some(text))? {
        None => Vec::new(),
        Some(doc) => imports_in(config_path, &doc),
    })
}

/// [`imports_of`] of a main config already parsed.
pub fn imports_in(config_path: &Path, doc: &DocumentMut) -> Vec<Import> {
    imports(config_path, doc)
        .into_iter()
        .map(|(dir, pattern)| Import { dir, pattern })
        .collect()
}

/// `path` with `.` and `..` resolved lexically, as Go's `filepath.Join` (containerd's) does.
fn lexical(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Our drop-in at `path`, loaded through import pattern `pat`: its backup and the temp name of a
/// write go outside the directory when the pattern would match them there.
fn drop_in_for(path: PathBuf, pat: &str) -> DropIn {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let backup = if glob_match(pat.as_bytes(), format!("{name}.bak").as_bytes()) {
        backup_outside_dir(&path)
    } else {
        crate::default_backup_path(&path)
    };
    // What a temp name of ours looks like (see gpuctk_atomicfile).
    let temp = format!(".{name}.gpuctk-1-0.tmp");
    let staging = if glob_match(pat.as_bytes(), temp.as_bytes()) {
        outside_dir(&path)
    } else {
        None
    };
    DropIn {
        path,
        backup,
        staging,
    }
}

/// The drop-in to write, when the main config imports a directory pattern matching
/// [`DROP_IN_NAME`].
fn drop_in_target(config_path: &Path, doc: &DocumentMut) -> Option<DropIn> {
    imports(config_path, doc)
        .into_iter()
        .find(|(_, pat)| glob_match(pat.as_bytes(), DROP_IN_NAME.as_bytes()))
        .map(|(dir, pat)| drop_in_for(dir.join(DROP_IN_NAME), &pat))
}

/// The import of the main config that loads `drop_in`, if any.
fn import_covering(config_path: &Path, doc: &DocumentMut, drop_in: &Path) -> Option<DropIn> {
    let (dir, name) = (drop_in.parent()?, drop_in.file_name()?.to_str()?);
    imports(config_path, doc)
        .into_iter()
        .find(|(d, pat)| d == dir && glob_match(pat.as_bytes(), name.as_bytes()))
        .map(|(_, pat)| drop_in_for(drop_in.to_path_buf(), &pat))
}

/// How the main config names `drop_in` in `imports`: relative to the main config's directory
/// (containerd joins a relative import to it, lexically) when the two share a directory below
/// `/`, so the pair stays right when the host's files are seen under another root, as by the
/// installer (`conf.d/99-nvidia.toml`, or `../../etc/k0s/nvidia.toml`); else absolute.
pub fn import_entry(config_path: &Path, drop_in: &Path) -> String {
    let absolute = || drop_in.to_string_lossy().into_owned();
    let Some(base) = config_path.parent().filter(|b| b.is_absolute()) else {
        return absolute();
    };
    if !drop_in.is_absolute() {
        return absolute();
    }
    let (b, d): (Vec<_>, Vec<_>) = (base.components().collect(), drop_in.components().collect());
    let common = b.iter().zip(&d).take_while(|(x, y)| x == y).count();
    // Only the root in common: nothing a relative path would keep together.
    if common <= 1 {
        return absolute();
    }
    let mut rel = PathBuf::new();
    for _ in common..b.len() {
        rel.push("..");
    }
    for c in &d[common..] {
        rel.push(c.as_os_str());
    }
    rel.to_string_lossy().into_owned()
}

/// `--drop-in-config FILE`: the runtime goes to `drop_in`, and the main config imports it (the
/// entry is added when no import covers the file yet; an absent main config becomes one holding
/// just `version = 2` and that import).
fn configure_explicit(
    config_path: &Path,
    current: Option<&[u8]>,
    drop_in: &Path,
    opts: &Options,
    read: ReadFile<'_>,
) -> Result<Vec<Edit>, EngineError> {
    let main = parse_main(config_path, current)?.unwrap_or_else(|| {
        let mut doc = DocumentMut::new();
        doc.insert("version", toml_edit::value(2));
        doc
    });
    let version = config_version(config_path, &main)?;
    let mut edits = Vec::new();
    let target = match import_covering(config_path, &main, drop_in) {
        Some(t) => t,
        None => {
            let mut doc = main.clone();
            let entry = import_entry(config_path, drop_in);
            let found = doc.get("imports").map(Item::type_name);
            match doc.get_mut("imports").and_then(Item::as_array_mut) {
                Some(list) => list.push(entry),
                None if found.is_some() => {
                    return Err(ContainerdError::from(TomlError::NotATable {
                        path: config_path.to_path_buf(),
                        key: "imports (an array)".to_string(),
                        found: found.unwrap_or("?"),
                    })
                    .into())
                }
                None => {
                    let mut list = toml_edit::Array::new();
                    list.push(entry);
                    // The mark tells unconfigure the key is ours to remove once it empties.
                    let v = Value::Array(list).decorated(" ", format!(" {IMPORTS_MARK}"));
                    doc.insert("imports", Item::Value(v));
                }
            }
            edits.push(Edit::write(
                config_path.to_path_buf(),
                current.map(<[u8]>::to_vec),
                tomlutil::render(&doc),
            ));
            drop_in_for(drop_in.to_path_buf(), "")
        }
    };
    let before = read_drop_in(read, &target.path)?;
    let after = drop_in_content(
        config_path,
        &target.path,
        before.as_deref(),
        &main,
        version,
        opts,
        read,
    )?;
    // The drop-in first: containerd never sees an import of a file not there yet.
    edits.insert(0, target.edit(before, after, false));
    Ok(edits)
}

/// Undo [`configure_explicit`]: our runtime leaves the drop-in (deleted once none of ours is
/// left), and the import entry we add leaves the main config with it (the `imports` key too
/// when that empties it). A runtime of ours in the main file itself (an earlier configure without
/// a drop-in) is removed as well.
fn unconfigure_explicit(
    config_path: &Path,
    current: Option<&[u8]>,
    drop_in: &Path,
    opts: &Options,
    read: ReadFile<'_>,
) -> Result<Vec<Edit>, EngineError> {
    let Some(mut doc) = parse_main(config_path, current)? else {
        let target = drop_in_for(drop_in.to_path_buf(), "");
        let before = read_drop_in(read, drop_in)?;
        let delete = before.is_some();
        return Ok(vec![target.edit(before, Vec::new(), delete)]);
    };
    let version = config_version(config_path, &doc)?;
    let target = import_covering(config_path, &doc, drop_in)
        .unwrap_or_else(|| drop_in_for(drop_in.to_path_buf(), ""));
    let mut changed = remove_runtime(&mut doc, version, &opts.runtime_name);
    let drop_edit = unconfigure_drop_in(config_path, &target, &doc, version, opts, read)?;
    if drop_edit.delete {
        let entry = import_entry(config_path, drop_in);
        let mut emptied = false;
        if let Some(list) = doc.get_mut("imports").and_then(Item::as_array_mut) {
            let n = list.len();
            list.retain(|v| v.as_str() != Some(entry.as_str()));
            changed |= list.len() != n;
            // An `imports` key of the admin's stays, even empty.
            emptied = list.is_empty()
                && list
                    .decor()
                    .suffix()
                    .and_then(|s| s.as_str())
                    .is_some_and(|s| s.contains(IMPORTS_MARK));
        }
        if emptied {
            doc.remove("imports");
        }
    }
    let mut edits = vec![drop_edit];
    if changed {
        // The import goes after the drop-in: containerd never imports a missing file.
        edits.push(Edit::write(
            config_path.to_path_buf(),
            current.map(<[u8]>::to_vec),
            tomlutil::render(&doc),
        ));
    }
    Ok(edits)
}

/// Register the runtime; see the module docs.
pub fn configure(
    config_path: &Path,
    current: Option<&[u8]>,
    opts: &Options,
    read: ReadFile<'_>,
) -> Result<Vec<Edit>, EngineError> {
    if let Some(drop_in) = &opts.drop_in {
        return configure_explicit(config_path, current, drop_in, opts, read);
    }
    let main = parse_main(config_path, current)?;
    let Some(main) = main else {
        // No config at all: write a minimal v2 one, which containerd 1.x and 2.x both read.
        let mut doc = DocumentMut::new();
        doc.insert("version", toml_edit::value(2));
        add_runtime(config_path, &mut doc, 2, opts, false)?;
        let after = tomlutil::render(&doc);
        return Ok(vec![Edit::write(
            config_path.to_path_buf(),
            current.map(<[u8]>::to_vec),
            after,
        )]);
    };
    let version = config_version(config_path, &main)?;
    let literal = tomlutil::prefers_literal_strings(&main);

    if let Some(target) = drop_in_target(config_path, &main) {
        let before = read_drop_in(read, &target.path)?;
        let after = drop_in_content(
            config_path,
            &target.path,
            before.as_deref(),
            &main,
            version,
            opts,
            read,
        )?;
        return Ok(vec![target.edit(before, after, false)]);
    }

    let mut doc = main;
    add_runtime(config_path, &mut doc, version, opts, literal)?;
    let after = tomlutil::render(&doc);
    Ok(vec![Edit::write(
        config_path.to_path_buf(),
        current.map(<[u8]>::to_vec),
        after,
    )])
}

/// The drop-in's new content: a copy of the main config's CRI plugin table as it is now (see
/// the module docs), with what is ours from `before` (the runtimes the main file does not have,
/// the settings the ledger says configure made) and our runtime added. The copy is taken again
/// on every run, so a later edit of the main file's CRI table reaches containerd through the
/// next configure instead of being hidden by a stale copy. A file at our path that we did not
/// write (no [`OURS_HEADER`]) is the admin's: our runtime is added to it in place.
fn drop_in_content(
    config_path: &Path,
    drop_in: &Path,
    before: Option<&[u8]>,
    main: &DocumentMut,
    version: i64,
    opts: &Options,
    read: ReadFile<'_>,
) -> Result<Vec<u8>, EngineError> {
    let literal = tomlutil::prefers_literal_strings(main);
    let existing = match before {
        Some(b) if !b.iter().all(u8::is_ascii_whitespace) => {
            Some(tomlutil::parse(drop_in, b).map_err(ContainerdError::from)?)
        }
        _ => None,
    };
    let mut doc = match existing {
        Some(mut doc) if !written_by_us(before) => {
            add_runtime(drop_in, &mut doc, version, opts, literal)?;
            return Ok(tomlutil::render(&doc));
        }
        Some(old) => refreshed(config_path, drop_in, main, &old, version, literal, read)?,
        None => copy_of_main(drop_in, main, version)?,
    };
    add_runtime(drop_in, &mut doc, version, opts, literal)?;
    Ok(with_header(config_path, &doc))
}

/// Our drop-in's text: the header that marks it ours, then `doc`.
fn with_header(config_path: &Path, doc: &DocumentMut) -> Vec<u8> {
    let mut after = format!(
        "{OURS_HEADER}. containerd 1.x replaces a plugin's whole\n\
         # section with the one in an imported file, so the CRI plugin settings of\n\
         # {} are repeated here. Remove this file to undo.\n",
        config_path.display()
    )
    .into_bytes();
    after.extend(tomlutil::render(doc));
    after
}

/// A new drop-in: `version` and a copy of the main config's CRI plugin table.
fn copy_of_main(
    drop_in: &Path,
    main: &DocumentMut,
    version: i64,
) -> Result<DocumentMut, EngineError> {
    let mut doc = DocumentMut::new();
    if version >= 2 {
        doc.insert("version", toml_edit::value(version));
    }
    let plugin = cri_plugin(version);
    if let Some(plugins) = main.get("plugins").and_then(Item::as_table) {
        if let (Some(key), Some(Item::Table(cri))) = (plugins.key(plugin), plugins.get(plugin)) {
            let dst = tomlutil::ensure_table(drop_in, doc.as_table_mut(), &["plugins"])
                .map_err(ContainerdError::from)?;
            dst.insert_formatted(key, Item::Table(cri.clone()));
        }
    }
    Ok(doc)
}

/// Our drop-in `old` made again from the main config as it is now: [`copy_of_main`], then
/// `old`'s runtimes that the main file does not have (ours, with whatever the admin tuned in
/// them), its default runtime when that is one of them or the ledger says configure set it, and
/// its `enable_cdi` when the ledger says configure turned it on. Everything else in `old` is
/// the stale copy, replaced.
fn refreshed(
    config_path: &Path,
    drop_in: &Path,
    main: &DocumentMut,
    old: &DocumentMut,
    version: i64,
    literal: bool,
    read: ReadFile<'_>,
) -> Result<DocumentMut, EngineError> {
    let mut doc = copy_of_main(drop_in, main, version)?;
    let plugin = cri_plugin(version);
    let rt_path = ["plugins", plugin, "containerd", "runtimes"];
    let main_rt = tomlutil::get_table(main.as_table(), &rt_path);
    let mut ours: Vec<String> = Vec::new();
    if let Some(old_rt) = tomlutil::get_table(old.as_table(), &rt_path) {
        for (name, item) in old_rt.iter() {
            if main_rt.is_some_and(|m| m.contains_key(name)) {
                continue;
            }
            let mut item = item.clone();
            if let Item::Table(t) = &mut item {
                // Printed where it is inserted, after the copy's tables.
                forget_positions(t);
                // The first table of our old file carries its header as a comment; the header
                // is written again by `with_header`, so it must not travel with the table.
                let has_header = t
                    .decor()
                    .prefix()
                    .and_then(|p| p.as_str())
                    .is_some_and(|p| p.contains(OURS_HEADER));
                if has_header {
                    t.decor_mut().set_prefix("\n");
                }
            }
            let key = old_rt.key(name).cloned().unwrap_or_else(|| Key::new(name));
            let dst = tomlutil::ensure_table(drop_in, doc.as_table_mut(), &rt_path)
                .map_err(ContainerdError::from)?;
            dst.insert_formatted(&key, item);
            ours.push(name.to_string());
        }
    }
    let recorded = crate::added::containerd_recorded(config_path, read)?;
    let old_default = tomlutil::get_table(old.as_table(), &["plugins", plugin, "containerd"])
        .and_then(|c| c.get("default_runtime_name"))
        .and_then(Item::as_str);
    if let Some(d) = old_default
        .filter(|d| ours.iter().any(|o| o == d) || recorded.defaults.iter().any(|r| r == d))
    {
        let c = tomlutil::ensure_table(
            drop_in,
            doc.as_table_mut(),
            &["plugins", plugin, "containerd"],
        )
        .map_err(ContainerdError::from)?;
        tomlutil::set_value(c, "default_runtime_name", Value::from(d), literal);
    }
    let old_cdi = tomlutil::get_table(old.as_table(), &["plugins", plugin])
        .and_then(|c| c.get("enable_cdi"))
        .and_then(Item::as_bool);
    if old_cdi == Some(true) && recorded.cdi {
        let c = tomlutil::ensure_table(drop_in, doc.as_table_mut(), &["plugins", plugin])
            .map_err(ContainerdError::from)?;
        tomlutil::set_value(c, "enable_cdi", Value::from(true), literal);
    }
    Ok(doc)
}

/// Clear the position of `t` and of every table in it, so that they print where they are put.
fn forget_positions(t: &mut Table) {
    t.set_position(None);
    for (_, it) in t.iter_mut() {
        if let Item::Table(sub) = it {
            forget_positions(sub);
        }
    }
}

/// Add (or update) `runtimes.<name>`, and the default-runtime and CDI switches, in `doc`.
fn add_runtime(
    file: &Path,
    doc: &mut DocumentMut,
    version: i64,
    opts: &Options,
    literal: bool,
) -> Result<(), ContainerdError> {
    let plugin = cri_plugin(version);
    let name = opts.runtime_name.as_str();
    let root = doc.as_table_mut();
    let runtimes =
        tomlutil::ensure_table(file, root, &["plugins", plugin, "containerd", "runtimes"])?;

    if let Some(existing) = runtimes.get_mut(name) {
        // Already there: update it in place rather than re-copying, so a second configure is a
        // no-op and whatever the admin tuned in our table survives.
        let found = existing.type_name();
        let rt = existing
            .as_table_mut()
            .ok_or_else(|| TomlError::NotATable {
                path: file.to_path_buf(),
                key: format!("plugins.{plugin}.containerd.runtimes.{name}"),
                found,
            })?;
        set_binary(file, rt, &opts.runtime_path, literal, plugin, name)?;
        pass_cdi_annotations(file, rt, literal, plugin, name)?;
    } else {
        let rt = new_runtime_table(file, doc, version, opts, literal)?;
        let runtimes = tomlutil::get_table_mut(
            doc.as_table_mut(),
            &["plugins", plugin, "containerd", "runtimes"],
        )
        .expect("created above");
        runtimes.insert_formatted(&Key::new(name), Item::Table(rt));
    }

    let root = doc.as_table_mut();
    if opts.set_as_default {
        let containerd = tomlutil::ensure_table(file, root, &["plugins", plugin, "containerd"])?;
        tomlutil::set_value(
            containerd,
            "default_runtime_name",
            Value::from(name),
            literal,
        );
    }
    if opts.enable_cdi {
        let cri = tomlutil::ensure_table(file, root, &["plugins", plugin])?;
        tomlutil::set_value(cri, "enable_cdi", Value::from(true), literal);
    }
    Ok(())
}

/// Our runtime's table: a copy of the default runtime's (so `SystemdCgroup` and the like carry
/// over), else of `runc` or `crun`, else a plain runc-v2 entry.
fn new_runtime_table(
    file: &Path,
    doc: &DocumentMut,
    version: i64,
    opts: &Options,
    literal: bool,
) -> Result<Table, ContainerdError> {
    let plugin = cri_plugin(version);
    let root = doc.as_table();
    let containerd = tomlutil::get_table(root, &["plugins", plugin, "containerd"]);
    let runtimes = tomlutil::get_table(root, &["plugins", plugin, "containerd", "runtimes"]);
    let default = containerd
        .and_then(|c| c.get("default_runtime_name"))
        .and_then(Item::as_str);
    let source = [default, Some("runc"), Some("crun")]
        .into_iter()
        .flatten()
        .filter(|n| !n.starts_with("nvidia") && *n != opts.runtime_name)
        .find_map(|n| runtimes?.get(n)?.clone().into_table().ok());

    let mut rt = match source {
        Some(mut t) => {
            tomlutil::sanitize_copy(&mut t);
            // Our table always starts after a blank line, even where the one copied sits
            // right under its parent's header.
            let h = tomlutil::header_indent(&t);
            t.decor_mut().set_prefix(format!("\n{h}"));
            t
        }
        None => {
            // Nothing to copy: take the layout (indentation) from any sibling runtime, else
            // from the runtimes table itself.
            let sibling = runtimes.and_then(|r| r.iter().find_map(|(_, it)| it.as_table()));
            let (h, k) = match sibling {
                Some(s) => (
                    tomlutil::header_indent(s),
                    tomlutil::key_indent(s).unwrap_or_default(),
                ),
                None => {
                    let h = runtimes
                        .filter(|r| !r.is_implicit())
                        .map(|r| {
                            let h = tomlutil::header_indent(r);
                            if h.is_empty() {
                                h
                            } else {
                                format!("{h}  ")
                            }
                        })
                        .unwrap_or_default();
                    let k = if h.is_empty() {
                        String::new()
                    } else {
                        format!("{h}  ")
                    };
                    (h, k)
                }
            };
            let mut t = Table::new();
            t.decor_mut().set_prefix(format!("\n{h}"));
            let mut put = |key: &str, v: Value| {
                let v = match &v {
                    Value::String(s) => tomlutil::string_value(s.value(), literal),
                    _ => v.decorated(" ", ""),
                };
                let k = Key::new(key).with_leaf_decor(toml_edit::Decor::new(k.clone(), " "));
                t.insert_formatted(&k, Item::Value(v));
            };
            put("runtime_type", Value::from(RUNC_V2));
            // containerd 2.x (config v3) dropped these two fields.
            if version < 3 {
                put("runtime_root", Value::from(""));
                put("runtime_engine", Value::from(""));
            }
            put("privileged_without_host_devices", Value::from(false));
            t
        }
    };
    set_binary(
        file,
        &mut rt,
        &opts.runtime_path,
        literal,
        plugin,
        &opts.runtime_name,
    )?;
    pass_cdi_annotations(file, &mut rt, literal, plugin, &opts.runtime_name)?;
    Ok(rt)
}

/// [`CDI_ANNOTATIONS`] in the runtime's `container_annotations`, next to what is there.
fn pass_cdi_annotations(
    file: &Path,
    rt: &mut Table,
    literal: bool,
    plugin: &str,
    name: &str,
) -> Result<(), ContainerdError> {
    let mut list = match rt.get("container_annotations") {
        None => toml_edit::Array::new(),
        Some(Item::Value(Value::Array(a))) => a.clone(),
        Some(other) => {
            return Err(TomlError::NotAnArray {
                path: file.to_path_buf(),
                key: format!("plugins.{plugin}.containerd.runtimes.{name}.container_annotations"),
                found: other.type_name(),
            }
            .into())
        }
    };
    if list.iter().any(|v| v.as_str() == Some(CDI_ANNOTATIONS)) {
        return Ok(());
    }
    let first = if list.is_empty() { "" } else { " " };
    let v = tomlutil::string_value(CDI_ANNOTATIONS, literal).decorated(first, "");
    list.push_formatted(v);
    tomlutil::set_value(rt, "container_annotations", Value::Array(list), literal);
    Ok(())
}

/// `options.BinaryName = <path>`, and `runtime_type` when it is missing or empty.
fn set_binary(
    file: &Path,
    rt: &mut Table,
    binary: &str,
    literal: bool,
    plugin: &str,
    name: &str,
) -> Result<(), ContainerdError> {
    if rt
        .get("runtime_type")
        .and_then(Item::as_str)
        .unwrap_or("")
        .is_empty()
    {
        tomlutil::set_value(rt, "runtime_type", Value::from(RUNC_V2), literal);
    }
    if !rt.contains_key("options") {
        let mut o = Table::new();
        let h = tomlutil::header_indent(rt);
        let deeper = if h.is_empty() { h } else { format!("{h}  ") };
        o.decor_mut().set_prefix(format!("\n{deeper}"));
        rt.insert("options", Item::Table(o));
    }
    let key_indent = tomlutil::key_indent(rt);
    match rt.get_mut("options") {
        Some(Item::Table(o)) => {
            if o.is_empty() {
                // A table we just made: indent its keys like the parent's.
                let k = Key::new("BinaryName")
                    .with_leaf_decor(toml_edit::Decor::new(key_indent.unwrap_or_default(), " "));
                o.insert_formatted(&k, Item::Value(tomlutil::string_value(binary, literal)));
            } else {
                tomlutil::set_value(o, "BinaryName", Value::from(binary), literal);
            }
            Ok(())
        }
        Some(Item::Value(Value::InlineTable(o))) => {
            let v = tomlutil::string_value(binary, literal);
            match o.get_mut("BinaryName") {
                Some(old) => {
                    let d = old.decor().clone();
                    *old = v;
                    *old.decor_mut() = d;
                }
                None => {
                    o.insert("BinaryName", v);
                }
            }
            Ok(())
        }
        Some(other) => Err(TomlError::NotATable {
            path: file.to_path_buf(),
            key: format!("plugins.{plugin}.containerd.runtimes.{name}.options"),
            found: other.type_name(),
        }
        .into()),
        None => unreachable!("inserted above"),
    }
}

/// Remove our runtime (and make it no longer the default) from `doc`; true if anything changed.
fn remove_runtime(doc: &mut DocumentMut, version: i64, name: &str) -> bool {
    let plugin = cri_plugin(version);
    let mut changed = false;
    let root = doc.as_table_mut();
    if let Some(runtimes) =
        tomlutil::get_table_mut(root, &["plugins", plugin, "containerd", "runtimes"])
    {
        changed |= runtimes.remove(name).is_some();
    }
    if let Some(containerd) = tomlutil::get_table_mut(root, &["plugins", plugin, "containerd"]) {
        if containerd
            .get("default_runtime_name")
            .and_then(Item::as_str)
            == Some(name)
        {
            changed = true;
            let values = containerd.iter().filter(|(_, it)| it.is_value()).count();
            if values == 1 {
                // A containerd table holding nothing but our default is the one configure
                // wrote: drop the key, and its header with it.
                containerd.remove("default_runtime_name");
                containerd.set_implicit(true);
            } else {
                // containerd's own default; the value `config default` writes.
                tomlutil::set_value(
                    containerd,
                    "default_runtime_name",
                    Value::from("runc"),
                    false,
                );
            }
        }
    }
    changed
}

/// Remove what [`configure`] added: our runtime from the main file (and the default-runtime
/// switch if it names us), and our drop-in when the main file imports one. `enable_cdi` and a
/// default configure replaced are put back by [`crate::added`] from its ledger before this runs;
/// with no ledger `enable_cdi` is left as it is (nothing tells whether configure or the admin
/// turned it on).
pub fn unconfigure(
    config_path: &Path,
    current: Option<&[u8]>,
    opts: &Options,
    read: ReadFile<'_>,
) -> Result<Vec<Edit>, EngineError> {
    if let Some(drop_in) = &opts.drop_in {
        return unconfigure_explicit(config_path, current, drop_in, opts, read);
    }
    let Some(mut doc) = parse_main(config_path, current)? else {
        return Ok(Vec::new());
    };
    let version = config_version(config_path, &doc)?;
    let drop_in = drop_in_target(config_path, &doc);
    let changed = remove_runtime(&mut doc, version, &opts.runtime_name);
    let before = current.map(<[u8]>::to_vec);
    let main_edit = Edit::write(
        config_path.to_path_buf(),
        before.clone(),
        if changed {
            tomlutil::render(&doc)
        } else {
            before.clone().unwrap_or_default()
        },
    );
    let mut edits = Vec::new();
    if let Some(target) = drop_in {
        edits.push(unconfigure_drop_in(
            config_path,
            &target,
            &doc,
            version,
            opts,
            read,
        )?);
        if changed {
            edits.push(main_edit);
        }
    } else {
        edits.push(main_edit);
    }
    Ok(edits)
}

/// Remove our runtime from the drop-in; delete the drop-in when no runtime of ours (one the main
/// file `main` does not have) is left in it.
fn unconfigure_drop_in(
    config_path: &Path,
    target: &DropIn,
    main: &DocumentMut,
    version: i64,
    opts: &Options,
    read: ReadFile<'_>,
) -> Result<Edit, EngineError> {
    let before = read_drop_in(read, &target.path)?;
    let mut doc = match before.as_deref() {
        None => return Ok(target.edit(None, Vec::new(), true)),
        Some(b) if b.iter().all(u8::is_ascii_whitespace) => {
            return Ok(target.edit(before, Vec::new(), true))
        }
        Some(b) => match tomlutil::parse(&target.path, b) {
            Ok(doc) => doc,
            // Not ours to understand: remove it whole, as every version before did.
            Err(_) => return Ok(target.edit(before, Vec::new(), true)),
        },
    };
    if !remove_runtime(&mut doc, version, &opts.runtime_name) {
        let same = before.clone().unwrap_or_default();
        return Ok(target.edit(before, same, false));
    }
    let plugin = cri_plugin(version);
    let path = ["plugins", plugin, "containerd", "runtimes"];
    let main_runtimes = tomlutil::get_table(main.as_table(), &path);
    let ours_left = tomlutil::get_table(doc.as_table(), &path).is_some_and(|r| {
        r.iter()
            .any(|(k, _)| main_runtimes.is_none_or(|m| !m.contains_key(k)))
    });
    if ours_left && written_by_us(before.as_deref()) {
        // Refreshed from the main file, like configure's.
        let literal = tomlutil::prefers_literal_strings(main);
        let doc = refreshed(
            config_path,
            &target.path,
            main,
            &doc,
            version,
            literal,
            read,
        )?;
        Ok(target.edit(before, with_header(config_path, &doc), false))
    } else if ours_left {
        let after = tomlutil::render(&doc);
        Ok(target.edit(before, after, false))
    } else {
        Ok(target.edit(before, Vec::new(), true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match(b"*.toml", b"99-nvidia.toml"));
        assert!(!glob_match(b"*.toml", b"99-nvidia.toml.bak"));
        assert!(glob_match(b"*", b"99-nvidia.toml.bak"));
        assert!(glob_match(b"[0-9]*-*.toml", b"99-nvidia.toml"));
        assert!(!glob_match(b"[!9]*.toml", b"99-nvidia.toml"));
        assert!(glob_match(b"99-nvidia.toml", b"99-nvidia.toml"));
        assert!(!glob_match(b"?.toml", b"99-nvidia.toml"));
    }

    #[test]
    fn imports_resolve_as_configure_resolves_them() {
        let main = Path::new("/etc/containerd/config.toml");
        let text = b"version = 2\nimports = [\"conf.d/*.toml\", \"/opt/x/../y/one.toml\", \"/a/*/b.toml\"]\n";
        let imps = imports_of(main, text).unwrap();
        assert_eq!(imps.len(), 2, "{imps:?}");
        assert_eq!(imps[0].dir, Path::new("/etc/containerd/conf.d"));
        assert!(imps[0].is_glob() && imps[0].matches("99-nvidia.toml"));
        assert!(!imps[0].matches("99-nvidia.toml.bak"));
        assert_eq!(imps[1].dir, Path::new("/opt/y"));
        assert!(!imps[1].is_glob() && imps[1].matches("one.toml"));
        assert!(imports_of(main, b"  \n").unwrap().is_empty());
        assert!(imports_of(main, b"imports = [").is_err());
    }

    #[test]
    fn import_entries() {
        let e = |c: &str, d: &str| import_entry(Path::new(c), Path::new(d));
        assert_eq!(
            e(
                "/etc/containerd/config.toml",
                "/etc/containerd/conf.d/99-nvidia.toml"
            ),
            "conf.d/99-nvidia.toml"
        );
        assert_eq!(
            e("/host/run/k0s/c.toml", "/host/etc/k0s/d/nvidia.toml"),
            "../../etc/k0s/d/nvidia.toml"
        );
        assert_eq!(
            e("/run/k0s/c.toml", "/etc/k0s/nvidia.toml"),
            "/etc/k0s/nvidia.toml"
        );
        assert_eq!(e("c.toml", "/etc/x.toml"), "/etc/x.toml");
    }

    #[test]
    fn unsupported_version() {
        let e = configure(
            Path::new("/c.toml"),
            Some(b"version = 4\n"),
            &Options::default(),
            &|_| Ok(None),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "/c.toml: unsupported containerd config version 4"
        );
    }
}
