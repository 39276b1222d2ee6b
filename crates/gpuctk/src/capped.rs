//! Reading a file whose size we bound: config.json, an engine's config, the install manifest,
//! and the caches we keep under `/run` (the discovery snapshot, NVML's recorded answers).

use std::path::Path;

use anyhow::Context;

/// Reads a regular file of at most `cap` bytes: the size is checked before reading (a huge file
/// fails at once, without being read), and a FIFO or device is refused rather than opened for
/// blocking reads.
pub fn read_capped(path: &Path, cap: u64, what: &str) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .with_context(|| format!("{}: cannot read {what}", path.display()))?;
    let md = file
        .metadata()
        .with_context(|| format!("{}: cannot read {what}", path.display()))?;
    if !md.is_file() {
        anyhow::bail!("{}: {what} is not a regular file", path.display());
    }
    if md.len() > cap {
        anyhow::bail!(
            "{}: {what} is {} bytes, more than the {} allowed; this is not a file an engine writes",
            path.display(),
            md.len(),
            cap
        );
    }
    let mut buf = Vec::with_capacity(md.len() as usize);
    file.take(cap + 1)
        .read_to_end(&mut buf)
        .with_context(|| format!("{}: cannot read {what}", path.display()))?;
    if buf.len() as u64 > cap {
        anyhow::bail!(
            "{}: {what} grew past the {cap} bytes allowed while being read",
            path.display()
        );
    }
    Ok(buf)
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

/// Reads a cache file we wrote: never through a symlink, never blocking on a FIFO, only a
/// regular file owned by `uid` and writable by it only, of at most `cap` bytes, in one read of
/// the size its stat gave (plus one byte, to see that nothing follows).
pub fn read_owned(path: &Path, uid: u32, cap: u64) -> Result<Vec<u8>, OwnedFileError> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let md = f.metadata()?;
    if !md.is_file() || md.uid() != uid || md.mode() & 0o022 != 0 {
        return Err(OwnedFileError::NotOwned(uid));
    }
    if md.len() > cap {
        return Err(OwnedFileError::TooLarge(cap));
    }
    let mut buf = vec![0u8; md.len() as usize + 1];
    let n = f.read(&mut buf)?;
    if n != md.len() as usize {
        return Err(OwnedFileError::Changed);
    }
    buf.truncate(n);
    Ok(buf)
}
