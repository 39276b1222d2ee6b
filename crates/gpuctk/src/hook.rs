//! `nvidia-cdi-hook` (also `gpuctk hook`): the OCI createContainer hooks our CDI specs and
//! just-in-time edits declare, flag-compatible with NVIDIA's. Each reads the container state from
//! stdin, finds the container root and works inside it only through `openat2(RESOLVE_IN_ROOT)`.
//! An unknown hook or flag is a warning and exit 0, as NVIDIA does, so specs written by a newer
//! toolkit never break container creation.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use gpuctk_container::hooks;
use gpuctk_container::ops;
use gpuctk_container::root::Root;
use gpuctk_container::state::{container_root, State};
use gpuctk_core::ops::{parse_mode, InRootOp, Link, OpError};

/// The OCI hooks gpuctk's CDI specs use.
#[derive(Debug, Parser)]
#[command(name = "nvidia-cdi-hook", version, max_term_width = 100)]
struct HookCli {
    /// Debug logging
    #[arg(short = 'd', long, global = true)]
    debug: bool,
    /// Only errors
    #[arg(long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    hook: Hook,
}

#[derive(Debug, clap::Args)]
struct Target {
    /// The container's config.json, instead of the OCI state on stdin (for tests)
    #[arg(long, hide = true, value_name = "FILE")]
    container_spec: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Hook {
    /// Add the injected library folders to the container's ld.so.cache, written natively
    UpdateLdcache {
        /// A library folder inside the container (repeatable)
        #[arg(long = "folder", value_name = "DIR")]
        folders: Vec<String>,
        /// Accepted for compatibility and ignored: no ldconfig is ever run
        #[arg(long, value_name = "PATH")]
        ldconfig_path: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Create symlinks inside the container
    CreateSymlinks {
        /// TARGET::LINK (repeatable)
        #[arg(long = "link", value_name = "TARGET::LINK")]
        links: Vec<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Use the image's CUDA forward-compat libcuda when it is newer and supported on this driver
    EnableCudaCompat {
        /// The host's driver version
        #[arg(long, value_name = "VERSION")]
        host_driver_version: Option<String>,
        /// The host's CUDA version (Tegra)
        #[arg(long, value_name = "VERSION")]
        host_cuda_version: Option<String>,
        /// Where the image keeps its compat libraries
        #[arg(long, default_value = "/usr/local/cuda/compat", value_name = "DIR")]
        cuda_compat_container_root: String,
        #[command(flatten)]
        target: Target,
    },
    /// Change the mode of paths inside the container
    Chmod {
        /// Octal mode, e.g. 755
        #[arg(long, value_name = "MODE")]
        mode: String,
        /// A path inside the container (repeatable)
        #[arg(long = "path", value_name = "PATH")]
        paths: Vec<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Make the container's /proc/driver/nvidia/params say ModifyDeviceFiles: 0, so the driver
    /// inside never creates or changes device nodes
    DisableDeviceNodeModification {
        /// Where the host's procfs is, when not /proc (ours)
        #[arg(long, value_name = "DIR")]
        proc_root: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Limit EGL and Vulkan to the container's GPUs (the driver's application profile)
    UpdateApplicationProfile {
        #[command(flatten)]
        target: Target,
    },
    /// Do nothing
    #[command(hide = true)]
    Noop,
}

fn open_root(target: &Target) -> anyhow::Result<Root> {
    open_root_and_bundle(target).map(|(root, _)| root)
}

/// The container root and its bundle directory.
fn open_root_and_bundle(target: &Target) -> anyhow::Result<(Root, PathBuf)> {
    let (root_path, bundle) = match &target.container_spec {
        Some(spec) => {
            let bundle = spec
                .parent()
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("."));
            let state = State {
                oci_version: String::new(),
                id: String::new(),
                status: String::new(),
                pid: None,
                bundle,
                root: None,
                annotations: Default::default(),
            };
            (container_root(&state)?, state.bundle)
        }
        None => {
            let state = State::from_reader(std::io::stdin().lock())
                .context("reading the OCI state from stdin")?;
            (container_root(&state)?, state.bundle)
        }
    };
    let root = Root::open_container(&root_path)
        .with_context(|| format!("container root {}", root_path.display()))?;
    Ok((root, bundle))
}

/// `disable-device-node-modification`: the host's params, rewritten into the bundle, bound over
/// the container's (this hook runs in the container's mount namespace, before `pivot_root`).
fn disable_device_node_modification(
    proc_root: Option<&str>,
    target: &Target,
) -> anyhow::Result<()> {
    let proc_root = PathBuf::from(proc_root.unwrap_or(gpuctk_core::ops::DEFAULT_PROC_ROOT));
    let (root, bundle) = open_root_and_bundle(target)?;
    if !gpuctk_container::guard::shows_driver_procfs(&root)? {
        tracing::debug!("disable-device-node-modification: the container shows no driver procfs");
        return Ok(());
    }
    let bundle = if bundle.is_absolute() {
        bundle
    } else {
        std::env::current_dir()
            .context("the current directory")?
            .join(bundle)
    };
    let Some(mount) = gpuctk_container::guard::params_mount(&proc_root, &bundle)? else {
        tracing::debug!("disable-device-node-modification: nothing to change");
        return Ok(());
    };
    gpuctk_container::legacy::bind_into(&root, &mount)?;
    Ok(())
}

impl Hook {
    /// The typed operation and where to do it; `None` for `noop`.
    fn into_op(self) -> Result<Option<(InRootOp, Target)>, OpError> {
        Ok(Some(match self {
            Hook::UpdateLdcache {
                folders, target, ..
            } => (InRootOp::UpdateLdcache { folders }, target),
            Hook::CreateSymlinks { links, target } => (
                InRootOp::CreateSymlinks {
                    links: links
                        .iter()
                        .map(|l| Link::parse(l))
                        .collect::<Result<_, _>>()?,
                },
                target,
            ),
            Hook::EnableCudaCompat {
                host_driver_version,
                host_cuda_version,
                cuda_compat_container_root,
                target,
            } => (
                InRootOp::EnableCudaCompat {
                    host_driver_version,
                    host_cuda_version,
                    compat_root: cuda_compat_container_root,
                },
                target,
            ),
            Hook::Chmod {
                mode,
                paths,
                target,
            } => (
                InRootOp::Chmod {
                    mode: parse_mode(&mode)?,
                    paths,
                },
                target,
            ),
            Hook::DisableDeviceNodeModification { proc_root, target } => (
                InRootOp::DisableDeviceNodeModification { proc_root },
                target,
            ),
            Hook::UpdateApplicationProfile { target } => {
                (InRootOp::UpdateApplicationProfile, target)
            }
            Hook::Noop => return Ok(None),
        }))
    }
}

/// [`decode_with`], its answer checked against clap's alone, with a command of its own and with
/// one command reused for every call, as the shim uses it.
#[cfg(test)]
fn decode(args: &[String]) -> Result<Option<InRootOp>, OpError> {
    thread_local! {
        static REUSED: std::cell::RefCell<Option<clap::Command>> =
            const { std::cell::RefCell::new(None) };
    }
    let clap_alone = decode_clap(&mut decoder(), &plain(args));
    let fresh = decode_with(&mut None, args);
    let reused = REUSED.with(|c| decode_with(&mut c.borrow_mut(), args));
    assert_eq!(fresh, clap_alone, "{args:?}");
    assert_eq!(fresh, reused, "{args:?}");
    fresh
}

/// The hook's command line as clap builds it, for many [`decode_with`] calls: a static spec of
/// 64 GPUs holds 65 of our hooks, and building the command anew for each cost about 1 ms.
fn decoder() -> clap::Command {
    <HookCli as clap::CommandFactory>::command()
}

/// The one decoder of our hook entries, the hook's own command line: a spec hook's `args`
/// (`args[0]` is the program name; NVIDIA's older `nvidia-ctk hook NAME` form too) as a typed
/// operation. `Ok(None)` for what is not one of our operations as we know them (another
/// subcommand, an unknown flag, `noop`, a test's `--container-spec`): it stays a hook process.
/// `Err` for one of ours with a malformed value, which the hook would refuse too. `cmd` keeps
/// clap's command ([`decoder`]) for the calls after: built by the first call that needs clap.
pub fn decode_with(
    cmd: &mut Option<clap::Command>,
    args: &[String],
) -> Result<Option<InRootOp>, OpError> {
    let args = plain(args);
    if let Some(op) = canonical(&args) {
        return Ok(Some(op));
    }
    decode_clap(cmd.get_or_insert_with(decoder), &args)
}

/// One of our operations but `chmod` written exactly as [`InRootOp::to_args`] writes it (as
/// our specs and NVIDIA's hold them), decoded without clap, whose encoding clap decodes to that
/// same operation (`encode_then_decode_is_identity`); anything else goes to clap, whose answer
/// (and error) stands. A static spec of 64 GPUs holds a `create-symlinks` per GPU, whose parse by
/// clap cost about 14,000 instructions each, and one of each of the others, for which clap's
/// command cost a create of 8 GPUs 240,000 instructions.
fn canonical(args: &[&str]) -> Option<InRootOp> {
    let [_, name, rest @ ..] = args else {
        return None;
    };
    let op = match *name {
        // `--link VALUE` pairs, each link checked as it is read (encoding them all again to
        // compare would cost what it saves): a value that starts with `-` is written
        // `--link=VALUE`, and one that does not parse is clap's to refuse.
        "create-symlinks" => {
            if rest.len() % 2 != 0 {
                return None;
            }
            let links = rest
                .chunks_exact(2)
                .map(|p| match p {
                    ["--link", v] if !v.is_empty() && !v.starts_with('-') => Link::parse(v).ok(),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?;
            return Some(InRootOp::CreateSymlinks { links });
        }
        "enable-cuda-compat" => {
            let (mut driver, mut cuda, mut root) = (None, None, None);
            for a in rest {
                let (flag, v) = a.split_once('=')?;
                let slot = match flag {
                    "--host-driver-version" => &mut driver,
                    "--host-cuda-version" => &mut cuda,
                    "--cuda-compat-container-root" => &mut root,
                    _ => return None,
                };
                *slot = Some(v.to_string());
            }
            InRootOp::EnableCudaCompat {
                host_driver_version: driver,
                host_cuda_version: cuda,
                compat_root: root.unwrap_or_else(|| gpuctk_core::ops::DEFAULT_COMPAT_ROOT.into()),
            }
        }
        "update-ldcache" => InRootOp::UpdateLdcache {
            folders: rest
                .chunks(2)
                .map(|p| match p {
                    ["--folder", v] => Some(v.to_string()),
                    _ => None,
                })
                .collect::<Option<_>>()?,
        },
        "disable-device-node-modification" => InRootOp::DisableDeviceNodeModification {
            proc_root: match rest {
                [] => None,
                [a] => Some(a.strip_prefix("--proc-root=")?.to_string()),
                _ => return None,
            },
        },
        "update-application-profile" => InRootOp::UpdateApplicationProfile,
        _ => return None,
    };
    // The others are taken only where their own encoding is the arguments, to the byte; none
    // of them can hold a value clap would refuse.
    op.to_args()
        .iter()
        .map(String::as_str)
        .eq(args[1..].iter().copied())
        .then_some(op)
}

/// A spec hook's `args` with `hook` taken out of NVIDIA's older `nvidia-ctk hook NAME` form.
fn plain(args: &[String]) -> Vec<&str> {
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    if args.get(1) == Some(&"hook") {
        args.remove(1);
    }
    args
}

/// [`decode_with`] by clap, for arguments as [`plain`] gives them.
fn decode_clap(cmd: &mut clap::Command, args: &[&str]) -> Result<Option<InRootOp>, OpError> {
    let Ok(mut matches) = cmd.try_get_matches_from_mut(args) else {
        return Ok(None);
    };
    let Ok(cli) = <HookCli as clap::FromArgMatches>::from_arg_matches_mut(&mut matches) else {
        return Ok(None);
    };
    Ok(match cli.hook.into_op()? {
        Some((op, target)) if target.container_spec.is_none() => Some(op),
        _ => None,
    })
}

fn run(cli: HookCli) -> anyhow::Result<()> {
    let Some((op, target)) = cli.hook.into_op()? else {
        return Ok(());
    };
    if let InRootOp::DisableDeviceNodeModification { proc_root } = &op {
        return disable_device_node_modification(proc_root.as_deref(), &target);
    }
    let root = open_root(&target)?;
    match ops::run(&root, &op, &mut hooks::Pending::default())? {
        ops::Outcome::Ldcache(report) => {
            tracing::debug!(
                "update-ldcache: {} entries ({} replaced), {} links",
                report.entries.len(),
                report.replaced,
                report.links.len()
            );
            for n in &report.notes {
                tracing::debug!("update-ldcache: {n}");
            }
        }
        ops::Outcome::Compat(outcome) => tracing::debug!("enable-cuda-compat: {outcome}"),
        ops::Outcome::AppProfile(minors) => {
            tracing::debug!("update-application-profile: GPU minors {minors:?}")
        }
        ops::Outcome::Links(_) | ops::Outcome::Chmod => {}
    }
    Ok(())
}

/// The hooks' command line, for the man pages and completions.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    HookCli::command()
}

/// `nvidia-cdi-hook ARGS` (`args` with argv[0]).
pub fn main(args: &[OsString]) -> ExitCode {
    use clap::error::ErrorKind;
    let cli = match HookCli::try_parse_from(args) {
        Ok(c) => c,
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            e.exit()
        }
        Err(e) => {
            // A spec from a newer toolkit may name hooks or flags we do not know; creating
            // the container matters more than this hook.
            let first = e.render().to_string();
            let first = first
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("error: ")
                .to_string();
            let _ = writeln!(
                std::io::stderr(),
                "nvidia-cdi-hook: warning: ignored: {first}"
            );
            return ExitCode::SUCCESS;
        }
    };
    crate::logging::init(if cli.quiet {
        tracing::Level::ERROR
    } else if cli.debug {
        tracing::Level::DEBUG
    } else {
        tracing::Level::WARN
    });
    let name = args
        .get(1)
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_default();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let msg = crate::one_line::one_line(&e);
            let _ = writeln!(std::io::stderr(), "nvidia-cdi-hook {name}: error: {msg}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuctk_core::ops::DEFAULT_COMPAT_ROOT;

    /// xorshift64: a property test without a dependency, the same cases on every run.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        /// A value as a spec could hold one: odd characters, leading dashes, `=`, `::`, spaces.
        fn text(&mut self, absolute: bool) -> String {
            const PIECES: &[&str] = &[
                "lib", "cuda", ".so", ".1", "-", "--", "=", " ", "x", "é", "::", "/", "..", "a_b",
            ];
            let mut s = String::new();
            if absolute {
                s.push('/');
            }
            for _ in 0..1 + self.below(6) {
                s.push_str(PIECES[self.below(PIECES.len() as u64) as usize]);
            }
            s
        }
        fn list(&mut self, absolute: bool) -> Vec<String> {
            (0..self.below(4)).map(|_| self.text(absolute)).collect()
        }
    }

    fn random_op(r: &mut Rng) -> InRootOp {
        match r.below(6) {
            4 => InRootOp::DisableDeviceNodeModification {
                proc_root: (r.below(2) == 0).then(|| r.text(true)),
            },
            5 => InRootOp::UpdateApplicationProfile,
            0 => InRootOp::CreateSymlinks {
                links: (0..r.below(4))
                    .filter_map(|_| {
                        // `::` splits at its first occurrence: a target holds none.
                        let target = r.text(false).replace("::", ":");
                        Link::parse(&format!("{target}::{}", r.text(true))).ok()
                    })
                    .collect(),
            },
            1 => InRootOp::EnableCudaCompat {
                host_driver_version: (r.below(2) == 0).then(|| r.text(false)),
                host_cuda_version: (r.below(2) == 0).then(|| r.text(false)),
                compat_root: if r.below(2) == 0 {
                    DEFAULT_COMPAT_ROOT.to_string()
                } else {
                    r.text(true)
                },
            },
            2 => InRootOp::UpdateLdcache {
                folders: r.list(true),
            },
            _ => InRootOp::Chmod {
                mode: r.below(0o1000) as u32,
                paths: r.list(true),
            },
        }
    }

    #[test]
    fn encode_then_decode_is_identity() {
        let mut r = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..5000 {
            let op = random_op(&mut r);
            let args = op.to_hook("/usr/bin/nvidia-cdi-hook").args;
            assert_eq!(decode(&args), Ok(Some(op.clone())), "{args:?}");
        }
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// `decode` checks every answer against clap's alone; these are the edges of the
    /// `create-symlinks` read without clap.
    #[test]
    fn create_symlinks_read_without_clap_agree_with_clap() {
        let link = |v: &str| Link::parse(v).unwrap();
        // Err: any error.
        type Want = Result<Option<InRootOp>, ()>;
        let cases: &[(&[&str], Want)] = &[
            (
                &[
                    "--link",
                    "a::/b",
                    "--link",
                    "../card0::/dev/dri/by-path/x-card",
                ],
                Ok(Some(InRootOp::CreateSymlinks {
                    links: vec![link("a::/b"), link("../card0::/dev/dri/by-path/x-card")],
                })),
            ),
            (&[], Ok(Some(InRootOp::CreateSymlinks { links: vec![] }))),
            (
                &["--link=a::/b"],
                Ok(Some(InRootOp::CreateSymlinks {
                    links: vec![link("a::/b")],
                })),
            ),
            (
                &["--link=-a::/b"],
                Ok(Some(InRootOp::CreateSymlinks {
                    links: vec![link("-a::/b")],
                })),
            ),
            // Not a link clap accepts either: the hook would refuse it.
            (&["--link", "a::b"], Err(())),
            (&["--link", "a"], Err(())),
            // A dangling flag, another flag, a global flag, a test's target: clap decides.
            (&["--link"], Ok(None)),
            (&["--link", "a::/b", "--folder", "/x"], Ok(None)),
            (
                &["-d", "--link", "a::/b"],
                Ok(Some(InRootOp::CreateSymlinks {
                    links: vec![link("a::/b")],
                })),
            ),
            (
                &["--link", "a::/b", "--container-spec", "/c.json"],
                Ok(None),
            ),
        ];
        for (flags, want) in cases {
            for prefix in [&["nvidia-cdi-hook"][..], &["nvidia-ctk", "hook"]] {
                let mut args = s(prefix);
                args.push("create-symlinks".into());
                args.extend(s(flags));
                let got = decode(&args);
                match want {
                    Ok(w) => assert_eq!(&got, &Ok(w.clone()), "{args:?}"),
                    Err(()) => assert!(got.is_err(), "{args:?}: {got:?}"),
                }
            }
        }
    }

    /// The other hooks of a static spec read without clap: only their exact encoding is (the
    /// property test above takes that path for every one), and `decode` checks each answer
    /// against clap's alone, whichever path gave it.
    #[test]
    fn other_hooks_read_without_clap_only_as_encoded() {
        let cases: &[(&str, &[&str], bool)] = &[
            (
                "enable-cuda-compat",
                &["--host-driver-version=570.124.06"],
                true,
            ),
            ("enable-cuda-compat", &[], true),
            ("enable-cuda-compat", &["--host-driver-version="], true),
            (
                "enable-cuda-compat",
                &["--host-driver-version", "570"],
                false,
            ),
            (
                "enable-cuda-compat",
                &["--cuda-compat-container-root=/usr/local/cuda/compat"],
                false,
            ),
            (
                "enable-cuda-compat",
                &["--host-cuda-version=12.8", "--host-driver-version=570"],
                false,
            ),
            (
                "enable-cuda-compat",
                &["--host-driver-version=1", "--host-driver-version=2"],
                false,
            ),
            (
                "enable-cuda-compat",
                &["--host-driver-version=1", "-d"],
                false,
            ),
            (
                "update-ldcache",
                &["--folder", "/usr/lib64", "--folder", "/lib"],
                true,
            ),
            ("update-ldcache", &[], true),
            ("update-ldcache", &["--folder=/x"], false),
            ("update-ldcache", &["--folder"], false),
            (
                "update-ldcache",
                &["--folder", "/x", "--container-spec", "/c.json"],
                false,
            ),
            ("disable-device-node-modification", &[], true),
            (
                "disable-device-node-modification",
                &["--proc-root=/p"],
                true,
            ),
            (
                "disable-device-node-modification",
                &["--proc-root", "/p"],
                false,
            ),
            ("update-application-profile", &[], true),
            ("update-application-profile", &["-d"], false),
            ("update-application-profile", &["x"], false),
        ];
        for (name, flags, fast) in cases {
            for prefix in [&["nvidia-cdi-hook"][..], &["nvidia-ctk", "hook"]] {
                let mut args = s(prefix);
                args.push(name.to_string());
                args.extend(s(flags));
                let read = canonical(&plain(&args));
                assert_eq!(read.is_some(), *fast, "{args:?}");
                let got = decode(&args);
                if let Some(op) = read {
                    assert_eq!(got, Ok(Some(op)), "{args:?}");
                }
            }
        }
        // Every operation of the property test's kinds but `chmod` (clap's) is read so.
        let mut r = Rng(0x2545_F491_4F6C_DD1D);
        for _ in 0..2000 {
            let op = random_op(&mut r);
            let args = op.to_hook("/usr/bin/nvidia-cdi-hook").args;
            let fast = canonical(&plain(&args));
            let leading_dash = |v: &str| v.is_empty() || v.starts_with('-');
            let must = match &op {
                InRootOp::Chmod { .. } => false,
                InRootOp::UpdateLdcache { folders } => !folders.iter().any(|f| leading_dash(f)),
                InRootOp::CreateSymlinks { links } => {
                    !links.iter().any(|l| leading_dash(&l.to_string()))
                }
                _ => true,
            };
            if must {
                assert_eq!(fast.as_ref(), Some(&op), "{args:?}");
            }
        }
    }

    #[test]
    fn decodes_what_nvidia_specs_hold() {
        assert_eq!(
            decode(&s(&[
                "nvidia-cdi-hook",
                "create-symlinks",
                "--link",
                "libcuda.so.1::/usr/lib64/libcuda.so",
                "--link=a::/b",
            ])),
            Ok(Some(InRootOp::CreateSymlinks {
                links: vec![
                    Link::parse("libcuda.so.1::/usr/lib64/libcuda.so").unwrap(),
                    Link::parse("a::/b").unwrap(),
                ]
            }))
        );
        // Older toolkits: `nvidia-ctk hook NAME`, with an ldconfig path we never run.
        assert_eq!(
            decode(&s(&[
                "nvidia-ctk",
                "hook",
                "update-ldcache",
                "--ldconfig-path",
                "/sbin/ldconfig",
                "--folder",
                "/usr/lib64",
                "--folder=/x",
            ])),
            Ok(Some(InRootOp::UpdateLdcache {
                folders: s(&["/usr/lib64", "/x"])
            }))
        );
        assert_eq!(
            decode(&s(&["x", "chmod", "--mode", "755", "--path", "/dev/dri"])),
            Ok(Some(InRootOp::Chmod {
                mode: 0o755,
                paths: s(&["/dev/dri"])
            }))
        );
        // Not ours as we know them: stays a hook.
        for args in [
            &["x", "update-ldcache", "--bogus", "1"][..],
            &["x", "disable-device-node-modification", "--bogus"],
            &["x"],
            &["x", "noop"],
            &["x", "update-ldcache", "--container-spec", "/b/config.json"],
        ] {
            assert_eq!(decode(&s(args)), Ok(None), "{args:?}");
        }
        assert_eq!(
            decode(&s(&["x", "disable-device-node-modification"])),
            Ok(Some(InRootOp::DisableDeviceNodeModification {
                proc_root: None
            }))
        );
        assert_eq!(
            decode(&s(&["x", "update-application-profile"])),
            Ok(Some(InRootOp::UpdateApplicationProfile))
        );
        // Ours, malformed: refused as the hook would.
        assert!(decode(&s(&["x", "create-symlinks", "--link", "nolink"])).is_err());
        assert!(decode(&s(&["x", "chmod", "--mode", "99"])).is_err());
    }

    #[test]
    fn global_flags_defaults_and_hidden_flags() {
        // -d and --quiet are global: before or after the hook's name.
        for args in [
            &[
                "x",
                "-d",
                "enable-cuda-compat",
                "--host-driver-version=570.1",
            ][..],
            &[
                "x",
                "enable-cuda-compat",
                "--quiet",
                "--host-driver-version",
                "570.1",
            ],
        ] {
            assert_eq!(
                decode(&s(args)),
                Ok(Some(InRootOp::EnableCudaCompat {
                    host_driver_version: Some("570.1".into()),
                    host_cuda_version: None,
                    compat_root: DEFAULT_COMPAT_ROOT.into(),
                })),
                "{args:?}"
            );
        }
        assert_eq!(
            decode(&s(&[
                "x",
                "disable-device-node-modification",
                "--proc-root=/host/proc"
            ])),
            Ok(Some(InRootOp::DisableDeviceNodeModification {
                proc_root: Some("/host/proc".into())
            }))
        );
        // Modes are octal, with or without NVIDIA's `0o`; a value flag without its value is
        // not one of ours (the hook warns and exits 0).
        for (mode, want) in [("0o750", 0o750), ("0644", 0o644), ("7777", 0o7777)] {
            assert_eq!(
                decode(&s(&["x", "chmod", "--mode", mode, "--path=/dev/a"])),
                Ok(Some(InRootOp::Chmod {
                    mode: want,
                    paths: s(&["/dev/a"])
                })),
                "{mode}"
            );
        }
        assert!(decode(&s(&["x", "chmod", "--mode", "8", "--path=/dev/a"])).is_err());
        assert_eq!(decode(&s(&["x", "chmod", "--path", "/dev/a"])), Ok(None));
        assert_eq!(decode(&s(&["x", "create-symlinks", "--link"])), Ok(None));
        assert_eq!(decode(&s(&["x", "hook"])), Ok(None));
    }
}
