//! Parsers for the files the NVIDIA kernel module publishes under `/proc`: `driver/nvidia/version`,
//! `driver/nvidia/gpus/<bus-id>/information` and the character-device table in `devices`.
//!
//! Pure: text in, typed value or error out. The caller adds the file name to the error.

use std::fmt;

/// What is wrong with a proc file; the caller names the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcError {
    /// `version` had no `NVRM version:` line with a version number in it.
    #[error("no \"NVRM version: ... <version>\" line with a driver version like 570.124.06")]
    NoVersion,
    /// A required `Key: value` line was absent from `information`.
    #[error("missing \"{0}:\" line")]
    MissingField(&'static str),
    /// A field was present but its value could not be understood.
    #[error("bad {field} value {value:?}: {why}")]
    BadField {
        /// The key of the line.
        field: &'static str,
        /// The value as found.
        value: String,
        /// What a valid one looks like.
        why: &'static str,
    },
    /// The file was not text.
    #[error("not UTF-8 text")]
    NotText,
}

/// A driver version such as `570.124.06`, validated to be dot-separated numbers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct DriverVersion(String);

// Read back (a discovery snapshot) through the same validation as parsed.
impl<'de> serde::Deserialize<'de> for DriverVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<DriverVersion, D::Error> {
        let s = String::deserialize(d)?;
        DriverVersion::parse(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("{s:?} is not a driver version")))
    }
}

impl DriverVersion {
    /// Parse `570.124.06` or `535.54`: two or three dot-separated decimal fields.
    pub fn parse(s: &str) -> Option<DriverVersion> {
        let parts: Vec<&str> = s.split('.').collect();
        if !(2..=3).contains(&parts.len())
            || parts
                .iter()
                .any(|p| p.is_empty() || p.len() > 6 || !p.bytes().all(|b| b.is_ascii_digit()))
        {
            return None;
        }
        Some(DriverVersion(s.to_string()))
    }

    /// The version as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The branch (first field), e.g. 570.
    pub fn major(&self) -> u32 {
        self.0
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0)
    }
}

impl fmt::Display for DriverVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parse `/proc/driver/nvidia/version`.
///
/// Both the proprietary ("Kernel Module  570.124.06  ...") and the open module ("Open Kernel
/// Module for x86_64  570.124.06  Release Build ...") spell the line differently; the version is
/// the first token on the NVRM line that looks like a driver version.
pub fn parse_version(text: &str) -> Result<DriverVersion, ProcError> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("NVRM version:"))
        .ok_or(ProcError::NoVersion)?;
    line.split_whitespace()
        .filter_map(DriverVersion::parse)
        .next()
        .ok_or(ProcError::NoVersion)
}

/// One GPU as `information` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInformation {
    /// `Model:`, e.g. `NVIDIA A100-SXM4-80GB`.
    pub model: String,
    /// `GPU UUID:`, e.g. `GPU-c4f1a5ff-d592-056d-5aa4-d2c68f653ec6`.
    pub uuid: String,
    /// `Bus Location:`, e.g. `0000:17:00.0`.
    pub bus_id: String,
    /// `Device Minor:`, the minor of `/dev/nvidiaN`.
    pub minor: u32,
}

fn field<'a>(text: &'a str, key: &'static str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim())
    })
}

/// Parse `/proc/driver/nvidia/gpus/<bus-id>/information`.
pub fn parse_information(text: &str) -> Result<GpuInformation, ProcError> {
    let get = |k: &'static str| field(text, k).ok_or(ProcError::MissingField(k));
    let model = get("Model")?;
    if model.is_empty() {
        return Err(ProcError::BadField {
            field: "Model",
            value: String::new(),
            why: "expected a GPU name",
        });
    }
    let uuid = get("GPU UUID")?;
    if !is_gpu_uuid(uuid) {
        return Err(ProcError::BadField {
            field: "GPU UUID",
            value: uuid.to_string(),
            why: "expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
        });
    }
    let bus_id = get("Bus Location")?;
    if !is_bus_id(bus_id) {
        return Err(ProcError::BadField {
            field: "Bus Location",
            value: bus_id.to_string(),
            why: "expected a PCI address like 0000:17:00.0",
        });
    }
    let minor_s = get("Device Minor")?;
    let minor = minor_s
        .parse::<u32>()
        .ok()
        .filter(|m| *m < 255)
        .ok_or_else(|| ProcError::BadField {
            field: "Device Minor",
            value: minor_s.to_string(),
            why: "expected a number from 0 to 254",
        })?;
    Ok(GpuInformation {
        model: model.to_string(),
        uuid: uuid.to_string(),
        bus_id: bus_id.to_ascii_lowercase(),
        minor,
    })
}

/// `GPU-` followed by a canonical 8-4-4-4-12 hex UUID.
pub fn is_gpu_uuid(s: &str) -> bool {
    let Some(rest) = s.strip_prefix("GPU-") else {
        return false;
    };
    let groups: Vec<&str> = rest.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `dddd:bb:dd.f` (16-bit domain) or `dddddddd:bb:dd.f` (32-bit domain), hex.
pub fn is_bus_id(s: &str) -> bool {
    let hex =
        |p: &str, n: &[usize]| n.contains(&p.len()) && p.bytes().all(|b| b.is_ascii_hexdigit());
    let Some((head, func)) = s.rsplit_once('.') else {
        return false;
    };
    let parts: Vec<&str> = head.split(':').collect();
    parts.len() == 3
        && hex(parts[0], &[4, 8])
        && hex(parts[1], &[2])
        && hex(parts[2], &[2])
        && hex(func, &[1])
}

/// The character-device majors by name from `/proc/devices` (block devices ignored).
pub fn parse_char_devices(text: &str) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let mut in_char = false;
    for line in text.lines() {
        let t = line.trim();
        if t == "Character devices:" {
            in_char = true;
            continue;
        }
        if t.ends_with("devices:") {
            in_char = false;
            continue;
        }
        if !in_char {
            continue;
        }
        if let Some((num, name)) = t.split_once(char::is_whitespace) {
            if let Ok(major) = num.parse::<u32>() {
                out.push((major, name.trim().to_string()));
            }
        }
    }
    out
}

/// The major of the first character device in `majors` (from [`parse_char_devices`]) that has
/// one of `names`.
pub fn char_major(majors: &[(u32, String)], names: &[&str]) -> Option<u32> {
    majors
        .iter()
        .find(|(_, n)| names.contains(&n.as_str()))
        .map(|(m, _)| *m)
}

/// The GPUs' and control nodes' major: `nvidia` (`nvidia-frontend` on hosts with several driver
/// instances), else 195, the major the driver always takes.
pub fn nvidia_major(majors: &[(u32, String)]) -> u32 {
    char_major(majors, &["nvidia", "nvidia-frontend"]).unwrap_or(195)
}

/// The major of `nvidia-uvm`, when its module is loaded.
pub fn uvm_major(majors: &[(u32, String)]) -> Option<u32> {
    char_major(majors, &["nvidia-uvm"])
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "Model: \t\t NVIDIA A100-SXM4-80GB\nIRQ:   \t\t 64\nGPU UUID: \t GPU-c4f1a5ff-d592-056d-5aa4-d2c68f653ec6\nVideo BIOS: \t 92.00.45.00.03\nBus Type: \t PCIe\nDMA Size: \t 47 bits\nDMA Mask: \t 0x7fffffffffff\nBus Location: \t 0000:17:00.0\nDevice Minor: \t 3\nGPU Firmware: \t 570.124.06\nGPU Excluded:\t No\n";

    #[test]
    fn versions_of_both_module_flavours() {
        let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build  (dvs-builder@U16)  Tue Feb 25 19:31:49 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n";
        assert_eq!(parse_version(open).unwrap().as_str(), "570.124.06");
        let prop = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.54  Tue Jun  6 22:20:39 UTC 2023\n";
        assert_eq!(parse_version(prop).unwrap().as_str(), "535.54");
        assert_eq!(parse_version(prop).unwrap().major(), 535);
    }

    #[test]
    fn garbage_version_is_rejected() {
        for bad in [
            "",
            "hello\n",
            "NVRM version: NVIDIA UNIX\n",
            "GCC version: 12.2.0\n",
            "NVRM version: x 1.2.3.4.5\n",
        ] {
            assert_eq!(parse_version(bad), Err(ProcError::NoVersion), "{bad:?}");
        }
    }

    #[test]
    fn information_parses() {
        let g = parse_information(INFO).unwrap();
        assert_eq!(g.model, "NVIDIA A100-SXM4-80GB");
        assert_eq!(g.uuid, "GPU-c4f1a5ff-d592-056d-5aa4-d2c68f653ec6");
        assert_eq!(g.bus_id, "0000:17:00.0");
        assert_eq!(g.minor, 3);
    }

    #[test]
    fn truncated_information_names_the_missing_line() {
        let cut = &INFO[..INFO.find("Bus Location").unwrap()];
        assert_eq!(
            parse_information(cut),
            Err(ProcError::MissingField("Bus Location"))
        );
        let bad = INFO.replace("Device Minor: \t 3", "Device Minor: \t three");
        assert!(matches!(
            parse_information(&bad),
            Err(ProcError::BadField {
                field: "Device Minor",
                ..
            })
        ));
        let bad = INFO.replace("GPU-c4f1a5ff", "GPU-zzzz");
        assert!(matches!(
            parse_information(&bad),
            Err(ProcError::BadField {
                field: "GPU UUID",
                ..
            })
        ));
    }

    #[test]
    fn every_truncation_of_information_is_an_error_or_a_value() {
        for i in 0..INFO.len() {
            if INFO.is_char_boundary(i) {
                let _ = parse_information(&INFO[..i]);
            }
        }
    }

    #[test]
    fn char_devices() {
        let t = "Character devices:\n  1 mem\n195 nvidia\n195 nvidia-modeset\n195 nvidiactl\n508 nvidia-uvm\n\nBlock devices:\n  7 loop\n508 notme\n";
        let d = parse_char_devices(t);
        assert!(d.contains(&(508, "nvidia-uvm".into())));
        assert!(!d.iter().any(|(_, n)| n == "notme" || n == "loop"));
    }
}
