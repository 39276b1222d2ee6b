//! What ships for other distributions (issue 19 §3, §4): the static binary runs in a root with no
//! C library at all, and the RPM, built with the .deb by the same `scripts/package.sh` run, holds
//! the same files and installs, upgrades and erases with `rpm --root` (its scriptlets run there,
//! in a busybox root with no libc, run by the static binary it ships).

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::package::{must, out, package_sh, repo, rpm, unpacked_deb};
use crate::util::*;

/// The static release binary the packages ship (built by scripts/static.sh, once: the packages'
/// build has made it already when this runs after them, and cargo reuses it).
pub(crate) fn static_bin() -> PathBuf {
    let _ = rpm();
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let mut c = Command::new(repo().join("scripts/static.sh"));
    c.args(["--arch", "amd64"])
        .env("CARGO_TARGET_DIR", tmp.parent().expect("target dir"));
    if let Some(cargo) = std::env::var_os("CARGO").or(option_env!("CARGO").map(Into::into)) {
        c.env("CARGO", cargo);
    }
    let r = must(&mut c);
    PathBuf::from(r.stdout.lines().last().unwrap_or("").trim())
}

/// Every file under `root` whose name is a C library or a dynamic loader.
fn libcs_under(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else if name.starts_with("libc.so")
                || name.starts_with("libc-")
                || name.starts_with("ld-linux")
                || name.starts_with("ld-musl")
            {
                found.push(e.path());
            }
        }
    }
    found
}

#[test]
fn static_binary_runs_in_a_root_without_any_libc() {
    let t = TestDir::new();
    let root = t.join("root");
    fs::create_dir_all(&root).unwrap();
    let bin = static_bin();
    fs::copy(&bin, root.join("gpuctk")).unwrap();
    // The mock host is made from outside, by the test build, inside the root: its driver
    // libraries are there, no C library and no loader anywhere.
    let h = mock_host(&t, "root/host", 2, "570.124.06", "debian");
    assert_eq!(libcs_under(&root), Vec::<PathBuf>::new());
    for dir in ["lib", "lib64", "usr/lib", "etc/ld.so.cache"] {
        assert!(!root.join(dir).exists(), "{dir} in the root");
    }
    let chroot = |args: &[&str]| -> Run {
        Run::from(
            Command::new("/usr/sbin/chroot")
                .arg(&root)
                .arg("/gpuctk")
                .args(args)
                .env_clear()
                .output()
                .unwrap(),
        )
    };
    // In a musl build (musl's start-up is `_start_c`), `memcpy` and friends are ours
    // (crates/mem): musl's `memcpy`, whose helper `__memcpy_fwd` its `memmove` also calls, is
    // not linked at all.
    let symbols = must(Command::new("nm").arg(&bin)).stdout;
    let defines = |name: &str| {
        symbols
            .lines()
            .any(|l| l.split_whitespace().last() == Some(name))
    };
    if defines("_start_c") {
        assert!(
            defines("memcpy") && defines("memcmp"),
            "no memcpy in {}",
            bin.display()
        );
        assert!(
            !defines("__memcpy_fwd"),
            "musl's memcpy is in {}",
            bin.display()
        );
    }
    let v = chroot(&["--version"]);
    assert_eq!(v.code, 0, "{}", v.stderr);
    assert_eq!(v.stdout, ok(&["--version"]).stdout);
    let g = chroot(&[
        "cdi",
        "generate",
        "--driver-root",
        "/host",
        "--dev-root",
        "/host",
        "--proc-root",
        "/host/proc",
        "--output",
        "/nvidia.yaml",
    ]);
    assert_eq!(g.code, 0, "{}", g.stderr);
    let spec = yaml(&fs::read_to_string(root.join("nvidia.yaml")).unwrap());
    assert_cdi_schema(&spec);
    let text = spec.to_string();
    for uuid in h.uuids() {
        assert!(text.contains(&uuid), "{uuid} not in {text}");
    }
    assert!(
        text.contains("/dev/nvidia0") && text.contains("libcuda.so.570.124.06"),
        "{text}"
    );
    // doctor's checks and config default, the other commands the refresh unit and postinst run.
    let c = chroot(&["config", "default"]);
    assert_eq!(c.code, 0, "{}", c.stderr);
    assert!(
        c.stdout.contains("[nvidia-container-runtime]"),
        "{}",
        c.stdout
    );
}

/// Whether `name` matches `pattern`, whose `*` stands for any run of characters (as in a linker
/// script's section patterns).
fn glob(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut i, mut j) = (0, 0);
    // Where the last `*` was, and where in `name` its run ends so far.
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && p[i] == b'*' {
            star = Some((i, j));
            i += 1;
        } else if i < p.len() && p[i] == n[j] {
            i += 1;
            j += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == b'*')
}

#[test]
fn glob_matches_as_a_linker_script_does() {
    assert!(glob(
        "_RNvNtCs*_6gpuctk7runtime7main_as",
        "_RNvNtCsab12_6gpuctk7runtime7main_as"
    ));
    assert!(glob("a*b*c", "aXbYbc"));
    assert!(glob("*", ""));
    assert!(!glob(
        "_RNvNtCs*_6gpuctk7runtime7main_as",
        "_RNvNtCsab12_6gpuctk7runtime7main_as0"
    ));
    assert!(!glob("a*b", "aXc"));
}

/// The shipped binary's hot code (issue 21, scripts/hot-text.ld): the functions the runtime
/// shim's calls and the hooks run lie together at the start of its code, where an exec faults
/// them in a few pages at a time, and the script's patterns still name this build's functions
/// (a rename on a hot path leaves it among the rest: rerun scripts/hot-text.sh).
#[test]
fn the_shims_hot_functions_lie_together_at_the_start_of_the_code() {
    let bin = static_bin();
    let sections = must(Command::new("readelf").arg("-SW").arg(&bin)).stdout;
    // A section's addresses, from its line: `[Nr] Name Type Address Off Size ...`.
    let section = |name: &str| {
        sections.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let at = f.iter().position(|w| *w == name)?;
            let addr = u64::from_str_radix(f.get(at + 2)?, 16).ok()?;
            let size = u64::from_str_radix(f.get(at + 4)?, 16).ok()?;
            Some(addr..addr + size)
        })
    };
    let hot = section(".text.gpuctk_hot").unwrap_or_else(|| {
        panic!(
            "no .text.gpuctk_hot section in {}:\n{sections}",
            bin.display()
        )
    });
    let text = section(".text").expect("a .text section");
    let text = text.end - text.start;
    // Functions: (address, name).
    let symbols: Vec<(u64, String)> = must(Command::new("nm").arg(&bin))
        .stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f[..] {
                [addr, kind, name] if "tTwW".contains(kind) => {
                    Some((u64::from_str_radix(addr, 16).ok()?, name.to_string()))
                }
                _ => None,
            }
        })
        .collect();
    // The runtime shim's entry and its pass-through, the create's decision and in-root work,
    // and the hooks' entry (v0 names, whose paths end so).
    for path in [
        "6gpuctk7runtime7main_as",
        "6gpuctk11passthrough4exec",
        "6gpuctk7runtime18modify_bundle_once",
        "11gpuctk_core6decide3jit",
        "16gpuctk_container3ops3run",
        "6gpuctk4hook4main",
    ] {
        let at: Vec<u64> = symbols
            .iter()
            .filter(|(_, n)| n.starts_with("_R") && n.ends_with(path))
            .map(|(a, _)| *a)
            .collect();
        assert!(
            !at.is_empty(),
            "no function ending in {path} in {}",
            bin.display()
        );
        assert!(
            at.iter().all(|a| hot.contains(a)),
            "{path} at {at:x?}, outside the hot code {hot:x?}"
        );
    }
    // The hot code is the smaller part.
    assert!(
        hot.end - hot.start < text,
        "hot code {hot:x?} against {text:#x} of the rest"
    );
    let script = fs::read_to_string(repo().join("scripts/hot-text.ld")).unwrap();
    let patterns: Vec<&str> = script
        .lines()
        .filter_map(|l| l.trim().strip_prefix("*(.text.")?.split_whitespace().next())
        .collect();
    assert!(patterns.len() > 300, "{} patterns", patterns.len());
    let stale: Vec<&&str> = patterns
        .iter()
        .filter(|p| {
            // The literal after the last `*` first: a cheap filter before the full match.
            let tail = p.rsplit('*').next().unwrap_or("");
            !symbols.iter().any(|(_, n)| n.ends_with(tail) && glob(p, n))
        })
        .collect();
    assert!(
        stale.len() * 5 <= patterns.len(),
        "{} of the {} functions in scripts/hot-text.ld are not in this build (run scripts/hot-text.sh): {:?}",
        stale.len(),
        patterns.len(),
        &stale[..stale.len().min(10)]
    );
}

// ------------------------------------------------------------------------------------ RPM

fn rpm_q(args: &[&str], pkg: &Path) -> String {
    must(Command::new("rpm").args(args).arg(pkg)).stdout
}

/// NVIDIA's RPM names that ours takes the place of (NVIDIA's packaging/rpm spec and
/// libnvidia-container's): provided and obsoleted, so dnf swaps them in one transaction.
const NVIDIA_RPMS: &[&str] = &[
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "nvidia-container-toolkit-operator-extensions",
    "libnvidia-container-tools",
    "nvidia-container-runtime",
    "nvidia-container-runtime-hook",
];

#[test]
fn rpm_metadata_contents_and_digests() {
    let pkg = rpm();
    let version = ok(&["--version"]).stdout;
    let version = version.trim().strip_prefix("gpuctk ").unwrap();
    assert_eq!(
        pkg.file_name().unwrap().to_str().unwrap(),
        format!("gpuctk-{version}-1.x86_64.rpm")
    );
    // rpm -K: the digests of header and payload check out (unsigned: nothing to sign with here).
    let k = rpm_q(&["-K"], pkg);
    assert!(k.trim().ends_with("digests OK"), "{k}");
    let provides = rpm_q(&["-qp", "--provides"], pkg);
    let obsoletes = rpm_q(&["-qp", "--obsoletes"], pkg);
    for name in NVIDIA_RPMS {
        assert!(provides.lines().any(|l| l == *name), "{name}: {provides}");
        assert!(obsoletes.lines().any(|l| l == *name), "{name}: {obsoletes}");
    }
    assert!(
        !provides.contains("libnvidia-container1") && !obsoletes.contains("libnvidia-container1"),
        "the library stays: {provides} {obsoletes}"
    );
    // Static: nothing but the scriptlets' shell is required.
    let requires = rpm_q(&["-qp", "--requires"], pkg);
    for r in requires.lines() {
        assert!(r == "/bin/sh" || r.starts_with("rpmlib("), "{requires}");
    }
    let scripts = rpm_q(&["-qp", "--scripts"], pkg);
    for s in ["postinstall", "preuninstall", "postuninstall"] {
        assert!(scripts.contains(&format!("{s} scriptlet")), "{scripts}");
    }
    // The .deb's files, at RPM distributions' paths for zsh and the license.
    let x = unpacked_deb();
    let mut from_deb = BTreeSet::new();
    let mut stack = vec![x.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                let p = format!("/{}", e.path().strip_prefix(x).unwrap().display());
                let p = p
                    .replace(
                        "/usr/share/zsh/vendor-completions/",
                        "/usr/share/zsh/site-functions/",
                    )
                    .replace("/usr/share/doc/gpuctk/", "/usr/share/licenses/gpuctk/");
                from_deb.insert(p);
            }
        }
    }
    let listed = rpm_q(&["-qlp"], pkg);
    let mut from_rpm: BTreeSet<String> = listed.lines().map(str::to_string).collect();
    assert!(from_rpm.remove("/usr/share/licenses/gpuctk"), "{listed}");
    assert_eq!(from_rpm, from_deb);
    // Owned by root, the binary executable, the names links to it.
    let dump = rpm_q(&["-qp", "--dump"], pkg);
    for line in dump.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!((f[5], f[6]), ("root", "root"), "{line}");
        if f[0] == "/usr/bin/gpuctk" {
            assert_eq!(f[4], "0100755", "{line}");
        } else if f[0].starts_with("/usr/bin/") {
            assert_eq!(f[10], "gpuctk", "{line}");
        }
    }
}

/// A root with busybox's shell and tools (static, no libc), /dev/null, and an empty rpm database.
fn rpm_root(t: &TestDir) -> PathBuf {
    let root = t.join("rpmroot");
    fs::create_dir_all(root.join("bin")).unwrap();
    fs::create_dir_all(root.join("dev")).unwrap();
    fs::create_dir_all(root.join("tmp")).unwrap();
    fs::create_dir_all(root.join("var/tmp")).unwrap();
    fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
    must(Command::new("/usr/sbin/chroot").arg(&root).args([
        "/bin/busybox",
        "--install",
        "-s",
        "/bin",
    ]));
    must(
        Command::new("mknod")
            .arg(root.join("dev/null"))
            .args(["c", "1", "3"]),
    );
    fs::set_permissions(root.join("dev/null"), fs::Permissions::from_mode(0o666)).unwrap();
    root
}

/// `rpm --root ROOT ...`: the root's own database; --nodeps to change it, since busybox's
/// /bin/sh is no package.
fn rpm_in(root: &Path, args: &[&str]) -> crate::package::Out {
    let change = ["-i", "-U", "-e", "-V"].contains(&args[0]);
    out(Command::new("rpm")
        .arg("--root")
        .arg(root)
        .args(["--dbpath", "/var/lib/rpm"])
        .args(if change { &["--nodeps"][..] } else { &[] })
        .args(args)
        .env_remove("NVIDIA_CTK_QUIET"))
}

fn rpm_must(root: &Path, args: &[&str]) -> crate::package::Out {
    let r = rpm_in(root, args);
    assert_eq!(r.code, 0, "rpm {args:?}:\n{}\n{}", r.stdout, r.stderr);
    r
}

fn chroot_must(root: &Path, argv: &[&str]) -> String {
    must(
        Command::new("/usr/sbin/chroot")
            .arg(root)
            .args(argv)
            .env_clear(),
    )
    .stdout
}

/// A stand-in for one of NVIDIA's RPMs: its name and version, the files it holds (path, shell
/// script text), and a %post.
fn stand_in(dir: &Path, name: &str, files: &[(&str, &str)], post: &str) -> PathBuf {
    let top = dir.join(format!("build-{name}"));
    fs::create_dir_all(&top).unwrap();
    let mut install = String::new();
    let mut list = String::new();
    for (path, text) in files {
        install.push_str(&format!(
            "mkdir -p %{{buildroot}}$(dirname {path})\nprintf '%s\\n' '{text}' >%{{buildroot}}{path}\nchmod 0755 %{{buildroot}}{path}\n"
        ));
        list.push_str(&format!("{path}\n"));
    }
    let spec = format!(
        "Name: {name}\nVersion: 1.17.0\nRelease: 1\nSummary: stand-in\nLicense: Apache-2.0\nAutoReqProv: no\n\
         %description\nstand-in for NVIDIA's {name}\n%install\n{install}\n%post\n{post}\n\
         %files\n%defattr(-,root,root,-)\n{list}"
    );
    let spec_path = top.join(format!("{name}.spec"));
    fs::write(&spec_path, spec).unwrap();
    must(
        Command::new("rpmbuild")
            .args(["-bb", "--quiet", "--target", "x86_64-linux", "--define"])
            .arg(format!("_topdir {}", top.display()))
            .args([
                "--define",
                "debug_package %{nil}",
                "--define",
                "__os_install_post %{nil}",
            ])
            .arg(&spec_path),
    );
    top.join(format!("RPMS/x86_64/{name}-1.17.0-1.x86_64.rpm"))
}

const CONFIG: &str = "etc/nvidia-container-runtime/config.toml";
const MARK: &str = "var/lib/gpuctk/config.toml.sha256";

#[test]
fn rpm_installs_upgrades_and_erases_in_a_root() {
    let t = TestDir::new();
    let root = rpm_root(&t);
    let v1 = rpm().to_path_buf();
    assert!(libcs_under(&root).is_empty());

    // Install: %post writes config.toml with the shipped binary (static: there is no libc in
    // this root) and records its checksum; every file is as packaged.
    rpm_must(&root, &["-i", v1.to_str().unwrap()]);
    let config = fs::read_to_string(root.join(CONFIG)).unwrap();
    assert_eq!(config, ok(&["config", "default"]).stdout);
    let mark = fs::read_to_string(root.join(MARK)).unwrap();
    assert!(mark.ends_with(&format!(" /{CONFIG}\n")), "{mark}");
    rpm_must(&root, &["-V", "gpuctk"]);
    let v = chroot_must(&root, &["/usr/bin/gpuctk", "--version"]);
    assert_eq!(v, ok(&["--version"]).stdout);
    // The admin configures docker with it.
    chroot_must(
        &root,
        &[
            "/usr/bin/nvidia-ctk",
            "runtime",
            "configure",
            "--runtime=docker",
        ],
    );
    let daemon = root.join("etc/docker/daemon.json");
    assert!(fs::read_to_string(&daemon)
        .unwrap()
        .contains("nvidia-container-runtime"));

    // Upgrade to release 2: %preun of the old one sees $1 = 1 and leaves the engines and the
    // config alone; every file is there, from the new package.
    let v2dir = t.join("v2");
    let r = must(package_sh(&v2dir).args(["--rpm", "--rpm-release", "2"]));
    let v2 = PathBuf::from(r.stdout.lines().last().unwrap().trim());
    rpm_must(&root, &["-U", v2.to_str().unwrap()]);
    let q = rpm_must(&root, &["-q", "gpuctk"]).stdout;
    assert!(q.trim().ends_with("-2.x86_64"), "{q}");
    rpm_must(&root, &["-V", "gpuctk"]);
    assert!(fs::read_to_string(&daemon)
        .unwrap()
        .contains("nvidia-container-runtime"));
    assert_eq!(fs::read_to_string(root.join(CONFIG)).unwrap(), config);
    assert_eq!(fs::read_to_string(root.join(MARK)).unwrap(), mark);

    // Erase: the runtime is taken out of docker's config, the unchanged config.toml and the
    // state go, and nothing of the package is left.
    let e = rpm_must(&root, &["-e", "gpuctk"]);
    assert!(
        e.stderr.contains("removed the nvidia runtime from: docker"),
        "{}",
        e.stderr
    );
    let d = fs::read_to_string(&daemon).unwrap();
    assert!(!d.contains("nvidia"), "{d}");
    assert!(!root.join(CONFIG).exists());
    assert!(!root.join("var/lib/gpuctk").exists());
    assert!(!root.join("usr/bin/nvidia-ctk").exists());
    assert_ne!(rpm_in(&root, &["-q", "gpuctk"]).code, 0);

    // An edited config.toml is the admin's: erase keeps it and says so.
    rpm_must(&root, &["-i", v1.to_str().unwrap()]);
    let mut edited = fs::read_to_string(root.join(CONFIG)).unwrap();
    edited.push_str("# the admin's\n");
    fs::write(root.join(CONFIG), &edited).unwrap();
    let e = rpm_must(&root, &["-e", "gpuctk"]);
    assert!(
        e.stderr
            .contains("kept /etc/nvidia-container-runtime/config.toml"),
        "{}",
        e.stderr
    );
    assert_eq!(fs::read_to_string(root.join(CONFIG)).unwrap(), edited);
}

#[test]
fn rpm_takes_the_place_of_nvidias_packages_and_gives_it_back() {
    let t = TestDir::new();
    let root = rpm_root(&t);
    // NVIDIA's toolkit as its packages lay it out; its %post writes config.toml (as
    // `nvidia-ctk config --in-place` does); the library package is not ours to replace.
    let nvidia_config = "# NVIDIA config.toml\n";
    let base = stand_in(
        &t.join("nv"),
        "nvidia-container-toolkit-base",
        &[
            ("/usr/bin/nvidia-ctk", "#!/bin/sh\necho nvidia-ctk"),
            (
                "/usr/bin/nvidia-container-runtime",
                "#!/bin/sh\necho runtime",
            ),
        ],
        &format!(
            "mkdir -p /etc/nvidia-container-runtime\n[ -e /{CONFIG} ] || printf '{}' >/{CONFIG}",
            nvidia_config.replace('\n', "\\n")
        ),
    );
    let toolkit = stand_in(
        &t.join("nv"),
        "nvidia-container-toolkit",
        &[(
            "/usr/bin/nvidia-container-runtime-hook",
            "#!/bin/sh\necho hook",
        )],
        ":",
    );
    let tools = stand_in(
        &t.join("nv"),
        "libnvidia-container-tools",
        &[("/usr/bin/nvidia-container-cli", "#!/bin/sh\necho cli")],
        ":",
    );
    let lib = stand_in(
        &t.join("nv"),
        "libnvidia-container1",
        &[("/usr/lib64/libnvidia-container.so.1", "not a library")],
        ":",
    );
    let nv: Vec<String> = [&base, &toolkit, &tools, &lib]
        .iter()
        .map(|p| p.to_str().unwrap().to_string())
        .collect();
    let mut args = vec!["-i"];
    args.extend(nv.iter().map(String::as_str));
    rpm_must(&root, &args);
    assert_eq!(
        fs::read_to_string(root.join(CONFIG)).unwrap(),
        nvidia_config
    );

    // `rpm -U gpuctk`: the obsoleted toolkit packages go in the same transaction (no file
    // conflict), the library stays, NVIDIA's config.toml is kept byte for byte and not ours.
    rpm_must(&root, &["-U", rpm().to_str().unwrap()]);
    let all = rpm_must(&root, &["-qa", "--qf", "%{NAME}\n"]).stdout;
    let installed: BTreeSet<&str> = all.lines().collect();
    assert_eq!(
        installed,
        BTreeSet::from(["gpuctk", "libnvidia-container1"]),
        "{all}"
    );
    assert_eq!(
        fs::read_link(root.join("usr/bin/nvidia-ctk")).unwrap(),
        Path::new("gpuctk")
    );
    assert_eq!(
        fs::read_to_string(root.join(CONFIG)).unwrap(),
        nvidia_config
    );
    assert!(!root.join(MARK).exists());
    chroot_must(
        &root,
        &[
            "/usr/bin/nvidia-ctk",
            "runtime",
            "configure",
            "--runtime=docker",
        ],
    );

    // Back to NVIDIA's in one transaction (as `dnf swap` does): NVIDIA's runtime now stands where
    // ours was, so the engines stay configured, and its config.toml stays.
    let mut args = vec!["-U", "--replacefiles"];
    args.extend(nv[..3].iter().map(String::as_str));
    rpm_must(&root, &args);
    let e = rpm_must(&root, &["-e", "gpuctk"]);
    assert!(
        !e.stderr.contains("removed the nvidia runtime"),
        "{}",
        e.stderr
    );
    let daemon = fs::read_to_string(root.join("etc/docker/daemon.json")).unwrap();
    assert!(daemon.contains("nvidia-container-runtime"), "{daemon}");
    assert_eq!(
        fs::read_to_string(root.join(CONFIG)).unwrap(),
        nvidia_config
    );
    let cli = fs::read_to_string(root.join("usr/bin/nvidia-ctk")).unwrap();
    assert!(cli.contains("echo nvidia-ctk"), "{cli}");
}

// ------------------------------------------------------------------------------------ NVML

/// `bin cdi generate` on `h` with config.toml's `[gpuctk] nvml-helper = helper`; `env` added.
fn generate_with_helper(
    t: &TestDir,
    bin: &Path,
    h: &Host,
    helper: &Path,
    env: &[(&str, &str)],
) -> Run {
    let name = helper.file_name().unwrap().to_str().unwrap();
    let config = t.join(&format!("{name}.toml"));
    fs::write(
        &config,
        format!("[gpuctk]\nnvml-helper = \"{}\"\n", helper.display()),
    )
    .unwrap();
    let mut c = Command::new(bin);
    c.args(["cdi", "generate", "--format", "json", "--config"])
        .arg(&config)
        .args(h.roots());
    for (k, _) in std::env::vars() {
        if k.starts_with("NVIDIA_") || k.starts_with("GPUCTK_") {
            c.env_remove(k);
        }
    }
    c.envs(env.iter().copied());
    ok_command(c, &["cdi", "generate", name])
}

/// The shipped pair: the static `gpuctk` (no dlopen in it) gets the MIG devices' UUIDs from the
/// mock host's fake NVML through the packaged helper, and `GPUCTK_NVML=off` still keeps NVML out.
#[test]
fn packaged_static_binary_asks_nvml_through_its_helper() {
    let t = TestDir::new();
    let x = unpacked_deb();
    let bin = x.join("usr/bin/gpuctk");
    let helper = x.join("usr/libexec/gpuctk/gpuctk-nvml");
    let h = crate::mig::mig_host(&t);
    let migs = crate::mig::migs(&h);
    assert_eq!(migs.len(), 3);

    let r = generate_with_helper(&t, &bin, &h, &helper, &[]);
    assert!(!r.stderr.contains("NVML"), "{}", r.stderr);
    for (uuid, ..) in &migs {
        assert!(
            r.stdout.contains(uuid.as_str()),
            "{uuid} not in {}",
            r.stdout
        );
    }

    // Roots relative to the working directory: the helper, run in `/`, gets the absolute path.
    assert_eq!(h.driver_root(), t.join("host").to_str().unwrap());
    let q = must(
        Command::new(&bin)
            .current_dir(t.path())
            .args(["nvml-query", "--config", "gpuctk-nvml.toml"])
            .args([
                "--driver-root",
                "host",
                "--dev-root",
                "host",
                "--proc-root",
                "host/proc",
            ]),
    );
    for (uuid, ..) in &migs {
        assert!(
            q.stdout.contains(uuid.as_str()),
            "{uuid} not in {}",
            q.stdout
        );
    }

    let off = generate_with_helper(&t, &bin, &h, &helper, &[("GPUCTK_NVML", "off")]);
    assert!(off.stderr.contains("GPUCTK_NVML=off"), "{}", off.stderr);
    assert!(off.stdout.contains("\"0:2\""), "{}", off.stdout);
    for (uuid, ..) in &migs {
        assert!(!off.stdout.contains(uuid.as_str()), "{uuid} with NVML off");
    }
}

/// A helper that is missing, fails, answers garbage, answers too much or hangs: `cdi generate`
/// still writes every GPU and MIG device procfs shows, without MIG UUIDs, and says why in one
/// line; the helper ran with an empty environment.
#[test]
fn a_bad_nvml_helper_is_one_warning_line() {
    let t = TestDir::new();
    let bin = static_bin();
    let h = crate::mig::mig_host(&t);
    let migs = crate::mig::migs(&h);
    let seen_env = t.join("env.txt");
    let script = |name: &str, body: &str| -> PathBuf {
        let p = t.join(name);
        fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        p
    };
    let cases: Vec<(PathBuf, &str)> = vec![
        (t.join("missing"), "No such file"),
        (
            script(
                "fails",
                "echo 'gpuctk-nvml: nvmlInit_v2: Driver Not Loaded (NVML error 9)' >&2\necho more >&2\nexit 1",
            ),
            "exit status: 1: gpuctk-nvml: nvmlInit_v2: Driver Not Loaded (NVML error 9)",
        ),
        (
            script(
                "garbage",
                &format!("/usr/bin/env > {}\necho '{{\"gpus\": \"all of them\"}}'", seen_env.display()),
            ),
            "not an NVML answer: invalid type",
        ),
        (
            script(
                "escape",
                "printf '%s\\n' '{\"gpus\":[{\"index\":0,\"minor\":0,\"uuid\":\"GPU-\\u001b[2J\",\"compute_capability\":null,\"brand\":null,\"architecture\":null,\"mig_enabled\":false,\"mig\":[]}]}'",
            ),
            "not an NVML answer: GPU UUID",
        ),
        (
            script("too-much", "exec /usr/bin/head -c 3000000 /dev/zero"),
            "answer longer than 1048576 bytes",
        ),
        // Not `exec`: the shell's child holds the pipe too, and goes with its process group.
        (script("hangs", "/bin/sleep 600\necho late"), "no answer within"),
    ];
    std::thread::scope(|s| {
        let runs: Vec<_> = cases
            .iter()
            .map(|(helper, _)| {
                let (t, bin, h) = (&t, &bin, &h);
                s.spawn(move || {
                    generate_with_helper(t, bin, h, helper, &[("GPUCTK_TEST_SENTINEL", "1")])
                })
            })
            .collect();
        for ((helper, why), run) in cases.iter().zip(runs) {
            let r = run.join().unwrap();
            let lines: Vec<&str> = r.stderr.lines().filter(|l| l.contains("NVML")).collect();
            assert_eq!(lines.len(), 1, "{helper:?}: {}", r.stderr);
            let line = lines[0];
            assert!(
                line.contains(&format!("NVML helper {}", helper.display()))
                    && line.contains(why)
                    && line.contains("MIG UUIDs, brand and architecture are unknown"),
                "{helper:?}: {line}"
            );
            assert!(r.stdout.contains("\"0:2\""), "{helper:?}: {}", r.stdout);
            for (uuid, ..) in &migs {
                assert!(!r.stdout.contains(uuid.as_str()), "{helper:?}: {uuid}");
            }
        }
    });
    let env = fs::read_to_string(&seen_env).unwrap();
    assert!(
        !env.contains("GPUCTK_TEST_SENTINEL") && !env.contains("PATH="),
        "the helper inherited: {env}"
    );
}
