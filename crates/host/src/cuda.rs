//! The newest CUDA version each driver branch supports (NVIDIA's CUDA release notes, "CUDA
//! Toolkit and Corresponding Driver Versions"): what `libcuda`'s `cuDriverGetVersion` reports.

/// A CUDA version, e.g. 12.8.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct CudaVersion {
    /// Major, e.g. 12.
    pub major: u32,
    /// Minor, e.g. 8.
    pub minor: u32,
}

impl std::fmt::Display for CudaVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// (first branch, CUDA version) pairs, ascending: a branch gets the entry of the highest first
/// branch not above it.
const TABLE: &[(u32, u32, u32)] = &[
    (418, 10, 1),
    (440, 10, 2),
    (450, 11, 0),
    (455, 11, 1),
    (460, 11, 2),
    (465, 11, 3),
    (470, 11, 4),
    (495, 11, 5),
    (510, 11, 6),
    (515, 11, 7),
    (520, 11, 8),
    (525, 12, 0),
    (530, 12, 1),
    (535, 12, 2),
    (545, 12, 3),
    (550, 12, 4),
    (555, 12, 5),
    (560, 12, 6),
    (565, 12, 7),
    (570, 12, 8),
    (575, 12, 9),
    (580, 13, 0),
];

/// The CUDA version a driver of branch `major` supports when the table knows it exactly:
/// `None` before 418 and after the newest branch it lists (for those,
/// [`cuda_version_for_branch`] is only a lower bound; their libcuda's note says).
pub fn cuda_version_known(major: u32) -> Option<CudaVersion> {
    let newest = TABLE.last().map_or(0, |t| t.0);
    (major <= newest)
        .then(|| cuda_version_for_branch(major))
        .flatten()
}

/// The CUDA version a driver of branch `major` (e.g. 570) supports; `None` before 418.
pub fn cuda_version_for_branch(major: u32) -> Option<CudaVersion> {
    TABLE
        .iter()
        .rev()
        .find(|(b, _, _)| *b <= major)
        .map(|&(_, major, minor)| CudaVersion { major, minor })
}

/// The CUDA version in the JSON description of libcuda's `.note.cuda.fwd_compatibility` note
/// (real libraries of 575 and later carry one): the value of its `"CUDA version"` key, matched
/// without regard to case as NVIDIA's decoder does. A small scan, linear in `desc`, not a JSON
/// parser: the value is a plain `"MAJOR.MINOR"` string.
pub fn cuda_version_from_note(desc: &[u8]) -> Option<CudaVersion> {
    const KEY: &[u8] = b"\"cuda version\"";
    let at = desc
        .windows(KEY.len())
        .position(|w| w.eq_ignore_ascii_case(KEY))?;
    let rest = &desc[at + KEY.len()..];
    let rest = rest
        .trim_ascii_start()
        .strip_prefix(b":")?
        .trim_ascii_start();
    let rest = rest.strip_prefix(b"\"")?;
    let end = rest.iter().position(|&b| b == b'"')?;
    let text = std::str::from_utf8(&rest[..end]).ok()?;
    let (major, minor) = text.split_once('.')?;
    Some(CudaVersion {
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_from_the_note() {
        let v = |s: &str| cuda_version_from_note(s.as_bytes());
        let want = Some(CudaVersion {
            major: 12,
            minor: 9,
        });
        assert_eq!(
            v(r#"{"format":1,"CUDA version":"12.9","driver":[570]}"#),
            want
        );
        assert_eq!(v(r#"{"CUDA Version" : "12.9"}   "#), want);
        assert_eq!(v(r#"{"Driver":[570]}"#), None);
        assert_eq!(v(r#"{"CUDA version":12.9}"#), None);
        assert_eq!(v(r#"{"CUDA version":"x"}"#), None);
    }

    #[test]
    fn branches_from_the_issue() {
        let v = |b| cuda_version_for_branch(b).unwrap().to_string();
        assert_eq!(v(535), "12.2");
        assert_eq!(v(550), "12.4");
        assert_eq!(v(570), "12.8");
        assert_eq!(v(580), "13.0");
        assert_eq!(v(572), "12.8");
        assert!(cuda_version_for_branch(390).is_none());
    }
}
