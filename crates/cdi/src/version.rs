//! CDI spec versions: which exist, and which a spec needs given the features it uses.
//!
//! A loader must reject a spec whose `cdiVersion` is unknown or lower than the features it uses
//! require, and a writer should emit the lowest version that fits so older runtimes can read it
//! (NVIDIA's generator does the same). The rules are those of CDI's `requiresVxxx` functions:
//! 0.4.0 mount `type`; 0.5.0 `hostPath` or a device name starting with a non-letter; 0.6.0
//! annotations or a `.` in the class; 0.7.0 `intelRdt` or `additionalGids`; 1.1.0 `netDevices`
//! or `intelRdt.schemata`/`enableMonitoring`. 0.8.0 and 1.0.0 changed only the Go API and are
//! never required. 0.1.0 and 0.2.0 are accepted as version strings but nothing is older than 0.3.0.

use std::fmt;
use std::str::FromStr;

use crate::spec::Spec;

/// Why a version string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    /// Not of the form `X.Y.Z` (optionally `vX.Y.Z`).
    #[error("invalid cdiVersion {0:?}: want a version such as {LATEST}")]
    Malformed(String),
    /// Well-formed, but no CDI release has this number.
    #[error("unknown cdiVersion {:?}: known versions are {}", .0, known_list())]
    Unknown(String),
}

fn known_list() -> String {
    KNOWN_VERSIONS
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A CDI spec version `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// Patch number.
    pub patch: u32,
}

impl Version {
    /// Build a version.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// Parse `X.Y.Z` or `vX.Y.Z` (any numbers; see [`Version::parse_known`]).
    pub fn parse(s: &str) -> Result<Version, VersionError> {
        let malformed = || VersionError::Malformed(s.to_string());
        let t = s.strip_prefix('v').unwrap_or(s);
        let mut parts = t.split('.');
        let mut num = || -> Result<u32, VersionError> {
            let p = parts.next().ok_or_else(malformed)?;
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(malformed());
            }
            p.parse().map_err(|_| malformed())
        };
        let v = Version::new(num()?, num()?, num()?);
        if parts.next().is_some() {
            return Err(malformed());
        }
        Ok(v)
    }

    /// Parse and require one of [`KNOWN_VERSIONS`].
    pub fn parse_known(s: &str) -> Result<Version, VersionError> {
        let v = Version::parse(s)?;
        if v.is_known() {
            Ok(v)
        } else {
            Err(VersionError::Unknown(s.to_string()))
        }
    }

    /// Whether a CDI release has this number.
    pub fn is_known(&self) -> bool {
        KNOWN_VERSIONS.contains(self)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl FromStr for Version {
    type Err = VersionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Version::parse(s)
    }
}

/// 0.1.0 (pre-tag draft).
pub const V0_1_0: Version = Version::new(0, 1, 0);
/// 0.2.0 (pre-tag draft).
pub const V0_2_0: Version = Version::new(0, 2, 0);
/// 0.3.0, the first tagged spec and the baseline.
pub const V0_3_0: Version = Version::new(0, 3, 0);
/// 0.4.0: `mounts[].type`.
pub const V0_4_0: Version = Version::new(0, 4, 0);
/// 0.5.0: `deviceNodes[].hostPath`, device names starting with a digit.
pub const V0_5_0: Version = Version::new(0, 5, 0);
/// 0.6.0: annotations, `.` in the class.
pub const V0_6_0: Version = Version::new(0, 6, 0);
/// 0.7.0: `intelRdt`, `additionalGids`.
pub const V0_7_0: Version = Version::new(0, 7, 0);
/// 0.8.0: Go API only.
pub const V0_8_0: Version = Version::new(0, 8, 0);
/// 1.0.0: Go API only.
pub const V1_0_0: Version = Version::new(1, 0, 0);
/// 1.1.0: `netDevices`, `intelRdt.schemata`/`enableMonitoring`.
pub const V1_1_0: Version = Version::new(1, 1, 0);

/// The lowest version a spec can require.
pub const EARLIEST: Version = V0_3_0;
/// The newest CDI spec version this crate knows.
pub const LATEST: Version = V1_1_0;

/// Every released CDI spec version, oldest first.
pub const KNOWN_VERSIONS: [Version; 10] = [
    V0_1_0, V0_2_0, V0_3_0, V0_4_0, V0_5_0, V0_6_0, V0_7_0, V0_8_0, V1_0_0, V1_1_0,
];

/// Why a spec needs a version: the lowest version and the feature that needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The version needed.
    pub version: Version,
    /// The feature, phrased to follow "uses", e.g. `hostPath`.
    pub feature: String,
}

/// Every feature in `spec` that needs more than [`EARLIEST`], highest version first; ties keep
/// the order of the rules above.
pub fn requirements(spec: &Spec) -> Vec<Requirement> {
    let mut out = Vec::new();
    let mut need = |version: Version, feature: &str| {
        if !out.iter().any(|r: &Requirement| r.version == version) {
            out.push(Requirement {
                version,
                feature: feature.to_string(),
            });
        }
    };
    for e in spec.all_edits() {
        if !e.net_devices.is_empty() {
            need(V1_1_0, "netDevices");
        }
        if let Some(rdt) = &e.intel_rdt {
            if rdt.schemata.is_some() {
                need(V1_1_0, "intelRdt.schemata");
            }
            if rdt.enable_monitoring.is_some() {
                need(V1_1_0, "intelRdt.enableMonitoring");
            }
        }
    }
    for e in spec.all_edits() {
        if e.intel_rdt.is_some() {
            need(V0_7_0, "intelRdt");
        }
        if !e.additional_gids.is_empty() {
            need(V0_7_0, "additionalGids");
        }
    }
    if !spec.annotations.is_empty() || spec.devices.iter().any(|d| !d.annotations.is_empty()) {
        need(V0_6_0, "annotations");
    }
    if let Some((_, class)) = spec.kind.split_once('/') {
        if class.contains('.') {
            need(V0_6_0, "a '.' in the class of its kind");
        }
    }
    if let Some(d) = spec.devices.iter().find(|d| {
        d.name
            .chars()
            .next()
            .is_some_and(|c| !c.is_ascii_alphabetic())
    }) {
        need(
            V0_5_0,
            &format!("a device name starting with a digit ({:?})", d.name),
        );
    }
    if spec.all_edits().any(|e| {
        e.device_nodes
            .iter()
            .any(|n| n.host_path.as_deref().is_some_and(|h| !h.is_empty()))
    }) {
        need(V0_5_0, "hostPath");
    }
    if spec.all_edits().any(|e| {
        e.mounts
            .iter()
            .any(|m| m.r#type.as_deref().is_some_and(|t| !t.is_empty()))
    }) {
        need(V0_4_0, "mounts[].type");
    }
    out.sort_by_key(|r| std::cmp::Reverse(r.version));
    out
}

/// The lowest CDI version that supports every feature `spec` uses.
pub fn minimum_version(spec: &Spec) -> Version {
    requirements(spec)
        .first()
        .map(|r| r.version)
        .unwrap_or(EARLIEST)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{ContainerEdits, Device, DeviceNode, IntelRdt, Mount, NetDevice};

    fn base() -> Spec {
        Spec {
            cdi_version: "0.3.0".into(),
            kind: "vendor.com/dev".into(),
            devices: vec![Device {
                name: "a".into(),
                container_edits: ContainerEdits {
                    env: vec!["A=1".into()],
                    ..Default::default()
                },
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn parse() {
        assert_eq!(Version::parse("0.5.0").unwrap(), V0_5_0);
        assert_eq!(Version::parse("v1.1.0").unwrap(), V1_1_0);
        assert!(Version::parse("1.1").is_err());
        assert!(Version::parse("1.1.0.0").is_err());
        assert!(Version::parse("1.1.0-rc1").is_err());
        assert!(Version::parse("+1.1.0").is_err());
        assert!(Version::parse("").is_err());
        assert!(Version::parse_known("0.9.0").is_err());
        assert!(Version::parse_known("0.1.0").is_ok());
        assert!(VersionError::Unknown("0.9.0".into())
            .to_string()
            .contains("1.1.0"));
        // Compared as numbers, not strings.
        assert!(Version::parse("0.10.0").unwrap() > V0_8_0);
    }

    #[test]
    fn minimum_versions() {
        let mut s = base();
        assert_eq!(minimum_version(&s), V0_3_0);
        s.devices[0].container_edits.mounts.push(Mount {
            host_path: "/a".into(),
            container_path: "/a".into(),
            r#type: Some("bind".into()),
            ..Default::default()
        });
        assert_eq!(minimum_version(&s), V0_4_0);
        s.container_edits.device_nodes.push(DeviceNode {
            path: "/dev/x".into(),
            host_path: Some("/h/dev/x".into()),
            ..Default::default()
        });
        assert_eq!(minimum_version(&s), V0_5_0);
        let mut t = base();
        t.devices[0].name = "0".into();
        assert_eq!(minimum_version(&t), V0_5_0);
        t.kind = "vendor.com/dev.sub".into();
        assert_eq!(minimum_version(&t), V0_6_0);
        t.devices[0].container_edits.additional_gids.push(3);
        assert_eq!(minimum_version(&t), V0_7_0);
        t.container_edits.intel_rdt = Some(IntelRdt {
            schemata: Some(vec!["L3:0=f".into()]),
            ..Default::default()
        });
        assert_eq!(minimum_version(&t), V1_1_0);
        let mut n = base();
        n.devices[0].container_edits.net_devices.push(NetDevice {
            host_interface_name: "eth1".into(),
            name: "eth1".into(),
        });
        assert_eq!(minimum_version(&n), V1_1_0);
        let mut a = base();
        a.annotations.insert("x".into(), "y".into());
        let r = requirements(&a);
        assert_eq!(r[0].version, V0_6_0);
        assert_eq!(r[0].feature, "annotations");
    }
}
