//! Jetson (Tegra) CSV mode: the mount-spec files under
//! `/etc/nvidia-container-runtime/host-files-for-container.d` (`dev`, `lib`, `sym` and `dir`
//! lines, NVIDIA's format), and what they name on a driver root, as [`CsvHost`].
//!
//! A line is `TYPE, PATH`: the type before the first comma, the path (which may hold commas)
//! after it, both trimmed. What NVIDIA's toolkit does with each type:
//! - `dev`: a character device node, under the dev root (a relative name is under `/dev`);
//! - `lib`: a file, followed through its symlinks, mounted at its resolved path;
//! - `sym`: a symlink, recreated in the container link by link (`create-symlinks`), and the file
//!   its chain ends at mounted;
//! - `dir`: a directory, mounted.
//!
//! A path the host lacks is left out, as NVIDIA's locators do. Unlike NVIDIA's parser, which
//! drops a line it cannot read at debug level, a malformed line is an error naming the file and
//! line: blank lines and `#` comments are the only lines skipped.

use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use crate::resolve::{host_path, is_absent, regular_file_in_root};
use crate::DeviceNode;

/// NVIDIA's CSV folder.
pub const DEFAULT_MOUNT_SPEC_PATH: &str =
    "/etc/nvidia-container-runtime/host-files-for-container.d";
/// The files NVIDIA reads from it unless `NVIDIA_REQUIRE_JETPACK=csv-mounts=all`.
pub const BASE_FILES: [&str; 3] = ["devices.csv", "drivers.csv", "l4t.csv"];
/// The largest CSV file read (L4T's biggest is about 20 KiB).
pub const MAX_CSV_SIZE: u64 = 1 << 20;
/// The most entries taken from all CSV files together.
pub const MAX_ENTRIES: usize = 65_536;
/// The longest ignore pattern.
pub const MAX_PATTERN_LEN: usize = 4096;
/// Links followed in one `sym` chain.
const MAX_CHAIN: usize = 40;

/// The kind of a CSV line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecType {
    /// `dev`: a character device node.
    Dev,
    /// `lib`: a library or other regular file.
    Lib,
    /// `sym`: a symlink.
    Sym,
    /// `dir`: a directory.
    Dir,
}

/// One line of a CSV file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountSpec {
    /// Its kind.
    pub kind: SpecType,
    /// The path as written.
    pub path: String,
}

/// A CSV file or entry that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CsvError {
    /// The file exists but cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Larger than [`MAX_CSV_SIZE`].
    #[error("{}: more than {MAX_CSV_SIZE} bytes; not a CSV mount-spec file", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// Not UTF-8.
    #[error("{}: not UTF-8 text; not a CSV mount-spec file", path.display())]
    NotText {
        /// The file.
        path: PathBuf,
    },
    /// A line that is not `TYPE, PATH`.
    #[error("{}:{line}: {reason}; expected `TYPE, PATH` with TYPE dev, lib, sym or dir (e.g. `lib, /usr/lib/aarch64-linux-gnu/tegra/libcuda.so.1.1`)", path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// More than [`MAX_ENTRIES`] lines in all.
    #[error("{}: more than {MAX_ENTRIES} entries in the CSV files", path.display())]
    TooMany {
        /// The file that went over.
        path: PathBuf,
    },
    /// An ignore pattern that is too long.
    #[error("--csv.ignore-pattern: longer than {MAX_PATTERN_LEN} bytes")]
    Pattern,
    /// Looking a listed path up on the host failed for another reason than its absence.
    #[error("{}: {source} (listed in the CSV files as {listed})", host.display())]
    Lookup {
        /// The host path.
        host: PathBuf,
        /// The entry.
        listed: String,
        /// Why.
        source: io::Error,
    },
}

/// Parse one CSV file's text. Linear in `text`.
pub fn parse(text: &str, path: &Path) -> Result<Vec<MountSpec>, CsvError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |reason: String| CsvError::Line {
            path: path.to_path_buf(),
            line: i + 1,
            reason,
        };
        let Some((kind, p)) = line.split_once(',') else {
            return Err(bad(format!("{line:?} has no comma")));
        };
        let kind = match kind.trim() {
            "dev" => SpecType::Dev,
            "lib" => SpecType::Lib,
            "sym" => SpecType::Sym,
            "dir" => SpecType::Dir,
            other => return Err(bad(format!("unknown type {other:?}"))),
        };
        let p = p.trim();
        if p.is_empty() {
            return Err(bad("the path is empty".into()));
        }
        if p.contains('\0') {
            return Err(bad("the path holds a NUL byte".into()));
        }
        out.push(MountSpec {
            kind,
            path: p.to_string(),
        });
    }
    Ok(out)
}

/// Read and parse `files` (host paths), in order. A file that does not exist is skipped, as
/// NVIDIA skips it (a Jetson release may lack one of the three base files); any other read
/// error, or a malformed line, is an error.
pub fn read_files(files: &[PathBuf]) -> Result<Vec<MountSpec>, CsvError> {
    let mut all = Vec::new();
    for f in files {
        let file = match std::fs::File::open(f) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                tracing::debug!("{}: absent; skipped", f.display());
                continue;
            }
            Err(source) => {
                return Err(CsvError::Read {
                    path: f.clone(),
                    source,
                })
            }
        };
        let mut bytes = Vec::new();
        file.take(MAX_CSV_SIZE + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| CsvError::Read {
                path: f.clone(),
                source,
            })?;
        if bytes.len() as u64 > MAX_CSV_SIZE {
            return Err(CsvError::TooLarge { path: f.clone() });
        }
        let text = String::from_utf8(bytes).map_err(|_| CsvError::NotText { path: f.clone() })?;
        let specs = parse(&text, f)?;
        if specs.is_empty() {
            tracing::warn!("{}: no entries; skipped", f.display());
        }
        if all.len() + specs.len() > MAX_ENTRIES {
            return Err(CsvError::TooMany { path: f.clone() });
        }
        all.extend(specs);
    }
    Ok(all)
}

/// The CSV files of `dir` NVIDIA reads: the three base files, or with `all` every `*.csv`
/// file there (`NVIDIA_REQUIRE_JETPACK=csv-mounts=all`), sorted.
pub fn files_in(dir: &Path, all: bool) -> Result<Vec<PathBuf>, CsvError> {
    if !all {
        return Ok(BASE_FILES.iter().map(|f| dir.join(f)).collect());
    }
    // The project's reader: std's `ReadDir` panics when `closedir` fails.
    let entries = match crate::discover::read_dir_entries(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(CsvError::Read {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut out = Vec::new();
    for entry in entries {
        let name = entry.name.to_string_lossy();
        let is_csv = name.len() > 4 && name.to_ascii_lowercase().ends_with(".csv");
        if is_csv && entry.is_file {
            out.push(dir.join(&entry.name));
        }
        if out.len() > MAX_ENTRIES {
            return Err(CsvError::TooMany {
                path: dir.to_path_buf(),
            });
        }
    }
    out.sort();
    Ok(out)
}

/// `filepath.Match` on whole strings: `*` and `?` do not cross `/`, `[...]` classes with `^`
/// or `!` negation and ranges, `\` escapes. O(pattern × name) by the usual star backtracking.
pub fn glob(pattern: &str, name: &str) -> bool {
    let p = pattern.as_bytes();
    let n = name.as_bytes();
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() {
            match p[pi] {
                b'*' => {
                    star = Some((pi, ni));
                    pi += 1;
                    continue;
                }
                b'?' if n[ni] != b'/' => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                b'[' => {
                    if let Some((hit, len)) = class(&p[pi..], n[ni]) {
                        if hit && n[ni] != b'/' {
                            pi += len;
                            ni += 1;
                            continue;
                        }
                    }
                }
                b'\\' if pi + 1 < p.len() && p[pi + 1] == n[ni] => {
                    pi += 2;
                    ni += 1;
                    continue;
                }
                c if c == n[ni] && c != b'?' && c != b'\\' => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                _ => {}
            }
        }
        // Backtrack: the last star takes one more byte, never a `/`.
        match star {
            Some((sp, sn)) if n[sn] != b'/' => {
                star = Some((sp, sn + 1));
                pi = sp + 1;
                ni = sn + 1;
            }
            _ => return false,
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// A `[...]` class at the start of `p` against `c`: whether it matches, and its length.
fn class(p: &[u8], c: u8) -> Option<(bool, usize)> {
    let mut i = 1;
    let negate = matches!(p.get(i), Some(b'^') | Some(b'!'));
    if negate {
        i += 1;
    }
    let mut hit = false;
    let mut first = true;
    while i < p.len() {
        if p[i] == b']' && !first {
            return Some((hit != negate, i + 1));
        }
        first = false;
        let lo = if p[i] == b'\\' && i + 1 < p.len() {
            i += 1;
            p[i]
        } else {
            p[i]
        };
        if i + 2 < p.len() && p[i + 1] == b'-' && p[i + 2] != b']' {
            hit |= lo <= c && c <= p[i + 2];
            i += 3;
        } else {
            hit |= lo == c;
            i += 1;
        }
    }
    None
}

/// Whether an ignore pattern drops `path`: a `**/` prefix matches the file name only, any other
/// pattern the whole path (NVIDIA's `--csv.ignore-pattern`).
pub fn ignored(patterns: &[String], path: &str) -> bool {
    patterns.iter().any(|pat| match pat.strip_prefix("**/") {
        Some(rest) => glob(rest, path.rsplit('/').next().unwrap_or(path)),
        None => glob(pat, path),
    })
}

/// A file or directory to mount: its host path and its path in the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvMount {
    /// On the host (under the driver root).
    pub host_path: PathBuf,
    /// In the container.
    pub path: String,
}

/// One link of a `sym` chain: `link` (a container path) pointing at `target` (as read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvLink {
    /// What the link points at, as the host's link has it.
    pub target: String,
    /// The container path of the link.
    pub link: String,
}

/// What the CSV entries name on a host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CsvHost {
    /// `dev` entries present under the dev root, in order, without repeats.
    pub devices: Vec<DeviceNode>,
    /// `dir` entries present, in order.
    pub dirs: Vec<CsvMount>,
    /// `lib` entries' resolved files, then the files `sym` chains end at, without repeats.
    pub files: Vec<CsvMount>,
    /// The links of each `sym` chain, in order, without repeats.
    pub links: Vec<CsvLink>,
}

/// `path` as an absolute path inside a root, lexically: `.` dropped, `..` stops at the root.
fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in Path::new(path).components() {
        match c {
            Component::Normal(n) => parts.push(n.to_str().unwrap_or("")),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    format!("/{}", parts.join("/"))
}

/// Look `specs` up: devices under `dev_root`, files, links and directories under `driver_root`.
/// `ignore` drops `sym` entries whose path matches one of its patterns.
pub fn lookup(
    specs: &[MountSpec],
    driver_root: &Path,
    dev_root: &Path,
    ignore: &[String],
) -> Result<CsvHost, CsvError> {
    if ignore.iter().any(|p| p.len() > MAX_PATTERN_LEN) {
        return Err(CsvError::Pattern);
    }
    let mut out = CsvHost::default();
    let lookup_err = |host: &Path, listed: &str, source: io::Error| CsvError::Lookup {
        host: host.to_path_buf(),
        listed: listed.to_string(),
        source,
    };
    let push_file = |out: &mut CsvHost, inner: &str| {
        if !out.files.iter().any(|f| f.path == inner) {
            out.files.push(CsvMount {
                host_path: host_path(driver_root, Path::new(inner)),
                path: inner.to_string(),
            });
        }
    };
    for s in specs {
        match s.kind {
            SpecType::Dev => {
                let inner = if s.path.starts_with('/') {
                    normalize(&s.path)
                } else {
                    normalize(&format!("/dev/{}", s.path))
                };
                let host = host_path(dev_root, Path::new(&inner));
                let md = match std::fs::metadata(&host) {
                    Ok(md) => md,
                    Err(e) if is_absent(&e) => {
                        tracing::debug!(
                            "{}: absent; CSV entry dev {} skipped",
                            host.display(),
                            s.path
                        );
                        continue;
                    }
                    Err(e) => return Err(lookup_err(&host, &s.path, e)),
                };
                if !md.file_type().is_char_device() {
                    tracing::warn!(
                        "{}: not a character device; CSV entry dev {} skipped",
                        host.display(),
                        s.path
                    );
                    continue;
                }
                if out.devices.iter().any(|d| d.path == inner) {
                    continue;
                }
                out.devices.push(DeviceNode {
                    path: inner,
                    host_path: host,
                    major: libc::major(md.rdev()),
                    minor: libc::minor(md.rdev()),
                    mode: md.mode() & 0o7777,
                    gid: md.gid(),
                });
            }
            SpecType::Dir => {
                let inner = normalize(&s.path);
                let host = host_path(driver_root, Path::new(&inner));
                match std::fs::metadata(&host) {
                    Ok(md) if md.is_dir() => {
                        if !out.dirs.iter().any(|d| d.path == inner) {
                            out.dirs.push(CsvMount {
                                host_path: host,
                                path: inner,
                            });
                        }
                    }
                    Ok(_) => tracing::warn!(
                        "{}: not a directory; CSV entry dir {} skipped",
                        host.display(),
                        s.path
                    ),
                    Err(e) if is_absent(&e) => {}
                    Err(e) => return Err(lookup_err(&host, &s.path, e)),
                }
            }
            SpecType::Lib => {
                let inner = normalize(&s.path);
                match resolve_file(driver_root, &inner) {
                    Ok(Some(r)) => push_file(&mut out, &r),
                    Ok(None) => {}
                    Err(e) => {
                        return Err(lookup_err(
                            &host_path(driver_root, Path::new(&inner)),
                            &s.path,
                            e,
                        ))
                    }
                }
            }
            SpecType::Sym => {
                let inner = normalize(&s.path);
                if ignored(ignore, &inner) {
                    continue;
                }
                let mut cur = inner.clone();
                let mut end = None;
                for _ in 0..MAX_CHAIN {
                    let host = host_path(driver_root, Path::new(&cur));
                    let md = match std::fs::symlink_metadata(&host) {
                        Ok(md) => md,
                        Err(e) if is_absent(&e) => break,
                        Err(e) => return Err(lookup_err(&host, &s.path, e)),
                    };
                    if !md.file_type().is_symlink() {
                        if md.is_file() {
                            end = Some(cur.clone());
                        }
                        break;
                    }
                    let target =
                        std::fs::read_link(&host).map_err(|e| lookup_err(&host, &s.path, e))?;
                    let target = target.to_string_lossy().into_owned();
                    let link = CsvLink {
                        target: target.clone(),
                        link: cur.clone(),
                    };
                    if !out.links.contains(&link) {
                        out.links.push(link);
                    }
                    let parent = cur.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
                    cur = if target.starts_with('/') {
                        normalize(&target)
                    } else {
                        normalize(&format!("{parent}/{target}"))
                    };
                }
                if let Some(f) = end {
                    // The file may itself sit behind a linked directory: mount it where it is.
                    match resolve_file(driver_root, &f) {
                        Ok(Some(r)) => push_file(&mut out, &r),
                        Ok(None) => {}
                        Err(e) => {
                            return Err(lookup_err(
                                &host_path(driver_root, Path::new(&f)),
                                &s.path,
                                e,
                            ))
                        }
                    }
                }
            }
        }
    }
    Ok(out)
}

/// `inner` followed through its links inside `root` to a regular file: its path inside the
/// root, or `None` when absent or not a regular file.
fn resolve_file(root: &Path, inner: &str) -> io::Result<Option<String>> {
    Ok(regular_file_in_root(root, Path::new(inner))?.map(|r| r.to_string_lossy().into_owned()))
}

/// Whether the host under these roots is a Tegra (Jetson) system, as NVIDIA's `auto` tells:
/// `/etc/nv_tegra_release` under the driver root, or `/sys/devices/soc0/family` starting with
/// `tegra` (any case) under `sys_root`. A marker that is there but cannot be looked at or read
/// is an error naming it, not a "no": that would pick another mode for the host unseen.
pub fn is_tegra(driver_root: &Path, sys_root: &Path) -> io::Result<bool> {
    let named = |p: &Path, e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", p.display()));
    let release = host_path(driver_root, Path::new("/etc/nv_tegra_release"));
    match std::fs::metadata(&release) {
        Ok(_) => return Ok(true),
        Err(e) if is_absent(&e) => {}
        Err(e) => return Err(named(&release, e)),
    }
    let family = host_path(sys_root, Path::new("/sys/devices/soc0/family"));
    let mut buf = [0u8; 64];
    let n = match std::fs::File::open(&family) {
        Ok(mut f) => f.read(&mut buf).map_err(|e| named(&family, e))?,
        Err(e) if is_absent(&e) => 0,
        Err(e) => return Err(named(&family, e)),
    };
    Ok(buf[..n].to_ascii_lowercase().starts_with(b"tegra"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_as_nvidia_reads_them() {
        let p = Path::new("x.csv");
        let got = parse(
            "dev, nvhost-ctrl\n\n# comment\n dir ,/usr/local/cuda\nlib, /a/path,with,commas\nsym,/usr/lib/libcuda.so\r\n",
            p,
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                MountSpec {
                    kind: SpecType::Dev,
                    path: "nvhost-ctrl".into()
                },
                MountSpec {
                    kind: SpecType::Dir,
                    path: "/usr/local/cuda".into()
                },
                MountSpec {
                    kind: SpecType::Lib,
                    path: "/a/path,with,commas".into()
                },
                MountSpec {
                    kind: SpecType::Sym,
                    path: "/usr/lib/libcuda.so".into()
                },
            ]
        );
        for (bad, needle) in [
            ("dev", "x.csv:1: \"dev\" has no comma"),
            ("dev,", "x.csv:1: the path is empty"),
            ("lib, /a\nnot-dev, /a", "x.csv:2: unknown type \"not-dev\""),
            (",", "unknown type \"\""),
        ] {
            let e = parse(bad, p).unwrap_err().to_string();
            assert!(e.contains(needle), "{bad:?}: {e}");
        }
    }

    #[test]
    fn parse_is_linear_on_a_large_input() {
        let text = "lib, /usr/lib/x.so\n".repeat(50_000);
        assert_eq!(parse(&text, Path::new("x")).unwrap().len(), 50_000);
        let long = format!("lib, /{}", "a".repeat(1 << 20));
        assert_eq!(parse(&long, Path::new("x")).unwrap().len(), 1);
    }

    #[test]
    fn globs_as_filepath_match() {
        assert!(glob("*.so", "libcuda.so"));
        assert!(!glob("*.so", "/usr/lib/libcuda.so"));
        assert!(glob("/usr/lib/*.so", "/usr/lib/libcuda.so"));
        assert!(glob("*.so.[0-9]", "libcuda.so.1"));
        assert!(!glob("*.so.[0-9]", "libcuda.so.1.1"));
        assert!(glob("lib?uda.so", "libcuda.so"));
        assert!(glob("[!a]*", "libx"));
        assert!(!glob("[^l]*", "libx"));
        assert!(glob("a\\*b", "a*b"));
        assert!(!glob("a\\*b", "axb"));
        // Quadratic at worst, never exponential.
        let name = "a".repeat(2000);
        assert!(!glob(&format!("{}b", "*a".repeat(500)), &name));
        assert!(ignored(&["**/*.so".into()], "/usr/lib/libcuda.so"));
        assert!(!ignored(&["**/*.so".into()], "/usr/lib/libcuda.so.1"));
        assert!(ignored(&["/usr/lib/*".into()], "/usr/lib/libcuda.so.1"));
    }

    #[test]
    fn lookup_follows_links_inside_the_root() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        let lib = r.join("usr/lib/aarch64-linux-gnu/tegra");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::create_dir_all(r.join("usr/local/cuda")).unwrap();
        std::fs::write(lib.join("libcuda.so.1.1"), b"\x7fELF").unwrap();
        std::os::unix::fs::symlink("libcuda.so.1.1", lib.join("libcuda.so")).unwrap();
        std::os::unix::fs::symlink(
            "tegra/libcuda.so",
            r.join("usr/lib/aarch64-linux-gnu/libcuda.so"),
        )
        .unwrap();
        // An absolute link leads back into the root, never out of it.
        std::os::unix::fs::symlink(
            "/usr/lib/aarch64-linux-gnu/tegra/libcuda.so.1.1",
            lib.join("libabs.so"),
        )
        .unwrap();
        std::os::unix::fs::symlink("/etc/passwd", lib.join("libout.so")).unwrap();
        let specs = parse(
            "lib, /usr/lib/aarch64-linux-gnu/tegra/libcuda.so\nsym, /usr/lib/aarch64-linux-gnu/libcuda.so\nsym, /usr/lib/aarch64-linux-gnu/tegra/libabs.so\nsym, /usr/lib/aarch64-linux-gnu/tegra/libout.so\ndir, /usr/local/cuda\ndir, /usr/absent\nlib, /usr/absent.so\ndev, nvmap\n",
            Path::new("t.csv"),
        )
        .unwrap();
        let got = lookup(&specs, r, r, &[]).unwrap();
        assert_eq!(got.files.len(), 1);
        assert_eq!(
            got.files[0].path,
            "/usr/lib/aarch64-linux-gnu/tegra/libcuda.so.1.1"
        );
        assert_eq!(got.files[0].host_path, lib.join("libcuda.so.1.1"));
        let links: Vec<String> = got
            .links
            .iter()
            .map(|l| format!("{}::{}", l.target, l.link))
            .collect();
        assert_eq!(
            links,
            [
                "tegra/libcuda.so::/usr/lib/aarch64-linux-gnu/libcuda.so",
                "libcuda.so.1.1::/usr/lib/aarch64-linux-gnu/tegra/libcuda.so",
                "/usr/lib/aarch64-linux-gnu/tegra/libcuda.so.1.1::/usr/lib/aarch64-linux-gnu/tegra/libabs.so",
                "/etc/passwd::/usr/lib/aarch64-linux-gnu/tegra/libout.so",
            ]
        );
        assert_eq!(got.dirs.len(), 1);
        assert!(got.devices.is_empty());
        let ignored = lookup(&specs, r, r, &["**/*.so".into()]).unwrap();
        assert!(ignored.links.is_empty());
    }

    #[test]
    fn tegra_markers() {
        let t = tempfile::tempdir().unwrap();
        assert!(!is_tegra(t.path(), t.path()).unwrap());
        std::fs::create_dir_all(t.path().join("sys/devices/soc0")).unwrap();
        std::fs::write(t.path().join("sys/devices/soc0/family"), "Tegra\n").unwrap();
        assert!(is_tegra(t.path(), t.path()).unwrap());
    }

    /// Review finding (session 8): a marker that cannot be read was taken for "not a Tegra".
    #[test]
    fn an_unreadable_tegra_marker_is_an_error_naming_it() {
        let t = tempfile::tempdir().unwrap();
        let family = t.path().join("sys/devices/soc0/family");
        // A folder where the file belongs: it opens, and reading it fails (EISDIR).
        std::fs::create_dir_all(&family).unwrap();
        let e = is_tegra(t.path(), t.path()).unwrap_err();
        assert!(e.to_string().contains(&family.display().to_string()), "{e}");
        // A loop where the release file belongs: it cannot be looked at (ELOOP).
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("etc")).unwrap();
        let release = t.path().join("etc/nv_tegra_release");
        std::os::unix::fs::symlink("nv_tegra_release", &release).unwrap();
        let e = is_tegra(t.path(), t.path()).unwrap_err();
        assert!(
            e.to_string().contains(&release.display().to_string()),
            "{e}"
        );
    }
}
