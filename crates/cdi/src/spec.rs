//! The CDI spec model (what a file in `/etc/cdi` or `/var/run/cdi` holds), strict parsing from JSON
//! or YAML, and writing.
//!
//! Field names and their serialized order follow CDI's Go structs (`specs-go/config.go`), which is
//! also what `nvidia-ctk cdi generate` emits, so a spec we write diffs cleanly against NVIDIA's.
//! Empty fields are omitted as Go's `omitempty` does; `minor: 0` is therefore written only when set.
//! Parsing rejects unknown fields, as CDI loaders do (`yaml.UnmarshalStrict`), so a typo such as
//! `hostpath` is an error rather than a silently ignored field. Parsing does not validate; see
//! [`crate::validate`] and [`Spec::load_valid`].

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::validate::{validate, ValidationError};

/// Why bytes did not parse as a CDI spec.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The input holds nothing but white space.
    #[error("empty document: a CDI spec needs at least cdiVersion, kind and devices")]
    Empty,
    /// JSON syntax or structure error.
    #[error("{}", location_message(*line, *column, message))]
    Json {
        /// 1-based line, 0 when unknown.
        line: usize,
        /// 1-based column, 0 when unknown.
        column: usize,
        /// What serde said.
        message: String,
    },
    /// YAML syntax or structure error.
    #[error("{}", location_message(*line, *column, message))]
    Yaml {
        /// 1-based line, 0 when unknown.
        line: usize,
        /// 1-based column, 0 when unknown.
        column: usize,
        /// What serde said.
        message: String,
    },
    /// The input is larger than any spec we read.
    #[error("{size} bytes, more than the {cap} a CDI spec may have; this is not a device spec, remove it from the spec directory")]
    TooLarge {
        /// Its size.
        size: u64,
        /// The cap.
        cap: u64,
    },
    /// The input nests deeper than any spec does.
    #[error("{}", location_message(*line, 1, &format!("mappings and sequences nested more than {cap} deep; a CDI spec nests about 6 deep, remove this file from the spec directory")))]
    TooDeep {
        /// 1-based line where the nesting went past the cap.
        line: usize,
        /// The cap.
        cap: usize,
    },
    /// Serialization of a spec failed (not expected for well-formed values).
    #[error("cannot serialize CDI spec: {0}")]
    Serialize(String),
}

fn location_message(line: usize, column: usize, message: &str) -> String {
    if line == 0 {
        message.to_string()
    } else {
        format!("line {line}, column {column}: {message}")
    }
}

/// Errors of loading and writing spec files. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("{}: cannot read CDI spec: {source}", path.display())]
    Read {
        /// The spec file.
        path: PathBuf,
        /// The IO error.
        source: io::Error,
    },
    /// The file is not a well-formed spec.
    #[error("{}: {source}", path.display())]
    Parse {
        /// The spec file.
        path: PathBuf,
        /// The parse error.
        source: ParseError,
    },
    /// The file parsed but breaks CDI rules.
    #[error("{0}")]
    Invalid(ValidationError),
    /// The file could not be written.
    #[error("{}: cannot write CDI spec: {source}", path.display())]
    Write {
        /// The spec file.
        path: PathBuf,
        /// The IO error.
        source: io::Error,
    },
}

/// The encoding of a spec file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// `*.json`
    Json,
    /// `*.yaml` or `*.yml`
    Yaml,
}

impl Format {
    /// The format a file name implies: `.json`, `.yaml` or `.yml` (case-insensitive), else `None`.
    pub fn from_path(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "json" => Some(Format::Json),
            "yaml" | "yml" => Some(Format::Yaml),
            _ => None,
        }
    }

    /// Guess the format from content: JSON when the first non-blank byte is `{`, else YAML.
    pub fn sniff(bytes: &[u8]) -> Format {
        let first = bytes
            .iter()
            .copied()
            .find(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'));
        if first == Some(b'{') {
            Format::Json
        } else {
            Format::Yaml
        }
    }
}

/// A CDI spec: one kind (`vendor/class`) and its devices.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Spec {
    /// The CDI spec version this document follows, e.g. `0.5.0`.
    pub cdi_version: String,
    /// `vendor/class`, e.g. `nvidia.com/gpu`.
    pub kind: String,
    /// Free-form metadata (cdiVersion 0.6.0).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The devices of this kind.
    pub devices: Vec<Device>,
    /// Edits applied once when any device of this spec is requested.
    #[serde(default, skip_serializing_if = "ContainerEdits::is_empty")]
    pub container_edits: ContainerEdits,
}

/// One named device of a spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Device {
    /// The device name, unique within the spec (`0`, `all`, `GPU-…`).
    pub name: String,
    /// Free-form metadata (cdiVersion 0.6.0).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Edits applied when this device is requested; must not be empty.
    // Required in the schema, but an absent one is reported by validation ("has no container
    // edits") rather than as a bare parse error, which says more about how to fix it.
    #[serde(default)]
    pub container_edits: ContainerEdits,
}

/// Changes to make to a container's OCI spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ContainerEdits {
    /// `KEY=VALUE` entries for `process.env`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Device nodes to create in the container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_nodes: Vec<DeviceNode>,
    /// Network devices to move into the container's network namespace (cdiVersion 1.1.0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub net_devices: Vec<NetDevice>,
    /// OCI hooks to add.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<Hook>,
    /// Mounts to add.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    /// Intel RDT settings (cdiVersion 0.7.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intel_rdt: Option<IntelRdt>,
    /// Supplementary groups for the container process (cdiVersion 0.7.0).
    #[serde(
        default,
        rename = "additionalGids",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub additional_gids: Vec<u32>,
}

impl ContainerEdits {
    /// Whether these edits change nothing.
    pub fn is_empty(&self) -> bool {
        self.env.is_empty()
            && self.device_nodes.is_empty()
            && self.net_devices.is_empty()
            && self.hooks.is_empty()
            && self.mounts.is_empty()
            && self.intel_rdt.is_none()
            && self.additional_gids.is_empty()
    }

    /// Append `other` after these edits; a set `intelRdt` in `other` replaces ours (last wins, as
    /// in CDI).
    pub fn append(&mut self, other: &ContainerEdits) {
        self.env.extend(other.env.iter().cloned());
        self.device_nodes.extend(other.device_nodes.iter().cloned());
        self.net_devices.extend(other.net_devices.iter().cloned());
        self.hooks.extend(other.hooks.iter().cloned());
        self.mounts.extend(other.mounts.iter().cloned());
        if other.intel_rdt.is_some() {
            self.intel_rdt.clone_from(&other.intel_rdt);
        }
        self.additional_gids
            .extend(other.additional_gids.iter().copied());
    }
}

/// A device node to create in the container.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DeviceNode {
    /// Path in the container.
    pub path: String,
    /// Path on the host, when it differs from `path` (cdiVersion 0.5.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
    /// `b`, `c`, `u` or `p`; filled from the host when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#type: Option<String>,
    /// Major number; filled from the host when absent or 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major: Option<i64>,
    /// Minor number; absent means 0 once `major` is set (Go's `omitempty` drops 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor: Option<i64>,
    /// Permission bits of the node (Go `os.FileMode`, e.g. 438 = 0666).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_mode: Option<u32>,
    /// Device cgroup access, a subset of `rwm` (default `rwm`), or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<String>,
    /// Owner of the node in the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// Group of the node in the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
}

/// A mount to add to the container.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Mount {
    /// Source on the host.
    pub host_path: String,
    /// Destination in the container.
    pub container_path: String,
    /// OCI mount options (`ro`, `nosuid`, `nodev`, `rbind`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// Filesystem type, e.g. `bind` or `tmpfs` (cdiVersion 0.4.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#type: Option<String>,
}

/// An OCI hook to add.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Hook {
    /// OCI hook list: `prestart`, `createRuntime`, `createContainer`, `startContainer`,
    /// `poststart` or `poststop`.
    pub hook_name: String,
    /// Absolute path of the executable on the host.
    pub path: String,
    /// argv, including argv\[0\].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment of the hook, `KEY=VALUE`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Timeout in seconds, > 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<i64>,
}

/// Intel RDT (resource director technology) settings.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IntelRdt {
    /// The resctrl class of service; a plain file name.
    #[serde(default, rename = "closID", skip_serializing_if = "Option::is_none")]
    pub clos_id: Option<String>,
    /// L3 cache schema line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l3_cache_schema: Option<String>,
    /// Memory bandwidth schema line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_bw_schema: Option<String>,
    /// Cache monitoring (cdiVersion 0.7.0–1.0.0; removed in 1.1.0). Kept so that older specs
    /// still load.
    #[serde(default, rename = "enableCMT", skip_serializing_if = "Option::is_none")]
    pub enable_cmt: Option<bool>,
    /// Memory bandwidth monitoring (cdiVersion 0.7.0–1.0.0; removed in 1.1.0).
    #[serde(default, rename = "enableMBM", skip_serializing_if = "Option::is_none")]
    pub enable_mbm: Option<bool>,
    /// Schemata lines (cdiVersion 1.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schemata: Option<Vec<String>>,
    /// Monitoring (cdiVersion 1.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_monitoring: Option<bool>,
}

/// A host network interface to move into the container (cdiVersion 1.1.0).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NetDevice {
    /// Interface name on the host.
    pub host_interface_name: String,
    /// Interface name in the container.
    pub name: String,
}

impl Spec {
    /// Every edit of the spec: its top-level ones, then each device's.
    pub fn all_edits(&self) -> impl Iterator<Item = &ContainerEdits> {
        std::iter::once(&self.container_edits)
            .chain(self.devices.iter().map(|d| &d.container_edits))
    }

    /// Parse a spec from bytes. `format` `None` sniffs: JSON if the first non-blank byte is `{`.
    pub fn from_bytes(bytes: &[u8], format: Option<Format>) -> Result<Spec, ParseError> {
        // Editors on some systems add a UTF-8 byte order mark; neither parser accepts one.
        let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        if bytes
            .iter()
            .all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        {
            return Err(ParseError::Empty);
        }
        let format = format.unwrap_or_else(|| Format::sniff(bytes));
        crate::limits::check(bytes, format)?;
        match format {
            Format::Json => serde_json::from_slice(bytes).map_err(|e| ParseError::Json {
                line: e.line(),
                column: e.column(),
                message: strip_location(&e.to_string()),
            }),
            Format::Yaml => serde_norway::from_slice(bytes).map_err(|e| {
                let (line, column) = e
                    .location()
                    .map(|l| (l.line(), l.column()))
                    .unwrap_or((0, 0));
                ParseError::Yaml {
                    line,
                    column,
                    message: strip_location(&e.to_string()),
                }
            }),
        }
    }

    /// Read and parse a spec file; the format comes from the extension, else from the content.
    pub fn load(path: &Path) -> Result<Spec, Error> {
        let bytes = crate::limits::read_spec_file(path)?;
        Spec::from_bytes(&bytes, Format::from_path(path)).map_err(|source| Error::Parse {
            path: path.to_path_buf(),
            source,
        })
    }

    /// [`Spec::load`], then [`validate`]; any issue makes it an [`Error::Invalid`].
    pub fn load_valid(path: &Path) -> Result<Spec, Error> {
        Spec::valid(path, Spec::load(path)?)
    }

    /// Parses `bytes` read from `path`, then [`validate`]s it.
    pub fn from_bytes_valid(path: &Path, bytes: &[u8]) -> Result<Spec, Error> {
        let spec =
            Spec::from_bytes(bytes, Format::from_path(path)).map_err(|source| Error::Parse {
                path: path.to_path_buf(),
                source,
            })?;
        Spec::valid(path, spec)
    }

    fn valid(path: &Path, spec: Spec) -> Result<Spec, Error> {
        let issues = validate(&spec);
        if issues.is_empty() {
            Ok(spec)
        } else {
            Err(Error::Invalid(ValidationError {
                file: path.to_path_buf(),
                issues,
            }))
        }
    }

    /// Pretty JSON (two-space indent) with a trailing newline.
    pub fn to_json_pretty(&self) -> String {
        // Serializing plain structs of strings and integers cannot fail.
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }

    /// YAML with a leading `---` document marker, like NVIDIA's writer. The direct writer
    /// answers for what `cdi generate` makes; serde_norway writes the rest, to the same bytes.
    pub fn to_yaml(&self) -> String {
        let body = crate::yaml_out::spec(self)
            .unwrap_or_else(|| serde_norway::to_string(self).unwrap_or_default());
        format!("---\n{body}")
    }

    /// Serialize in `format`.
    pub fn to_format(&self, format: Format) -> String {
        match format {
            Format::Json => self.to_json_pretty(),
            Format::Yaml => self.to_yaml(),
        }
    }

    /// The device called `name`, if any.
    pub fn device(&self, name: &str) -> Option<&Device> {
        self.devices.iter().find(|d| d.name == name)
    }
}

// serde appends " at line L column C" to its messages; we report the location ourselves.
fn strip_location(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) if msg[i..].contains(" column ") => msg[..i].to_string(),
        _ => msg.to_string(),
    }
}

/// Write `spec` to `path` atomically (temp file, fsync, rename) with mode 0644. The directory
/// must exist; an existing file is left intact on any failure.
pub fn write_spec(path: &Path, spec: &Spec, format: Format) -> Result<(), Error> {
    write_spec_text(path, spec.to_format(format).as_bytes())
}

/// [`write_spec`] of a spec already serialized.
pub fn write_spec_text(path: &Path, text: &[u8]) -> Result<(), Error> {
    gpuctk_atomicfile::write(path, text, Some(0o644)).map_err(|source| Error::Write {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"{"cdiVersion":"0.3.0","kind":"vendor.com/device","devices":[{"name":"myDevice","containerEdits":{"deviceNodes":[{"path":"/dev/card1"}]}}]}"#;

    #[test]
    fn parses_json_and_yaml() {
        let s = Spec::from_bytes(MINIMAL.as_bytes(), None).unwrap();
        assert_eq!(s.kind, "vendor.com/device");
        assert_eq!(
            s.devices[0].container_edits.device_nodes[0].path,
            "/dev/card1"
        );
        let y = s.to_yaml();
        assert!(
            y.starts_with("---\ncdiVersion: 0.3.0\nkind: vendor.com/device\n"),
            "{y}"
        );
        assert_eq!(Spec::from_bytes(y.as_bytes(), None).unwrap(), s);
        assert_eq!(
            Spec::from_bytes(s.to_json_pretty().as_bytes(), Some(Format::Json)).unwrap(),
            s
        );
    }

    #[test]
    fn rejects_unknown_fields_with_location() {
        let bad = MINIMAL.replace("\"path\"", "\"pth\"");
        let e = Spec::from_bytes(bad.as_bytes(), None).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("unknown field `pth`"), "{msg}");
        assert!(msg.starts_with("line 1, column"), "{msg}");
        let y = "cdiVersion: 0.3.0\nkind: a/b\ndevices:\n- name: x\n  containerEdits:\n    env: [A=1]\n  extra: 1\n";
        let msg = Spec::from_bytes(y.as_bytes(), None)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("unknown field `extra`"), "{msg}");
        assert!(msg.starts_with("line 7"), "{msg}");
    }

    #[test]
    fn empty_input_is_an_error() {
        assert!(matches!(
            Spec::from_bytes(b"  \n", None),
            Err(ParseError::Empty)
        ));
    }

    #[test]
    fn field_order_is_go_order() {
        let mut s = Spec::from_bytes(MINIMAL.as_bytes(), None).unwrap();
        s.container_edits = ContainerEdits {
            env: vec!["A=1".into()],
            additional_gids: vec![5],
            mounts: vec![Mount {
                host_path: "/a".into(),
                container_path: "/b".into(),
                options: vec!["ro".into()],
                r#type: Some("bind".into()),
            }],
            hooks: vec![Hook {
                hook_name: "createContainer".into(),
                path: "/bin/true".into(),
                ..Default::default()
            }],
            device_nodes: vec![DeviceNode {
                path: "/dev/x".into(),
                host_path: Some("/h".into()),
                r#type: Some("c".into()),
                major: Some(1),
                minor: Some(2),
                file_mode: Some(438),
                permissions: Some("rw".into()),
                uid: Some(1),
                gid: Some(2),
            }],
            net_devices: vec![NetDevice {
                host_interface_name: "eth1".into(),
                name: "net0".into(),
            }],
            intel_rdt: Some(IntelRdt {
                clos_id: Some("c".into()),
                ..Default::default()
            }),
        };
        let all = s.to_json_pretty();
        // Only the top-level edits hold every field.
        let j = &all[all.rfind("\"containerEdits\"").unwrap()..];
        let pos = |k: &str| j.find(&format!("\"{k}\"")).unwrap();
        let order = [
            "env",
            "deviceNodes",
            "netDevices",
            "hooks",
            "mounts",
            "intelRdt",
            "additionalGids",
        ];
        for w in order.windows(2) {
            assert!(pos(w[0]) < pos(w[1]), "{} before {}", w[0], w[1]);
        }
        let node = [
            "hostPath",
            "type",
            "major",
            "minor",
            "fileMode",
            "permissions",
            "uid",
            "gid",
        ];
        for w in node.windows(2) {
            assert!(pos(w[0]) < pos(w[1]), "{} before {}", w[0], w[1]);
        }
        assert!(pos("containerPath") < pos("options") && pos("options") < pos("closID"));
    }

    #[test]
    fn format_from_path() {
        assert_eq!(Format::from_path(Path::new("a/b.json")), Some(Format::Json));
        assert_eq!(Format::from_path(Path::new("b.YAML")), Some(Format::Yaml));
        assert_eq!(Format::from_path(Path::new("b.yml")), Some(Format::Yaml));
        assert_eq!(Format::from_path(Path::new("b.tmp")), None);
        assert_eq!(Format::from_path(Path::new("json")), None);
    }

    #[test]
    fn append_keeps_order_and_last_intel_rdt_wins() {
        let mut a = ContainerEdits {
            env: vec!["A=1".into()],
            ..Default::default()
        };
        let b = ContainerEdits {
            env: vec!["B=2".into()],
            intel_rdt: Some(IntelRdt {
                clos_id: Some("x".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(!a.is_empty());
        a.append(&b);
        assert_eq!(a.env, ["A=1", "B=2"]);
        assert_eq!(a.intel_rdt.unwrap().clos_id.as_deref(), Some("x"));
        assert!(ContainerEdits::default().is_empty());
    }

    #[test]
    fn load_names_the_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.yaml");
        std::fs::write(&p, "cdiVersion: [").unwrap();
        let msg = Spec::load(&p).unwrap_err().to_string();
        assert!(msg.starts_with(&format!("{}: line", p.display())), "{msg}");
        let msg = Spec::load(&d.path().join("missing.json"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("missing.json: cannot read CDI spec"), "{msg}");
    }
}
