//! The OCI state a runtime passes to a hook on stdin, and where it says the
//! container's root filesystem is.
//!
//! The root is the state's `root` when present (crun adds it), else
//! `root.path` of `<bundle>/config.json`, made absolute against the bundle
//! (containerd writes a relative `rootfs`; docker and podman an absolute
//! path). Only the runtime-written bundle is read here, with plain host
//! paths: nothing inside the container root is touched.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Largest state or `config.json` we read (both are small JSON documents).
const MAX_JSON: u64 = 64 << 20;

/// Why the state or the bundle's `config.json` could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The state could not be read.
    #[error("reading the OCI state from stdin: {0}")]
    Read(#[source] std::io::Error),
    /// The state is not the JSON we expect.
    #[error("the OCI state on stdin is not valid: {0} (a runtime passes the container state as JSON on a hook's stdin)")]
    Parse(#[source] serde_json::Error),
    /// Neither `bundle` nor the legacy `bundlePath` is set.
    #[error("the OCI state on stdin has no `bundle` (nor legacy `bundlePath`)")]
    NoBundle,
    /// `config.json` could not be read.
    #[error("{}: {source}", path.display())]
    ConfigRead {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// `config.json` is not valid JSON.
    #[error("{}: invalid JSON: {source}", path.display())]
    ConfigParse {
        /// The file.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// `config.json` has no usable `root.path`.
    #[error("{}: root.path {what}", path.display())]
    RootPath {
        /// The file.
        path: PathBuf,
        /// What is wrong: `missing`, `is empty`, `is not a string`.
        what: &'static str,
    },
}

/// The OCI container state (runtime-spec `state`), as hooks receive it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// `ociVersion`.
    pub oci_version: String,
    /// Container id.
    pub id: String,
    /// `creating`, `created`, `running`, `stopped`.
    pub status: String,
    /// The container process, when the runtime gives one.
    pub pid: Option<i32>,
    /// The bundle directory (`bundle`, or pre-1.0 `bundlePath`).
    pub bundle: PathBuf,
    /// crun's extension: the container root, when present.
    pub root: Option<PathBuf>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawState {
    #[serde(default)]
    oci_version: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    pid: Option<i32>,
    #[serde(default)]
    bundle: Option<PathBuf>,
    #[serde(default)]
    bundle_path: Option<PathBuf>,
    #[serde(default)]
    root: Option<PathBuf>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
}

impl State {
    /// Reads the state JSON (a hook's stdin).
    pub fn from_reader(reader: impl Read) -> Result<State, StateError> {
        let mut bytes = Vec::new();
        reader
            .take(MAX_JSON)
            .read_to_end(&mut bytes)
            .map_err(StateError::Read)?;
        State::from_slice(&bytes)
    }

    /// Parses the state JSON.
    pub fn from_slice(bytes: &[u8]) -> Result<State, StateError> {
        let raw: RawState = serde_json::from_slice(bytes).map_err(StateError::Parse)?;
        let bundle = raw
            .bundle
            .filter(|b| !b.as_os_str().is_empty())
            .or(raw.bundle_path.filter(|b| !b.as_os_str().is_empty()))
            .ok_or(StateError::NoBundle)?;
        Ok(State {
            oci_version: raw.oci_version,
            id: raw.id,
            status: raw.status,
            pid: raw.pid,
            bundle,
            root: raw.root.filter(|r| !r.as_os_str().is_empty()),
            annotations: raw.annotations.unwrap_or_default(),
        })
    }
}

/// The host path of the container's root filesystem: the state's `root`
/// if present, else `root.path` of `<bundle>/config.json`; a relative
/// path is taken against the bundle.
pub fn container_root(state: &State) -> Result<PathBuf, StateError> {
    if let Some(root) = &state.root {
        return Ok(absolute_in(&state.bundle, root));
    }
    let config = state.bundle.join("config.json");
    let file = std::fs::File::open(&config).map_err(|source| StateError::ConfigRead {
        path: config.clone(),
        source,
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_JSON)
        .read_to_end(&mut bytes)
        .map_err(|source| StateError::ConfigRead {
            path: config.clone(),
            source,
        })?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|source| StateError::ConfigParse {
            path: config.clone(),
            source,
        })?;
    let missing = |what| StateError::RootPath {
        path: config.clone(),
        what,
    };
    let path = value
        .get("root")
        .and_then(|r| r.get("path"))
        .ok_or_else(|| missing("missing"))?;
    let path = path.as_str().ok_or_else(|| missing("is not a string"))?;
    if path.is_empty() {
        return Err(missing("is empty"));
    }
    Ok(absolute_in(&state.bundle, Path::new(path)))
}

fn absolute_in(bundle: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        bundle.join(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runc_style_state() {
        let s = State::from_reader(
            &br#"{"ociVersion":"1.2.0","id":"c1","status":"creating","pid":1,
                 "bundle":"/run/containerd/b/c1","annotations":{"a":"b"}}"#[..],
        )
        .unwrap();
        assert_eq!(s.oci_version, "1.2.0");
        assert_eq!(s.id, "c1");
        assert_eq!(s.status, "creating");
        assert_eq!(s.pid, Some(1));
        assert_eq!(s.bundle, PathBuf::from("/run/containerd/b/c1"));
        assert_eq!(s.root, None);
        assert_eq!(s.annotations.get("a").map(String::as_str), Some("b"));
    }

    #[test]
    fn crun_style_state_has_root() {
        let s = State::from_reader(
            &br#"{"ociVersion":"1.0.0","id":"c2","status":"created","pid":0,
                 "bundle":"/b","root":"/b/merged"}"#[..],
        )
        .unwrap();
        assert_eq!(s.pid, Some(0));
        assert_eq!(s.root, Some(PathBuf::from("/b/merged")));
        assert_eq!(container_root(&s).unwrap(), PathBuf::from("/b/merged"));
    }

    #[test]
    fn crun_relative_root_is_taken_against_bundle() {
        let s = State::from_slice(br#"{"bundle":"/b","root":"rootfs"}"#).unwrap();
        assert_eq!(container_root(&s).unwrap(), PathBuf::from("/b/rootfs"));
    }

    #[test]
    fn legacy_bundle_path() {
        let s = State::from_slice(br#"{"id":"x","bundlePath":"/old/bundle"}"#).unwrap();
        assert_eq!(s.bundle, PathBuf::from("/old/bundle"));
        assert_eq!(s.pid, None);
    }

    #[test]
    fn garbage_names_stdin() {
        let e = State::from_reader(&b"not json"[..]).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("stdin"), "{msg}");
        let e = State::from_slice(br#"{"id":"x"}"#).unwrap_err();
        assert!(matches!(e, StateError::NoBundle), "{e}");
        assert!(e.to_string().contains("stdin"), "{e}");
    }

    fn bundle_with(config: &str) -> (tempfile::TempDir, State) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), config).unwrap();
        let state = State::from_slice(
            serde_json::json!({"ociVersion":"1.0.2","id":"c","status":"creating","pid":7,
                               "bundle": dir.path()})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        (dir, state)
    }

    #[test]
    fn relative_root_path_from_config() {
        let (dir, state) = bundle_with(r#"{"root":{"path":"rootfs","readonly":false}}"#);
        assert_eq!(container_root(&state).unwrap(), dir.path().join("rootfs"));
    }

    #[test]
    fn absolute_root_path_from_config() {
        let (_dir, state) = bundle_with(r#"{"root":{"path":"/var/lib/docker/overlay2/x/merged"}}"#);
        assert_eq!(
            container_root(&state).unwrap(),
            PathBuf::from("/var/lib/docker/overlay2/x/merged")
        );
    }

    #[test]
    fn config_errors_name_the_file_and_field() {
        let (dir, state) = bundle_with(r#"{"process":{}}"#);
        let msg = container_root(&state).unwrap_err().to_string();
        let want = format!(
            "{}: root.path missing",
            dir.path().join("config.json").display()
        );
        assert_eq!(msg, want);

        let (dir, state) = bundle_with("{broken");
        let msg = container_root(&state).unwrap_err().to_string();
        assert!(
            msg.starts_with(&format!(
                "{}: invalid JSON",
                dir.path().join("config.json").display()
            )),
            "{msg}"
        );

        let state = State::from_slice(br#"{"bundle":"/nonexistent/gpuctk-bundle"}"#).unwrap();
        let msg = container_root(&state).unwrap_err().to_string();
        assert!(
            msg.starts_with("/nonexistent/gpuctk-bundle/config.json: "),
            "{msg}"
        );
    }
}
