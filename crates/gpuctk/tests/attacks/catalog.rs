//! The attacks: what each image (or engine input) does, where it applies and what must happen.
//! Every attack is data: a `prepare` that edits a fresh [`Case`], the deliveries it applies to,
//! and the expected outcome per delivery.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::lab::{
    patch_dynamic, program_headers, sections, Case, Escape, Flip, Layout, GPUS, WANT,
};
use super::paths::Delivery;

/// Every delivery.
pub const ALL: &[Delivery] = &[
    Delivery::Shim,
    Delivery::Hook,
    Delivery::Cli,
    Delivery::Podman,
];
/// Inputs of the OCI config or of our config, which podman builds itself.
pub const NOT_PODMAN: &[Delivery] = &[Delivery::Shim, Delivery::Hook, Delivery::Cli];
/// Request sources in config.json: read by the shim and the prestart hook only
/// (`nvidia-container-cli` takes `--device`, podman `--device`).
pub const REQUEST: &[Delivery] = &[Delivery::Shim, Delivery::Hook];

/// Default bound on one container's start to its end.
pub const BOUND: Duration = Duration::from_secs(10);

/// What must happen.
#[derive(Clone, Debug)]
pub struct Expect {
    /// The GPUs the container sees when it runs (empty: no GPU node at all).
    pub want: Vec<u32>,
    /// A clear failure is an acceptable outcome.
    pub may_refuse: bool,
    /// Only a clear failure is.
    pub must_refuse: bool,
    /// When it runs with GPUs, libcuda must load and count them.
    pub libcuda: bool,
    /// Running at all is enough: the image sabotages itself (a flip also races the runtime's
    /// own mounts and the container's loader), only the host must stay intact.
    pub runs_any: bool,
}

impl Expect {
    /// Runs with GPUs 0 and 2 injected in its own root, or fails with a clear message.
    pub fn contained() -> Expect {
        Expect {
            want: WANT.to_vec(),
            may_refuse: true,
            must_refuse: false,
            libcuda: true,
            runs_any: false,
        }
    }
    /// Runs with GPUs 0 and 2: the input is harmless and must not stop the container.
    pub fn runs() -> Expect {
        Expect {
            may_refuse: false,
            ..Expect::contained()
        }
    }
    /// Fails with a clear message.
    pub fn refused() -> Expect {
        Expect {
            want: Vec::new(),
            may_refuse: true,
            must_refuse: true,
            libcuda: false,
            runs_any: false,
        }
    }
    /// Runs and sees exactly these GPUs.
    pub fn grant(want: &[u32]) -> Expect {
        Expect {
            want: want.to_vec(),
            may_refuse: false,
            must_refuse: false,
            libcuda: true,
            runs_any: false,
        }
    }
    /// Runs in whatever state the image leaves itself, or fails clearly.
    pub fn harmless() -> Expect {
        Expect {
            runs_any: true,
            ..Expect::contained()
        }
    }
}

type Prepare = Box<dyn Fn(&mut Case)>;
type ExpectFn = Box<dyn Fn(Delivery) -> Expect>;

pub struct Attack {
    pub name: String,
    pub what: String,
    pub layout: Layout,
    pub on: &'static [Delivery],
    pub prepare: Prepare,
    pub expect: ExpectFn,
    pub bound: Duration,
    /// The bound is on top of what the runtime alone takes on the same input.
    pub baseline: bool,
}

fn attack(
    name: impl Into<String>,
    what: impl Into<String>,
    on: &'static [Delivery],
    prepare: impl Fn(&mut Case) + 'static,
    expect: Expect,
) -> Attack {
    Attack {
        name: name.into(),
        what: what.into(),
        layout: Layout::Debian,
        on,
        prepare: Box::new(prepare),
        expect: Box::new(move |_| expect.clone()),
        bound: BOUND,
        baseline: false,
    }
}

/// The benign image: proves injection works on the path before any attack runs.
pub fn control() -> Attack {
    attack(
        "control",
        "the mock image unchanged: GPUs 0 and 2 injected, nvidia-smi lists them, libcuda loads",
        ALL,
        |_| {},
        Expect::runs(),
    )
}

pub fn all() -> Vec<Attack> {
    let mut v = Vec::new();
    symlink_escapes(&mut v);
    flips(&mut v);
    special_files(&mut v);
    malformed_elf(&mut v);
    chains(&mut v);
    loader_env(&mut v);
    planted_ldconfig(&mut v);
    section1_inputs(&mut v);
    policy_matrix(&mut v);
    v
}

// ------------------------------------------------------------------ symlinks out of the root

/// What an image holds at `rel` before it is turned into a symlink.
fn populate(c: &Case, rel: &str) {
    match rel {
        "usr/local/cuda/compat" => c.install(
            &c.lab.compat_lib,
            "usr/local/cuda/compat/libcuda.so.575.51.03",
        ),
        "dev/dri" => c.write("dev/dri/card0", b"not a device\n"),
        "etc/ld.so.conf.d" => c.write("etc/ld.so.conf.d/zz-image.conf", b"/opt/image/lib\n"),
        _ if fs::symlink_metadata(c.at(rel)).is_ok() => {}
        _ => c.mkdir(rel),
    }
}

fn symlink_escapes(v: &mut Vec<Attack>) {
    let all_kinds = [
        Escape::Absolute,
        Escape::ClimbToBundle,
        Escape::ProcSelfRoot,
        Escape::ClimbFar,
    ];
    let three = &all_kinds[..3];
    let dirs: &[(&str, Layout, &[Escape])] = &[
        ("etc", Layout::Debian, &all_kinds),
        ("etc/ld.so.conf.d", Layout::Debian, &all_kinds),
        ("etc/ld.so.cache", Layout::Debian, &all_kinds),
        ("usr/lib/x86_64-linux-gnu", Layout::Debian, &all_kinds),
        ("usr/lib64", Layout::Rhel, &all_kinds),
        ("usr/local/cuda/compat", Layout::Debian, &all_kinds),
        ("usr/bin", Layout::Debian, three),
        ("usr/lib/firmware/nvidia", Layout::Debian, three),
        ("dev", Layout::Debian, three),
        ("dev/dri", Layout::Debian, three),
        ("run/nvidia-persistenced", Layout::Debian, three),
        ("var/run", Layout::Debian, three),
    ];
    for &(rel, layout, kinds) in dirs {
        for &kind in kinds {
            let mut a = attack(
                format!("symlink-{}-{}", kind.tag(), rel.replace('/', "_")),
                format!(
                    "/{rel} is a symlink ({}) to a sentinel copy outside the root; resolved in the root it reaches a working copy",
                    kind.tag()
                ),
                ALL,
                move |c| {
                    populate(c, rel);
                    c.redirect(rel, kind);
                },
                Expect::contained(),
            );
            a.layout = layout;
            v.push(a);
        }
    }
}

// ------------------------------------------------------------------ swapped while hooks run

fn flips(v: &mut Vec<Attack>) {
    for rel in [
        "etc/ld.so.conf.d",
        "etc",
        "etc/ld.so.cache",
        "usr/lib/x86_64-linux-gnu",
        "usr/local/cuda/compat",
    ] {
        v.push(attack(
            format!("flip-{}", rel.replace('/', "_")),
            format!("a thread swaps /{rel} with a symlink to a sentinel copy in a loop while the container is created"),
            ALL,
            move |c| {
                populate(c, rel);
                let mirror = c.at(c.sentinel_of(rel).to_str().unwrap());
                fs::create_dir_all(mirror.parent().unwrap()).unwrap();
                let st = Command::new("cp").arg("-a").arg(c.at(rel)).arg(&mirror).status().unwrap();
                assert!(st.success());
                c.flip = Some(Flip {
                    rel: rel.to_string(),
                    target: c.sentinel_of(rel),
                });
            },
            Expect::harmless(),
        ));
    }
}

// ------------------------------------------------------------------ FIFOs, sockets, devices, sparse files

const HUGE: u64 = 100 << 30;

fn special_files(v: &mut Vec<Attack>) {
    type Make = fn(&mut Case, &str);
    let kinds: &[(&str, Make)] = &[
        ("fifo", |c, r| c.mkfifo(r)),
        ("socket", |c, r| c.mksocket(r)),
        ("chardev-zero", |c, r| c.mkchar(r, 1, 5)),
    ];
    let places: &[(&str, &str)] = &[
        ("ld.so.cache", "etc/ld.so.cache"),
        ("compat-conf", "etc/ld.so.conf.d/00-compat-evil.conf"),
        ("lib", "usr/lib/x86_64-linux-gnu/libevil.so.1"),
        ("compat-lib", "usr/local/cuda/compat/libcuda.so.575.51.03"),
    ];
    for &(pname, rel) in places {
        for &(kname, make) in kinds {
            v.push(attack(
                format!("{kname}-as-{pname}"),
                format!("/{rel} is a {kname}"),
                ALL,
                move |c| make(c, rel),
                Expect::contained(),
            ));
        }
    }
    v.push(attack(
        "fifo-as-ld.so.conf",
        "/etc/ld.so.conf is a FIFO",
        ALL,
        |c| c.mkfifo("etc/ld.so.conf"),
        Expect::contained(),
    ));
    v.push(attack(
        "fifo-behind-lib-symlink",
        "a library symlink libfifo.so.1 -> a FIFO in the library folder",
        ALL,
        |c| {
            c.mkfifo("usr/lib/x86_64-linux-gnu/fifo");
            c.symlink("usr/lib/x86_64-linux-gnu/libfifo.so.1", "fifo");
        },
        Expect::contained(),
    ));
    v.push(attack(
        "fifo-as-compat-dir",
        "/usr/local/cuda/compat is a FIFO",
        ALL,
        |c| c.mkfifo("usr/local/cuda/compat"),
        Expect::contained(),
    ));
    v.push(attack(
        "sparse-100g-ld.so.cache",
        "/etc/ld.so.cache is the image's valid cache followed by a hole to 100 GB",
        ALL,
        |c| {
            let head = fs::read(c.at("etc/ld.so.cache")).unwrap();
            c.sparse("etc/ld.so.cache", &head, HUGE);
        },
        Expect::contained(),
    ));
    v.push(attack(
        "sparse-100g-compat-conf",
        "/etc/ld.so.conf.d/00-compat-sparse.conf: one folder, then a hole to 100 GB",
        ALL,
        |c| {
            c.sparse(
                "etc/ld.so.conf.d/00-compat-sparse.conf",
                b"/usr/local/cuda/compat\n",
                HUGE,
            )
        },
        Expect::contained(),
    ));
    v.push(attack(
        "sparse-100g-lib",
        "libsparse.so.1 in the library folder: a real library's first 16 KiB, then a hole to 100 GB",
        ALL,
        |c| {
            let lib = fs::read(&c.lab.compat_lib).unwrap();
            c.sparse("usr/lib/x86_64-linux-gnu/libsparse.so.1", &lib[..16 << 10], HUGE);
        },
        Expect::contained(),
    ));
    v.push(attack(
        "sparse-100g-compat-lib",
        "the compat libcuda is a valid forward-compat library extended by a hole to 100 GB",
        ALL,
        |c| {
            let lib = fs::read(&c.lab.compat_lib).unwrap();
            c.sparse("usr/local/cuda/compat/libcuda.so.575.51.03", &lib, HUGE);
        },
        Expect::contained(),
    ));
}

// ------------------------------------------------------------------ malformed ELF

fn patch(bytes: &mut [u8], at: usize, value: &[u8]) {
    bytes[at..at + value.len()].copy_from_slice(value);
}

fn malformed_elf(v: &mut Vec<Attack>) {
    type Mutate = fn(&mut Vec<u8>);
    let muts: &[(&str, &str, Mutate)] = &[
        ("truncated-64", "only the 64-byte ELF header", |b| {
            b.truncate(64)
        }),
        ("truncated-half", "the first half of the file", |b| {
            let n = b.len() / 2;
            b.truncate(n)
        }),
        (
            "shoff-past-end",
            "e_shoff points past the end of the file",
            |b| {
                let n = b.len() as u64 + 4096;
                patch(b, 0x28, &n.to_le_bytes())
            },
        ),
        ("shoff-near-max", "e_shoff = 2^64 - 16", |b| {
            patch(b, 0x28, &(u64::MAX - 15).to_le_bytes())
        }),
        ("shnum-max", "e_shnum = 65535", |b| {
            patch(b, 0x3c, &0xffffu16.to_le_bytes())
        }),
        ("shstrndx-out-of-range", "e_shstrndx = 65534", |b| {
            patch(b, 0x3e, &0xfffeu16.to_le_bytes())
        }),
        ("phoff-near-max", "e_phoff = 2^64 - 8", |b| {
            patch(b, 0x20, &(u64::MAX - 7).to_le_bytes())
        }),
        ("phnum-max", "e_phnum = 65535", |b| {
            patch(b, 0x38, &0xffffu16.to_le_bytes())
        }),
        (
            "note-namesz-huge",
            "the forward-compat note's namesz = 0xfffffff0",
            |b| {
                let s = sections(b)
                    .into_iter()
                    .find(|s| s.0 == ".note.cuda.fwd_compatibility")
                    .unwrap();
                patch(b, s.2 as usize, &0xffff_fff0u32.to_le_bytes())
            },
        ),
        (
            "note-descsz-huge",
            "the forward-compat note's descsz = 0xfffffff0",
            |b| {
                let s = sections(b)
                    .into_iter()
                    .find(|s| s.0 == ".note.cuda.fwd_compatibility")
                    .unwrap();
                patch(b, s.2 as usize + 4, &0xffff_fff0u32.to_le_bytes())
            },
        ),
        (
            "note-offset-overflow",
            "the note section's sh_offset = 2^64 - 8",
            |b| {
                let s = sections(b)
                    .into_iter()
                    .find(|s| s.0 == ".note.cuda.fwd_compatibility")
                    .unwrap();
                patch(b, s.4 + 24, &(u64::MAX - 7).to_le_bytes())
            },
        ),
        ("note-size-huge", "the note section's sh_size = 2^62", |b| {
            let s = sections(b)
                .into_iter()
                .find(|s| s.0 == ".note.cuda.fwd_compatibility")
                .unwrap();
            patch(b, s.4 + 32, &(1u64 << 62).to_le_bytes())
        }),
        (
            "note-json-not-object",
            "the note's JSON payload starts with [ instead of {",
            |b| {
                let s = sections(b)
                    .into_iter()
                    .find(|s| s.0 == ".note.cuda.fwd_compatibility")
                    .unwrap();
                let start = s.2 as usize;
                let end = start + s.3 as usize;
                let brace = b[start..end].iter().position(|&x| x == b'{').unwrap();
                b[start + brace] = b'[';
            },
        ),
        (
            "elf32-class",
            "EI_CLASS says 32-bit over a 64-bit layout",
            |b| b[4] = 1,
        ),
        (
            "load-offset-near-max",
            "every PT_LOAD's p_offset = 2^64 - 1",
            |b| {
                for (t, h, _) in program_headers(b) {
                    if t == 1 {
                        patch(b, h + 8, &u64::MAX.to_le_bytes());
                    }
                }
            },
        ),
        ("strtab-near-max", "DT_STRTAB = 2^64 - 256", |b| {
            patch_dynamic(b, 5, u64::MAX - 255)
        }),
        ("soname-near-max", "DT_SONAME = 2^64 - 2", |b| {
            patch_dynamic(b, 14, u64::MAX - 1)
        }),
    ];
    for &(tag, what, m) in muts {
        v.push(attack(
            format!("elf-compat-{tag}"),
            format!("the compat libcuda under /usr/local/cuda/compat: {what}"),
            ALL,
            move |c| {
                let mut b = fs::read(&c.lab.compat_lib).unwrap();
                m(&mut b);
                c.write("usr/local/cuda/compat/libcuda.so.575.51.03", &b);
            },
            Expect::contained(),
        ));
    }
    for &(tag, what, m) in muts.iter().filter(|(t, _, _)| {
        [
            "truncated-64",
            "shoff-near-max",
            "phoff-near-max",
            "phnum-max",
            "load-offset-near-max",
            "strtab-near-max",
            "soname-near-max",
        ]
        .contains(t)
    }) {
        v.push(attack(
            format!("elf-lib-{tag}"),
            format!("a library libbad.so.1 in the injected library folder: {what}"),
            ALL,
            move |c| {
                let mut b = fs::read(&c.lab.compat_lib).unwrap();
                m(&mut b);
                c.write("usr/lib/x86_64-linux-gnu/libbad.so.1", &b);
            },
            Expect::contained(),
        ));
    }
}

// ------------------------------------------------------------------ symlink chains

fn chains(v: &mut Vec<Attack>) {
    v.push(attack(
        "chain-cycle-ld.so.cache",
        "/etc/ld.so.cache -> .a -> .b -> .a",
        ALL,
        |c| {
            c.symlink("etc/.b", ".a");
            c.symlink("etc/.a", ".b");
            c.symlink("etc/ld.so.cache", ".a");
        },
        Expect::contained(),
    ));
    v.push(attack(
        "chain-self-ld.so.conf.d",
        "/etc/ld.so.conf.d -> ld.so.conf.d",
        ALL,
        |c| c.symlink("etc/ld.so.conf.d", "ld.so.conf.d"),
        Expect::contained(),
    ));
    v.push(attack(
        "chain-1000-ld.so.cache",
        "/etc/ld.so.cache is the first of 1000 chained symlinks ending at the real cache",
        ALL,
        |c| {
            let real = fs::read(c.at("etc/ld.so.cache")).unwrap();
            c.write("etc/chain/real", &real);
            for i in 0..1000 {
                let next = if i == 999 {
                    "real".to_string()
                } else {
                    format!("l{}", i + 1)
                };
                c.symlink(&format!("etc/chain/l{i}"), next);
            }
            c.symlink("etc/ld.so.cache", "chain/l0");
        },
        Expect::contained(),
    ));
    v.push(attack(
        "chain-39-lib",
        "libchain.so.1 in the library folder reaches a real library through 39 symlinks (under the kernel's 40)",
        ALL,
        |c| {
            c.install(&c.lab.compat_lib, "usr/lib/x86_64-linux-gnu/chain/real");
            for i in 0..38 {
                let next = if i == 37 { "real".to_string() } else { format!("l{}", i + 1) };
                c.symlink(&format!("usr/lib/x86_64-linux-gnu/chain/l{i}"), next);
            }
            c.symlink("usr/lib/x86_64-linux-gnu/libchain.so.1", "chain/l0");
        },
        Expect::contained(),
    ));
    v.push(attack(
        "chain-cycle-compat-lib",
        "the compat libcuda is a symlink cycle",
        ALL,
        |c| {
            c.symlink("usr/local/cuda/compat/x", "y");
            c.symlink("usr/local/cuda/compat/y", "x");
            c.symlink("usr/local/cuda/compat/libcuda.so.575.51.03", "x");
        },
        Expect::contained(),
    ));
    v.push(attack(
        "chain-cycle-compat-dir",
        "/usr/local/cuda/compat -> compat2 -> compat",
        ALL,
        |c| {
            c.symlink("usr/local/cuda/compat2", "compat");
            c.symlink("usr/local/cuda/compat", "compat2");
        },
        Expect::contained(),
    ));
    v.push(attack(
        "chain-long-target",
        "a compat conf file whose symlink target is 4000 bytes of a/../",
        ALL,
        |c| {
            let t = "a/../".repeat(800);
            c.mkdir("etc/ld.so.conf.d/a");
            c.symlink("etc/ld.so.conf.d/00-compat-long.conf", t + "zz.conf");
        },
        Expect::contained(),
    ));
    v.push(attack(
        "dir-loop-in-libdir",
        "libloop.so is a symlink to the library folder itself",
        ALL,
        |c| c.symlink("usr/lib/x86_64-linux-gnu/libloop.so", "."),
        Expect::contained(),
    ));
    v.push(attack(
        "libdir-20000-files",
        "20,000 empty libjunkN.so.1 files in the library folder",
        ALL,
        |c| {
            for i in 0..20_000 {
                c.write(&format!("usr/lib/x86_64-linux-gnu/libjunk{i}.so.1"), b"");
            }
        },
        Expect::contained(),
    ));
}

// ------------------------------------------------------------------ loader variables

fn host_view(c: &Case, rel: &str) -> String {
    c.at(rel).to_string_lossy().into_owned()
}

fn loader_env(v: &mut Vec<Attack>) {
    v.push(attack(
        "env-ld-preload",
        "LD_PRELOAD names the image's marker library, by its container path and by its host path",
        ALL,
        |c| {
            c.install(&c.lab.evil, "evil/libevil.so");
            c.mkdir("evil-ran");
            let host = host_view(c, "evil/libevil.so");
            c.env(&format!("LD_PRELOAD=/evil/libevil.so {host}"));
            c.in_root_marker = true;
        },
        Expect::runs(),
    ));
    v.push(attack(
        "env-ld-audit",
        "LD_AUDIT names the image's marker library (a valid audit module), container and host paths",
        ALL,
        |c| {
            c.install(&c.lab.evil, "evil/libevil.so");
            c.mkdir("evil-ran");
            let host = host_view(c, "evil/libevil.so");
            c.env(&format!("LD_AUDIT=/evil/libevil.so:{host}"));
            c.in_root_marker = true;
        },
        Expect::runs(),
    ));
    v.push(attack(
        "env-gconv-path",
        "GCONV_PATH names an image folder with a gconv-modules file loading the marker library",
        ALL,
        |c| {
            c.install(&c.lab.evil, "evil/gconv/EVIL.so");
            c.write(
                "evil/gconv/gconv-modules",
                b"module  INTERNAL  EVIL//  EVIL  1\nmodule  EVIL//  INTERNAL  EVIL  1\nalias UTF-8// EVIL//\n",
            );
            let host = host_view(c, "evil/gconv");
            c.env(&format!("GCONV_PATH=/evil/gconv:{host}"));
            c.env("LANG=C.UTF-8");
        },
        Expect::runs(),
    ));
    v.push(attack(
        "env-ld-library-path",
        "LD_LIBRARY_PATH names a host-visible image folder with marker libnvidia-ml.so.1, libcuda.so.1 and libgcc_s.so.1",
        ALL,
        |c| {
            for n in ["libnvidia-ml.so.1", "libcuda.so.1", "libgcc_s.so.1"] {
                c.install(&c.lab.evil, &format!("evil/lib/{n}"));
            }
            let host = host_view(c, "evil/lib");
            c.env(&format!("LD_LIBRARY_PATH={host}"));
        },
        Expect::runs(),
    ));
}

// ------------------------------------------------------------------ an ldconfig in the image

fn plant_ldconfig(c: &Case) {
    let script = format!(
        "#!/bin/sh\necho \"image ldconfig ran: $0 $*\" > {}/ldconfig-$$\nexit 0\n",
        c.lab.markers.display()
    );
    for rel in [
        "usr/sbin/ldconfig",
        "usr/sbin/ldconfig.real",
        "usr/local/sbin/ldconfig",
        "usr/bin/ldconfig",
    ] {
        c.remove(rel);
        c.write(rel, script.as_bytes());
        fs::set_permissions(c.at(rel), fs::Permissions::from_mode(0o755)).unwrap();
    }
}

fn planted_ldconfig(v: &mut Vec<Attack>) {
    v.push(attack(
        "ldconfig-in-image",
        "/sbin/ldconfig, /usr/sbin/ldconfig(.real), /usr/local/sbin/ldconfig write a host marker when run",
        ALL,
        |c| plant_ldconfig(c),
        Expect::runs(),
    ));
    v.push(attack(
        "ldconfig-in-image-configured",
        "the same, with [nvidia-container-cli] ldconfig = \"/sbin/ldconfig\" (NVIDIA: the container's)",
        NOT_PODMAN,
        |c| {
            plant_ldconfig(c);
            c.config_cli = "ldconfig = \"/sbin/ldconfig\"".into();
        },
        Expect::runs(),
    ));
}

// ------------------------------------------------------------------ the inputs of issue 8 §1

fn big_compat_conf(seed: char) -> Vec<u8> {
    let mut s = String::with_capacity(1 << 20);
    let mut i = 0u32;
    while s.len() < (1 << 20) - 32 {
        s.push_str(&format!("/opt/{seed}/{i:07}\n"));
        i += 1;
    }
    s.into_bytes()
}

fn junk_spec_json(bytes: usize) -> Vec<u8> {
    let mut s = String::from(r#"{"cdiVersion":"0.5.0","kind":"example.com/junk","devices":["#);
    let mut i = 0;
    while s.len() < bytes {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&format!(
            r#"{{"name":"d{i}","containerEdits":{{"env":["JUNK_{i}=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"]}}}}"#
        ));
        i += 1;
    }
    s.push_str("]}");
    s.into_bytes()
}

fn nested_yaml(depth: usize) -> Vec<u8> {
    let mut s = String::from("cdiVersion: 0.5.0\nkind: example.com/nested\ndevices: ");
    s.push_str(&"[".repeat(depth));
    s.push_str(&"]".repeat(depth));
    s.push('\n');
    s.into_bytes()
}

fn cdi_request(c: &mut Case) {
    c.set_request("nvidia.com/gpu=0,nvidia.com/gpu=2");
    c.cli_devices = "nvidia.com/gpu=0,nvidia.com/gpu=2".into();
}

fn section1_inputs(v: &mut Vec<Attack>) {
    v.push(attack(
        "conf-1mb-compat",
        "one 1 MB /etc/ld.so.conf.d/00-compat-x.conf listing 80,000 distinct folders",
        ALL,
        |c| c.write("etc/ld.so.conf.d/00-compat-x.conf", &big_compat_conf('x')),
        Expect::contained(),
    ));
    v.push(attack(
        "conf-4x1mb-compat",
        "four such 1 MB 00-compat-*.conf files",
        ALL,
        |c| {
            for s in ['a', 'b', 'c', 'd'] {
                c.write(
                    &format!("etc/ld.so.conf.d/00-compat-{s}.conf"),
                    &big_compat_conf(s),
                );
            }
        },
        Expect::contained(),
    ));
    v.push(attack(
        "nvidia-visible-devices-150k",
        "NVIDIA_VISIBLE_DEVICES with 150,000 distinct indices (1 MB); --device with 20,000 for the CLI (argv caps one argument at 128 KiB)",
        NOT_PODMAN,
        |c| {
            let list: Vec<String> = (0..150_000).map(|i| i.to_string()).collect();
            c.set_request(&list.join(","));
            c.cli_devices = list[..20_000].join(",");
        },
        Expect {
            want: WANT.to_vec(),
            ..Expect::refused()
        },
    ));
    let mut a = attack(
        "config-json-96mb",
        "a 96 MB config.json (one 96 MB annotation); runc alone needs about 12 s for it, so the bound is on top of that",
        NOT_PODMAN,
        |c| c.annotate("org.example/pad", &"x".repeat(96 << 20)),
        Expect::contained(),
    );
    a.baseline = true;
    v.push(a);
    v.push(attack(
        "cdi-spec-32mb-beside",
        "a valid 32 MB CDI spec of another kind in the spec dir; the request names nvidia.com/gpu devices",
        NOT_PODMAN,
        |c| {
            fs::write(c.cdi_dir.join("junk.json"), junk_spec_json(32 << 20)).unwrap();
            cdi_request(c);
        },
        Expect::runs(),
    ));
    v.push(attack(
        "cdi-spec-nested-yaml-beside",
        "a 200 KB CDI spec of 100,000 nested YAML lists in the spec dir; the request names nvidia.com/gpu devices",
        NOT_PODMAN,
        |c| {
            fs::write(c.cdi_dir.join("nested.yaml"), nested_yaml(100_000)).unwrap();
            cdi_request(c);
        },
        Expect::runs(),
    ));
    v.push(attack(
        "cdi-spec-32mb-unused",
        "the 32 MB and the nested specs in the spec dir; the request is by index and does not use CDI",
        NOT_PODMAN,
        |c| {
            fs::write(c.cdi_dir.join("junk.json"), junk_spec_json(32 << 20)).unwrap();
            fs::write(c.cdi_dir.join("nested.yaml"), nested_yaml(100_000)).unwrap();
        },
        Expect::runs(),
    ));
    for (tag, what) in [
        ("slash", "root.path (the CLI's ROOTFS) is \"/\""),
        ("symlink", "root.path (ROOTFS) is a symlink to /"),
        ("dotdot", "root.path (ROOTFS) is /usr/.."),
        (
            "climb",
            "root.path is ../../../../../../../.. (relative to the bundle: /)",
        ),
    ] {
        v.push(attack(
            format!("host-root-{tag}"),
            format!("{what}: our programs are run directly (runc and crun stop earlier), in a private mount namespace chrooted into an overlay of the host's /"),
            NOT_PODMAN,
            move |c| {
                c.host_root = Some(match tag {
                    "slash" => "/".to_string(),
                    "symlink" => super::paths::host_root_symlink(c).to_string_lossy().into_owned(),
                    "dotdot" => "/usr/..".to_string(),
                    _ => "../../../../../../../..".to_string(),
                });
            },
            Expect::refused(),
        ));
    }
}

// ------------------------------------------------------------------ request sources × policy

/// Request sources of one container.
#[derive(Clone, Copy, Debug)]
struct Sources {
    tag: &'static str,
    annotation: Option<&'static str>,
    mount: Option<u32>,
    env: Option<&'static str>,
}

const SOURCES: &[Sources] = &[
    Sources {
        tag: "env-all",
        annotation: None,
        mount: None,
        env: Some("all"),
    },
    Sources {
        tag: "mount-1",
        annotation: None,
        mount: Some(1),
        env: None,
    },
    Sources {
        tag: "annotation-all",
        annotation: Some("nvidia.com/gpu=all"),
        mount: None,
        env: None,
    },
    Sources {
        tag: "annotation-all+mount-1",
        annotation: Some("nvidia.com/gpu=all"),
        mount: Some(1),
        env: None,
    },
    Sources {
        tag: "annotation-all+env-0",
        annotation: Some("nvidia.com/gpu=all"),
        mount: None,
        env: Some("0"),
    },
    Sources {
        tag: "mount-1+env-all",
        annotation: None,
        mount: Some(1),
        env: Some("all"),
    },
];

/// Only under the two unprivileged env policies (the rest add nothing the env case does not).
const NAME_SOURCES: &[Sources] = &[
    Sources {
        tag: "env-cdi-name-2",
        annotation: None,
        mount: None,
        env: Some("nvidia.com/gpu=2"),
    },
    Sources {
        tag: "env-runtime-name-3",
        annotation: None,
        mount: None,
        env: Some("runtime.nvidia.com/gpu=3"),
    },
];

fn ids(value: &str) -> Vec<u32> {
    match value {
        "all" | "nvidia.com/gpu=all" => (0..GPUS).collect(),
        "nvidia.com/gpu=2" => vec![2],
        "runtime.nvidia.com/gpu=3" => vec![3],
        v => vec![v.parse().unwrap()],
    }
}

/// The rule of the one gate in core (docs/security.md): in NVIDIA's order the first source that
/// is present and accepted wins (CDI annotations, then device mounts, then the env); a refused
/// source never widens, replaces or adds to another's grant. Annotations count only through the
/// shim, and from an unprivileged container only while the env var is accepted from one.
fn model(privileged: bool, envvar: bool, mounts: bool, s: Sources, d: Delivery) -> Expect {
    if let Some(a) = s.annotation {
        if d == Delivery::Shim && (privileged || envvar) {
            return Expect::grant(&ids(a));
        }
    }
    if let Some(m) = s.mount {
        if mounts {
            return Expect::grant(&[m]);
        }
    }
    if let Some(e) = s.env {
        if privileged || envvar {
            let mut x = Expect::grant(&ids(e));
            // NVIDIA's jit-cdi kind: serve it or refuse it clearly; never more.
            x.may_refuse = e.starts_with("runtime.nvidia.com/");
            return x;
        }
    }
    Expect::grant(&[])
}

fn policy_matrix(v: &mut Vec<Attack>) {
    for privileged in [false, true] {
        // A privileged container's env is accepted whatever the env key says: one setting of it.
        for envvar in [true, false].into_iter().filter(|e| !privileged || !e) {
            for mounts in [false, true] {
                let extra: &[Sources] = if !privileged && !mounts {
                    NAME_SOURCES
                } else {
                    &[]
                };
                for &s in SOURCES.iter().chain(extra) {
                    let name = format!(
                        "policy-{}-envvar-{}-mounts-{}-{}",
                        if privileged {
                            "privileged"
                        } else {
                            "unprivileged"
                        },
                        envvar,
                        mounts,
                        s.tag
                    );
                    let what = format!(
                        "{} container, accept-nvidia-visible-devices-envvar-when-unprivileged = {envvar}, accept-nvidia-visible-devices-as-volume-mounts = {mounts}; requests: {s:?}",
                        if privileged { "a privileged" } else { "an unprivileged" },
                    );
                    v.push(Attack {
                        name,
                        what,
                        layout: Layout::Debian,
                        on: REQUEST,
                        prepare: Box::new(move |c| {
                            c.unenv("NVIDIA_VISIBLE_DEVICES");
                            c.config_top = format!(
                                "accept-nvidia-visible-devices-envvar-when-unprivileged = {envvar}\naccept-nvidia-visible-devices-as-volume-mounts = {mounts}"
                            );
                            if privileged {
                                c.privileged();
                            }
                            if let Some(a) = s.annotation {
                                c.annotate("cdi.k8s.io/x", a);
                            }
                            if let Some(m) = s.mount {
                                c.device_mount(&m.to_string());
                            }
                            if let Some(e) = s.env {
                                c.set_request(e);
                            }
                        }),
                        expect: Box::new(move |d| model(privileged, envvar, mounts, s, d)),
                        bound: BOUND,
                        baseline: false,
                    });
                }
            }
        }
    }
}

#[allow(dead_code)]
fn exists(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok()
}
