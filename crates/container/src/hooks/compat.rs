//! `enable-cuda-compat`: whether the image's CUDA forward-compat libraries fit this host's
//! driver, and the loader drop-in that puts them first.

use std::cmp::Ordering;
use std::fmt;

use super::{
    fnv1a64, join, normalize_dir, unusable, HookError, COMPAT_CONF_PREFIX, CUDA_FWD_COMPAT_SECTION,
    CUDA_NOTE_OWNER, LD_SO_CONF_D, MAX_DIR_ENTRIES,
};
use crate::elf;
use crate::root::Root;

/// What [`enable_cuda_compat`] decided, and why (for debug logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompatOutcome {
    /// Neither a host driver nor a host CUDA version was given.
    NoVersionGiven,
    /// The compat root does not exist (or is not a directory).
    NoCompatDir {
        /// The compat root looked at.
        compat_root: String,
    },
    /// Not exactly one `libcuda.so.*.*` in the compat root.
    NoSingleLibrary {
        /// The compat root.
        compat_root: String,
        /// The matches found (zero or several).
        found: Vec<String>,
    },
    /// A compat library was found but is not to be used.
    NotUsed {
        /// Its container path.
        library: String,
        /// Its version (the file suffix).
        compat_version: String,
        /// Why not.
        reason: String,
    },
    /// The compat library is to be used; the drop-in was written.
    Enabled {
        /// Its container path.
        library: String,
        /// Its version.
        compat_version: String,
        /// The compat root resolved inside the container (the drop-in's content).
        compat_dir: String,
        /// The drop-in written.
        conf_file: String,
        /// Why.
        reason: String,
    },
}

impl CompatOutcome {
    /// Whether the compat libraries were enabled.
    pub fn enabled(&self) -> bool {
        matches!(self, CompatOutcome::Enabled { .. })
    }
}

impl fmt::Display for CompatOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompatOutcome::NoVersionGiven => {
                f.write_str("CUDA compat: no host driver or CUDA version given; nothing to do")
            }
            CompatOutcome::NoCompatDir { compat_root } => {
                write!(f, "CUDA compat: {compat_root} does not exist in the container; nothing to do")
            }
            CompatOutcome::NoSingleLibrary { compat_root, found } => write!(
                f,
                "CUDA compat: expected exactly one libcuda.so.*.* in {compat_root}, found {} ({}); not used",
                found.len(),
                found.join(", ")
            ),
            CompatOutcome::NotUsed {
                library, reason, ..
            } => write!(f, "CUDA compat: {library} not used: {reason}"),
            CompatOutcome::Enabled {
                library,
                compat_dir,
                conf_file,
                reason,
                ..
            } => write!(
                f,
                "CUDA compat: using {library}: {reason}; wrote {compat_dir} to {conf_file}"
            ),
        }
    }
}

/// A dotted version as numbers (`575.57.08` → `[575, 57, 8]`).
fn parse_version(s: &str) -> Option<Vec<u64>> {
    let parts: Option<Vec<u64>> = s
        .trim()
        .split('.')
        .map(|p| {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                None
            } else {
                p.parse().ok()
            }
        })
        .collect();
    parts.filter(|p| !p.is_empty())
}

/// Component-wise numeric comparison, missing components counting as 0.
fn cmp_versions(a: &[u64], b: &[u64]) -> Ordering {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            a.get(i)
                .copied()
                .unwrap_or(0)
                .cmp(&b.get(i).copied().unwrap_or(0))
        })
        .find(|o| o.is_ne())
        .unwrap_or(Ordering::Equal)
}

/// Why [`decide`] leaves the compat libraries out (the `reason` of [`CompatOutcome::NotUsed`]).
#[derive(Debug, thiserror::Error)]
enum CompatSkip {
    #[error("host driver branch {host_major} is not among the branches the compat library supports ({branches:?})")]
    BranchNotSupported { host_major: u64, branches: Vec<u64> },
    #[error("compat {compat} is not newer than host driver {driver}")]
    NotNewerThanDriver { compat: String, driver: String },
    #[error("cannot compare CUDA versions (compat note {note:?}, host {host:?})")]
    CudaNotComparable { note: Option<String>, host: String },
    #[error("compat CUDA {note} is not newer than host CUDA {host}")]
    CudaNotNewer { note: String, host: String },
    #[error("cannot compare: host driver version {driver:?} or compat version {compat:?} does not parse")]
    Unparsable {
        driver: Option<String>,
        compat: String,
    },
    #[error("the compat library has no forward-compat note and a host CUDA version was given")]
    NoNoteButHostCuda,
    #[error("no forward-compat note; host driver major {driver} is not older than compat major {compat}")]
    MajorNotOlder { driver: u64, compat: u64 },
}

/// The decision of NVIDIA's `enable-cuda-compat` (facts §5.1 step 4), pure: why the compat
/// libraries are used, or why not. `note` is the JSON payload of the forward-compat note, when
/// present.
fn decide(
    host_driver: Option<&str>,
    host_cuda: Option<&str>,
    compat_version: &str,
    note: Option<&serde_json::Value>,
) -> Result<String, CompatSkip> {
    let unparsable = || CompatSkip::Unparsable {
        driver: host_driver.map(str::to_string),
        compat: compat_version.to_string(),
    };
    let compat = parse_version(compat_version);
    let driver = host_driver.and_then(parse_version);
    match note {
        Some(note) => {
            if let (Some(driver), Some(compat)) = (&driver, &compat) {
                let host_major = driver[0];
                let branches: Vec<u64> = note_field(note, "Driver")
                    .and_then(|d| d.as_array())
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| {
                                v.as_u64()
                                    .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                if !branches.contains(&host_major) {
                    return Err(CompatSkip::BranchNotSupported {
                        host_major,
                        branches,
                    });
                }
                return match cmp_versions(compat, driver) {
                    Ordering::Greater => Ok(format!(
                        "compat {compat_version} is newer than host driver {} and supports branch {host_major}",
                        host_driver.unwrap_or_default()
                    )),
                    _ => Err(CompatSkip::NotNewerThanDriver {
                        compat: compat_version.to_string(),
                        driver: host_driver.unwrap_or_default().to_string(),
                    }),
                };
            }
            if let Some(host_cuda) = host_cuda {
                let note_cuda = note_field(note, "CUDA Version").and_then(|v| v.as_str());
                let (Some(note_v), Some(host_v)) =
                    (note_cuda.and_then(parse_version), parse_version(host_cuda))
                else {
                    return Err(CompatSkip::CudaNotComparable {
                        note: note_cuda.map(str::to_string),
                        host: host_cuda.to_string(),
                    });
                };
                return if cmp_versions(&note_v, &host_v).is_gt() {
                    Ok(format!(
                        "compat CUDA {} is newer than host CUDA {host_cuda}",
                        note_cuda.unwrap_or_default()
                    ))
                } else {
                    Err(CompatSkip::CudaNotNewer {
                        note: note_cuda.unwrap_or_default().to_string(),
                        host: host_cuda.to_string(),
                    })
                };
            }
            Err(unparsable())
        }
        None => {
            if host_cuda.is_some() {
                return Err(CompatSkip::NoNoteButHostCuda);
            }
            let (Some(driver), Some(compat)) = (driver, compat) else {
                return Err(unparsable());
            };
            if driver[0] < compat[0] {
                Ok(format!(
                    "no forward-compat note; host driver major {} is older than compat major {}",
                    driver[0], compat[0]
                ))
            } else {
                Err(CompatSkip::MajorNotOlder {
                    driver: driver[0],
                    compat: compat[0],
                })
            }
        }
    }
}

/// A field of the forward-compat note. Real libraries write `"driver"` and `"CUDA version"`
/// where older ones wrote `"Driver"` and `"CUDA Version"`; NVIDIA's decoder (Go's
/// `encoding/json`) matches keys without regard to ASCII case, and so do we. An exact match wins.
fn note_field<'a>(note: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    let obj = note.as_object()?;
    obj.get(key).or_else(|| {
        obj.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    })
}

/// A compat library [`judge_cuda_compat`] found fit to use on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompatUse {
    /// Its container path.
    pub library: String,
    /// Its version (the file suffix), e.g. `575.57.08`.
    pub compat_version: String,
    /// The compat root looked at, normalized (not resolved).
    pub compat_root: String,
    /// The `CUDA Version` of its forward-compat note, when it has one.
    pub note_cuda_version: Option<String>,
    /// Why it is used.
    pub reason: String,
}

/// What [`judge_cuda_compat`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompatJudgement {
    /// The compat library is to be used.
    Use(CompatUse),
    /// It is not (or there is none), and why.
    Skip(CompatOutcome),
}

/// Decides, as NVIDIA's `enable-cuda-compat` does, whether the container's
/// CUDA forward-compat libraries in `compat_root` should be used on this host,
/// without writing anything into the container (what [`enable_cuda_compat`]
/// and `gpuctk doctor` both ask).
pub fn judge_cuda_compat(
    root: &Root,
    host_driver_version: Option<&str>,
    host_cuda_version: Option<&str>,
    compat_root: &str,
) -> Result<CompatJudgement, HookError> {
    use CompatJudgement::Skip;
    let host_driver_version = host_driver_version.filter(|v| !v.is_empty());
    let host_cuda_version = host_cuda_version.filter(|v| !v.is_empty());
    if host_driver_version.is_none() && host_cuda_version.is_none() {
        return Ok(Skip(CompatOutcome::NoVersionGiven));
    }
    // NVIDIA's hook takes a relative root as relative to the container root.
    let compat_root = if compat_root.starts_with('/') || compat_root.is_empty() {
        normalize_dir(compat_root, "--cuda-compat-container-root")?
    } else {
        normalize_dir(&format!("/{compat_root}"), "--cuda-compat-container-root")?
    };
    let no_dir = || CompatOutcome::NoCompatDir {
        compat_root: compat_root.clone(),
    };
    let names = match root.read_dir_names_limited(&compat_root, MAX_DIR_ENTRIES) {
        Ok(n) => n,
        Err(e) if e.is_not_found() || e.errno() == Some(libc::ENOTDIR) || unusable(&e) => {
            return Ok(Skip(no_dir()))
        }
        Err(e) => return Err(e.into()),
    };
    let found: Vec<String> = names
        .into_iter()
        .filter(|n| {
            n.strip_prefix("libcuda.so.")
                .is_some_and(|rest| rest.contains('.'))
        })
        .collect();
    if found.len() != 1 {
        return Ok(Skip(CompatOutcome::NoSingleLibrary { compat_root, found }));
    }
    let name = &found[0];
    let compat_version = name["libcuda.so.".len()..].to_string();
    let library = join(&compat_root, name);
    let not_used = |reason: String| CompatOutcome::NotUsed {
        library: library.clone(),
        compat_version: compat_version.clone(),
        reason,
    };

    let file = match root.open_read(&library) {
        Ok(f) => f,
        Err(e) if e.is_not_found() || unusable(&e) => {
            return Ok(Skip(not_used(format!("cannot open it: {e}"))))
        }
        Err(e) => return Err(e.into()),
    };
    // When the library cannot be read as ELF, or its note is not JSON, NVIDIA falls back to the
    // rule for libraries without a note (driver majors from the file names); so do we, noting why.
    let mut warning = None;
    let notes = match elf::note_section(&file, CUDA_FWD_COMPAT_SECTION) {
        Ok(n) => n,
        Err(e) => {
            warning = Some(format!("{library} is not a readable ELF file ({e})"));
            None
        }
    };
    let note = notes
        .unwrap_or_default()
        .into_iter()
        .find(|n| n.owner == CUDA_NOTE_OWNER);
    let payload = match note {
        None => None,
        Some(n) => {
            let end = n.desc.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
            match serde_json::from_slice::<serde_json::Value>(&n.desc[..end]) {
                Ok(v) if v.is_object() => Some(v),
                Ok(_) | Err(_) => {
                    warning = Some(format!(
                        "the {CUDA_FWD_COMPAT_SECTION} note of {library} is not a JSON object"
                    ));
                    None
                }
            }
        }
    };
    let with_warning = |reason: String| match &warning {
        Some(w) => format!("{w}; judged by the driver majors in the file names: {reason}"),
        None => reason,
    };
    let reason = match decide(
        host_driver_version,
        host_cuda_version,
        &compat_version,
        payload.as_ref(),
    ) {
        Ok(reason) => with_warning(reason),
        Err(reason) => return Ok(Skip(not_used(with_warning(reason.to_string())))),
    };

    let note_cuda_version = payload
        .as_ref()
        .and_then(|p| note_field(p, "CUDA Version"))
        .and_then(|v| v.as_str())
        .map(str::to_string);
    Ok(CompatJudgement::Use(CompatUse {
        library,
        compat_version,
        compat_root,
        note_cuda_version,
        reason,
    }))
}

/// Decides as [`judge_cuda_compat`] whether the container's CUDA
/// forward-compat libraries in `compat_root` (default
/// [`DEFAULT_COMPAT_ROOT`]) should be used on this host, and if so writes
/// `/etc/ld.so.conf.d/00-compat-<hash of the directory>.conf` (0644)
/// holding the compat directory resolved inside the container, for
/// [`update_ldcache`] to pick up.
pub fn enable_cuda_compat(
    root: &Root,
    host_driver_version: Option<&str>,
    host_cuda_version: Option<&str>,
    compat_root: &str,
) -> Result<CompatOutcome, HookError> {
    let CompatUse {
        library,
        compat_version,
        compat_root,
        reason,
        ..
    } = match judge_cuda_compat(root, host_driver_version, host_cuda_version, compat_root)? {
        CompatJudgement::Use(u) => u,
        CompatJudgement::Skip(outcome) => return Ok(outcome),
    };
    let compat_dir = root.canonicalize(&compat_root)?;
    let conf_file = format!(
        "{LD_SO_CONF_D}/{COMPAT_CONF_PREFIX}{:016x}.conf",
        fnv1a64(compat_dir.as_bytes())
    );
    root.mkdir_all(LD_SO_CONF_D, 0o755)?;
    root.write_file_atomic(&conf_file, format!("{compat_dir}\n").as_bytes(), 0o644)?;
    Ok(CompatOutcome::Enabled {
        library,
        compat_version,
        compat_dir,
        conf_file,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn versions_compare_numerically() {
        let v = |s| parse_version(s).unwrap();
        assert_eq!(v("575.57.08"), vec![575, 57, 8]);
        assert!(cmp_versions(&v("575.57.08"), &v("570.124.06")).is_gt());
        assert!(cmp_versions(&v("570.9"), &v("570.10")).is_lt());
        assert!(cmp_versions(&v("12.10"), &v("12.9")).is_gt());
        assert!(cmp_versions(&v("570.124"), &v("570.124.0")).is_eq());
        assert_eq!(parse_version("570.x"), None);
        assert_eq!(parse_version(""), None);
        assert_eq!(parse_version("1..2"), None);
    }

    #[test]
    fn decision_with_note() {
        let note = json!({"Format":1,"CUDA Version":"12.9","Driver":[535,550,570],"Device":[]});
        assert!(decide(Some("570.124.06"), None, "575.57.08", Some(&note)).is_ok());
        // Branch not listed.
        assert!(decide(Some("560.35.03"), None, "575.57.08", Some(&note)).is_err());
        // Compat older than host.
        let new_host = json!({"Driver":[580]});
        assert!(decide(Some("580.65.06"), None, "575.57.08", Some(&new_host)).is_err());
        // Same version is not newer.
        let same = json!({"Driver":[575]});
        assert!(decide(Some("575.57.08"), None, "575.57.08", Some(&same)).is_err());
        // String branches accepted.
        let strs = json!({"Driver":["570"]});
        assert!(decide(Some("570.1"), None, "575.57.08", Some(&strs)).is_ok());
        // Tegra path: CUDA versions.
        assert!(decide(None, Some("12.6"), "575.57.08", Some(&note)).is_ok());
        assert!(decide(None, Some("12.9"), "575.57.08", Some(&note)).is_err());
        assert!(decide(None, Some("13.0"), "575.57.08", Some(&note)).is_err());
    }

    #[test]
    fn decision_without_note() {
        assert!(decide(Some("560.35.03"), None, "575.57.08", None).is_ok());
        assert!(decide(Some("575.10"), None, "575.57.08", None).is_err());
        assert!(decide(Some("580.1"), None, "575.57.08", None).is_err());
        assert!(decide(Some("560.35.03"), Some("12.6"), "575.57.08", None).is_err());
        assert!(decide(Some("bogus"), None, "575.57.08", None).is_err());
        assert!(decide(Some("560.1"), None, "x.y", None).is_err());
    }

    #[test]
    fn stable_conf_name() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_ne!(fnv1a64(b"/a"), fnv1a64(b"/b"));
    }
}
