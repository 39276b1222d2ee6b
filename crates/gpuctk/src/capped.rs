//! Reading a file whose size we bound: config.json, config.toml, an engine's config, the install
//! manifest, and the caches we keep under `/run` (the discovery snapshot, NVML's recorded answers).

use std::path::Path;

/// A JSON file's bytes that did not parse: where, and why.
#[derive(Debug)]
pub enum JsonError {
    /// The line and column (1-based; the column in bytes, as serde_json counts) of the first
    /// byte that is not UTF-8.
    NotUtf8(usize, usize),
    Json(serde_json::Error),
}

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JsonError::NotUtf8(line, column) => {
                write!(f, "invalid JSON at line {line} column {column}: not UTF-8")
            }
            JsonError::Json(e) => {
                write!(
                    f,
                    "invalid JSON at line {} column {}: {e}",
                    e.line(),
                    e.column()
                )
            }
        }
    }
}

/// `bytes` parsed as JSON: UTF-8 is checked once over the whole file ([`json_text`]) and the
/// text parsed with `serde_json::from_str`, where `from_slice` checks UTF-8 string by string (a
/// tenth of the instructions of a create that reads a large spec cache). `from_slice` accepts
/// the same inputs: JSON outside strings is ASCII.
pub fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, JsonError> {
    let text = json_text(bytes).map_err(|(line, column)| JsonError::NotUtf8(line, column))?;
    serde_json::from_str(text).map_err(JsonError::Json)
}

/// `bytes` as text; Err: the line and column (1-based; the column in bytes, as serde_json
/// counts) of the first byte that is not UTF-8.
fn json_text(bytes: &[u8]) -> Result<&str, (usize, usize)> {
    std::str::from_utf8(bytes).map_err(|e| {
        let good = &bytes[..e.valid_up_to()];
        let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
        let start = good.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        (line, good.len() - start + 1)
    })
}

/// Reads a regular file of at most `cap` bytes: the size is checked before reading (a huge file
/// fails at once, without being read), and a FIFO or device is refused rather than opened for
/// blocking reads.
pub fn read_capped(path: &Path, cap: u64, what: &str) -> anyhow::Result<Vec<u8>> {
    read_capped_meta(path, cap, what).map(|(bytes, _)| bytes)
}

/// [`read_capped`], with what `fstat` said of the file (its mode, for a writer that keeps it).
pub fn read_capped_meta(
    path: &Path,
    cap: u64,
    what: &str,
) -> anyhow::Result<(Vec<u8>, std::fs::Metadata)> {
    read_regular(path, cap).map_err(|e| match e {
        CappedError::Io(e) => {
            anyhow::Error::new(e).context(format!("{}: cannot read {what}", path.display()))
        }
        CappedError::NotRegular => {
            anyhow::anyhow!("{}: {what} is not a regular file", path.display())
        }
        CappedError::TooLarge(size) => anyhow::anyhow!(
            "{}: {what} is {size} bytes, more than the {cap} allowed; this is not a file an engine writes",
            path.display(),
        ),
        CappedError::Grew => anyhow::anyhow!(
            "{}: {what} grew past the {cap} bytes allowed while being read",
            path.display()
        ),
    })
}

/// Why [`read_regular`] read nothing.
#[derive(Debug, thiserror::Error)]
pub enum CappedError {
    /// Opening, stat'ing or reading it failed (`NotFound`: there is none).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A FIFO, device, socket or directory.
    #[error("not a regular file")]
    NotRegular,
    /// Larger than the cap: its size.
    #[error("{0} bytes, more than allowed")]
    TooLarge(u64),
    /// It grew past the cap while read.
    #[error("grew past the size allowed while read")]
    Grew,
}

/// The bytes of regular file `path` (symlinks followed), at most `cap` of them, and what
/// `fstat` said of it: opened without blocking on a FIFO, refused over the cap before a byte is
/// read, and read in one read where it is still the size `fstat` gave.
pub fn read_regular(path: &Path, cap: u64) -> Result<(Vec<u8>, std::fs::Metadata), CappedError> {
    read_accepted(path, 0, cap, |_| true)
}

/// [`read_regular`], opened with `flags` too, of a file that `accept` takes, asked of what
/// `fstat` said before a byte is read (one it refuses is [`CappedError::NotRegular`]).
fn read_accepted(
    path: &Path,
    flags: i32,
    cap: u64,
    accept: impl FnOnce(&std::fs::Metadata) -> bool,
) -> Result<(Vec<u8>, std::fs::Metadata), CappedError> {
    let file = open_read(path, flags)?;
    let md = file.metadata()?;
    if !md.is_file() || !accept(&md) {
        return Err(CappedError::NotRegular);
    }
    if md.len() > cap {
        return Err(CappedError::TooLarge(md.len()));
    }
    let buf = gpuctk_container::sized::read_sized(&file, md.len(), cap)?;
    if buf.len() as u64 > cap {
        return Err(CappedError::Grew);
    }
    Ok((buf, md))
}

/// `open(path, O_RDONLY | flags | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)`, one system call: not
/// blocked by a FIFO, never made our terminal. (std's `OpenOptions` goes through the C
/// library's `open`, which under musl follows every `O_CLOEXEC` open with an `fcntl` for
/// kernels older than 2.6.23: one call more on each file the create path reads.)
pub fn open_read(path: &Path, flags: i32) -> std::io::Result<std::fs::File> {
    let all = flags | libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    let fd = rustix::fs::openat(
        rustix::fs::CWD,
        path,
        rustix::fs::OFlags::from_bits_retain(all as u32),
        rustix::fs::Mode::empty(),
    )?;
    Ok(fd.into())
}

/// This process's effective uid, as the kernel gave it at exec in the auxiliary vector
/// (`AT_EUID`), so without a system call: the process never changes it (discovery's
/// privilege drop is per thread, and this is the process's), and the caches of ours, their
/// folder and the default snapshot folder each ask on every create. Asked of the kernel
/// where the vector has no such entry.
pub fn euid() -> u32 {
    static EUID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *EUID.get_or_init(|| {
        // SAFETY: getauxval only reads the vector the kernel put on the stack at exec, and
        // errno is this thread's.
        #[allow(unsafe_code)]
        let (v, missing) = unsafe {
            *libc::__errno_location() = 0;
            let v = libc::getauxval(libc::AT_EUID);
            (v, v == 0 && *libc::__errno_location() == libc::ENOENT)
        };
        match u32::try_from(v) {
            Ok(uid) if !missing => uid,
            _ => rustix::process::geteuid().as_raw(),
        }
    })
}

/// Why a cache file of ours was not read.
#[derive(Debug, thiserror::Error)]
pub enum OwnedFileError {
    /// Opening, stat'ing or reading it failed (`NotFound`: there is none).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Not a regular file owned by the uid, or writable by others (a symlink is `Io`: `ELOOP`).
    #[error("not a regular file of uid {0} writable by it only")]
    NotOwned(u32),
    /// Larger than the cap.
    #[error("larger than {0} bytes")]
    TooLarge(u64),
    /// Its size moved between the stat and the read.
    #[error("changed while read")]
    Changed,
}

/// Whether `path` is a regular file (not a link) owned by `uid`, of mode `mode` exactly, holding
/// `bytes` and nothing else: what an atomic write of `bytes` with that mode by `uid` would leave.
/// Any doubt (absent, unreadable, another size) is `false`. Read only when its size matches.
pub fn holds_exactly(path: &Path, uid: u32, mode: u32, bytes: &[u8]) -> bool {
    use std::os::unix::fs::MetadataExt;
    let len = bytes.len() as u64;
    let same =
        |md: &std::fs::Metadata| md.uid() == uid && md.mode() & 0o7777 == mode && md.len() == len;
    read_accepted(path, libc::O_NOFOLLOW, len, same).is_ok_and(|(buf, _)| buf == bytes)
}

/// Reads a cache file we wrote: never through a symlink, never blocking on a FIFO, only a
/// regular file owned by `uid` and writable by it only, of at most `cap` bytes, in one read of
/// the size its stat gave (plus one byte, to see that nothing follows).
pub fn read_owned(path: &Path, uid: u32, cap: u64) -> Result<Vec<u8>, OwnedFileError> {
    use std::os::unix::fs::MetadataExt;
    let ours = |md: &std::fs::Metadata| md.uid() == uid && md.mode() & 0o022 == 0;
    let (buf, md) = read_accepted(path, libc::O_NOFOLLOW, cap, ours).map_err(|e| match e {
        CappedError::Io(e) => OwnedFileError::Io(e),
        CappedError::NotRegular => OwnedFileError::NotOwned(uid),
        CappedError::TooLarge(_) => OwnedFileError::TooLarge(cap),
        CappedError::Grew => OwnedFileError::Changed,
    })?;
    if buf.len() as u64 != md.len() {
        return Err(OwnedFileError::Changed);
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_text_says_where_the_first_byte_that_is_not_utf8_is() {
        assert_eq!(
            json_text(b"{\"a\": \"\xc3\xa9\"}"),
            Ok("{\"a\": \"\u{e9}\"}")
        );
        assert_eq!(json_text(b"{\n  \"a\": \"caf\xe9\"\n}"), Err((2, 12)));
        assert_eq!(json_text(b"\xff"), Err((1, 1)));
        // A sequence cut short at the end is not UTF-8 either.
        assert_eq!(json_text(b"[\"\xc3"), Err((1, 3)));
    }

    #[test]
    fn a_file_longer_than_its_stat_size_is_read_on_and_still_capped() {
        // procfs gives size 0 for a file with bytes: read on to its end, and not past the cap.
        let p = Path::new("/proc/self/status");
        let (bytes, _) = read_regular(p, 1 << 20).unwrap();
        assert!(bytes.starts_with(b"Name:"), "{bytes:?}");
        assert!(matches!(read_regular(p, 16), Err(CappedError::Grew)));
        assert_eq!(
            read_capped(p, 16, "the status").unwrap_err().to_string(),
            "/proc/self/status: the status grew past the 16 bytes allowed while being read"
        );
    }

    #[test]
    fn over_the_cap_or_not_a_regular_file_is_refused_before_reading() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, [1u8; 17]).unwrap();
        assert!(matches!(
            read_regular(&p, 16),
            Err(CappedError::TooLarge(17))
        ));
        let (bytes, md) = read_regular(&p, 17).unwrap();
        assert_eq!((bytes.len(), md.len()), (17, 17));
        assert_eq!(
            read_capped(&p, 16, "the file").unwrap_err().to_string(),
            format!(
                "{}: the file is 17 bytes, more than the 16 allowed; this is not a file an engine writes",
                p.display()
            )
        );
        assert!(matches!(
            read_regular(d.path(), 16),
            Err(CappedError::NotRegular)
        ));
    }

    #[test]
    fn read_owned_takes_only_a_file_of_the_uid_writable_by_it_only() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("cache");
        std::fs::write(&p, b"ours").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let uid = std::fs::metadata(&p).unwrap().uid();
        assert_eq!(read_owned(&p, uid, 4).unwrap(), b"ours");
        assert!(matches!(
            read_owned(&p, uid, 3),
            Err(OwnedFileError::TooLarge(3))
        ));
        assert!(matches!(
            read_owned(&p, uid + 1, 4),
            Err(OwnedFileError::NotOwned(_))
        ));
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        assert!(matches!(
            read_owned(&link, uid, 4),
            Err(OwnedFileError::Io(_))
        ));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(matches!(
            read_owned(&p, uid, 4),
            Err(OwnedFileError::NotOwned(_))
        ));
        assert!(matches!(
            read_owned(d.path(), uid, 4),
            Err(OwnedFileError::NotOwned(_))
        ));
    }
}
