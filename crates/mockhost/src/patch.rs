//! In-place patching of compiled artifacts: the per-host config block and
//! placeholder sonames. Pure byte manipulation; the layout constants must
//! match csrc/mock_common.h.

/// Marker that opens the config block, including its terminating NUL.
pub(crate) const CONFIG_MARKER: &[u8] = b"GPUCTK_MOCK_CONFIG_V1\0";
/// Total size of the block, marker included.
pub(crate) const CONFIG_BLOCK_SIZE: usize = 2048;
/// Longest config string that fits (one byte stays NUL for the C reader).
pub(crate) const CONFIG_MAX_LEN: usize = CONFIG_BLOCK_SIZE - CONFIG_MARKER.len() - 1;

/// Why a patch of an embedded artifact could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The needle occurs `count` times instead of exactly once.
    #[error("marker {needle:?} found {count} times, expected exactly once")]
    NotUnique {
        /// The marker or placeholder, without trailing NULs.
        needle: String,
        /// How often it occurs.
        count: usize,
    },
    /// The value does not fit in the space reserved for it.
    #[error("value is {len} bytes, at most {max} fit")]
    TooLong {
        /// The value's length.
        len: usize,
        /// The space reserved.
        max: usize,
    },
    /// The value contains a NUL byte, which would cut it short in C.
    #[error("value contains a NUL byte")]
    ContainsNul,
    /// The block runs past the end of the file.
    #[error("config block runs past the end of the file")]
    Truncated,
}

/// Offset of the only occurrence of `needle` in `hay`.
pub(crate) fn find_unique(hay: &[u8], needle: &[u8]) -> Result<usize, PatchError> {
    let mut found = None;
    let mut count = 0;
    if !needle.is_empty() && hay.len() >= needle.len() {
        for (i, w) in hay.windows(needle.len()).enumerate() {
            if w == needle {
                count += 1;
                found.get_or_insert(i);
            }
        }
    }
    match (count, found) {
        (1, Some(i)) => Ok(i),
        _ => Err(PatchError::NotUnique {
            needle: String::from_utf8_lossy(needle)
                .trim_end_matches('\0')
                .to_string(),
            count,
        }),
    }
}

/// The config string the C side parses: `key=value;` pairs.
pub(crate) fn config_string(driver: &str, cuda: u32, model: &str, seed: &str) -> String {
    format!("driver={driver};cuda={cuda};model={model};seed={seed};")
}

/// Copy of `bytes` with `config` written after the marker and the rest of
/// the block zeroed. Nothing outside the block changes.
pub(crate) fn patch_config(bytes: &[u8], config: &str) -> Result<Vec<u8>, PatchError> {
    if config.len() > CONFIG_MAX_LEN {
        return Err(PatchError::TooLong {
            len: config.len(),
            max: CONFIG_MAX_LEN,
        });
    }
    if config.as_bytes().contains(&0) {
        return Err(PatchError::ContainsNul);
    }
    let start = find_unique(bytes, CONFIG_MARKER)?;
    let payload = start + CONFIG_MARKER.len();
    let end = start + CONFIG_BLOCK_SIZE;
    if end > bytes.len() {
        return Err(PatchError::Truncated);
    }
    let mut out = bytes.to_vec();
    out[payload..end].fill(0);
    out[payload..payload + config.len()].copy_from_slice(config.as_bytes());
    Ok(out)
}

/// Marker in the description of libcuda's `.note.cuda.fwd_compatibility` note.
pub(crate) const NOTE_MARKER: &[u8] = b"GPUCTK_MOCK_NOTE_V1";
/// Room for the note's description (csrc/libcuda.c `GM_NOTE_DESC_SIZE`).
pub(crate) const NOTE_DESC_SIZE: usize = 256;
/// The note's owner, NUL-terminated and padded to 4 bytes, as it precedes the description.
const NOTE_NAME: &[u8; 20] = b"NVIDIA Corporation\0\0";

/// The JSON description of libcuda's forward-compatibility note, as real libraries (575 and
/// later) write it: the CUDA version this libcuda provides, the host driver branches it runs
/// on, and the device generations.
pub fn cuda_note_json(driver_version: &str, cuda_version: &str) -> String {
    let major: u32 = driver_version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    let mut branches: Vec<u32> = [535, 550, 560, 565, 570, 575, 580, 590]
        .into_iter()
        .filter(|b| *b <= major)
        .collect();
    if !branches.contains(&major) {
        branches.push(major);
    }
    let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    format!(
        "{{\"format\":1,\"CUDA version\":\"{cuda_version}\",\"driver\":[{}],\"device\":[{}]}}",
        list(&branches),
        list(&[1, 2, 7, 8, 9, 10, 11, 12, 13, 14])
    )
}

/// Copy of `bytes` with the note's description set to `desc`, padded with spaces to the
/// compiled size: still one JSON document for any reader, and the section still holds exactly
/// one note (NUL padding would read as empty notes after it).
pub(crate) fn patch_note(bytes: &[u8], desc: &str) -> Result<Vec<u8>, PatchError> {
    if desc.len() > NOTE_DESC_SIZE {
        return Err(PatchError::TooLong {
            len: desc.len(),
            max: NOTE_DESC_SIZE,
        });
    }
    if desc.as_bytes().contains(&0) {
        return Err(PatchError::ContainsNul);
    }
    let start = find_unique(bytes, NOTE_MARKER)?;
    if start < 32 || start + NOTE_DESC_SIZE > bytes.len() || &bytes[start - 20..start] != NOTE_NAME
    {
        return Err(PatchError::Truncated);
    }
    let mut out = bytes.to_vec();
    out[start..start + NOTE_DESC_SIZE].fill(b' ');
    out[start..start + desc.len()].copy_from_slice(desc.as_bytes());
    Ok(out)
}

/// Replace the unique `placeholder` with `value`, NUL-padded to the same
/// length, so string-table offsets and sizes stay valid.
pub(crate) fn patch_placeholder(
    bytes: &[u8],
    placeholder: &[u8],
    value: &[u8],
) -> Result<Vec<u8>, PatchError> {
    if value.len() > placeholder.len() {
        return Err(PatchError::TooLong {
            len: value.len(),
            max: placeholder.len(),
        });
    }
    if value.contains(&0) {
        return Err(PatchError::ContainsNul);
    }
    let start = find_unique(bytes, placeholder)?;
    let mut out = bytes.to_vec();
    let region = &mut out[start..start + placeholder.len()];
    region.fill(0);
    region[..value.len()].copy_from_slice(value);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_artifact() -> Vec<u8> {
        let mut v = b"\x7fELF-prefix-bytes".to_vec();
        v.extend_from_slice(CONFIG_MARKER);
        v.resize(v.len() + CONFIG_BLOCK_SIZE - CONFIG_MARKER.len(), 0);
        v.extend_from_slice(b"-suffix-bytes");
        v
    }

    #[test]
    fn patches_inside_block_only() {
        let orig = fake_artifact();
        let cfg = config_string("570.124.06", 12080, "NVIDIA A100-SXM4-80GB", "gpuctk");
        let out = patch_config(&orig, &cfg).unwrap();
        assert_eq!(out.len(), orig.len());
        let start = find_unique(&orig, CONFIG_MARKER).unwrap();
        let payload = start + CONFIG_MARKER.len();
        assert_eq!(&out[..payload], &orig[..payload]);
        assert_eq!(&out[payload..payload + cfg.len()], cfg.as_bytes());
        assert!(out[payload + cfg.len()..start + CONFIG_BLOCK_SIZE]
            .iter()
            .all(|&b| b == 0));
        assert_eq!(
            &out[start + CONFIG_BLOCK_SIZE..],
            &orig[start + CONFIG_BLOCK_SIZE..]
        );
    }

    #[test]
    fn repatching_shorter_value_clears_old_tail() {
        let once = patch_config(&fake_artifact(), &"x".repeat(100)).unwrap();
        let twice = patch_config(&once, "short").unwrap();
        let p = find_unique(&twice, CONFIG_MARKER).unwrap() + CONFIG_MARKER.len();
        assert_eq!(&twice[p..p + 6], b"short\0");
        assert!(twice[p + 5..p + 100].iter().all(|&b| b == 0));
    }

    #[test]
    fn longest_value_fits_one_more_does_not() {
        let a = fake_artifact();
        assert!(patch_config(&a, &"v".repeat(CONFIG_MAX_LEN)).is_ok());
        assert_eq!(
            patch_config(&a, &"v".repeat(CONFIG_MAX_LEN + 1)),
            Err(PatchError::TooLong {
                len: CONFIG_MAX_LEN + 1,
                max: CONFIG_MAX_LEN
            })
        );
    }

    #[test]
    fn marker_must_be_unique() {
        let mut twice = fake_artifact();
        twice.extend(fake_artifact());
        assert!(matches!(
            patch_config(&twice, "a=b;"),
            Err(PatchError::NotUnique { count: 2, .. })
        ));
        assert!(matches!(
            patch_config(b"no marker here", "a=b;"),
            Err(PatchError::NotUnique { count: 0, .. })
        ));
    }

    #[test]
    fn truncated_block_rejected() {
        let mut v = b"xx".to_vec();
        v.extend_from_slice(CONFIG_MARKER);
        v.extend_from_slice(&[0; 10]);
        assert_eq!(patch_config(&v, "a=b;"), Err(PatchError::Truncated));
    }

    #[test]
    fn nul_rejected() {
        assert_eq!(
            patch_config(&fake_artifact(), "a=\0;"),
            Err(PatchError::ContainsNul)
        );
    }

    #[test]
    fn placeholder_padded_with_nul() {
        let src = b"..lib.so.PLACEHOLDER_XXXX\0rest".to_vec();
        let out = patch_placeholder(&src, b"PLACEHOLDER_XXXX", b"570.1").unwrap();
        assert_eq!(out.len(), src.len());
        assert_eq!(&out[..], &b"..lib.so.570.1\0\0\0\0\0\0\0\0\0\0\0\0rest"[..]);
        assert!(patch_placeholder(&src, b"PLACEHOLDER_XXXX", &[b'9'; 17]).is_err());
    }
}
