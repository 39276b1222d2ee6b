//! The Debian package (issue 13 §1): `scripts/package.sh` builds it (one release build per run,
//! reused by cargo while nothing changed), its metadata and contents are checked, and it is
//! installed with `dpkg -i` on this machine, used by docker and podman, removed and purged.
//!
//! The install runs in a private mount namespace whose `/usr`, `/etc` and `/var` are overlays of
//! the machine's own (writes land in the test's temp dir) and whose `/run` is a tmpfs: dpkg works
//! on the machine's real package database and files, while the tests running at the same time
//! never see `/usr/bin/nvidia-container-runtime` appear (some assert it is not in `PATH`) and a
//! failed run leaves nothing behind on the host. Completions and man pages are also checked
//! straight from the test build's `completion` and `man` commands.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::util::*;

const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const IMAGE: &str = "gpuctk-deb-test:latest";

/// Our executables: the binary and every name it is linked under.
const NAMES: &[&str] = &[
    "gpuctk",
    "nvidia-ctk",
    "nvidia-container-runtime",
    "nvidia-container-runtime.cdi",
    "nvidia-container-runtime.legacy",
    "nvidia-container-runtime-hook",
    "nvidia-container-toolkit",
    "nvidia-cdi-hook",
    "nvidia-container-cli",
];

/// NVIDIA's packages that ours takes the place of.
const NVIDIA_PACKAGES: &[&str] = &[
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "nvidia-container-toolkit-cdi-refresh",
    "libnvidia-container-tools",
    "nvidia-container-runtime",
    "nvidia-container-runtime-hook",
];

const SERVICE: &str = "/usr/lib/systemd/system/gpuctk-cdi-refresh.service";
const PATH_UNIT: &str = "/usr/lib/systemd/system/gpuctk-cdi-refresh.path";
const UDEV_RULE: &str = "/usr/lib/udev/rules.d/99-gpuctk-nvidia.rules";
const CONFIG: &str = "/etc/nvidia-container-runtime/config.toml";
/// Where postinst records the checksum of the config.toml it wrote.
const CONFIG_MARK: &str = "/var/lib/gpuctk/config.toml.sha256";
const SCRIPTS: &[&str] = &["preinst", "postinst", "prerm", "postrm"];

pub(crate) struct Out {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

pub(crate) fn out(c: &mut Command) -> Out {
    let o = c
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{c:?}: {e}"));
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

pub(crate) fn must(c: &mut Command) -> Out {
    let what = format!("{c:?}");
    let r = out(c);
    assert_eq!(
        r.code, 0,
        "{what} failed:\nstdout: {}\nstderr: {}",
        r.stdout, r.stderr
    );
    r
}

pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The packages, the .deb and the RPM, built once per test run by one `scripts/package.sh` into
/// the tests' target dir (its static build is kept there, so a later run without changes only
/// repackages).
fn packages() -> &'static (PathBuf, PathBuf) {
    static PACKAGES: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    PACKAGES.get_or_init(|| {
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let mut c = package_sh(&tmp.join("packages"));
        c.args(["--deb", "--rpm"]);
        let r = must(&mut c);
        let printed: Vec<PathBuf> = r.stdout.lines().map(|l| PathBuf::from(l.trim())).collect();
        let find = |ext: &str| -> PathBuf {
            printed
                .iter()
                .find(|p| p.extension().is_some_and(|e| e == ext) && p.is_file())
                .unwrap_or_else(|| panic!("package.sh printed no .{ext}: {}", r.stdout))
                .clone()
        };
        (find("deb"), find("rpm"))
    })
}

/// `scripts/package.sh --out OUT`, building in the tests' target dir with the tests' cargo.
pub(crate) fn package_sh(out: &Path) -> Command {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let target = tmp.parent().expect("target dir");
    let mut c = Command::new(repo().join("scripts/package.sh"));
    c.arg("--out").arg(out).env("CARGO_TARGET_DIR", target);
    if let Some(cargo) = std::env::var_os("CARGO").or(option_env!("CARGO").map(Into::into)) {
        c.env("CARGO", cargo);
    }
    c
}

pub(crate) fn deb() -> &'static Path {
    &packages().0
}

/// The .deb's files (`dpkg-deb -x`), unpacked once per test run next to the packages, for the
/// tests that only read them (ship's, arm64's).
pub(crate) fn unpacked_deb() -> &'static Path {
    static UNPACKED: OnceLock<PathBuf> = OnceLock::new();
    UNPACKED.get_or_init(|| {
        let x = Path::new(env!("CARGO_TARGET_TMPDIR")).join("deb-unpacked");
        match fs::remove_dir_all(&x) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("{}: {e}", x.display()),
        }
        must(Command::new("dpkg-deb").arg("-x").arg(deb()).arg(&x));
        x
    })
}

/// The RPM built with the .deb (same files, same binary).
pub(crate) fn rpm() -> &'static Path {
    &packages().1
}

fn dpkg_deb(args: &[&str]) -> String {
    must(Command::new("dpkg-deb").args(args).arg(deb())).stdout
}

/// Subcommand names listed in `--help`'s "Commands:" section (clap's layout), `help` left out.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect()
}

/// A dir holding `name` as a link to the test binary, for the personalities.
fn named(t: &TestDir, name: &str) -> PathBuf {
    let dir = t.join("bin");
    fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    if !p.exists() {
        symlink(GPUCTK, &p).unwrap();
    }
    p
}

// ------------------------------------------------------------------ completions and man pages

#[test]
fn completion_scripts_parse_and_complete() {
    let t = TestDir::new();
    for name in ["gpuctk", "nvidia-ctk"] {
        let bin = named(&t, name);
        let script = |shell: &str| -> PathBuf {
            let r = must(Command::new(&bin).args(["completion", shell]));
            let p = t.join(&format!("{name}.{shell}"));
            fs::write(&p, &r.stdout).unwrap();
            p
        };
        // bash: the script parses, and its function completes `NAME cdi ` to cdi's commands.
        let bash = script("bash");
        must(Command::new("bash").arg("-n").arg(&bash));
        let r = must(Command::new("bash").arg("-c").arg(format!(
            r#"source "$0"; COMP_WORDS=({name} cdi ''); COMP_CWORD=2; COMP_LINE="{name} cdi "; COMP_POINT=${{#COMP_LINE}}
               f=$(complete -p {name} | sed -n 's/.*-F \([^ ]*\).*/\1/p'); "$f" {name} '' cdi; printf '%s\n' "${{COMPREPLY[@]}}""#
        )).arg(&bash));
        let words: BTreeSet<&str> = r.stdout.split_whitespace().collect();
        for w in ["generate", "list", "transform", "validate"] {
            assert!(
                words.contains(w),
                "bash: {name} cdi <TAB> lacks {w}: {words:?}"
            );
        }
        // zsh: parses, and is a completion function for this name.
        let zsh = script("zsh");
        must(Command::new("zsh").arg("-n").arg(&zsh));
        let text = fs::read_to_string(&zsh).unwrap();
        assert!(text.starts_with(&format!("#compdef {name}")), "{text:.80}");
        // fish: parses, and fish itself completes `NAME runtime ` with it.
        let fish = script("fish");
        must(Command::new("fish").arg("--no-execute").arg(&fish));
        let r = must(Command::new("fish").arg("-c").arg(format!(
            "source {}; complete -C '{name} runtime '",
            fish.display()
        )));
        for w in ["configure", "unconfigure", "exec"] {
            assert!(
                r.stdout.lines().any(|l| l.split('\t').next() == Some(w)),
                "fish: {name} runtime <TAB> lacks {w}: {}",
                r.stdout
            );
        }
    }
    // An unknown shell is a one-line usage error.
    let r = run(&["completion", "tcsh"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
}

/// `man -l PAGE` as plain text, with roff's warnings on: none may appear.
fn render(page: &Path) -> String {
    let r = must(
        Command::new("man")
            .args(["--warnings=all", "-E", "UTF-8", "-l"])
            .arg(page)
            .current_dir(page.parent().and_then(Path::parent).unwrap())
            .env("MANWIDTH", "200")
            .env("MAN_KEEP_FORMATTING", "0")
            .env("PAGER", "cat"),
    );
    assert!(
        r.stderr.trim().is_empty(),
        "{}: roff warnings:\n{}",
        page.display(),
        r.stderr
    );
    // Overstrike bold and underline off, for plain matching.
    let mut text = String::new();
    let mut chars = r.stdout.chars().peekable();
    while let Some(c) = chars.next() {
        if chars.peek() == Some(&'\u{8}') {
            chars.next();
            continue;
        }
        text.push(c);
    }
    text.replace(['\u{2010}', '\u{2212}'], "-")
}

/// Each command of `bin`'s tree (`bin`'s help, then each subcommand's) has its page, and each
/// page names every subcommand of its command.
fn check_tree(bin: &Path, name: &str, mandir: &Path, path: &mut Vec<String>) -> usize {
    let mut args: Vec<String> = path.clone();
    args.push("--help".into());
    let help = must(Command::new(bin).args(&args)).stdout;
    let page = if path.is_empty() {
        mandir.join(format!("{name}.1"))
    } else {
        mandir.join(format!("{name}-{}.1", path.join("-")))
    };
    assert!(
        page.is_file(),
        "no page {} for `{name} {}`",
        page.display(),
        path.join(" ")
    );
    let text = render(&page);
    let subs = subcommands(&help);
    let mut n = 1;
    for sub in &subs {
        assert!(
            text.contains(&format!("{name}-{}", {
                let mut p = path.clone();
                p.push(sub.clone());
                p.join("-")
            })),
            "{} does not name its subcommand {sub}:\n{text}",
            page.display()
        );
        path.push(sub.clone());
        n += check_tree(bin, name, mandir, path);
        path.pop();
    }
    n
}

#[test]
fn man_pages_render_and_name_every_command() {
    let t = TestDir::new();
    // man1, so that the `.so man1/PAGE` of an alias page resolves from its parent.
    let dir = t.join("man/man1");
    let r = ok(&["man", "--output", dir.to_str().unwrap()]);
    let pages = names_in(&dir);
    assert!(
        r.stdout
            .contains(&format!("wrote {} man pages", pages.len())),
        "{}",
        r.stdout
    );
    let mut checked = 0;
    for name in ["gpuctk", "nvidia-ctk", "nvidia-cdi-hook"] {
        checked += check_tree(&named(&t, name), name, &dir, &mut Vec::new());
    }
    // The hand-parsed personalities: the page holds what --help prints.
    for name in ["nvidia-container-runtime-hook", "nvidia-container-cli"] {
        let help = must(Command::new(named(&t, name)).arg("--help")).stdout;
        let text = render(&dir.join(format!("{name}.1")));
        for line in help
            .lines()
            .skip(1)
            .map(str::trim)
            .filter(|l| !l.is_empty())
        {
            assert!(text.contains(line), "{name}.1 lacks {line:?}:\n{text}");
        }
        checked += 1;
    }
    for name in [
        "nvidia-container-runtime",
        "nvidia-container-runtime.cdi",
        "nvidia-container-runtime.legacy",
        "nvidia-container-toolkit",
    ] {
        let text = render(&dir.join(format!("{name}.1")));
        assert!(text.contains("NAME"), "{name}.1:\n{text}");
        checked += 1;
    }
    assert!(
        render(&dir.join("nvidia-container-runtime.cdi.1")).contains("mode = \"cdi\""),
        "the .cdi page says what it forces"
    );
    assert_eq!(checked, pages.len(), "pages no command owns: {pages:?}");
    // `man` is for packagers: not in the help, not given a page.
    let help = ok(&["--help"]).stdout;
    assert!(
        subcommands(&help).contains(&"completion".to_string()),
        "{help}"
    );
    assert!(!subcommands(&help).contains(&"man".to_string()), "{help}");
    // A directory that cannot be made: one line naming it, nothing written.
    let file = t.join("plain-file");
    fs::write(&file, "x").unwrap();
    let sub = file.join("man");
    fails(
        &["man", "--output", sub.to_str().unwrap()],
        &["--output", "plain-file"],
    );
}

// ------------------------------------------------------------------ the package, unpacked

/// A udev rule line as `(key, op, value)` triples; panics on anything udev would reject.
fn udev_line(line: &str) -> Vec<(String, String, String)> {
    const MATCH: &[&str] = &[
        "ACTION",
        "SUBSYSTEM",
        "KERNEL",
        "DRIVER",
        "ATTR",
        "ENV",
        "TAG",
    ];
    const ASSIGN: &[&str] = &["RUN", "TAG", "ENV", "SYMLINK", "MODE", "OWNER", "GROUP"];
    let mut rest = line.trim();
    let mut fields = Vec::new();
    while !rest.is_empty() {
        let key_end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '{' || c == '}'))
            .unwrap_or_else(|| panic!("{line}: no operator after {rest:?}"));
        let key = &rest[..key_end];
        rest = &rest[key_end..];
        let op = ["==", "!=", "+=", "-=", ":=", "="]
            .into_iter()
            .find(|op| rest.starts_with(op))
            .unwrap_or_else(|| panic!("{line}: bad operator at {rest:?}"));
        rest = &rest[op.len()..];
        assert!(rest.starts_with('"'), "{line}: value of {key} not quoted");
        let close = rest[1..]
            .find('"')
            .unwrap_or_else(|| panic!("{line}: unterminated value of {key}"));
        let value = &rest[1..1 + close];
        rest = rest[close + 2..].trim_start();
        let base = key.split('{').next().unwrap();
        let known = if op == "==" || op == "!=" {
            MATCH.contains(&base)
        } else {
            ASSIGN.contains(&base)
        };
        assert!(known, "{line}: {key}{op} is not a udev key/operator pair");
        if key.contains('{') {
            assert!(key.ends_with('}'), "{line}: {key}");
        }
        fields.push((key.to_string(), op.to_string(), value.to_string()));
        if let Some(r) = rest.strip_prefix(',') {
            rest = r.trim_start();
        } else {
            assert!(rest.is_empty(), "{line}: missing comma before {rest:?}");
        }
    }
    fields
}

#[test]
fn deb_metadata_and_contents() {
    let info = dpkg_deb(&["-I"]);
    let field = |name: &str| -> String {
        info.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("no {name} in:\n{info}"))
            .to_string()
    };
    assert_eq!(field("Package"), "gpuctk");
    let version = ok(&["--version"]).stdout;
    assert_eq!(format!("gpuctk {}", field("Version")), version.trim());
    let arch = must(Command::new("dpkg").arg("--print-architecture")).stdout;
    assert_eq!(field("Architecture"), arch.trim());
    assert_eq!(
        deb().file_name().unwrap().to_str().unwrap(),
        format!("gpuctk_{}_{}.deb", field("Version"), arch.trim())
    );
    // The binary is static: no libc6 or any other dependency.
    assert!(
        !info.lines().any(|l| l.trim().starts_with("Depends:")),
        "{info}"
    );
    for rel in ["Conflicts", "Replaces", "Provides"] {
        let listed: BTreeSet<String> = field(rel)
            .split(',')
            .map(|s| s.trim().to_string())
            .collect();
        for p in NVIDIA_PACKAGES {
            assert!(listed.contains(*p), "{rel} lacks {p}: {listed:?}");
        }
        assert!(
            !listed.contains("libnvidia-container1"),
            "{rel}: the library stays (nothing of ours replaces it)"
        );
    }
    for script in SCRIPTS {
        assert!(info.contains(&format!(" {script} ")), "no {script}: {info}");
    }
    let t = TestDir::new();
    let x = t.join("x");
    must(Command::new("dpkg-deb").arg("-R").arg(deb()).arg(&x));
    // No conffile: NVIDIA's postinst makes config.toml and no package owns it, so a conffile of
    // that path makes dpkg ask on every swap (issue 17); ours is made by postinst too.
    assert!(
        !x.join("DEBIAN/conffiles").exists(),
        "{:?}",
        fs::read_to_string(x.join("DEBIAN/conffiles"))
    );
    assert!(!x.join(&CONFIG[1..]).exists(), "config.toml is shipped");
    for script in SCRIPTS {
        must(
            Command::new("sh")
                .arg("-n")
                .arg(x.join("DEBIAN").join(script)),
        );
    }
    let listing = dpkg_deb(&["-c"]);
    let entry = |path: &str| -> String {
        listing
            .lines()
            .find(|l| l.ends_with(&format!(".{path}")) || l.contains(&format!(".{path} -> ")))
            .unwrap_or_else(|| panic!("{path} not in the package:\n{listing}"))
            .to_string()
    };
    let e = entry("/usr/bin/gpuctk");
    assert!(e.starts_with("-rwxr-xr-x root/root"), "{e}");
    for name in &NAMES[1..] {
        let e = entry(&format!("/usr/bin/{name}"));
        assert!(e.starts_with('l') && e.ends_with(" -> gpuctk"), "{e}");
    }
    for path in [
        SERVICE,
        PATH_UNIT,
        UDEV_RULE,
        "/usr/share/doc/gpuctk/copyright",
        "/usr/share/man/man1/nvidia-ctk.1.gz",
        "/usr/share/man/man1/nvidia-ctk-cdi-generate.1.gz",
        "/usr/share/man/man1/gpuctk.1.gz",
        "/usr/share/man/man1/nvidia-container-runtime.1.gz",
        "/usr/share/man/man1/nvidia-container-cli.1.gz",
        "/usr/share/man/man1/nvidia-cdi-hook.1.gz",
        "/usr/share/bash-completion/completions/gpuctk",
        "/usr/share/bash-completion/completions/nvidia-ctk",
        "/usr/share/zsh/vendor-completions/_nvidia-ctk",
        "/usr/share/fish/vendor_completions.d/nvidia-ctk.fish",
    ] {
        let e = entry(path);
        assert!(e.contains(" root/root "), "{e}");
    }
    // The package build has no test fakes, so no pages for them either.
    assert!(!listing.contains("mock-host"), "{listing}");
    let bin = x.join("usr/bin/gpuctk");
    let headers = must(Command::new("readelf").args(["-lW", "-d"]).arg(&bin)).stdout;
    assert!(!headers.contains("program interpreter"), "{headers}");
    assert!(!headers.contains("(NEEDED)"), "{headers}");
    // The NVML helper is the one dynamically linked program: NVML can only be dlopen'ed.
    let e = entry("/usr/libexec/gpuctk/gpuctk-nvml");
    assert!(e.starts_with("-rwxr-xr-x root/root"), "{e}");
    let helper = x.join("usr/libexec/gpuctk/gpuctk-nvml");
    let headers = must(Command::new("readelf").args(["-lW", "-d"]).arg(&helper)).stdout;
    assert!(headers.contains("program interpreter"), "{headers}");
    assert!(headers.contains("[libc.so.6]"), "{headers}");
    let help = must(Command::new(&bin).arg("--help")).stdout;
    assert!(!help.contains("mock-host"), "{help}");
    // md5sums cover every regular file.
    must(
        Command::new("md5sum")
            .args(["--check", "--quiet", "DEBIAN/md5sums"])
            .current_dir(&x),
    );

    // The units run what the package ships, by absolute path: the device nodes first (a
    // failure there left to generate, "-"), then generate, writing where
    // NVIDIA_CTK_CDI_OUTPUT_FILE_PATH says: the unit's default, which the env file, read after
    // it, overrides (no --output to override the variable).
    let service = fs::read_to_string(x.join(&SERVICE[1..])).unwrap();
    let execs: Vec<&str> = service
        .lines()
        .filter_map(|l| l.strip_prefix("ExecStart="))
        .collect();
    assert_eq!(execs.len(), 2, "{service}");
    assert!(
        execs[0].starts_with("-/bin/sh -c 'exec /usr/bin/nvidia-ctk system create-device-nodes ")
            && execs[0].contains(" --load-kernel-modules "),
        "{}",
        execs[0]
    );
    assert_eq!(execs[1], "/usr/bin/nvidia-ctk cdi generate");
    let at = |line: &str| {
        service
            .lines()
            .position(|l| l.starts_with(line))
            .unwrap_or_else(|| panic!("no {line}"))
    };
    assert!(
        at("Environment=NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/var/run/cdi/nvidia.yaml")
            < at("EnvironmentFile=-/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"),
        "{service}"
    );
    for line in [
        "Type=oneshot",
        "Restart=on-failure",
        "WantedBy=multi-user.target",
    ] {
        assert!(
            service.lines().any(|l| l == line),
            "{line} missing:\n{service}"
        );
    }
    let path_unit = fs::read_to_string(x.join(&PATH_UNIT[1..])).unwrap();
    assert!(
        path_unit.contains("Unit=gpuctk-cdi-refresh.service"),
        "{path_unit}"
    );
    // The udev rule: udev's syntax (this udev has no `udevadm verify`), programs we ship, a
    // unit we ship.
    let rules = fs::read_to_string(x.join(&UDEV_RULE[1..])).unwrap();
    let mut runs = 0;
    let mut wants = 0;
    for line in rules
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        let fields = udev_line(line);
        let get = |k: &str| fields.iter().find(|f| f.0 == k).map(|f| f.2.clone());
        assert_eq!(get("ACTION").as_deref(), Some("add"), "{line}");
        assert_eq!(get("SUBSYSTEM").as_deref(), Some("module"), "{line}");
        if let Some(cmd) = get("RUN") {
            let prog = cmd.split_whitespace().next().unwrap();
            assert!(
                listing.contains(&format!(".{prog} -> gpuctk")),
                "{prog} not shipped"
            );
            assert!(
                cmd.contains("system create-dev-char-symlinks --create-all"),
                "{cmd}"
            );
            runs += 1;
        }
        if let Some(unit) = get("ENV{SYSTEMD_WANTS}") {
            assert!(
                listing.contains(&format!("/{unit}\n")) || listing.ends_with(&unit),
                "{unit}"
            );
            assert!(
                fields.iter().any(|f| f.0 == "TAG" && f.2 == "systemd"),
                "{line}"
            );
            wants += 1;
        }
    }
    assert_eq!((runs, wants), (1, 1), "{rules}");
}

#[test]
fn udev_rule_check_rejects_what_udev_rejects() {
    // The checker above, shown to fail where udev would.
    for bad in [
        r#"ACTION=="add" SUBSYSTEM=="module""#,
        r#"ACTION=="add", RUN=="/bin/true""#,
        r#"ACTION=="add", KERNEL="nvidia""#,
        r#"ACTION=="add, RUN+="/bin/true""#,
        r#"ACTION~"add""#,
    ] {
        let r = std::panic::catch_unwind(|| udev_line(bad));
        assert!(r.is_err(), "accepted {bad}");
    }
    assert_eq!(udev_line(r#"ACTION=="add", ENV{X}+="y""#).len(), 2);
}

// ------------------------------------------------------------------ installed

/// A private mount namespace with copy-on-write `/usr`, `/etc`, `/var` and an empty `/run`,
/// held by a `sleep`; commands enter it with nsenter. Dropping it purges the package if a
/// failed test left it installed, stops the daemons started in it and ends it.
struct Ns {
    holder: Child,
    daemons: Vec<Child>,
    installed: bool,
}

impl Ns {
    fn new(t: &Path) -> Ns {
        for d in ["/usr", "/etc", "/var", "/run"] {
            assert!(
                !t.starts_with(d),
                "the test dir {} is under {d}",
                t.display()
            );
        }
        let ready = t.join("ns-ready");
        let script = r#"set -e
            for d in usr etc var; do
                mkdir -p "$0/ov/$d/upper" "$0/ov/$d/work"
                mount -t overlay overlay -o "lowerdir=/$d,upperdir=$0/ov/$d/upper,workdir=$0/ov/$d/work" "/$d"
            done
            mount -t tmpfs -o mode=0755 tmpfs /run
            mkdir -p /run/lock /run/cdi
            : > "$0/ns-ready"
            exec sleep 3600"#;
        let holder = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", script])
            .arg(t)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(t.join("ns.err")).unwrap())
            .spawn()
            .expect("unshare (util-linux)");
        let mut ns = Ns {
            holder,
            daemons: Vec::new(),
            installed: false,
        };
        let start = Instant::now();
        while !ready.exists() {
            if let Ok(Some(st)) = ns.holder.try_wait() {
                panic!(
                    "the namespace did not come up ({st}): {}",
                    fs::read_to_string(t.join("ns.err")).unwrap_or_default()
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "namespace setup hangs"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        ns
    }

    /// `argv` inside the namespace, with a clean environment and the system's PATH.
    fn cmd(&self, argv: &[&str]) -> Command {
        let mut c = Command::new("nsenter");
        c.arg("-t")
            .arg(self.holder.id().to_string())
            .args(["-m", "--", "env", "-i"])
            .arg(format!("PATH={SYSTEM_PATH}"))
            .args(["HOME=/root", "LANG=C.UTF-8"])
            .args(argv)
            .current_dir("/");
        c
    }

    fn sh(&self, script: &str) -> Out {
        out(&mut self.cmd(&["sh", "-c", script]))
    }

    fn must_sh(&self, script: &str) -> Out {
        let r = self.sh(script);
        assert_eq!(
            r.code, 0,
            "{script}\nstdout: {}\nstderr: {}",
            r.stdout, r.stderr
        );
        r
    }

    fn read(&self, path: &str) -> Option<String> {
        let r = out(&mut self.cmd(&["cat", path]));
        (r.code == 0).then_some(r.stdout)
    }

    /// The non-directories under `dirs` (as the namespace sees them), sorted.
    fn files_under(&self, dirs: &[&str]) -> Vec<String> {
        let mut argv = vec!["find"];
        argv.extend_from_slice(dirs);
        argv.extend_from_slice(&["-not", "-type", "d"]);
        let r = out(&mut self.cmd(&argv));
        let mut v: Vec<String> = r.stdout.lines().map(str::to_string).collect();
        v.sort();
        v
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        if self.installed {
            let _ = out(&mut self.cmd(&["dpkg", "--purge", "--force-all", "gpuctk"]));
        }
        for d in &mut self.daemons {
            kill(d.id() as i32, 15);
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(20) {
                if let Ok(Some(_)) = d.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            kill(d.id() as i32, 9);
            let _ = d.wait();
        }
        kill(self.holder.id() as i32, 9);
        let _ = self.holder.wait();
    }
}

fn kill(pid: i32, sig: i32) {
    // SAFETY: kill(2) on a process this test started.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// The UUIDs `nvidia-smi -L` printed.
fn uuids_in(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split("(UUID: ").nth(1))
        .map(|u| u.trim_end_matches(')').to_string())
        .collect()
}

/// The refresh service run as systemd runs it, in `ns`: its `Environment=`, then its
/// `EnvironmentFile=` written with `env` (read after, so it overrides), then each `ExecStart=` in
/// turn, where a failure stops the service unless the line starts with "-". `$$` is systemd's
/// escaped `$`, the only expansion the lines may use (checked), so `sh` reads the rest as
/// systemd would. Returns whether the service succeeded, and each command's output.
fn run_service(ns: &Ns, service: &str, env: &str) -> (bool, Vec<Out>) {
    let env_file = service
        .lines()
        .find_map(|l| l.strip_prefix("EnvironmentFile=-"))
        .expect("EnvironmentFile=-");
    ns.must_sh(&format!(
        "mkdir -p $(dirname {env_file}) && printf '%s' '{env}' > {env_file}"
    ));
    let mut prelude = String::new();
    for assignment in service
        .lines()
        .filter_map(|l| l.strip_prefix("Environment="))
    {
        prelude += &format!("export {assignment}; ");
    }
    prelude += &format!("set -a; . {env_file}; set +a; exec ");
    let mut outs = Vec::new();
    for line in service.lines().filter_map(|l| l.strip_prefix("ExecStart=")) {
        let (ignore, line) = match line.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, line),
        };
        assert!(
            !line.replace("$$", "").contains(['$', '%']),
            "a systemd expansion this test does not do: {line}"
        );
        let r = ns.sh(&format!("{prelude}{}", line.replace("$$", "$")));
        let failed = r.code != 0;
        outs.push(r);
        if failed && !ignore {
            return (false, outs);
        }
    }
    (true, outs)
}

/// What the package test compares before install and after purge: every place the package,
/// its maintainer scripts or its units write.
const WATCHED: &[&str] = &[
    "/usr/bin",
    "/usr/lib/systemd/system",
    "/usr/lib/udev/rules.d",
    "/usr/share/man/man1",
    "/usr/share/bash-completion/completions",
    "/usr/share/zsh/vendor-completions",
    "/usr/share/fish/vendor_completions.d",
    "/usr/share/doc",
    "/etc/systemd/system",
    "/etc/nvidia-container-runtime",
    "/var/lib/systemd",
    "/var/lib/dpkg/info",
    "/var/lib/gpuctk",
    "/run/cdi",
];

#[test]
fn deb_install_docker_podman_remove_purge() {
    let deb = deb().to_path_buf();
    let t = TestDir::new();
    let host = mock_host(&t, "host", 2, "570.124.06", "debian");
    ok(&["mock-host", "rootfs", t.join("rootfs").to_str().unwrap()]);
    must(
        Command::new("tar")
            .arg("-C")
            .arg(t.join("rootfs"))
            .arg("-cf")
            .arg(t.join("rootfs.tar"))
            .arg("."),
    );
    let mut ns = Ns::new(t.path());
    assert!(
        ns.sh("dpkg -s gpuctk").code != 0,
        "gpuctk is installed on this machine already"
    );
    // The admin's docker config, which must come back as it was.
    let daemon_json = "{\n    \"log-level\": \"warn\"\n}\n";
    fs::write(t.join("daemon.json"), daemon_json).unwrap();
    ns.must_sh(&format!(
        "mkdir -p /etc/docker && cp {} /etc/docker/daemon.json",
        t.join("daemon.json").display()
    ));
    let before = ns.files_under(WATCHED);

    // Install.
    ns.installed = true;
    let r = must(&mut ns.cmd(&["dpkg", "-i", deb.to_str().unwrap()]));
    assert!(
        !r.stderr.contains("gpuctk prerm") && !r.stderr.contains("error"),
        "{}",
        r.stderr
    );
    assert!(ns
        .sh("dpkg -s gpuctk")
        .stdout
        .contains("Status: install ok installed"));
    for name in NAMES {
        let r = ns.must_sh(&format!(
            "command -v {name} && readlink -f $(command -v {name})"
        ));
        assert_eq!(
            r.stdout.lines().collect::<Vec<_>>(),
            vec![format!("/usr/bin/{name}").as_str(), "/usr/bin/gpuctk"],
            "{name}"
        );
    }
    // config.toml, written by postinst (there was none), with its checksum kept for purge.
    assert_eq!(
        ns.read(CONFIG).as_deref(),
        Some(ok(&["config", "default"]).stdout.as_str())
    );
    ns.must_sh(&format!("sha256sum --check --status {CONFIG_MARK}"));
    // Enabled although systemd is not running here, as the admin's `systemctl enable` would.
    let wants = ns.files_under(&["/etc/systemd/system/multi-user.target.wants"]);
    for unit in ["gpuctk-cdi-refresh.path", "gpuctk-cdi-refresh.service"] {
        let link = format!("/etc/systemd/system/multi-user.target.wants/{unit}");
        assert!(wants.contains(&link), "{unit} not enabled: {wants:?}");
        // deb-systemd-helper writes /lib/systemd/system/UNIT, /usr/lib's merged-/usr alias.
        let r = ns.must_sh(&format!("readlink -e {link}"));
        assert_eq!(r.stdout.trim(), format!("/usr/lib/systemd/system/{unit}"));
    }
    // The units as installed: systemd's own check, which also looks their man page up.
    let r = ns.sh(&format!("systemd-analyze verify {SERVICE} {PATH_UNIT}"));
    assert!(
        r.code == 0 && !r.stderr.contains("gpuctk-cdi-refresh"),
        "systemd-analyze verify: {}\n{}",
        r.stdout,
        r.stderr
    );
    // The installed completions where each shell looks: fish and zsh find them on their own
    // paths; bash-completion loads completions/NAME when NAME is first completed.
    let r = ns.must_sh("fish -c \"complete -C 'nvidia-ctk runtime '\"");
    assert!(
        r.stdout.lines().any(|l| l.starts_with("configure\t")),
        "fish: {}",
        r.stdout
    );
    let r = ns.must_sh(
        "zsh -fc 'for d in $fpath; do [ -f $d/_nvidia-ctk ] && [ -f $d/_gpuctk ] && echo $d; done; true'",
    );
    assert_eq!(
        r.stdout.trim(),
        "/usr/share/zsh/vendor-completions",
        "zsh: {}",
        r.stderr
    );
    let r = ns.must_sh(
        r#"bash -c 'source /usr/share/bash-completion/completions/nvidia-ctk; COMP_WORDS=(nvidia-ctk system ""); COMP_CWORD=2; f=$(complete -p nvidia-ctk | sed -n "s/.*-F \([^ ]*\).*/\1/p"); "$f" nvidia-ctk "" system; printf "%s\n" "${COMPREPLY[@]}"'"#,
    );
    assert!(
        r.stdout.lines().any(|l| l == "create-dev-char-symlinks"),
        "bash: {}",
        r.stdout
    );

    // The installed config pointed at the mock host, with the installed binary.
    let root = host.driver_root();
    let proc_root = host.proc_root();
    ns.must_sh(&format!(
        "nvidia-ctk config --in-place --set nvidia-container-cli.root={root} --set gpuctk.proc-root={proc_root}"
    ));
    let r = ns.must_sh("man -w nvidia-ctk nvidia-container-runtime nvidia-ctk-runtime-configure");
    assert_eq!(r.stdout.lines().count(), 3, "{}", r.stdout);
    assert!(
        r.stdout.contains("/usr/share/man/man1/nvidia-ctk.1.gz"),
        "{}",
        r.stdout
    );

    // The refresh service's condition: skipped (not failed) where no NVIDIA module is
    // installed, run where one is, whatever the module's file name (modules.dep is in /usr's
    // overlay; a loaded driver's procfs dir, on a GPU host, is hidden).
    let service = ns.read(SERVICE).unwrap();
    let condition = service
        .lines()
        .find_map(|l| l.strip_prefix("ExecCondition=/bin/sh -c '"))
        .and_then(|c| c.strip_suffix('\''))
        .expect("ExecCondition=/bin/sh -c '...'");
    let kver = ns.must_sh("uname -r").stdout.trim().to_string();
    let condition = condition.replace("%v", &kver);
    ns.must_sh(&format!(
        "mkdir -p /lib/modules/{kver}; if [ -d /proc/driver/nvidia ]; then mount -t tmpfs tmpfs /proc/driver; fi"
    ));
    for (modules_dep, installed) in [
        ("kernel/drivers/net/dummy.ko:\n", false),
        (
            "updates/dkms/nvidia-drm.ko: updates/dkms/nvidia-modeset.ko\n",
            false,
        ),
        (
            "kernel/drivers/net/dummy.ko:\nupdates/dkms/nvidia.ko:\n",
            true,
        ),
        ("updates/dkms/nvidia-current.ko.zst:\n", true),
    ] {
        ns.must_sh(&format!(
            "printf '{modules_dep}' > /lib/modules/{kver}/modules.dep"
        ));
        let r = out(&mut ns.cmd(&["sh", "-c", &condition]));
        assert_eq!(
            r.code == 0,
            installed,
            "ExecCondition on {modules_dep:?}: {}",
            r.stderr
        );
    }
    // It fails while the driver is not up (no procfs entries yet), so that systemd retries it
    // (Restart=on-failure), and writes nothing. The driver root is the mock host's in every run
    // here, so the modprobe it asks for runs chrooted there, never on this machine.
    fs::create_dir_all(t.join("proc-not-loaded")).unwrap();
    let no_nodes = t.join("dev-not-loaded");
    fs::create_dir_all(&no_nodes).unwrap();
    let (ran, outs) = run_service(
        &ns,
        &service,
        &format!(
            "NVIDIA_CTK_DRIVER_ROOT={root}\nNVIDIA_CTK_DEV_ROOT={}\nGPUCTK_PROC_ROOT={}\n",
            no_nodes.display(),
            t.join("proc-not-loaded").display()
        ),
    );
    assert!(
        !ran,
        "without a loaded driver: {:?}",
        outs.iter().map(|o| &o.stderr).collect::<Vec<_>>()
    );
    assert!(ns.read("/var/run/cdi/nvidia.yaml").is_none());
    assert!(!no_nodes.join("dev").exists(), "nodes made for no driver");
    // On a host whose /dev/nvidia* are not made yet (a dev root without them): the service
    // makes the nodes, then writes the spec where the env file says (a spec kept in /etc/cdi),
    // not at the unit's default. The mock driver root holds no modprobe, so the modules cannot
    // load there, as on a host where they cannot: the nodes of the driver procfs shows loaded
    // are made all the same, and the failure is left to generate ("-").
    let fresh = t.join("dev-fresh");
    fs::create_dir_all(&fresh).unwrap();
    let (ran, outs) = run_service(
        &ns,
        &service,
        &format!(
            "NVIDIA_CTK_DRIVER_ROOT={root}\nNVIDIA_CTK_DEV_ROOT={}\nGPUCTK_PROC_ROOT={proc_root}\nNVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/etc/cdi/nvidia.yaml\n",
            fresh.display()
        ),
    );
    let said: Vec<(i32, &str)> = outs.iter().map(|o| (o.code, o.stderr.as_str())).collect();
    assert!(ran, "the service on a fresh dev root: {said:?}");
    assert!(
        outs[0].code != 0 && outs[0].stderr.contains("--load-kernel-modules"),
        "{said:?}"
    );
    {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        for (node, major, minor) in [
            ("nvidia0", 195, 0),
            ("nvidia1", 195, 1),
            ("nvidiactl", 195, 255),
            ("nvidia-modeset", 195, 254),
            (
                "nvidia-uvm",
                host.manifest["uvm_major"].as_u64().unwrap() as u32,
                0,
            ),
        ] {
            let md = fs::metadata(fresh.join("dev").join(node))
                .unwrap_or_else(|e| panic!("{node} not made: {e}; {said:?}"));
            assert!(md.file_type().is_char_device(), "{node}");
            assert_eq!(
                (libc::major(md.rdev()), libc::minor(md.rdev())),
                (major, minor),
                "{node}"
            );
        }
    }
    let spec = ns
        .read("/etc/cdi/nvidia.yaml")
        .unwrap_or_else(|| panic!("no spec where the env file says: {said:?}"));
    assert_cdi_schema(&yaml(&spec));
    assert!(
        spec.contains(&format!("{}/dev/nvidia1", fresh.display())),
        "the spec names the nodes made:\n{spec}"
    );
    assert!(
        ns.read("/var/run/cdi/nvidia.yaml").is_none(),
        "a second spec beside the one the env file asks for"
    );
    ns.must_sh("rm -r /etc/cdi");
    // The udev rule's command, pointed at the mock host by the variables its flags read.
    let rules = ns.read(UDEV_RULE).unwrap();
    let run_cmd = rules
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .flat_map(udev_line)
        .find_map(|(k, _, v)| (k == "RUN").then_some(v))
        .expect("RUN in the udev rule");
    let dev_char = t.join("dev-char");
    ns.must_sh(&format!(
        "DEV_CHAR_PATH={} NVIDIA_DRIVER_ROOT={root} GPUCTK_PROC_ROOT={proc_root} exec {run_cmd}",
        dev_char.display()
    ));
    for (link, node) in [
        ("195:0", "nvidia0"),
        ("195:1", "nvidia1"),
        ("195:255", "nvidiactl"),
    ] {
        assert_eq!(
            fs::read_link(dev_char.join(link)).ok(),
            Some(Path::new(&root).join("dev").join(node)),
            "/dev/char/{link}"
        );
    }

    // docker: NVIDIA's bare default path, resolved through dockerd's PATH to /usr/bin.
    let r = ns.must_sh("nvidia-ctk runtime configure --runtime=docker");
    assert!(!r.stderr.contains("not in this PATH"), "{}", r.stderr);
    let configured: serde_json::Value =
        serde_json::from_str(&ns.read("/etc/docker/daemon.json").unwrap()).unwrap();
    assert_eq!(
        configured["runtimes"]["nvidia"]["path"],
        "nvidia-container-runtime"
    );
    assert_eq!(configured["log-level"], "warn");
    let d = t.join("docker");
    fs::create_dir_all(&d).unwrap();
    let sock = d.join("docker.sock");
    let data = d.join("data");
    let exec = d.join("exec");
    let pidfile = d.join("docker.pid");
    let dockerd = ns
        .cmd(&[
            "dockerd",
            "--bridge",
            "none",
            "--iptables=false",
            "--ip-masq=false",
            "--storage-driver",
            "vfs",
            "--data-root",
            data.to_str().unwrap(),
            "--exec-root",
            exec.to_str().unwrap(),
            "--pidfile",
            pidfile.to_str().unwrap(),
            "--host",
            &format!("unix://{}", sock.display()),
        ])
        .stdout(fs::File::create(d.join("dockerd.log")).unwrap())
        .stderr(fs::File::create(d.join("dockerd.err")).unwrap())
        .spawn()
        .expect("dockerd (apt-get install docker.io)");
    ns.daemons.push(dockerd);
    let docker = |args: &[&str]| -> Out {
        out(Command::new("docker")
            .arg("-H")
            .arg(format!("unix://{}", sock.display()))
            .args(args))
    };
    let start = Instant::now();
    while docker(&["version"]).code != 0 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "dockerd did not come up: {}",
            fs::read_to_string(d.join("dockerd.err")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = docker(&["import", t.join("rootfs.tar").to_str().unwrap(), IMAGE]);
    assert_eq!(r.code, 0, "docker import: {}", r.stderr);
    let r = docker(&[
        "run",
        "--rm",
        "--network",
        "none",
        "--runtime=nvidia",
        "-e",
        "NVIDIA_VISIBLE_DEVICES=1",
        IMAGE,
        "nvidia-smi",
        "-L",
    ]);
    assert_eq!(
        (r.code, uuids_in(&r.stdout)),
        (0, vec![host.uuids()[1].clone()]),
        "docker run --runtime=nvidia: {}\n{}\n{}",
        r.stdout,
        r.stderr,
        fs::read_to_string(d.join("dockerd.err")).unwrap_or_default()
    );

    // podman, with the spec the refresh service writes, run as systemd would, with an env file
    // that points at a driver root and says nothing of the output: the unit's default.
    let (ran, outs) = run_service(
        &ns,
        &service,
        &format!("NVIDIA_CTK_DRIVER_ROOT={root}\nGPUCTK_PROC_ROOT={proc_root}\n"),
    );
    assert!(
        ran,
        "{:?}",
        outs.iter().map(|o| &o.stderr).collect::<Vec<_>>()
    );
    let spec = ns
        .read("/var/run/cdi/nvidia.yaml")
        .expect("the service wrote no spec");
    assert_cdi_schema(&yaml(&spec));
    // NVIDIA's default hook path: `nvidia-cdi-hook` from PATH, the package's link.
    assert!(
        spec.contains("path: /usr/bin/nvidia-cdi-hook"),
        "hooks run the installed binary:\n{spec}"
    );
    let podman = |args: &[&str]| -> Out {
        let p = t.join("podman");
        let mut argv = vec![
            "podman".to_string(),
            "--root".into(),
            p.join("storage").to_string_lossy().into_owned(),
            "--runroot".into(),
            p.join("run").to_string_lossy().into_owned(),
            "--tmpdir".into(),
            p.join("tmp").to_string_lossy().into_owned(),
            "--storage-driver".into(),
            "vfs".into(),
            "--cgroup-manager".into(),
            "cgroupfs".into(),
            "--events-backend".into(),
            "none".into(),
        ];
        argv.extend(args.iter().map(|s| s.to_string()));
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        out(&mut ns.cmd(&argv))
    };
    let r = podman(&["import", t.join("rootfs.tar").to_str().unwrap(), IMAGE]);
    assert_eq!(r.code, 0, "podman import: {}", r.stderr);
    let r = podman(&[
        "run",
        "--rm",
        "--network",
        "none",
        "--ulimit",
        "nofile=20000:20000",
        "--ulimit",
        "nproc=32768:32768",
        "--device",
        "nvidia.com/gpu=0",
        IMAGE,
        "nvidia-smi",
        "-L",
    ]);
    assert_eq!(
        (r.code, uuids_in(&r.stdout)),
        (0, vec![host.uuids()[0].clone()]),
        "podman --device nvidia.com/gpu=0: {}\n{}",
        r.stdout,
        r.stderr
    );
    // The daemons are done: docker stops before the package goes.
    for mut dm in ns.daemons.drain(..) {
        kill(dm.id() as i32, 15);
        let _ = dm.wait();
    }

    // The other engines configured too, as an admin would: containerd's own config (with
    // the admin's settings around ours), CRI-O's drop-in, podman's OCI hook file.
    let containerd_toml = "# containerd config\nversion = 2\n\n[plugins]\n  [plugins.\"io.containerd.grpc.v1.cri\"]\n    [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n      default_runtime_name = \"runc\" # keep me\n";
    fs::write(t.join("containerd.toml"), containerd_toml).unwrap();
    ns.must_sh(&format!(
        "mkdir -p /etc/containerd && cp {} /etc/containerd/config.toml \
         && nvidia-ctk runtime configure --runtime=containerd \
         && nvidia-ctk runtime configure --runtime=crio \
         && nvidia-ctk runtime configure --config-mode=oci-hook",
        t.join("containerd.toml").display()
    ));
    let crio_drop_in = "/etc/crio/crio.conf.d/99-nvidia.toml";
    let oci_hook = "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json";
    assert!(ns
        .read("/etc/containerd/config.toml")
        .unwrap()
        .contains("nvidia-container-runtime"));
    assert!(ns.read(crio_drop_in).is_some() && ns.read(oci_hook).is_some());

    // Remove: our files go, config.toml stays, each engine's config is the admin's again.
    let r = must(&mut ns.cmd(&["dpkg", "-r", "gpuctk"]));
    assert!(
        r.stderr
            .contains("removed the nvidia runtime from: docker containerd crio;"),
        "{}",
        r.stderr
    );
    assert_eq!(
        ns.read("/etc/docker/daemon.json").as_deref(),
        Some(daemon_json)
    );
    assert_eq!(
        ns.read("/etc/containerd/config.toml").as_deref(),
        Some(containerd_toml)
    );
    assert!(
        ns.read(crio_drop_in).is_none(),
        "the CRI-O drop-in we wrote is gone"
    );
    assert!(ns.read(oci_hook).is_none(), "the OCI hook file is gone");
    assert!(ns
        .sh("dpkg -s gpuctk")
        .stdout
        .contains("Status: deinstall ok config-files"));
    for name in NAMES {
        assert!(
            ns.sh(&format!(
                "test -e /usr/bin/{name} || test -L /usr/bin/{name}"
            ))
            .code
                != 0,
            "{name} left"
        );
    }
    assert!(ns.read(SERVICE).is_none() && ns.read(UDEV_RULE).is_none());
    assert!(ns.read(CONFIG).is_some(), "remove keeps config.toml");

    // Purge: nothing of ours is left.
    // config.toml was written by postinst, then changed (`config --in-place` above): it is the
    // admin's now, and purge keeps it, saying so.
    let edited = ns.read(CONFIG).unwrap();
    let r = must(&mut ns.cmd(&["dpkg", "-P", "gpuctk"]));
    ns.installed = false;
    assert!(ns.sh("dpkg -s gpuctk").code != 0);
    assert_eq!(
        ns.read(CONFIG),
        Some(edited),
        "purge keeps an edited config.toml"
    );
    assert!(
        r.stderr
            .contains(&format!("kept {CONFIG}, changed since gpuctk wrote it")),
        "{}",
        r.stderr
    );
    ns.must_sh(&format!("rm {CONFIG}"));
    assert!(
        ns.read("/var/run/cdi/nvidia.yaml").is_none(),
        "purge removes the spec"
    );
    for path in [CONFIG, SERVICE, "/usr/bin/gpuctk", "/usr/bin/nvidia-ctk"] {
        let r = ns.sh(&format!("dpkg -S {path}"));
        assert!(r.code != 0, "dpkg still knows {path}: {}", r.stdout);
    }
    let after = ns.files_under(WATCHED);
    let added: Vec<&String> = after.iter().filter(|f| !before.contains(f)).collect();
    let gone: Vec<&String> = before.iter().filter(|f| !after.contains(f)).collect();
    // The refresh service's env file is the admin's (this test wrote it), not the package's.
    assert!(
        added.is_empty() && gone.is_empty(),
        "left behind: {added:?}; lost: {gone:?}"
    );
    assert_eq!(
        ns.read("/etc/docker/daemon.json").as_deref(),
        Some(daemon_json)
    );
}

/// A stand-in for one of NVIDIA's packages: its name, version and relations, `files` (path,
/// content; those under `/usr/bin` executable) and a `postinst` ("" for none). Only what dpkg and
/// apt look at, and what NVIDIA's maintainer scripts do to the files ours meet.
fn stand_in(dir: &Path, control: &str, files: &[(&str, &str)], postinst: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let name = control
        .lines()
        .next()
        .unwrap()
        .trim_start_matches("Package: ");
    let root = dir.join(name);
    fs::create_dir_all(root.join("DEBIAN")).unwrap();
    fs::write(
        root.join("DEBIAN/control"),
        format!("{control}\nVersion: 1.17.8-1\nArchitecture: all\nMaintainer: test <t@example.invalid>\nDescription: stand-in for the test\n"),
    )
    .unwrap();
    let mut executables = Vec::new();
    if !postinst.is_empty() {
        fs::write(root.join("DEBIAN/postinst"), postinst).unwrap();
        executables.push(root.join("DEBIAN/postinst"));
    }
    for (path, content) in files {
        let p = root.join(&path[1..]);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, content).unwrap();
        if path.starts_with("/usr/bin/") {
            executables.push(p);
        }
    }
    for p in executables {
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let deb = dir.join(format!("{name}.deb"));
    must(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "--build"])
            .arg(&root)
            .arg(&deb),
    );
    deb
}

/// NVIDIA's nvidia-container-toolkit-base postinst: `nvidia-ctk --quiet config --config-file=...
/// --in-place`, which writes config.toml with the defaults when there is none. The file is
/// then owned by no package.
const NVIDIA_BASE_POSTINST: &str = "#!/bin/sh\nset -e\ncase \"$1\" in\n    configure)\n        /usr/bin/nvidia-ctk --quiet config --config-file=/etc/nvidia-container-runtime/config.toml --in-place\n        ;;\nesac\nexit 0\n";
/// The stand-in's `nvidia-ctk`, for that postinst: the defaults written where the file is missing.
const NVIDIA_CTK_STAND_IN: &str = "#!/bin/sh\nfor a; do case \"$a\" in --config-file=*) f=${a#--config-file=} ;; esac; done\nif [ -n \"$f\" ] && [ ! -e \"$f\" ]; then mkdir -p \"${f%/*}\" && printf '#no-cgroups = false\\n' >\"$f\"; fi\n";

#[test]
fn apt_install_swaps_nvidia_packages_in_one_go() {
    let deb = deb().to_path_buf();
    let t = TestDir::new();
    let d = t.path();
    let debs = [
        stand_in(d, "Package: libnvidia-container1", &[("/usr/lib/libnvidia-container.so.1", "lib")], ""),
        stand_in(
            d,
            "Package: libnvidia-container-tools\nDepends: libnvidia-container1",
            &[("/usr/bin/nvidia-container-cli", "#!/bin/sh\n")],
            "",
        ),
        stand_in(
            d,
            "Package: nvidia-container-toolkit-base",
            &[
                ("/usr/bin/nvidia-ctk", NVIDIA_CTK_STAND_IN),
                ("/usr/bin/nvidia-container-runtime", "#!/bin/sh\n"),
            ],
            NVIDIA_BASE_POSTINST,
        ),
        stand_in(
            d,
            "Package: nvidia-container-toolkit\nDepends: nvidia-container-toolkit-base (= 1.17.8-1), libnvidia-container-tools",
            &[("/usr/bin/nvidia-container-runtime-hook", "#!/bin/sh\n")],
            "",
        ),
        // Something of the admin's that needs a toolkit, whichever.
        stand_in(d, "Package: gpu-app-needing-a-toolkit\nDepends: nvidia-container-toolkit", &[], ""),
    ];
    let mut ns = Ns::new(d);
    ns.installed = true;
    let mut argv = vec!["dpkg", "-i"];
    argv.extend(debs.iter().map(|p| p.to_str().unwrap()));
    must(&mut ns.cmd(&argv));
    // NVIDIA's postinst made config.toml, owned by no package; the admin edits it.
    assert!(ns.sh(&format!("dpkg -S {CONFIG}")).code != 0);
    ns.must_sh(&format!("printf 'no-cgroups = true\\n' >> {CONFIG}"));
    let admins = ns.read(CONFIG).unwrap();
    assert_eq!(admins, "#no-cgroups = false\nno-cgroups = true\n");
    // One apt install, no network, no terminal, as config management runs it: NVIDIA's toolkit
    // goes, ours comes, the admin's package stays, and nothing asks about config.toml.
    let r = ns.must_sh(&format!(
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o APT::Sandbox::User=root {} </dev/null",
        deb.display()
    ));
    let audit = ns.must_sh("dpkg --audit");
    assert_eq!(audit.stdout, "", "half-installed packages left");
    for gone in [
        "nvidia-container-toolkit",
        "nvidia-container-toolkit-base",
        "libnvidia-container-tools",
    ] {
        let status = ns
            .sh(&format!("dpkg-query -W -f='${{Status}}' {gone}"))
            .stdout;
        assert!(
            !status.contains(" installed"),
            "{gone}: {status}\n{}",
            r.stdout
        );
    }
    for kept in [
        "gpuctk",
        "libnvidia-container1",
        "gpu-app-needing-a-toolkit",
    ] {
        let status = ns
            .sh(&format!("dpkg-query -W -f='${{Status}}' {kept}"))
            .stdout;
        assert_eq!(status, "install ok installed", "{kept}\n{}", r.stdout);
    }
    for name in [
        "nvidia-ctk",
        "nvidia-container-runtime",
        "nvidia-container-cli",
        "nvidia-container-runtime-hook",
    ] {
        let r = ns.must_sh(&format!(
            "readlink /usr/bin/{name}; dpkg -S /usr/bin/{name}"
        ));
        assert_eq!(
            r.stdout,
            format!("gpuctk\ngpuctk: /usr/bin/{name}\n"),
            "{name}"
        );
    }
    // The admin's config.toml, byte for byte, still owned by no package, not ours to purge.
    assert_eq!(ns.read(CONFIG).as_deref(), Some(admins.as_str()));
    assert!(ns.sh(&format!("dpkg -S {CONFIG}")).code != 0);
    assert!(ns.read(CONFIG_MARK).is_none(), "gpuctk did not write it");
    ns.must_sh("DEBIAN_FRONTEND=noninteractive apt-get purge -y -q -o APT::Sandbox::User=root gpuctk </dev/null");
    ns.installed = false;
    assert_eq!(ns.read(CONFIG).as_deref(), Some(admins.as_str()));
    assert_eq!(ns.must_sh("dpkg --audit").stdout, "");
}

/// config.toml's life: written by postinst where there is none and removed by purge when
/// unchanged; taken over from a gpuctk that shipped it as a conffile (the one before issue 17,
/// rebuilt here from this package with the conffile added), with no prompt on the upgrade and
/// nothing lost: an edited one stays the admin's, byte for byte, through upgrade and purge.
#[test]
fn config_toml_written_kept_and_taken_over_from_a_conffile() {
    let deb = deb().to_path_buf();
    let t = TestDir::new();
    let default = ok(&["config", "default"]).stdout;
    let old = t.join("old");
    must(Command::new("dpkg-deb").arg("-R").arg(&deb).arg(&old));
    let control = fs::read_to_string(old.join("DEBIAN/control")).unwrap();
    let control: String = control
        .lines()
        .map(|l| {
            if l.starts_with("Version: ") {
                "Version: 0~conffile\n".to_string()
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    fs::write(old.join("DEBIAN/control"), control).unwrap();
    // That version had no preinst.
    let _ = fs::remove_file(old.join("DEBIAN/preinst"));
    fs::create_dir_all(old.join("etc/nvidia-container-runtime")).unwrap();
    fs::write(old.join(&CONFIG[1..]), &default).unwrap();
    fs::write(old.join("DEBIAN/conffiles"), format!("{CONFIG}\n")).unwrap();
    let old_deb = t.join("gpuctk-conffile.deb");
    must(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "--build"])
            .arg(&old)
            .arg(&old_deb),
    );
    let (new, old) = (deb.to_str().unwrap(), old_deb.to_str().unwrap());
    let mut ns = Ns::new(t.path());
    ns.installed = true;
    let conffiles = |ns: &Ns| {
        ns.must_sh("dpkg-query -W -f='${Conffiles}' gpuctk")
            .stdout
            .trim()
            .to_string()
    };

    // Written where there is none; purged when unchanged.
    must(&mut ns.cmd(&["dpkg", "-i", new]));
    assert_eq!(ns.read(CONFIG).as_deref(), Some(default.as_str()));
    assert!(ns.read(CONFIG_MARK).is_some());
    must(&mut ns.cmd(&["dpkg", "-P", "gpuctk"]));
    assert!(
        ns.read(CONFIG).is_none(),
        "purge leaves the config.toml it wrote"
    );
    assert!(
        ns.sh("test -e /var/lib/gpuctk || test -e /etc/nvidia-container-runtime")
            .code
            != 0
    );

    // The conffile gpuctk, its config.toml edited, upgraded by apt with no terminal: no prompt,
    // the file as the admin left it, no longer listed as ours, and kept by purge.
    must(&mut ns.cmd(&["dpkg", "-i", old]));
    assert!(conffiles(&ns).starts_with(CONFIG));
    ns.must_sh(&format!("printf 'no-cgroups = true\\n' >> {CONFIG}"));
    let edited = ns.read(CONFIG).unwrap();
    ns.must_sh(&format!(
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o APT::Sandbox::User=root {new} </dev/null"
    ));
    assert_eq!(ns.must_sh("dpkg --audit").stdout, "");
    assert_eq!(ns.read(CONFIG).as_deref(), Some(edited.as_str()));
    assert_eq!(conffiles(&ns), "", "dpkg still lists the old conffile");
    assert!(ns.sh(&format!("dpkg -S {CONFIG}")).code != 0);
    assert!(
        ns.read(CONFIG_MARK).is_none(),
        "the admin's file taken for ours"
    );
    assert!(ns.read(&format!("{CONFIG}.gpuctk-upgrade")).is_none());
    let r = must(&mut ns.cmd(&["dpkg", "-P", "gpuctk"]));
    assert_eq!(
        ns.read(CONFIG).as_deref(),
        Some(edited.as_str()),
        "{}",
        r.stderr
    );
    ns.must_sh(&format!("rm {CONFIG}"));

    // The conffile gpuctk, its config.toml untouched, upgraded by dpkg: the file is the old
    // version's default, so ours, and purge removes it.
    must(&mut ns.cmd(&["dpkg", "-i", old]));
    must(&mut ns.cmd(&["dpkg", "-i", new]));
    assert_eq!(ns.read(CONFIG).as_deref(), Some(default.as_str()));
    assert_eq!(conffiles(&ns), "");
    must(&mut ns.cmd(&["dpkg", "-P", "gpuctk"]));
    ns.installed = false;
    assert!(ns.read(CONFIG).is_none(), "purge leaves the old default");
}
