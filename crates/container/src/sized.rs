//! Reading a regular file whose size `fstat` gave, in one read where the file allows: the one
//! way [`crate::Root`]'s capped reads and the binary's (`capped`: config.json, config.toml, our
//! caches) read a whole file; and a procfs file of one record (the driver's `version`) in one
//! read, with none to see its end.

use std::io::{self, Read};

/// The bytes of `file`, a regular file whose size `fstat` gave as `size`, but never more than
/// `cap + 1` of them: more than `cap` tells the caller the file grew past its cap while read.
/// The caller refuses a `size` over `cap` before calling.
///
/// One read of `size + 1` bytes: a regular file's short read is its end at that moment, so a
/// read that returns `size` needs no second read to see the end. Only a file that moved since
/// its `fstat` (grew: all `size + 1` came; shrank: fewer than `size`) is read on to its end,
/// capped; so is one whose size says nothing (`0`, as procfs gives).
pub fn read_sized<R: Read>(mut file: R, size: u64, cap: u64) -> io::Result<Vec<u8>> {
    let limit = cap.saturating_add(1);
    let mut buf = Vec::new();
    let one_read = usize::try_from(size.saturating_add(1))
        .ok()
        .filter(|_| size > 0 && size < limit);
    if let Some(want) = one_read {
        buf = vec![0; want];
        let n = read_once(&mut file, &mut buf)?;
        buf.truncate(n);
        if n == 0 || n as u64 == size {
            return Ok(buf);
        }
    }
    if buf.is_empty() {
        // Room for what procfs' files hold, so that one read takes it and the next says the
        // end (std would otherwise probe with a few bytes and grow from there).
        const PROC_ROOM: usize = 4096;
        // A limit past usize (a 32-bit target) is more than the room anyway.
        buf.reserve(usize::try_from(limit).unwrap_or(usize::MAX).min(PROC_ROOM));
    }
    file.take(limit - buf.len() as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

/// The bytes of `file`, a procfs file of one record (made with `single_open`, as the NVIDIA
/// driver's `version` is; size `0` to `fstat`) or a regular file, never more than `cap + 1` of
/// them. Such a file hands its whole text to one read that has room for it, so a read that
/// comes back short is the end, with no second read to see it; a text that fills the first
/// page is read on to its end. Not for a procfs file of many records (`maps`), whose reads
/// stop short at a record that does not fit.
pub fn read_single_record<R: Read>(mut file: R, cap: u64) -> io::Result<Vec<u8>> {
    const PAGE: u64 = 4096;
    let first = cap.saturating_add(1).min(PAGE);
    let mut buf = vec![0; first as usize];
    let n = read_once(&mut file, &mut buf)?;
    buf.truncate(n);
    if n as u64 == first {
        file.take(cap.saturating_add(1) - first)
            .read_to_end(&mut buf)?;
    }
    Ok(buf)
}

/// One `read` into `buf`, made again when a signal interrupted it.
fn read_once<R: Read>(file: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match file.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file as `read` sees it: `data` (what it holds now), each call counted, at most
    /// `chunk` bytes a call.
    struct Counted {
        data: Vec<u8>,
        at: usize,
        chunk: usize,
        calls: usize,
    }

    impl Counted {
        fn new(data: &[u8], chunk: usize) -> Counted {
            Counted {
                data: data.to_vec(),
                at: 0,
                chunk,
                calls: 0,
            }
        }
    }

    impl Read for Counted {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.calls += 1;
            let n = buf.len().min(self.chunk).min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    #[test]
    fn a_file_of_its_stat_size_is_one_read() {
        for len in [1, 100, 4096, 100_000] {
            let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut f = Counted::new(&data, usize::MAX);
            let got = read_sized(&mut f, len as u64, 1 << 20).unwrap();
            assert_eq!(got, data);
            assert_eq!(
                f.calls, 1,
                "{len} bytes: one read, no second one for the end"
            );
        }
    }

    #[test]
    fn a_file_that_grew_is_read_on_and_still_capped() {
        // Grew from 10 to 50 bytes, cap 100: all of it.
        let data = [7u8; 50];
        let mut f = Counted::new(&data, usize::MAX);
        assert_eq!(read_sized(&mut f, 10, 100).unwrap(), data);
        assert!(f.calls > 1);
        // Grew from 10 bytes past the cap of 20: cap + 1 bytes, the caller's sign.
        let mut f = Counted::new(&[1u8; 1000], 3);
        assert_eq!(read_sized(&mut f, 10, 20).unwrap().len(), 21);
        // Its size at the cap, then more: still cap + 1.
        let mut f = Counted::new(&[1u8; 1000], usize::MAX);
        assert_eq!(read_sized(&mut f, 20, 20).unwrap().len(), 21);
    }

    #[test]
    fn a_file_that_shrank_is_read_to_its_end() {
        let mut f = Counted::new(b"short", usize::MAX);
        assert_eq!(read_sized(&mut f, 10, 100).unwrap(), b"short");
        let mut f = Counted::new(b"", usize::MAX);
        assert_eq!(read_sized(&mut f, 10, 100).unwrap(), b"");
        assert_eq!(f.calls, 1, "empty now: the first read says so");
    }

    #[test]
    fn a_reader_that_gives_less_than_asked_is_read_on() {
        // Not a regular file's way, but no byte is lost where a read falls short of the size.
        let data: Vec<u8> = (0..100u8).collect();
        let mut f = Counted::new(&data, 7);
        assert_eq!(read_sized(&mut f, 100, 1000).unwrap(), data);
    }

    #[test]
    fn size_zero_reads_until_the_end_capped() {
        // procfs: fstat says 0, the file has bytes.
        let data = [9u8; 300];
        let mut f = Counted::new(&data, 64);
        assert_eq!(read_sized(&mut f, 0, 1000).unwrap(), data);
        let mut f = Counted::new(&data, 64);
        assert_eq!(read_sized(&mut f, 0, 100).unwrap().len(), 101);
        let mut f = Counted::new(b"", 64);
        assert_eq!(read_sized(&mut f, 0, 100).unwrap(), b"");
    }

    #[test]
    fn a_single_record_is_one_read_when_short_and_read_on_when_long() {
        let short = [7u8; 300];
        let mut f = Counted::new(&short, usize::MAX);
        assert_eq!(read_single_record(&mut f, 1 << 16).unwrap(), short);
        assert_eq!(f.calls, 1, "a short read is the end");
        let long: Vec<u8> = (0..10_000).map(|i| i as u8).collect();
        let mut f = Counted::new(&long, usize::MAX);
        assert_eq!(read_single_record(&mut f, 1 << 16).unwrap(), long);
        let mut f = Counted::new(&long, usize::MAX);
        assert_eq!(read_single_record(&mut f, 5000).unwrap().len(), 5001);
        let mut f = Counted::new(&long, usize::MAX);
        assert_eq!(read_single_record(&mut f, 100).unwrap().len(), 101);
        // A real procfs file of one record.
        let version = std::fs::read("/proc/version").unwrap();
        let f = std::fs::File::open("/proc/version").unwrap();
        assert_eq!(read_single_record(&f, 1 << 16).unwrap(), version);
    }

    #[test]
    fn a_container_file_longer_than_its_stat_size_is_still_capped() {
        // procfs gives size 0 for a file with bytes: every reader in a root reads it on to its
        // end and fails past its cap, as for a file that grew while read.
        use crate::root::{Root, RootError};
        let r = Root::open("/proc/self").unwrap();
        assert!(r
            .read_to_vec("/status", 1 << 20)
            .unwrap()
            .starts_with(b"Name:"));
        assert!(matches!(
            r.read_to_vec("/status", 16),
            Err(RootError::TooLarge {
                size: 17,
                cap: 16,
                ..
            })
        ));
        let d = r.open_dir("/").unwrap();
        let (bytes, _) = d.read_file("status", 1 << 20).unwrap().unwrap();
        assert!(bytes.starts_with(b"Name:"));
        assert!(matches!(
            d.read_file("status", 16),
            Err(RootError::TooLarge {
                size: 17,
                cap: 16,
                ..
            })
        ));
    }

    #[test]
    fn interrupted_reads_are_retried() {
        struct Eintr(bool, &'static [u8]);
        impl Read for Eintr {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if !self.0 {
                    self.0 = true;
                    return Err(io::ErrorKind::Interrupted.into());
                }
                (&mut self.1).read(buf)
            }
        }
        assert_eq!(read_sized(Eintr(false, b"abc"), 3, 10).unwrap(), b"abc");
    }
}
