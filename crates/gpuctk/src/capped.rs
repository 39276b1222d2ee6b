//! Reading a file whose size we bound: config.json, an engine's config, the install manifest.

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
