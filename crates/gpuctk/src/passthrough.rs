//! The shim's fast path: every runc command other than `create` and `run` (`start`, `state`,
//! `kill`, `delete`, `ps`, `--version`, ...) is handed to the low-level runtime untouched, and
//! an engine makes several of those per container, so this path does only what names the
//! runtime: it finds `config.toml` (the same variables as [`crate::config::config_path`]),
//! reads the one key `[nvidia-container-runtime] runtimes` with a small scanner, looks the
//! runtime up (stopping at the first hit) and execs it. No TOML document, no logging set-up,
//! no unknown-key warnings: those belong to `create`/`run`.
//!
//! A config that cannot be read for that key (missing, unreadable, a FIFO or over its cap, or
//! too broken for the scanner and for the full parser) gives the default runtimes: a
//! pass-through call must still reach the runtime, or a container created before the file
//! broke could not be stopped or deleted. A syntax error elsewhere in the file does not hide a
//! `runtimes` key the scanner can read, so `delete` goes to the runtime `create` used.
//! `create`/`run` still parse the whole file and stop on any error.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use crate::config::{self, Config};
use crate::runc::{find_runtime, RuncArgs};

/// Whether `parsed` is a call the shim only passes on (anything but `create`/`run`, and their
/// `--help`).
pub fn applies(parsed: &RuncArgs) -> bool {
    // `create --help` prints runc's help: no bundle to read.
    parsed.help || !matches!(parsed.command.as_deref(), Some("create" | "run"))
}

/// Where the runtime a container was created with is recorded: next to the runtime's state
/// directory (`--root`, which the engine gives every call on the container), so the record
/// lives and goes with that state. Without `--root` (rootless podman gives none), the first of
/// `/run/gpuctk/runtimes` and `$XDG_RUNTIME_DIR/gpuctk-runtimes` that can be written: a
/// rootless runtime is root only in the user's namespace and cannot write `/run`, and podman
/// gives every call on a container the user's `XDG_RUNTIME_DIR`. Reads look in both.
fn record_dirs(parsed: &RuncArgs) -> Vec<PathBuf> {
    match &parsed.root {
        Some(root) => {
            let mut s = root.as_os_str().to_os_string();
            s.push(".gpuctk");
            vec![PathBuf::from(s)]
        }
        None => {
            let mut dirs = vec![PathBuf::from("/run/gpuctk/runtimes")];
            if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
            {
                dirs.push(x.join("gpuctk-runtimes"));
            }
            dirs
        }
    }
}

/// A container id usable as a file name (runc allows `[\w+.-]`).
fn safe_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 255
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'+'))
}

/// At `create`/`run`: remember `runtime` for the container id, so that every later call on it
/// goes to the same runtime (see [`recorded_runtime`]). The record is a symbolic link named
/// after the id whose target is the runtime's path: made whole in one `symlink` (replaced by
/// rename when the id has a record already, see [`gpuctk_atomicfile::replace_symlink`]) and read
/// back in one `readlink`; the folder is made only when that says it is missing.
pub fn record_runtime(parsed: &RuncArgs, runtime: &std::path::Path) -> std::io::Result<()> {
    // A `run` in the foreground deletes its container when it ends, and no `delete` comes
    // to remove a record: only a detached one is recorded.
    if parsed.command.as_deref() == Some("run") && !parsed.detach {
        return Ok(());
    }
    let Some(id) = parsed.id.as_deref().filter(|id| safe_id(id)) else {
        return Ok(());
    };
    let mut last = None;
    for dir in record_dirs(parsed) {
        let record = dir.join(id);
        let write =
            || gpuctk_atomicfile::replace_symlink(&record, runtime).map_err(std::io::Error::from);
        let done = match write() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(&dir).and_then(|()| write())
            }
            r => r,
        };
        match done {
            Ok(()) => return Ok(()),
            Err(e) => {
                last = Some(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}", record.display()),
                ))
            }
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no directory to record in")))
}

/// A runtime recorded at create for the container a call names.
struct Record {
    /// The runtime, still executable.
    runtime: PathBuf,
    /// The record's file.
    file: PathBuf,
    /// The container id it is kept under.
    id: String,
}

/// The runtime recorded for the container this call names (its id where runc's grammar places
/// it, [`RuncArgs::id`]), if any and still executable.
fn recorded_runtime(parsed: &RuncArgs) -> Option<Record> {
    let id = parsed.id.as_deref().filter(|id| safe_id(id))?;
    record_dirs(parsed)
        .into_iter()
        .find_map(|dir| recorded_in(&dir, id))
}

/// The largest record read: a runtime's path.
const MAX_RECORD: u64 = 4096;

/// The runtime recorded in `dir` for container `id`: the target of a symbolic link, read
/// without following it; or, as versions before issue 21 wrote it, the content of a regular file,
/// opened without following a link and without blocking (a FIFO under that name would
/// otherwise hang every later call on the container). Anything else there, or a record that
/// cannot be read, is no record (the call goes to the configured runtime, as for a container
/// created before records), said on stderr: the call must still reach a runtime. Either way
/// the runtime named must be an executable file.
fn recorded_in(dir: &std::path::Path, id: &str) -> Option<Record> {
    let file = dir.join(id);
    let ignored = |why: &dyn std::fmt::Display| ignored(&file, why);
    // Not zeroed first: the call writes what it returns.
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); MAX_RECORD as usize + 1];
    let bytes = match rustix::fs::readlinkat_raw(rustix::fs::CWD, &file, &mut buf[..]) {
        Ok((read, _)) => &*read,
        // Not a link: a record of an earlier version, or something that is no record.
        Err(rustix::io::Errno::INVAL) => return recorded_in_file(file, id),
        // No record; or root's `/run/gpuctk/runtimes`, which a rootless call also looks in
        // (see `record_dirs`) and may not be allowed to search.
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::ACCESS) => return None,
        Err(e) => {
            ignored(&format_args!(
                "cannot read this runtime record: {}",
                std::io::Error::from(e)
            ));
            return None;
        }
    };
    if bytes.len() as u64 > MAX_RECORD {
        ignored(&format_args!(
            "runtime record larger than {MAX_RECORD} bytes"
        ));
        return None;
    }
    record(PathBuf::from(std::ffi::OsStr::from_bytes(bytes)), file, id)
}

/// The record `file` when it is a regular file (see [`recorded_in`]).
fn recorded_in_file(file: PathBuf, id: &str) -> Option<Record> {
    use std::io::Read;
    let ignored = |why: &dyn std::fmt::Display| ignored(&file, why);
    let f = match crate::capped::open_read(&file, libc::O_NOFOLLOW) {
        Ok(f) => f,
        // Gone since it was looked at (a delete), or not ours to read.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
            ) =>
        {
            return None
        }
        Err(e) => {
            ignored(&format_args!("cannot open this runtime record: {e}"));
            return None;
        }
    };
    let mut bytes = Vec::new();
    let read = f.metadata().and_then(|md| {
        if !md.is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
        f.take(MAX_RECORD + 1).read_to_end(&mut bytes)
    });
    if let Err(e) = read {
        ignored(&format_args!("runtime record: {e}"));
        return None;
    }
    if bytes.len() as u64 > MAX_RECORD {
        ignored(&format_args!(
            "runtime record larger than {MAX_RECORD} bytes"
        ));
        return None;
    }
    record(PathBuf::from(std::ffi::OsStr::from_bytes(&bytes)), file, id)
}

/// Say on stderr that the record `file` is not used, and why.
fn ignored(file: &std::path::Path, why: &dyn std::fmt::Display) {
    eprintln!(
        "nvidia-container-runtime: warning: {}: {why}; ignored, the configured runtime is used",
        file.display()
    );
}

/// A record of `runtime` when it is still an executable file.
fn record(runtime: PathBuf, file: PathBuf, id: &str) -> Option<Record> {
    gpuctk_host::checks::is_executable(&runtime).then(|| Record {
        runtime,
        file,
        id: id.to_string(),
    })
}

/// Find the runtime and exec it with `args`; returns only on failure, with the message for
/// the engine. A container created through the shim goes to the runtime it was created with.
// A function of its own in the shipped build, whose hot-text list and profiles name it.
#[inline(never)]
pub fn exec(args: &[OsString], parsed: &RuncArgs) -> String {
    let record = recorded_runtime(parsed);
    let runtime = match &record {
        Some(r) => r.runtime.clone(),
        None => match configured_runtime() {
            Ok(r) => r,
            Err(e) => return e.to_string(),
        },
    };
    if parsed.version {
        println!(
            "gpuctk nvidia-container-runtime version {}",
            env!("CARGO_PKG_VERSION")
        );
    }
    if let (Some(record), Some("delete")) = (&record, parsed.command.as_deref()) {
        // Where the config this call finds names the recorded runtime, the record adds
        // nothing: a delete that fails and is tried again would reach that runtime without
        // it. It goes first, and the call becomes the runtime, as every other call does
        // (waiting for the runtime cost a delete 0.15 ms more CPU, docs/performance.md).
        if configured_runtime().ok().as_ref() != Some(&record.runtime) {
            return delete_and_forget(args, record, parsed);
        }
        forget(record);
    }
    let err = std::process::Command::new(&runtime)
        .arg0(&runtime)
        .args(args)
        .exec();
    format!("exec {}: {err}", runtime.display())
}

/// `delete` of a container whose record names another runtime than the config this call
/// finds: the one call that waits for the runtime instead of becoming it, so that the record
/// goes with the container (one file per container ever created would otherwise pile up in
/// `/run` until the next boot) and stays while the container does. The record is removed when
/// the runtime deleted the container, or when its state (`<--root>/<id>`) is gone anyway;
/// exits with the runtime's status.
fn delete_and_forget(args: &[OsString], record: &Record, parsed: &RuncArgs) -> String {
    use std::os::unix::process::ExitStatusExt;
    // An engine that kills the runtime it started (a timeout) kills this process: the runtime
    // goes with it, as it would had we exec'd it (`run_tied`).
    let status = match crate::spawn::run_tied(&record.runtime, args) {
        Ok(s) => s,
        Err(e) => return format!("run {}: {e}", record.runtime.display()),
    };
    let gone = parsed
        .root
        .as_ref()
        .is_some_and(|root| !root.join(&record.id).exists());
    if status.success() || gone {
        forget(record);
    }
    std::process::exit(
        status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
    );
}

/// The runtime the config this call finds names, looked up in `PATH`.
fn configured_runtime() -> anyhow::Result<PathBuf> {
    find_runtime(&runtimes(), std::env::var_os("PATH").as_deref())
}

/// Remove `record`, and the temp link of a create killed while replacing an earlier record of
/// its id. A record left behind is only a stale file: the delete goes on either way.
fn forget(record: &Record) {
    let _ = std::fs::remove_file(&record.file);
    if let Ok(tmp) = gpuctk_atomicfile::symlink_temp(&record.file) {
        let _ = std::fs::remove_file(tmp);
    }
}

/// `[nvidia-container-runtime] runtimes` of the config the environment points at, or the
/// defaults when it cannot be read (see the module doc).
pub fn runtimes() -> Vec<String> {
    // A config whose place is unknown (an unreadable uid map) is one that cannot be read.
    let Ok((path, _required)) = config::config_path(&|k| std::env::var(k).ok()) else {
        return Config::default().runtimes;
    };
    let Ok(text) = config::read_text(&path) else {
        return Config::default().runtimes;
    };
    match scan_runtimes(&text) {
        Scan::Found(v) => v,
        Scan::Absent => Config::default().runtimes,
        // Forms the scanner does not follow (quoted keys, inline tables, escapes, multi-line
        // strings): the full parser decides, as it does for create.
        Scan::Unsure => config::parse(&text, &path)
            .map(|c| c.runtimes)
            .unwrap_or_else(|_| Config::default().runtimes),
    }
}

/// What the scanner made of a config's `runtimes` key.
#[derive(Debug, PartialEq, Eq)]
pub enum Scan {
    /// The key, an array of plain strings.
    Found(Vec<String>),
    /// Surely not there.
    Absent,
    /// A form the scanner does not follow; ask the full parser.
    Unsure,
}

const TABLE: &str = "nvidia-container-runtime";
const KEY: &str = "runtimes";

/// Find `[nvidia-container-runtime] runtimes` (or the dotted
/// `nvidia-container-runtime.runtimes` at the top) without parsing the rest of the document. A
/// value it cannot read elsewhere (a syntax error) is skipped to the end of its line; anything
/// that could change what the key means is [`Scan::Unsure`].
pub fn scan_runtimes(text: &str) -> Scan {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // A multi-line string can hold lines that look like tables or keys.
    if text.contains("\"\"\"") || text.contains("'''") {
        return Scan::Unsure;
    }
    let b = text.as_bytes();
    let mut i = 0;
    let mut table = String::new();
    let mut found: Option<Vec<String>> = None;
    loop {
        i = skip_blank(b, i, true);
        if i >= b.len() {
            break;
        }
        if b[i] == b'[' {
            let array = b.get(i + 1) == Some(&b'[');
            let end = line_end(b, i);
            let line = &text[i..end];
            let close = if array { "]]" } else { "]" };
            let open = if array { 2 } else { 1 };
            let Some(name) = line[open..].find(close).map(|e| &line[open..open + e]) else {
                // A broken header: we no longer know which table we are in.
                table = "?".into();
                i = end;
                continue;
            };
            let norm: String = name
                .chars()
                .filter(|c| !c.is_whitespace() && *c != '"' && *c != '\'')
                .collect();
            let ours = norm == TABLE || norm.starts_with("nvidia-container-runtime.");
            if ours && (array || name.contains(['"', '\''])) {
                return Scan::Unsure;
            }
            table = if array { format!("[[{norm}") } else { norm };
            i = end;
            continue;
        }
        // A key: up to '=' on this line.
        let end = line_end(b, i);
        let Some(eq) = text[i..end].find('=') else {
            i = end;
            continue;
        };
        let raw = &text[i..i + eq];
        let key: String = raw
            .chars()
            .filter(|c| !c.is_whitespace() && *c != '"' && *c != '\'')
            .collect();
        let relevant = (table == TABLE && key == KEY)
            || (table.is_empty()
                && key.strip_prefix(TABLE).and_then(|k| k.strip_prefix('.')) == Some(KEY));
        let suspicious = raw.contains(['"', '\''])
            && (key.ends_with(KEY) || key.starts_with(TABLE))
            || (table.is_empty() && key == TABLE);
        if suspicious && !relevant || (relevant && raw.contains(['"', '\''])) {
            return Scan::Unsure;
        }
        match value(b, i + eq + 1) {
            Some((next, strings)) => {
                if relevant {
                    match strings {
                        Some(v) if found.is_none() => found = Some(v),
                        _ => return Scan::Unsure,
                    }
                }
                i = next;
            }
            None if relevant => return Scan::Unsure,
            None => i = end,
        }
    }
    match found {
        Some(v) => Scan::Found(v),
        None => Scan::Absent,
    }
}

fn line_end(b: &[u8], i: usize) -> usize {
    b[i..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(b.len(), |p| i + p)
}

/// Skip spaces and tabs, comments, and newlines too when `newlines`.
fn skip_blank(b: &[u8], mut i: usize, newlines: bool) -> usize {
    while i < b.len() {
        match b[i] {
            b' ' | b'\t' | b'\r' => i += 1,
            b'\n' if newlines => i += 1,
            b'#' => i = line_end(b, i),
            _ => break,
        }
    }
    i
}

/// A basic (`"..."`) or literal (`'...'`) string at `b[i]`: where it ends, and its text when
/// it has no escapes.
fn string(b: &[u8], i: usize) -> Option<(usize, Option<String>)> {
    let q = b[i];
    let mut j = i + 1;
    let mut plain = true;
    while j < b.len() {
        match b[j] {
            b'\n' => return None,
            b'\\' if q == b'"' => {
                plain = false;
                j += 2;
                continue;
            }
            c if c == q => {
                let s = plain.then(|| String::from_utf8_lossy(&b[i + 1..j]).into_owned());
                return Some((j + 1, s));
            }
            _ => {}
        }
        j += 1;
    }
    None
}

/// The value starting at `b[i]` (after `=`): where its line ends, and its strings when it is
/// an array of plain strings. `None` for a value that does not end (a syntax error).
fn value(b: &[u8], i: usize) -> Option<(usize, Option<Vec<String>>)> {
    let i = skip_blank(b, i, false);
    let (end, strings) = match b.get(i)? {
        b'[' | b'{' => nested(b, i)?,
        b'"' | b'\'' => (string(b, i)?.0, None),
        b'\n' => return None,
        _ => (
            b[i..]
                .iter()
                .position(|&c| c == b'\n' || c == b'#')
                .map_or(b.len(), |p| i + p),
            None,
        ),
    };
    let rest = skip_blank(b, end, false);
    if rest < b.len() && b[rest] != b'\n' {
        return None;
    }
    Some((rest, strings))
}

/// An array or inline table at `b[i]`, across lines: where it ends, and its strings when it is
/// an array of plain strings only.
fn nested(b: &[u8], i: usize) -> Option<(usize, Option<Vec<String>>)> {
    let (open, close) = (b[i], if b[i] == b'[' { b']' } else { b'}' });
    let mut strings = (open == b'[').then(Vec::new);
    let mut j = i + 1;
    // In an array of strings, a string must come first and after each comma.
    let mut want_item = true;
    loop {
        j = skip_blank(b, j, open == b'[');
        let c = *b.get(j)?;
        if c == close {
            return Some((j + 1, strings));
        }
        match c {
            b'"' | b'\'' => {
                let (next, s) = string(b, j)?;
                match (s, want_item, strings.as_mut()) {
                    (Some(s), true, Some(v)) => v.push(s),
                    _ => strings = None,
                }
                want_item = false;
                j = next;
            }
            b'[' | b'{' => {
                j = nested(b, j)?.0;
                strings = None;
            }
            b',' if !want_item => {
                want_item = true;
                j += 1;
            }
            b'\n' => return None,
            _ => {
                strings = None;
                j += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runc::parse_runc_args;
    use std::path::Path;

    fn parse(args: &[&str]) -> RuncArgs {
        let v: Vec<OsString> = args.iter().map(OsString::from).collect();
        parse_runc_args(&v)
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// Issue 21: the record is a link made in one `symlink` (its folder made when missing),
    /// replaced whole by a later create of the id, and read back by the calls on the id.
    #[test]
    fn a_record_is_a_link_made_with_its_folder_and_replaced_whole() {
        let d = tempfile::tempdir().unwrap();
        let state = d.path().join("state");
        let state = state.to_str().unwrap();
        let create = parse(&["--root", state, "create", "--bundle", "/b", "c1"]);
        record_runtime(&create, Path::new("/bin/sh")).unwrap();
        let dir = d.path().join("state.gpuctk");
        assert_eq!(
            std::fs::read_link(dir.join("c1")).unwrap(),
            Path::new("/bin/sh")
        );
        record_runtime(&create, Path::new("/bin/true")).unwrap();
        assert_eq!(
            std::fs::read_link(dir.join("c1")).unwrap(),
            Path::new("/bin/true")
        );
        assert_eq!(names(&dir), ["c1"]);
        let r = recorded_runtime(&parse(&["--root", state, "state", "c1"])).unwrap();
        assert_eq!(r.runtime, Path::new("/bin/true"));
        assert_eq!(r.file, dir.join("c1"));
    }

    /// A regular file (what versions before issue 21 wrote) is still a record; a link or a
    /// file naming something that is not an executable file is none, and nothing at the
    /// record's name is opened or followed in a way that could block.
    #[test]
    fn earlier_file_records_still_count_and_other_things_are_no_record() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("state.gpuctk");
        std::fs::create_dir(&dir).unwrap();
        let state = d.path().join("state");
        let state = state.to_str().unwrap();
        let on = |id: &str| recorded_runtime(&parse(&["--root", state, "delete", id]));
        std::fs::write(dir.join("old"), "/bin/sh").unwrap();
        assert_eq!(on("old").unwrap().runtime, Path::new("/bin/sh"));
        let plain = d.path().join("plain");
        std::fs::write(&plain, "not a program").unwrap();
        let fifo = d.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        std::os::unix::fs::symlink(&plain, dir.join("to-plain")).unwrap();
        std::os::unix::fs::symlink(&fifo, dir.join("to-fifo")).unwrap();
        std::os::unix::fs::symlink(d.path().join("gone"), dir.join("dangling")).unwrap();
        std::fs::write(
            dir.join("names-plain"),
            plain.as_os_str().as_encoded_bytes(),
        )
        .unwrap();
        std::fs::create_dir(dir.join("a-dir")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            dir.join("a-fifo"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        for id in [
            "to-plain",
            "to-fifo",
            "dangling",
            "names-plain",
            "a-dir",
            "a-fifo",
            "none",
        ] {
            assert!(on(id).is_none(), "{id} taken for a record");
        }
    }

    fn found(v: &[&str]) -> Scan {
        Scan::Found(v.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn the_key_in_its_table() {
        let t = "disable-require = false\n[nvidia-container-cli]\nroot = \"/\"\n\n[nvidia-container-runtime]\ndebug = \"/var/log/x.log\" # c\nruntimes = [\"docker-runc\", 'runc', \"crun\",]  # trailing\nmode = \"auto\"\n[nvidia-container-runtime.modes.cdi]\nruntimes = [\"no\"]\n";
        assert_eq!(scan_runtimes(t), found(&["docker-runc", "runc", "crun"]));
        let t = "[ nvidia-container-runtime ]\nruntimes = [\n  \"/usr/bin/crun\", # first\n  \"runc\"\n]\n";
        assert_eq!(scan_runtimes(t), found(&["/usr/bin/crun", "runc"]));
        assert_eq!(
            scan_runtimes("nvidia-container-runtime.runtimes = [\"crun\"]\n"),
            found(&["crun"])
        );
        assert_eq!(
            scan_runtimes("[nvidia-container-runtime]\nruntimes = []"),
            found(&[])
        );
        // Windows line ends and a byte-order mark.
        assert_eq!(
            scan_runtimes(
                "\u{feff}[nvidia-container-runtime]\r\nruntimes = [\"a\",\r\n \"b\"]\r\n"
            ),
            found(&["a", "b"])
        );
    }

    #[test]
    fn absent_or_elsewhere() {
        assert_eq!(scan_runtimes(""), Scan::Absent);
        let t = "[gpuctk]\nruntimes = [\"x\"]\n[nvidia-container-runtime]\nmode = \"cdi\"\nm = [\n[1, 2],\n]\n[other]\nruntimes = [\"y\"]\n";
        assert_eq!(scan_runtimes(t), Scan::Absent);
        // A multi-line array whose line looks like our table.
        let t = "x = [\n[nvidia-container-runtime],\n]\nruntimes = [\"y\"]\n";
        assert_eq!(scan_runtimes(t), Scan::Absent);
    }

    #[test]
    fn syntax_errors_elsewhere_do_not_hide_it() {
        let t =
            "[nvidia-container-runtime]\nmode = \"auto\nruntimes = [\"crun\"]\n[gpuctk\nx = = 1\n";
        assert_eq!(scan_runtimes(t), found(&["crun"]));
        let t = "garbage line\n[nvidia-container-cli]\nroot = [\"a\"\n[nvidia-container-runtime]\nruntimes = [\"crun\"]\n";
        assert_eq!(scan_runtimes(t), found(&["crun"]));
    }

    #[test]
    fn unusual_forms_go_to_the_full_parser() {
        for t in [
            "[\"nvidia-container-runtime\"]\nruntimes = [\"a\"]\n",
            "[nvidia-container-runtime]\n\"runtimes\" = [\"a\"]\n",
            "nvidia-container-runtime = { runtimes = [\"a\"] }\n",
            "[nvidia-container-runtime]\nruntimes = [\"a\\u0062\"]\n",
            "[nvidia-container-runtime]\nruntimes = \"runc\"\n",
            "[nvidia-container-runtime]\nruntimes = [\"a\"]\nruntimes = [\"b\"]\n",
            "[nvidia-container-runtime]\nruntimes = [\"a\" \"b\"]\n",
            "[nvidia-container-runtime]\nruntimes = [\"a\"\n",
            "[nvidia-container-runtime]\nruntimes = [1]\n",
            "x = \"\"\"\n[nvidia-container-runtime]\nruntimes = [\"a\"]\n\"\"\"\n",
            "[[nvidia-container-runtime]]\nruntimes = [\"a\"]\n",
        ] {
            assert_eq!(scan_runtimes(t), Scan::Unsure, "{t}");
        }
    }

    /// Wherever the scanner answers for a valid document, it agrees with the full parser.
    #[test]
    fn agrees_with_the_parser() {
        for t in [
            "[nvidia-container-runtime]\nruntimes = [\"docker-runc\", \"runc\"]\n",
            "[nvidia-container-runtime]\nruntimes = [ 'a' , \"b\" , ]\n[gpuctk]\nhook-path = \"/x\"\n",
            "nvidia-container-runtime.runtimes = [\"crun\"]\n",
            "[nvidia-container-cli]\nroot = \"/\"\n",
            "a = { b = [\"c\"] }\n[nvidia-container-runtime]\nruntimes = [\"d\"] # e\n",
        ] {
            let full = config::parse(t, std::path::Path::new("c.toml")).unwrap();
            let want = match scan_runtimes(t) {
                Scan::Found(v) => v,
                Scan::Absent => Config::default().runtimes,
                Scan::Unsure => continue,
            };
            assert_eq!(full.runtimes, want, "{t}");
        }
    }
}
