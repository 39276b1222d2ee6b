//! runc's command line as the shim sees it (runc and crun share its grammar): the command, the
//! bundle, the log file and the container id; and where the low-level runtime is.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::bail;

/// runc's (and crun's) global flags that take a value; the command is the first word that is
/// not one of these or their value.
const VALUE_FLAGS: &[&str] = &[
    "--log",
    "--log-format",
    "--root",
    "--criu",
    "--rootless",
    "--cgroup-manager",
];

/// What we need to know of a runc command line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RuncArgs {
    /// The subcommand (`create`, `start`, ...).
    pub command: Option<String>,
    /// `--bundle`/`-b` of create/run.
    pub bundle: Option<PathBuf>,
    /// The global `--log FILE`.
    pub log: Option<PathBuf>,
    /// `--log-format json`.
    pub log_json: bool,
    /// `--version`/`-v` anywhere before the command.
    pub version: bool,
    /// `--help`/`-h` after the command: runc prints the command's help.
    pub help: bool,
    /// The global `--root` (the runtime's state directory).
    pub root: Option<PathBuf>,
    /// Where the command is in the argv.
    pub command_index: Option<usize>,
    /// The container id: the command's first positional argument, for a command that takes
    /// one (see [`Grammar`]). Not there, or not UTF-8: `None`.
    pub id: Option<String>,
    /// `--detach`/`-d` of the command (`run -d`, `--detach=true`).
    pub detach: bool,
}

/// A command's flags as runc (urfave/cli over Go's `flag`: `-name` or `--name`, a value after
/// `=` or in the next word) and crun (argp: also a value attached to a letter, `-uroot`, and
/// letters in a cluster, `-td`) parse them, from their sources and `CMD --help`. Every flag
/// not listed as taking a value is a switch: an unknown one is taken for a switch, as no
/// runtime takes a value for it anyway.
struct Grammar {
    /// Long flags that take a value.
    long: &'static [&'static str],
    /// Letters that take a value.
    short: &'static [u8],
    /// Letters that are switches (what may come before a value letter in a cluster).
    switches: &'static [u8],
    /// Whether the first positional argument is a container id.
    has_id: bool,
    /// Flags stop at the id (runc's `exec` does not reorder its arguments: what follows the id
    /// is the command to run; the other commands take flags after it too).
    stops_at_id: bool,
}

/// The grammar of `command`; an unknown command has no id (nothing to look up for it).
fn grammar(command: &str) -> Grammar {
    let g = |long, short, switches| Grammar {
        long,
        short,
        switches,
        has_id: true,
        stops_at_id: false,
    };
    match command {
        "checkpoint" => g(
            &[
                "image-path",
                "work-path",
                "parent-path",
                "status-fd",
                "page-server",
                "manage-cgroups-mode",
                "empty-ns",
            ],
            b"",
            b"",
        ),
        // crun's `-f`/`--config` is the config file's name.
        "create" | "run" => g(
            &[
                "bundle",
                "console-socket",
                "pidfd-socket",
                "pid-file",
                "preserve-fds",
                "config",
            ],
            b"bf",
            b"d",
        ),
        // crun's `-r`/`--regex`: a pattern, not an id.
        "delete" => g(&[], b"", b"fr"),
        "events" => g(&["interval"], b"", b""),
        "exec" => Grammar {
            stops_at_id: true,
            ..g(
                &[
                    "console-socket",
                    "pidfd-socket",
                    "cwd",
                    "env",
                    "user",
                    "additional-gids",
                    "process",
                    "pid-file",
                    "process-label",
                    "apparmor",
                    "cap",
                    "preserve-fds",
                    "cgroup",
                ],
                b"eugpc",
                b"td",
            )
        },
        // The second positional is the signal.
        "kill" => g(&[], b"", b"ar"),
        "pause" | "resume" | "start" | "state" => g(&[], b"", b""),
        "ps" => g(&["format"], b"f", b""),
        "restore" => g(
            &[
                "console-socket",
                "image-path",
                "work-path",
                "manage-cgroups-mode",
                "bundle",
                "pid-file",
                "empty-ns",
                "lsm-profile",
                "lsm-mount-context",
            ],
            b"b",
            b"d",
        ),
        "update" => g(
            &[
                "resources",
                "blkio-weight",
                "cpu-period",
                "cpu-quota",
                "cpu-burst",
                "cpu-share",
                "cpu-rt-period",
                "cpu-rt-runtime",
                "cpu-idle",
                "cpuset-cpus",
                "cpuset-mems",
                "kernel-memory",
                "kernel-memory-tcp",
                "memory",
                "memory-reservation",
                "memory-swap",
                "pids-limit",
                "l3-cache-schema",
                "mem-bw-schema",
            ],
            b"r",
            b"",
        ),
        // `list`, `spec`, `features` and anything else: no container id.
        _ => Grammar {
            has_id: false,
            ..g(&["format", "bundle", "file"], b"fb", b"q")
        },
    }
}

/// Go's `strconv.ParseBool` false values (`--detach=false`).
fn is_false(v: &[u8]) -> bool {
    matches!(v, b"0" | b"f" | b"F" | b"false" | b"FALSE" | b"False")
}

fn flag_value<'a>(
    args: &'a [OsString],
    i: usize,
    name: &str,
) -> Option<(Option<&'a OsStr>, usize)> {
    let a = args[i].to_str()?;
    // `--name` or `-name` (runc's flags take either), then nothing or `=value`. Read in place:
    // every call the shim passes on parses its argv (formatting the four spellings of each
    // flag cost a create 31,000 instructions).
    let rest = a.strip_prefix("--").or_else(|| a.strip_prefix('-'))?;
    let rest = rest.strip_prefix(name.trim_start_matches('-'))?;
    if rest.is_empty() {
        return Some((args.get(i + 1).map(OsString::as_os_str), 2));
    }
    rest.strip_prefix('=').map(|v| (Some(OsStr::new(v)), 1))
}

/// Parse runc's argv (without argv[0]): the global flags up to the command, then the
/// command's flags and its container id by the command's [`Grammar`].
pub fn parse_runc_args(args: &[OsString]) -> RuncArgs {
    let mut out = RuncArgs::default();
    let mut i = 0;
    while i < args.len() && out.command.is_none() {
        let Some(a) = args[i].to_str() else {
            i += 1;
            continue;
        };
        if a == "--version" || a == "-v" || a == "-version" {
            out.version = true;
            i += 1;
            continue;
        }
        if let Some(flag) = VALUE_FLAGS
            .iter()
            .find(|f| flag_value(args, i, f).is_some())
        {
            let (v, step) = flag_value(args, i, flag).unwrap();
            match *flag {
                "--log" => out.log = v.map(PathBuf::from),
                "--root" => out.root = v.map(PathBuf::from),
                "--log-format" => out.log_json = v.is_some_and(|v| v == "json"),
                _ => {}
            }
            i += step;
            continue;
        }
        if !a.starts_with('-') {
            out.command = Some(a.to_string());
            out.command_index = Some(i);
        }
        i += 1;
    }
    let Some(command) = &out.command else {
        return out;
    };
    let g = grammar(command);
    let mut seen_id = false;
    let mut only_positionals = false;
    while i < args.len() {
        let a = args[i].as_bytes();
        i += 1;
        if !only_positionals && a == b"--" {
            only_positionals = true;
            continue;
        }
        // `-` alone is a word, as for both parsers.
        if only_positionals || a.len() < 2 || a[0] != b'-' {
            if !seen_id {
                seen_id = true;
                if g.has_id {
                    out.id = std::str::from_utf8(a).ok().map(str::to_string);
                }
                if g.stops_at_id {
                    break;
                }
            }
            continue;
        }
        let single = a[1] != b'-';
        let body = if single { &a[1..] } else { &a[2..] };
        let (name, inline) = match body.iter().position(|&b| b == b'=') {
            Some(e) => (&body[..e], Some(&body[e + 1..])),
            None => (body, None),
        };
        let takes_value = g.long.iter().any(|l| l.as_bytes() == name)
            || (name.len() == 1 && g.short.contains(&name[0]));
        if takes_value {
            let value = match inline {
                Some(v) => Some(v),
                None => {
                    i += 1;
                    args.get(i - 1).map(|v| v.as_bytes())
                }
            };
            if matches!(name, b"bundle" | b"b") {
                out.bundle = value.map(|v| PathBuf::from(OsStr::from_bytes(v)));
            }
            continue;
        }
        match name {
            b"help" | b"h" => out.help = true,
            b"detach" | b"d" => out.detach = !inline.is_some_and(is_false),
            // argp's letters: switches, then perhaps one letter whose value is the rest of the
            // word or, at its end, the next word (`-tu 0`, `-uroot`).
            _ if single && inline.is_none() && g.switches.contains(&name[0]) => {
                for (k, c) in name.iter().enumerate() {
                    if g.short.contains(c) {
                        i += usize::from(k + 1 == name.len());
                        break;
                    }
                    if !g.switches.contains(c) {
                        break;
                    }
                    if *c == b'd' {
                        out.detach = true;
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The low-level runtime: the first of `names` that resolves to an executable that is not us.
/// A bare name is looked up in `path_env`, then the standard directories, stopping at the first
/// hit; "us" is the same file (device and inode) as `/proc/self/exe`, so a link to the shim
/// under a runtime's name is skipped without canonicalizing anything.
pub fn find_runtime(names: &[String], path_env: Option<&OsStr>) -> anyhow::Result<PathBuf> {
    use gpuctk_host::catalog::STANDARD_PATH;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let me = std::cell::OnceCell::new();
    let usable = |c: &Path| {
        let Ok(md) = std::fs::metadata(c) else {
            return false;
        };
        if !md.is_file() || md.permissions().mode() & 0o111 == 0 {
            return false;
        }
        let me = me.get_or_init(|| {
            std::fs::metadata("/proc/self/exe")
                .ok()
                .map(|m| (m.dev(), m.ino()))
        });
        *me != Some((md.dev(), md.ino()))
    };
    for name in names {
        if name.contains('/') {
            if usable(Path::new(name)) {
                return Ok(PathBuf::from(name));
            }
            continue;
        }
        let dirs = path_env
            .into_iter()
            .flat_map(std::env::split_paths)
            .chain(STANDARD_PATH.iter().map(PathBuf::from));
        for d in dirs {
            let c = d.join(name);
            if usable(&c) {
                return Ok(c);
            }
        }
    }
    bail!(
        "no low-level runtime found: none of {:?} ([nvidia-container-runtime] runtimes) is an executable in PATH; install runc or crun",
        names
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `flag_value` reads a flag in place; it answered the same by comparing each argument with
    /// the four spellings of each flag written out (`--f`, `-f`, `--f=`, `-f=`), the oracle here.
    #[test]
    fn flags_read_in_place_as_their_four_spellings_say() {
        fn spelled<'a>(
            args: &'a [OsString],
            i: usize,
            name: &str,
        ) -> Option<(Option<&'a OsStr>, usize)> {
            let a = args[i].to_str()?;
            let n = name.trim_start_matches('-');
            for d in [format!("--{n}"), format!("-{n}")] {
                if a == d {
                    return Some((args.get(i + 1).map(OsString::as_os_str), 2));
                }
                if let Some(v) = a.strip_prefix(&format!("{d}=")) {
                    return Some((Some(OsStr::new(v)), 1));
                }
            }
            None
        }
        let words = [
            "--root",
            "-root",
            "---root",
            "root",
            "--root=",
            "--root=/r",
            "-root=/r=x",
            "--rootx",
            "--roo",
            "--root =/r",
            "-",
            "--",
            "--log",
            "--log-format=json",
            "--log-format",
            "-b",
            "-b=/c",
            "--bundle",
            "--b",
            "",
        ];
        for w in words {
            for next in [None, Some("/next")] {
                let mut args = vec![OsString::from(w)];
                args.extend(next.map(OsString::from));
                for f in VALUE_FLAGS.iter().chain(&["--bundle", "-b", "b"]) {
                    assert_eq!(flag_value(&args, 0, f), spelled(&args, 0, f), "{w:?} {f}");
                }
            }
        }
    }
}
