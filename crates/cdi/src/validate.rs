//! Validation of a parsed CDI spec: every rule a runtime enforces, reported all at once with the
//! device and field at fault and what would be right.
//!
//! Decisions where the CDI sources are loose or disagree:
//! - Device-node and hook paths, and mount container paths, must be absolute (CDI's Go validator
//!   only checks they are non-empty; a relative path in a container spec is always a mistake).
//!   A device node's `hostPath`, when set, must be absolute too. Mount host paths only need to be
//!   non-empty, since some mount types (`tmpfs`, `proc`) take a source that is not a path.
//! - `permissions` may be a subset of `rwm` or the word `none` (no cgroup access).
//! - Annotations are checked with the Kubernetes rules on every path (the Go library skips them on
//!   its typed path, see the facts file B1.2), because a runtime that forwards them would reject
//!   them later anyway.
//! - `enableCMT`/`enableMBM` are accepted up to cdiVersion 1.0.0 and rejected from 1.1.0, which
//!   removed them.

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;

use crate::names;
use crate::spec::{ContainerEdits, Spec};
use crate::version::{requirements, Version};

/// The hook names CDI accepts (`prestart` is deprecated in OCI but still accepted by CDI).
pub const HOOK_NAMES: [&str; 6] = [
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
];

/// The most bytes all annotations of one object may hold (keys plus values), as in Kubernetes.
pub const MAX_ANNOTATIONS_SIZE: usize = 256 * 1024;

/// One problem found in a spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// The device at fault, `None` for the spec's top level.
    pub device: Option<String>,
    /// Path of the field, e.g. `containerEdits.deviceNodes[0].path`.
    pub field: String,
    /// What is wrong and what would be right.
    pub message: String,
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(d) = &self.device {
            write!(f, "device {d:?}: ")?;
        }
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// A spec file with the issues found in it; displays one line per issue, each prefixed with
/// the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ValidationError {
    /// The spec file.
    pub file: PathBuf,
    /// What is wrong with it (never empty when returned by this crate).
    pub issues: Vec<Issue>,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, issue) in self.issues.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}: {issue}", self.file.display())?;
        }
        Ok(())
    }
}

struct Checker<'a> {
    issues: Vec<Issue>,
    device: Option<&'a str>,
}

impl Checker<'_> {
    fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.issues.push(Issue {
            device: self.device.map(str::to_string),
            field: field.into(),
            message: message.into(),
        });
    }
}

/// Check `spec` against every CDI rule; an empty result means the spec is valid.
pub fn validate(spec: &Spec) -> Vec<Issue> {
    validate_read(spec, |_| true)
}

/// [`validate`], where only the devices `read` says (by index) have their edits read: the
/// others' names and annotations are checked, their edits, empty, are not
/// (`Registry::from_cached`).
pub(crate) fn validate_read(spec: &Spec, read: impl Fn(usize) -> bool) -> Vec<Issue> {
    let mut c = Checker {
        issues: Vec::new(),
        device: None,
    };
    check_version(&mut c, spec);
    if let Err(e) = names::validate_kind(&spec.kind) {
        c.push(
            "kind",
            format!("{e} (a kind is vendor/class, e.g. nvidia.com/gpu)"),
        );
    }
    check_annotations(&mut c, "annotations", &spec.annotations);
    check_edits(&mut c, "containerEdits", &spec.container_edits, spec);
    if spec.devices.is_empty() {
        c.push("devices", "a spec needs at least one device");
    }
    let mut seen = BTreeSet::new();
    for (i, d) in spec.devices.iter().enumerate() {
        c.device = Some(&d.name);
        if let Err(e) = names::validate_device_name(&d.name) {
            c.push(format!("devices[{i}].name"), e.to_string());
        }
        if !seen.insert(d.name.as_str()) {
            c.push(
                format!("devices[{i}].name"),
                "device name used more than once in this spec; names must be unique",
            );
        }
        check_annotations(&mut c, "annotations", &d.annotations);
        if !read(i) {
            continue;
        }
        if d.container_edits.is_empty() {
            c.push(
                "containerEdits",
                "device has no container edits; give it at least one of env, deviceNodes, \
                 netDevices, hooks, mounts, intelRdt or additionalGids",
            );
        }
        check_edits(&mut c, "containerEdits", &d.container_edits, spec);
    }
    c.issues
}

fn check_version(c: &mut Checker, spec: &Spec) {
    let v = match Version::parse_known(&spec.cdi_version) {
        Ok(v) => v,
        Err(e) => {
            c.push("cdiVersion", e.to_string());
            return;
        }
    };
    // Report the highest requirement; it is the one to fix, and fixing it fixes the rest.
    if let Some(r) = requirements(spec).into_iter().find(|r| r.version > v) {
        c.push(
            "cdiVersion",
            format!(
                "cdiVersion {} is too old: the spec uses {}, which needs cdiVersion {} or later",
                spec.cdi_version, r.feature, r.version
            ),
        );
    }
}

fn is_abs(p: &str) -> bool {
    p.starts_with('/')
}

/// `{base}.{name}`, or `{base}.{name}[{index}]`: a field's name, written out only where an issue
/// names it (a spec of 64 GPUs has over a thousand fields, and writing every name up front cost
/// a create from it 8% of its instructions).
struct Field<'a> {
    base: &'a dyn fmt::Display,
    name: &'static str,
    index: Option<usize>,
}

impl fmt::Display for Field<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.base, self.name)?;
        match self.index {
            Some(i) => write!(f, "[{i}]"),
            None => Ok(()),
        }
    }
}

fn field<'a>(base: &'a dyn fmt::Display, name: &'static str, index: Option<usize>) -> Field<'a> {
    Field { base, name, index }
}

fn check_env(c: &mut Checker, field: &dyn fmt::Display, env: &[String]) {
    for (i, e) in env.iter().enumerate() {
        match e.find('=') {
            Some(0) => c.push(
                format!("{field}[{i}]"),
                format!("{e:?} has an empty variable name; want KEY=VALUE"),
            ),
            None => c.push(
                format!("{field}[{i}]"),
                format!("{e:?} has no '='; want KEY=VALUE"),
            ),
            Some(_) => {}
        }
    }
}

fn check_edits(c: &mut Checker, base: &str, e: &ContainerEdits, spec: &Spec) {
    check_env(c, &field(&base, "env", None), &e.env);
    for (i, n) in e.device_nodes.iter().enumerate() {
        let f = field(&base, "deviceNodes", Some(i));
        if n.path.is_empty() {
            c.push(
                format!("{f}.path"),
                "empty device path; want e.g. /dev/nvidia0",
            );
        } else if !is_abs(&n.path) {
            c.push(
                format!("{f}.path"),
                format!("{:?} is not an absolute path", n.path),
            );
        }
        if let Some(h) = &n.host_path {
            if !is_abs(h) {
                c.push(
                    format!("{f}.hostPath"),
                    format!("{h:?} is not an absolute path"),
                );
            }
        }
        if let Some(t) = &n.r#type {
            if !matches!(t.as_str(), "" | "b" | "c" | "u" | "p") {
                c.push(
                    format!("{f}.type"),
                    format!(
                        "{t:?} is not a device type; want b (block), c (char), u (unbuffered \
                         char) or p (fifo), or leave it out to take it from the host"
                    ),
                );
            }
        }
        if let Some(m) = n.major {
            if m < 0 {
                c.push(format!("{f}.major"), format!("{m} is negative"));
            }
        }
        if let Some(m) = n.minor {
            if m < 0 {
                c.push(format!("{f}.minor"), format!("{m} is negative"));
            }
        }
        if let Some(p) = &n.permissions {
            if p != "none" && !p.chars().all(|ch| matches!(ch, 'r' | 'w' | 'm')) {
                c.push(
                    format!("{f}.permissions"),
                    format!(
                        "{p:?} is not valid; want a combination of r, w and m (e.g. rwm), or none"
                    ),
                );
            }
        }
    }
    let mut host_names = BTreeSet::new();
    let mut names = BTreeSet::new();
    for (i, n) in e.net_devices.iter().enumerate() {
        let f = field(&base, "netDevices", Some(i));
        for (k, v, set) in [
            ("hostInterfaceName", &n.host_interface_name, &mut host_names),
            ("name", &n.name, &mut names),
        ] {
            if v.is_empty() {
                c.push(format!("{f}.{k}"), "empty interface name");
            } else if v.len() > 15 || v == "." || v == ".." || v.contains(['/', ' ', ':']) {
                c.push(
                    format!("{f}.{k}"),
                    format!(
                        "{v:?} is not a valid interface name (at most 15 characters, no '/', \
                         ':' or spaces)"
                    ),
                );
            } else if !set.insert(v.as_str()) {
                c.push(format!("{f}.{k}"), format!("{v:?} is used more than once"));
            }
        }
    }
    for (i, h) in e.hooks.iter().enumerate() {
        let f = field(&base, "hooks", Some(i));
        if !HOOK_NAMES.contains(&h.hook_name.as_str()) {
            c.push(
                format!("{f}.hookName"),
                format!(
                    "{:?} is not a hook name; want one of {}",
                    h.hook_name,
                    HOOK_NAMES.join(", ")
                ),
            );
        }
        if h.path.is_empty() {
            c.push(
                format!("{f}.path"),
                "empty hook path; want an absolute path",
            );
        } else if !is_abs(&h.path) {
            c.push(
                format!("{f}.path"),
                format!("{:?} is not an absolute path", h.path),
            );
        }
        check_env(c, &field(&f, "env", None), &h.env);
        if let Some(t) = h.timeout {
            if t <= 0 {
                c.push(
                    format!("{f}.timeout"),
                    format!("{t} is not a positive number of seconds; leave it out for no timeout"),
                );
            }
        }
    }
    for (i, m) in e.mounts.iter().enumerate() {
        let f = field(&base, "mounts", Some(i));
        if m.host_path.is_empty() {
            c.push(format!("{f}.hostPath"), "empty mount source");
        }
        if m.container_path.is_empty() {
            c.push(
                format!("{f}.containerPath"),
                "empty mount destination; want an absolute path",
            );
        } else if !is_abs(&m.container_path) {
            c.push(
                format!("{f}.containerPath"),
                format!("{:?} is not an absolute path", m.container_path),
            );
        }
    }
    if let Some(rdt) = &e.intel_rdt {
        let f = field(&base, "intelRdt", None);
        if let Some(id) = &rdt.clos_id {
            if id.len() >= 4096 || id == "." || id == ".." || id.contains(['/', '\n']) {
                c.push(
                    format!("{f}.closID"),
                    format!("{id:?} is not a valid resctrl group name (a plain file name)"),
                );
            }
        }
        if let Some(s) = &rdt.mem_bw_schema {
            if !s.starts_with("MB:") || s.contains('\n') {
                c.push(
                    format!("{f}.memBwSchema"),
                    format!("{s:?} is not a memory bandwidth schema; want a line like MB:0=70"),
                );
            }
        }
        let removed = Version::parse(&spec.cdi_version)
            .map(|v| v >= crate::version::V1_1_0)
            .unwrap_or(false);
        if removed {
            for (set, k) in [(rdt.enable_cmt, "enableCMT"), (rdt.enable_mbm, "enableMBM")] {
                if set.is_some() {
                    c.push(
                        format!("{f}.{k}"),
                        format!(
                            "{k} was removed in cdiVersion 1.1.0; use enableMonitoring instead"
                        ),
                    );
                }
            }
        }
    }
}

fn check_annotations(
    c: &mut Checker,
    field: &str,
    annotations: &std::collections::BTreeMap<String, String>,
) {
    let mut total = 0usize;
    for (k, v) in annotations {
        total = total.saturating_add(k.len()).saturating_add(v.len());
        if let Err(why) = check_qualified_key(k) {
            c.push(
                format!("{field}[{k:?}]"),
                format!("invalid annotation key: {why}"),
            );
        }
    }
    if total > MAX_ANNOTATIONS_SIZE {
        c.push(
            field,
            format!("annotations hold {total} bytes; at most {MAX_ANNOTATIONS_SIZE} are allowed"),
        );
    }
}

/// Why an annotation key is not a Kubernetes qualified name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum KeyError<'a> {
    #[error("the prefix before '/' is empty")]
    EmptyPrefix,
    #[error("the prefix is longer than 253 characters")]
    LongPrefix,
    #[error("prefix {0:?} must be a lower-case DNS subdomain such as example.com")]
    BadPrefix(&'a str),
    #[error("the name is empty")]
    EmptyName,
    #[error("the name is longer than 63 characters")]
    LongName,
    #[error(
        "name {0:?} must consist of letters, digits, '-', '_' or '.', and start and end with a \
         letter or digit"
    )]
    BadName(&'a str),
}

/// A Kubernetes qualified name: an optional DNS-subdomain prefix and `/`, then a name of at most
/// 63 characters made of letters, digits, `-`, `_` and `.`, starting and ending alphanumeric.
fn check_qualified_key(k: &str) -> Result<(), KeyError<'_>> {
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Err(KeyError::EmptyPrefix);
        }
        if p.len() > 253 {
            return Err(KeyError::LongPrefix);
        }
        let ok_label = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if !p.split('.').all(ok_label) {
            return Err(KeyError::BadPrefix(p));
        }
    }
    if name.is_empty() {
        return Err(KeyError::EmptyName);
    }
    if name.len() > 63 {
        return Err(KeyError::LongName);
    }
    let ok_char = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    let bytes = name.as_bytes();
    if !bytes.iter().all(|b| ok_char(*b))
        || !bytes[0].is_ascii_alphanumeric()
        || !bytes[bytes.len() - 1].is_ascii_alphanumeric()
    {
        return Err(KeyError::BadName(name));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Device, DeviceNode, Hook, Mount};

    fn good() -> Spec {
        Spec {
            cdi_version: "0.5.0".into(),
            kind: "nvidia.com/gpu".into(),
            devices: vec![Device {
                name: "0".into(),
                container_edits: ContainerEdits {
                    device_nodes: vec![DeviceNode {
                        path: "/dev/nvidia0".into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn messages(s: &Spec) -> Vec<String> {
        validate(s).iter().map(|i| i.to_string()).collect()
    }

    #[test]
    fn good_spec_is_clean() {
        assert!(validate(&good()).is_empty(), "{:?}", validate(&good()));
    }

    #[test]
    fn relative_path_message() {
        let mut s = good();
        s.devices[0].container_edits.device_nodes[0].path = "dev/nvidia0".into();
        let err = ValidationError {
            file: "/etc/cdi/x.yaml".into(),
            issues: validate(&s),
        };
        assert_eq!(
            err.to_string(),
            "/etc/cdi/x.yaml: device \"0\": containerEdits.deviceNodes[0].path: \
             \"dev/nvidia0\" is not an absolute path"
        );
    }

    #[test]
    fn version_rules() {
        let mut s = good();
        s.cdi_version = "0.3.0".into();
        let m = messages(&s);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].contains("needs cdiVersion 0.5.0 or later"), "{m:?}");
        s.cdi_version = "0.9.0".into();
        assert!(messages(&s)[0].contains("unknown cdiVersion"));
        s.cdi_version = "v0.5.0".into();
        assert!(messages(&s).is_empty());
        s.devices[0].container_edits.device_nodes[0].host_path = Some("/host/dev/nvidia0".into());
        s.cdi_version = "0.4.0".into();
        s.devices[0].name = "gpu0".into();
        assert!(messages(&s)[0].contains("uses hostPath, which needs cdiVersion 0.5.0"));
    }

    #[test]
    fn many_issues_at_once() {
        let mut s = good();
        s.kind = "nvidia.com".into();
        let e = &mut s.devices[0].container_edits;
        e.env = vec!["NOEQ".into(), "=x".into(), "A=".into()];
        e.device_nodes[0].r#type = Some("x".into());
        e.device_nodes[0].permissions = Some("rwx".into());
        e.device_nodes[0].host_path = Some("rel".into());
        e.hooks.push(Hook {
            hook_name: "preStart".into(),
            path: "bin/hook".into(),
            timeout: Some(0),
            env: vec!["BAD".into()],
            ..Default::default()
        });
        e.mounts.push(Mount {
            host_path: "".into(),
            container_path: "usr/lib".into(),
            ..Default::default()
        });
        s.devices.push(s.devices[0].clone());
        s.devices.push(Device {
            name: "-x".into(),
            ..Default::default()
        });
        let fields: Vec<String> = validate(&s).iter().map(|i| i.field.clone()).collect();
        for f in [
            "kind",
            "containerEdits.env[0]",
            "containerEdits.env[1]",
            "containerEdits.deviceNodes[0].type",
            "containerEdits.deviceNodes[0].permissions",
            "containerEdits.deviceNodes[0].hostPath",
            "containerEdits.hooks[0].hookName",
            "containerEdits.hooks[0].path",
            "containerEdits.hooks[0].env[0]",
            "containerEdits.hooks[0].timeout",
            "containerEdits.mounts[0].hostPath",
            "containerEdits.mounts[0].containerPath",
            "devices[1].name",
            "devices[2].name",
            "containerEdits",
        ] {
            assert!(fields.iter().any(|x| x == f), "missing {f} in {fields:?}");
        }
        assert!(!fields.iter().any(|x| x == "containerEdits.env[2]"));
    }

    #[test]
    fn no_devices() {
        let mut s = good();
        s.devices.clear();
        assert_eq!(validate(&s)[0].field, "devices");
    }

    #[test]
    fn annotations() {
        let mut s = good();
        s.cdi_version = "0.6.0".into();
        s.annotations.insert("example.com/ok".into(), "v".into());
        s.annotations.insert("plain_ok.1".into(), "v".into());
        assert!(validate(&s).is_empty(), "{:?}", validate(&s));
        s.annotations.insert("Bad_Prefix/x".into(), "v".into());
        s.annotations.insert("x/-bad".into(), "v".into());
        s.devices[0]
            .annotations
            .insert("big".into(), "v".repeat(MAX_ANNOTATIONS_SIZE));
        let m = messages(&s);
        assert_eq!(m.len(), 3, "{m:?}");
        assert!(m.iter().any(|x| x.contains("lower-case DNS subdomain")));
        assert!(m.iter().any(|x| x.contains("at most 262144")));
    }

    #[test]
    fn annotation_key_errors() {
        let long_prefix = format!("{}/x", "a".repeat(254));
        let long_name = "a".repeat(64);
        assert_eq!(check_qualified_key("/x"), Err(KeyError::EmptyPrefix));
        assert_eq!(check_qualified_key(&long_prefix), Err(KeyError::LongPrefix));
        assert_eq!(
            check_qualified_key("Ex.com/x"),
            Err(KeyError::BadPrefix("Ex.com"))
        );
        assert_eq!(check_qualified_key("ex.com/"), Err(KeyError::EmptyName));
        assert_eq!(check_qualified_key(&long_name), Err(KeyError::LongName));
        assert_eq!(check_qualified_key("x/-a"), Err(KeyError::BadName("-a")));
        assert_eq!(check_qualified_key("ex.com/a-b.c_d"), Ok(()));
        assert_eq!(
            KeyError::BadName("-a").to_string(),
            "name \"-a\" must consist of letters, digits, '-', '_' or '.', and start and end \
             with a letter or digit"
        );
    }

    #[test]
    fn permissions_none_is_accepted() {
        let mut s = good();
        s.devices[0].container_edits.device_nodes[0].permissions = Some("none".into());
        assert!(validate(&s).is_empty());
    }
}
