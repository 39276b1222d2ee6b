//! CDI names: vendor, class, device name and the fully-qualified `vendor/class=name` form used to
//! request a device (`nvidia.com/gpu=0`, `nvidia.com/gpu=1:0` for MIG).
//!
//! The grammar follows the CDI parser (`pkg/parser`): vendor and class start with a letter, end
//! with a letter or digit and hold `[A-Za-z0-9_.-]` in between; a device name starts and ends with a
//! letter or digit and may also hold `:` in between. Where SPEC.md and the Go parser differ (SPEC.md
//! caps the vendor at 253 and the class at 63 characters, the parser does not) we follow the parser,
//! so every spec the reference implementation accepts is accepted here too.

use std::fmt;

/// Why a CDI name was rejected. Each message says what is wrong and what would be right.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The string has no `=`, so it names no device.
    #[error(
        "{0:?} is not a qualified CDI device name: want vendor/class=name, e.g. nvidia.com/gpu=0"
    )]
    NotQualified(String),
    /// The part before `=` has no `/`.
    #[error("{0:?} is not a CDI kind: want vendor/class, e.g. nvidia.com/gpu")]
    BadKind(String),
    /// The vendor part is malformed.
    #[error("invalid vendor {name:?}: {reason}")]
    BadVendor {
        /// The vendor as given.
        name: String,
        /// What is wrong with it.
        reason: LabelError,
    },
    /// The class part is malformed.
    #[error("invalid class {name:?}: {reason}")]
    BadClass {
        /// The class as given.
        name: String,
        /// What is wrong with it.
        reason: LabelError,
    },
    /// The device name is malformed.
    #[error("invalid device name {name:?}: {reason}")]
    BadDeviceName {
        /// The device name as given.
        name: String,
        /// What is wrong with it.
        reason: LabelError,
    },
}

/// A parsed fully-qualified CDI device name, `vendor/class=name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QualifiedName {
    /// Vendor, e.g. `nvidia.com`.
    pub vendor: String,
    /// Device class, e.g. `gpu`.
    pub class: String,
    /// Device name within the kind, e.g. `0`, `all`, `GPU-…`, `1:0`.
    pub name: String,
}

impl QualifiedName {
    /// Build a name from its parts, validating each.
    pub fn new(vendor: &str, class: &str, name: &str) -> Result<Self, NameError> {
        validate_vendor_name(vendor)?;
        validate_class_name(class)?;
        validate_device_name(name)?;
        Ok(QualifiedName {
            vendor: vendor.to_string(),
            class: class.to_string(),
            name: name.to_string(),
        })
    }

    /// The kind, `vendor/class`.
    pub fn kind(&self) -> String {
        format!("{}/{}", self.vendor, self.class)
    }
}

impl fmt::Display for QualifiedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}={}", self.vendor, self.class, self.name)
    }
}

impl std::str::FromStr for QualifiedName {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_qualified_name(s)
    }
}

/// Parse and validate `vendor/class=name`.
///
/// Like the CDI parser, the string is split at the first `=` and the kind at the first `/`, so a
/// `=` or `/` later in the string ends up in the part that rejects it.
pub fn parse_qualified_name(s: &str) -> Result<QualifiedName, NameError> {
    let Some((kind, name)) = s.split_once('=') else {
        return Err(NameError::NotQualified(s.to_string()));
    };
    let (vendor, class) = parse_kind(kind)?;
    validate_device_name(name)?;
    Ok(QualifiedName {
        vendor: vendor.to_string(),
        class: class.to_string(),
        name: name.to_string(),
    })
}

/// Whether `s` is a valid fully-qualified CDI device name.
pub fn is_qualified_name(s: &str) -> bool {
    parse_qualified_name(s).is_ok()
}

/// Split and validate a kind, `vendor/class`.
pub fn parse_kind(kind: &str) -> Result<(&str, &str), NameError> {
    let Some((vendor, class)) = kind.split_once('/') else {
        return Err(NameError::BadKind(kind.to_string()));
    };
    validate_vendor_name(vendor)?;
    validate_class_name(class)?;
    Ok((vendor, class))
}

/// Validate a kind, `vendor/class`.
pub fn validate_kind(kind: &str) -> Result<(), NameError> {
    parse_kind(kind).map(|_| ())
}

/// What is wrong with one part of a CDI name: the vendor, the class or the device name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    /// The part is empty.
    #[error("must not be empty")]
    Empty,
    /// A vendor or class starts with something other than a letter.
    #[error("must start with a letter, not {0:?}")]
    FirstNotLetter(char),
    /// A device name starts with something other than a letter or digit.
    #[error("must start with a letter or digit, not {0:?}")]
    FirstNotAlphanumeric(char),
    /// The part ends with something other than a letter or digit.
    #[error("must end with a letter or digit, not {0:?}")]
    LastNotAlphanumeric(char),
    /// A character outside the part's alphabet.
    #[error("character {bad:?} is not allowed (use letters, digits and {allowed})")]
    BadChar {
        /// The first character not allowed.
        bad: char,
        /// The punctuation the part may hold, quoted, e.g. `'_' '.' '-'`.
        allowed: &'static str,
    },
}

fn check_label(s: &str, allow_colon: bool, letter_first: bool) -> Result<(), LabelError> {
    let (extra, allowed) = if allow_colon {
        ("_.:-", "'_' '.' ':' '-'")
    } else {
        ("_.-", "'_' '.' '-'")
    };
    let mut chars = s.chars();
    let Some(first) = chars.next() else {
        return Err(LabelError::Empty);
    };
    if letter_first && !first.is_ascii_alphabetic() {
        return Err(LabelError::FirstNotLetter(first));
    }
    if !letter_first && !first.is_ascii_alphanumeric() {
        return Err(LabelError::FirstNotAlphanumeric(first));
    }
    let last = s.chars().last().unwrap_or(first);
    if s.chars().count() > 1 && !last.is_ascii_alphanumeric() {
        return Err(LabelError::LastNotAlphanumeric(last));
    }
    if let Some(bad) = s
        .chars()
        .find(|c| !c.is_ascii_alphanumeric() && !extra.contains(*c))
    {
        return Err(LabelError::BadChar { bad, allowed });
    }
    Ok(())
}

/// Validate a vendor name such as `nvidia.com`.
pub fn validate_vendor_name(vendor: &str) -> Result<(), NameError> {
    check_label(vendor, false, true).map_err(|reason| NameError::BadVendor {
        name: vendor.to_string(),
        reason,
    })
}

/// Validate a class name such as `gpu` (a `.` in the class needs cdiVersion 0.6.0).
pub fn validate_class_name(class: &str) -> Result<(), NameError> {
    check_label(class, false, true).map_err(|reason| NameError::BadClass {
        name: class.to_string(),
        reason,
    })
}

/// Validate a device name such as `0`, `all`, `GPU-…` or `1:0` (a leading digit needs
/// cdiVersion 0.5.0).
pub fn validate_device_name(name: &str) -> Result<(), NameError> {
    check_label(name, true, false).map_err(|reason| NameError::BadDeviceName {
        name: name.to_string(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_names() {
        let q = parse_qualified_name("nvidia.com/gpu=0").unwrap();
        assert_eq!(q.vendor, "nvidia.com");
        assert_eq!(q.class, "gpu");
        assert_eq!(q.name, "0");
        assert_eq!(q.kind(), "nvidia.com/gpu");
        assert_eq!(q.to_string(), "nvidia.com/gpu=0");
        assert!(is_qualified_name("nvidia.com/gpu=1:0"));
        assert!(is_qualified_name(
            "nvidia.com/gpu=GPU-c4f1a5ff-d592-056d-5aa4-d2c68f653ec6"
        ));
        assert!(is_qualified_name("nvidia.com/gpu=all"));
        assert!(is_qualified_name("a/b=c"));
        assert!(is_qualified_name("vendor.com/class.sub=x"));
    }

    #[test]
    fn rejects_bad_names() {
        for bad in [
            "",
            "nvidia.com/gpu",
            "nvidia.com=0",
            "/dev/nvidia0",
            "1vendor.com/gpu=0",
            "nvidia.com/gpu-=0",
            "nvidia.com/1gpu=0",
            "nvidia.com/gpu=",
            "nvidia.com/gpu=-0",
            "nvidia.com/gpu=0:",
            "nvidia.com/gpu=a b",
            "nvidia.com/g:pu=0",
            "nvidia.com/gpu=0=1",
            "nvidia.com/gpu/x=0",
            "nvidia.com/gpu=é",
        ] {
            assert!(!is_qualified_name(bad), "{bad:?} accepted");
        }
    }

    #[test]
    fn messages_say_what_is_right() {
        let e = parse_qualified_name("gpu0").unwrap_err();
        assert!(e.to_string().contains("want vendor/class=name"), "{e}");
        let e = parse_qualified_name("nvidia.com/gpu=0!").unwrap_err();
        assert!(
            e.to_string().contains("must end with a letter or digit"),
            "{e}"
        );
        let e = parse_qualified_name("nvidia.com/gpu=a*b").unwrap_err();
        assert!(e.to_string().contains("'*' is not allowed"), "{e}");
        let e = parse_qualified_name("nvidia.com/3d=0").unwrap_err();
        assert!(e.to_string().contains("must start with a letter"), "{e}");
    }

    #[test]
    fn reasons_are_typed() {
        assert_eq!(
            validate_vendor_name(""),
            Err(NameError::BadVendor {
                name: String::new(),
                reason: LabelError::Empty
            })
        );
        assert_eq!(
            validate_class_name("3d").unwrap_err(),
            NameError::BadClass {
                name: "3d".into(),
                reason: LabelError::FirstNotLetter('3')
            }
        );
        assert_eq!(
            parse_qualified_name("nvidia.com/gpu=a*b")
                .unwrap_err()
                .to_string(),
            "invalid device name \"a*b\": character '*' is not allowed (use letters, digits and \
             '_' '.' ':' '-')"
        );
        assert_eq!(
            validate_vendor_name("a:b").unwrap_err().to_string(),
            "invalid vendor \"a:b\": character ':' is not allowed (use letters, digits and '_' \
             '.' '-')"
        );
    }

    #[test]
    fn single_characters_are_fine() {
        assert!(validate_vendor_name("a").is_ok());
        assert!(validate_class_name("b").is_ok());
        assert!(validate_device_name("0").is_ok());
        assert!(validate_device_name(":").is_err());
    }
}
