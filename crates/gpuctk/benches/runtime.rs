//! `cargo bench -p gpuctk --bench runtime`: create + start + delete of a `/bin/true` container
//! through our `nvidia-container-runtime` vs the low-level runtime alone on the same bundle,
//! interleaved, under runc and under crun, for 0, 1, 8 and 64 GPUs injected just in time and 8
//! and 64 GPUs from a static CDI spec. The baseline runs the config.json our shim produced, so
//! the ratio is the shim's own cost. Both sides are exec'ed directly (no wrapper) with the same
//! environment (`GPUCTK_CONFIG` is set on both; the runtime ignores it). Also a pass-through
//! call (`state`), shim vs runtime. Needs root, runc, crun, and gcc (`scripts/setup.sh`
//! installs it); x86_64 or aarch64.
//!
//! A third side, the exec floor, runs the same lifecycle through the least any shim can be: a
//! static program without libc, built here with `cc -nostdlib`, whose first instructions exec
//! the runtime (argv as the shim passes it). What it costs over the runtime alone is the price of
//! one more exec per call, which no shim exec'ed by an engine avoids; shim / floor is what our
//! work adds on top. A fourth, the ideal shim, is the floor that on `create` also reads the
//! bundle's `config.json` and writes over it, by rename, the one our shim wrote (made
//! beforehand): a shim that decides, discovers and does nothing in the root, what any shim
//! costs at least. Beside it, the CPU time of the lifecycle (user + system, with the
//! children each call waits for), and of each call over the runtime alone's, for the shim
//! and for the floor: what the wall clock, which moves by a tenth between runs here, cannot
//! resolve. Not counted on either side: the container's init, which runc and crun leave
//! running after `create`, and so the `createContainer` hooks it runs; the shim's own work in
//! the root, which replaces those hooks, is counted (docs/performance.md, round fifteen). (The
//! floor is not a static glibc program: its start-up asks the CPU for its features, `cpuid`,
//! which traps to the hypervisor on a VM, and costs more than all of our shim's.)
//!
//! Prints medians and p90s, and the system calls of the shim's own create (`strace -f -c` of
//! one create with `/bin/true` as the runtime, less `/bin/true`'s own; `n/a` without strace)
//! and its CPU (user + system from `getrusage` of the same create, less `/bin/true`'s own with
//! the same arguments, the median over the runs, interleaved);
//! the issue's targets are printed beside them, never asserted.
//! `GPUCTK_BENCH_BIN` measures another gpuctk binary (a static build, say);
//! `GPUCTK_BENCH_ITERS` changes the number of runs (default 40).
//!
//! Bundles and state dirs are on tmpfs, where every engine keeps them (under `/run`: containerd's
//! task dirs and runc roots, CRI-O's and Podman's `userdata`, the shim's runtime records): `/run`
//! where it is a tmpfs, else `/dev/shm` (a container's `/run` is often its disk). On ext4, the
//! new inodes of a create (the shim's `config.json` and its runtime record, runc's `state.json`)
//! cost tenths of a millisecond once many have been deleted (the allocator skips recently
//! freed inodes: docs/performance.md, round ten), which no engine's create pays.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Median and p90 of `v`, in ms.
fn stats(v: &[Duration]) -> (f64, f64) {
    let mut v = v.to_vec();
    v.sort();
    let p90 = (v.len() * 9).div_ceil(10).max(1) - 1;
    (ms(v[v.len() / 2]), ms(v[p90]))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Run to completion. stdio goes nowhere: a detached container inherits `create`'s stdio, so a
/// captured pipe would never reach EOF.
fn run(cmd: &mut Command) {
    let st = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("spawn");
    assert!(
        st.success(),
        "{cmd:?} failed ({st}); rerun it by hand to see why"
    );
}

/// The system calls `cmd` makes, itself and its children (`strace -f -c`); `None` without a
/// working strace.
fn syscalls(cmd: &mut Command, out: &Path) -> Option<u64> {
    let prog = cmd.get_program().to_os_string();
    let args: Vec<_> = cmd.get_args().map(|a| a.to_os_string()).collect();
    let mut s = Command::new("strace");
    s.args(["-f", "-c", "-o"]).arg(out).arg(prog).args(args);
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            s.env(k, v);
        }
    }
    let ok = s
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()?
        .success();
    let text = fs::read_to_string(out).ok()?;
    // `100.00  0.004884  2  1640  118 total`: the calls are the fourth column.
    let total = text.lines().find(|l| l.trim_end().ends_with(" total"))?;
    ok.then(|| total.split_whitespace().nth(3)?.parse().ok())?
}

/// A temp dir on tmpfs (see the header): under `/run` or `/dev/shm`, whichever is one first;
/// the default temp dir, said so, where neither is.
fn tmpfs_tempdir() -> tempfile::TempDir {
    let tmpfs = |d: &str| {
        let c = std::ffi::CString::new(d).expect("no NUL");
        // SAFETY: statfs fills the plain struct it is given.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
        rc == 0 && st.f_type == libc::TMPFS_MAGIC
    };
    match ["/run", "/dev/shm"].into_iter().find(|d| tmpfs(d)) {
        Some(d) => {
            println!("bundles and state dirs on tmpfs, under {d}");
            tempfile::tempdir_in(d).expect("temp dir on tmpfs")
        }
        None => {
            println!("no tmpfs at /run or /dev/shm: bundles and state dirs on the temp dir's file system");
            tempfile::tempdir().expect("temp dir")
        }
    }
}

/// CPU time (user + system) of the children waited for so far.
fn children_cpu() -> Duration {
    // SAFETY: getrusage fills the struct it is given, which is plain data.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    assert_eq!(rc, 0, "getrusage: {}", std::io::Error::last_os_error());
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The CPU time `cmd` takes, itself and its children, run to completion.
fn cpu_of(cmd: &mut Command) -> Duration {
    let before = children_cpu();
    run(cmd);
    children_cpu().saturating_sub(before)
}

/// A config.toml for mock host `host` (the hook `exe`, the snapshots under `t`), with
/// `runtime_tables` between its `[nvidia-container-cli]` and `[gpuctk]` tables.
fn config_text(
    host: &gpuctk_mockhost::MockHost,
    exe: &Path,
    t: &Path,
    runtime_tables: &str,
) -> String {
    format!(
        "[nvidia-container-cli]\nroot = \"{}\"\n{runtime_tables}[gpuctk]\ndev-root = \"{}\"\nproc-root = \"{}\"\nhook-path = \"{}\"\nsnapshot-dir = \"{}\"\n",
        host.driver_root.display(),
        host.dev_root.display(),
        host.proc_root.display(),
        exe.display(),
        t.join("snapshots").display()
    )
}

/// The exec floor (see the header): `_start` hands the stack to `start`, which execs the
/// runtime with the arguments and environment found there, or exits 127.
const FLOOR_C: &str = r#"
#if defined(__x86_64__)
__asm__(".globl _start\n_start:\n mov %rsp, %rdi\n and $-16, %rsp\n call start\n hlt\n");
#define SYS_EXECVE 59
#define SYS_EXIT 60
#define SYS_READ 0
#define SYS_WRITE 1
#define SYS_CLOSE 3
#define SYS_OPENAT 257
#define SYS_RENAMEAT 264
static long sys4(long n, long a, long b, long c, long d) {
  long r;
  register long r10 __asm__("r10") = d;
  __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
  return r;
}
#elif defined(__aarch64__)
__asm__(".globl _start\n_start:\n mov x0, sp\n bl start\n");
#define SYS_EXECVE 221
#define SYS_EXIT 93
#define SYS_READ 63
#define SYS_WRITE 64
#define SYS_CLOSE 57
#define SYS_OPENAT 56
#define SYS_RENAMEAT 38
static long sys4(long n, long a, long b, long c, long d) {
  register long x8 __asm__("x8") = n, x0 __asm__("x0") = a, x1 __asm__("x1") = b,
                x2 __asm__("x2") = c, x3 __asm__("x3") = d;
  __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3) : "memory");
  return x0;
}
#else
#error "the exec floor is written for x86_64 and aarch64"
#endif
#define sys3(n, a, b, c) sys4(n, a, b, c, 0)
#ifdef FINISHED
/* The ideal shim (see the header): on `create`, the bundle's config.json read, the finished
   one (made beforehand) read and written over it by rename. */
#define AT_FDCWD -100
static char spec[1 << 20];
static int is_create(const char *a) {
  const char *c = "create";
  while (*a && *a == *c) a++, c++;
  return *a == 0 && *c == 0;
}
static long slurp(const char *path) {
  long fd = sys4(SYS_OPENAT, AT_FDCWD, (long)path, 0, 0), n = 0, r;
  if (fd < 0) return -1;
  while ((r = sys3(SYS_READ, fd, (long)spec + n, sizeof spec - n)) > 0) n += r;
  sys3(SYS_CLOSE, fd, 0, 0);
  return r < 0 ? -1 : n;
}
static int finish(void) {
  if (slurp(TARGET) < 0) return -1;
  long n = slurp(FINISHED);
  if (n < 0) return -1;
  long fd = sys4(SYS_OPENAT, AT_FDCWD, (long)TARGET ".tmp", 01 | 0100 | 01000 | 02000000, 0644);
  if (fd < 0 || sys3(SYS_WRITE, fd, (long)spec, n) != n) return -1;
  sys3(SYS_CLOSE, fd, 0, 0);
  return sys4(SYS_RENAMEAT, AT_FDCWD, (long)TARGET ".tmp", AT_FDCWD, (long)TARGET) < 0 ? -1 : 0;
}
#endif
__attribute__((used, noreturn)) void start(long *sp) {
  long argc = sp[0];
  char **argv = (char **)(sp + 1);
#ifdef FINISHED
  for (long i = 1; i < argc; i++)
    if (is_create(argv[i]) && finish() < 0)
      for (;;) sys3(SYS_EXIT, 126, 0, 0);
#endif
  argv[0] = (char *)RUNTIME; /* as the shim sets it: crun reads its personality there */
  sys3(SYS_EXECVE, (long)RUNTIME, (long)argv, (long)(argv + argc + 1));
  for (;;) sys3(SYS_EXIT, 127, 0, 0);
}
"#;

/// The exec floor for runtime `rt`, built in `dir`.
fn exec_floor(dir: &Path, rt: &Path) -> PathBuf {
    build_floor(dir, rt, None)
}

/// The ideal shim for runtime `rt` and `bundle` (see the header), built in `dir`: on `create`
/// it writes `<bundle>/finished.json` over the bundle's `config.json`.
fn ideal_shim(dir: &Path, rt: &Path, bundle: &Path) -> PathBuf {
    build_floor(dir, rt, Some(bundle))
}

fn build_floor(dir: &Path, rt: &Path, ideal: Option<&Path>) -> PathBuf {
    let name = rt
        .file_name()
        .expect("runtime path has a name")
        .to_string_lossy();
    let name = match ideal {
        None => format!("exec-floor-{name}"),
        Some(b) => format!(
            "ideal-shim-{}",
            b.file_name().expect("bundle has a name").to_string_lossy()
        ),
    };
    let src = dir.join(format!("{name}.c"));
    let out = dir.join(name);
    fs::write(&src, FLOOR_C).unwrap();
    let defines = ideal.map(|b| {
        [
            format!("-DTARGET=\"{}\"", b.join("config.json").display()),
            format!("-DFINISHED=\"{}\"", b.join("finished.json").display()),
        ]
    });
    let st = Command::new("cc")
        .args([
            "-O2",
            "-static",
            "-nostdlib",
            "-fno-stack-protector",
            "-fno-pie",
            "-no-pie",
            "-o",
        ])
        .arg(&out)
        .arg(&src)
        .arg(format!("-DRUNTIME=\"{}\"", rt.display()))
        .args(defines.iter().flatten())
        .status()
        .expect("the exec floor needs a C compiler, cc (apt-get install gcc)");
    assert!(st.success(), "cc {} failed ({st})", src.display());
    out
}

/// A command for `bin` with the environment both sides get.
fn cmd(bin: &Path, config: &Path) -> Command {
    let mut c = Command::new(bin);
    c.env("GPUCTK_CONFIG", config);
    c
}

/// One lifecycle: the wall time of its create, start and delete, and the CPU time of each
/// (user + system, with the children they waited for: not the container's process, which
/// outlives `create`).
struct Life {
    phases: [Duration; 3],
    cpu: [Duration; 3],
}

/// create, start and delete of one container.
fn lifecycle(bin: &Path, config: &Path, state: &Path, bundle: &Path, id: &str) -> Life {
    let step = |args: &[&OsStr]| {
        let cpu = children_cpu();
        let t = Instant::now();
        run(cmd(bin, config).arg("--root").arg(state).args(args));
        (t.elapsed(), children_cpu().saturating_sub(cpu))
    };
    let create = step(&[
        OsStr::new("create"),
        OsStr::new("--bundle"),
        bundle.as_os_str(),
        OsStr::new(id),
    ]);
    let start = step(&[OsStr::new("start"), OsStr::new(id)]);
    let delete = step(&[OsStr::new("delete"), OsStr::new("--force"), OsStr::new(id)]);
    Life {
        phases: [create.0, start.0, delete.0],
        cpu: [create.1, start.1, delete.1],
    }
}

struct Host {
    host: gpuctk_mockhost::MockHost,
    cdi: PathBuf,
}

struct Case {
    name: &'static str,
    env: &'static str,
    gpus: usize,
    host: usize,
}

const CASES: &[Case] = &[
    Case {
        name: "0 GPUs (no request)",
        env: "",
        gpus: 0,
        host: 0,
    },
    Case {
        name: "1 GPU, just in time",
        env: "NVIDIA_VISIBLE_DEVICES=0",
        gpus: 1,
        host: 0,
    },
    Case {
        name: "8 GPUs, just in time",
        env: "NVIDIA_VISIBLE_DEVICES=all",
        gpus: 8,
        host: 0,
    },
    Case {
        name: "64 GPUs, just in time",
        env: "NVIDIA_VISIBLE_DEVICES=all",
        gpus: 64,
        host: 1,
    },
    Case {
        name: "8 GPUs, static CDI spec",
        env: "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all",
        gpus: 8,
        host: 0,
    },
    Case {
        name: "64 GPUs, static CDI spec",
        env: "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all",
        gpus: 64,
        host: 1,
    },
];

/// A bundle from `runc spec` running `args`, with `env` added.
fn bundle(dir: &Path, args: &[&str], env: &str) -> Vec<u8> {
    fs::create_dir_all(dir).unwrap();
    gpuctk_mockhost::create_rootfs(
        &dir.join("rootfs"),
        &gpuctk_mockhost::RootfsConfig::default(),
    )
    .unwrap();
    run(Command::new("runc").arg("spec").arg("--bundle").arg(dir));
    let p = dir.join("config.json");
    let mut spec: serde_json::Value = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
    spec["process"]["terminal"] = serde_json::json!(false);
    spec["process"]["args"] = serde_json::json!(args);
    spec["root"]["readonly"] = serde_json::json!(false);
    if !env.is_empty() {
        spec["process"]["env"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!(env));
    }
    let bytes = serde_json::to_vec(&spec).unwrap();
    fs::write(&p, &bytes).unwrap();
    bytes
}

fn gpu_nodes(spec: &[u8]) -> usize {
    serde_json::from_slice::<serde_json::Value>(spec).unwrap()["linux"]["devices"]
        .as_array()
        .map_or(0, |a| {
            a.iter()
                .filter(|d| {
                    d["path"]
                        .as_str()
                        .unwrap_or("")
                        .trim_start_matches("/dev/nvidia")
                        .parse::<u32>()
                        .is_ok()
                })
                .count()
        })
}

fn main() {
    let exe = std::env::var_os("GPUCTK_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_gpuctk")));
    let iters: usize = std::env::var("GPUCTK_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let tmp = tmpfs_tempdir();
    let t = tmp.path();
    let shim = t.join("nvidia-container-runtime");
    symlink(&exe, &shim).unwrap();
    let hosts: Vec<Host> = [8u32, 64]
        .iter()
        .map(|&gpus| {
            let mut cfg = gpuctk_mockhost::HostConfig::new("570.124.06", (12, 8));
            cfg.gpus = gpus;
            let host = gpuctk_mockhost::create_host(&t.join(format!("host{gpus}")), &cfg)
                .expect("mock host (run as root)");
            let cdi = t.join(format!("cdi{gpus}"));
            fs::create_dir_all(&cdi).unwrap();
            // The runtime's config, as the refresh unit's `cdi generate` reads it on a node: its
            // discovery snapshot lands where the runtime's creates look for it.
            let generate_config = t.join(format!("generate{gpus}.toml"));
            fs::write(&generate_config, config_text(&host, &exe, t, "")).unwrap();
            run(Command::new(&exe)
                .args(["cdi", "generate", "--config"])
                .arg(&generate_config)
                .arg("--output")
                .arg(cdi.join("nvidia.yaml"))
                // A hook that exists: under runc the params guard stays a hook (architecture.md).
                .arg("--nvidia-cdi-hook-path")
                .arg(&exe)
                .arg("--driver-root")
                .arg(&host.driver_root)
                .arg("--dev-root")
                .arg(&host.dev_root)
                .arg("--proc-root")
                .arg(&host.proc_root));
            Host { host, cdi }
        })
        .collect();
    let state = t.join("state");
    let mut table = Vec::new();
    let mut floor_table = Vec::new();
    println!(
        "{} ({}), create+start+delete of /bin/true, {iters} runs each, interleaved",
        exe.display(),
        if std::env::var_os("GPUCTK_BENCH_BIN").is_some() {
            "GPUCTK_BENCH_BIN"
        } else {
            "this build"
        }
    );
    // Each runtime's path and its exec floor.
    let runtimes: Vec<(&str, PathBuf, PathBuf)> = ["runc", "crun"]
        .into_iter()
        .map(|runtime| {
            let rt = ["/usr/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/sbin"]
                .iter()
                .map(|d| Path::new(d).join(runtime))
                .find(|p| p.exists())
                .unwrap_or_else(|| panic!("{runtime} not installed"));
            let floor = exec_floor(t, &rt);
            (runtime, rt, floor)
        })
        .collect();
    for &(runtime, ref rt, ref floor) in &runtimes {
        let configs: Vec<PathBuf> = hosts
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let p = t.join(format!("config-{runtime}-{i}.toml"));
                let runtime_tables = format!(
                    "[nvidia-container-runtime]\nruntimes = [\"{}\"]\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = [\"{}\"]\n",
                    rt.display(),
                    h.cdi.display(),
                );
                fs::write(&p, config_text(&h.host, &exe, t, &runtime_tables)).unwrap();
                p
            })
            .collect();
        // The same configs with `/bin/true` as the runtime: the shim's own system calls.
        let true_configs: Vec<PathBuf> = configs
            .iter()
            .map(|c| {
                let p = c.with_extension("true.toml");
                let text = fs::read_to_string(c).unwrap().replace(
                    &format!("runtimes = [\"{}\"]", rt.display()),
                    "runtimes = [\"/bin/true\"]",
                );
                fs::write(&p, text).unwrap();
                p
            })
            .collect();
        for (ci, case) in CASES.iter().enumerate() {
            let config = &configs[case.host];
            let shim_bundle = t.join(format!("{runtime}-shim{ci}"));
            let base_bundle = t.join(format!("{runtime}-base{ci}"));
            let floor_bundle = t.join(format!("{runtime}-floor{ci}"));
            let ideal_bundle = t.join(format!("{runtime}-ideal{ci}"));
            let pristine = bundle(&shim_bundle, &["/bin/true"], case.env);
            bundle(&base_bundle, &["/bin/true"], case.env);
            bundle(&floor_bundle, &["/bin/true"], case.env);
            bundle(&ideal_bundle, &["/bin/true"], case.env);
            let ideal = ideal_shim(t, rt, &ideal_bundle);
            let p = shim_bundle.join("config.json");
            // The baseline gets exactly what the shim writes.
            lifecycle(&shim, config, &state, &shim_bundle, "warm-s");
            let warmed = Instant::now();
            let edited = fs::read(&p).unwrap();
            assert_eq!(gpu_nodes(&edited), case.gpus, "{}", case.name);
            fs::write(base_bundle.join("config.json"), &edited).unwrap();
            fs::write(floor_bundle.join("config.json"), &edited).unwrap();
            // The ideal shim writes what the shim wrote over what the shim read.
            fs::write(ideal_bundle.join("finished.json"), &edited).unwrap();
            let ideal_spec = ideal_bundle.join("config.json");
            lifecycle(rt, config, &state, &base_bundle, "warm-b");
            lifecycle(floor, config, &state, &floor_bundle, "warm-f");
            fs::write(&ideal_spec, &pristine).unwrap();
            lifecycle(&ideal, config, &state, &ideal_bundle, "warm-i");
            assert_eq!(
                fs::read(&ideal_spec).unwrap(),
                edited,
                "the ideal shim's spec"
            );
            let (mut ours, mut base, mut floors, mut ideals) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for i in 0..iters {
                fs::write(&p, &pristine).unwrap();
                fs::write(&ideal_spec, &pristine).unwrap();
                // Rotate who goes first, so none always runs on a cache another warmed.
                let mut sides = [
                    ('s', &shim, &shim_bundle, &mut ours),
                    ('b', rt, &base_bundle, &mut base),
                    ('f', floor, &floor_bundle, &mut floors),
                    ('i', &ideal, &ideal_bundle, &mut ideals),
                ];
                sides.rotate_left(i % 4);
                for (tag, bin, bundle, runs) in sides {
                    runs.push(lifecycle(
                        bin,
                        config,
                        &state,
                        bundle,
                        &format!("{tag}{ci}-{i}"),
                    ));
                }
            }
            // One more create, traced, with /bin/true as the runtime (after the warm-up, so the
            // discovery snapshot is there as for every create above), less /bin/true's own.
            fs::write(&p, &pristine).unwrap();
            // The shim's create with `/bin/true` as the runtime, and `/bin/true` alone with the
            // same arguments.
            let true_pair = |id: &str| {
                [shim.as_path(), Path::new("/bin/true")].map(|bin| {
                    let mut c = cmd(bin, &true_configs[case.host]);
                    c.arg("--root")
                        .arg(&state)
                        .args(["create", "--bundle"])
                        .arg(&shim_bundle)
                        .arg(id);
                    c
                })
            };
            // The root as a container started again on it finds it: what the warm-up made in it
            // is kept as found in place by a create at least 2 s later (docs/security.md §3b),
            // which the runs above, 40 of crun's, may not have reached. One such create first.
            std::thread::sleep(Duration::from_millis(2100).saturating_sub(warmed.elapsed()));
            run(&mut true_pair(&format!("settle{ci}"))[0]);
            fs::write(&p, &pristine).unwrap();
            let trace = t.join("strace.txt");
            let [mut sc, mut tc] = true_pair(&format!("sc{ci}"));
            let calls = syscalls(&mut sc, &trace)
                .zip(syscalls(&mut tc, &trace))
                .map(|(s, t)| s.saturating_sub(t));
            // The shim's own CPU in a create the same way: `/bin/true` as the runtime, less
            // `/bin/true` alone with the same arguments, interleaved; the median of the
            // differences (CPU time, unlike the lifecycle's wall time, hardly moves with what
            // else the machine does).
            let mut cpu = Vec::with_capacity(iters);
            for i in 0..iters {
                fs::write(&p, &pristine).unwrap();
                // A new id each time, as an engine gives: the shim records each container's
                // runtime under its id.
                let [mut sc, mut tc] = true_pair(&format!("cpu{ci}-{i}"));
                let (s, t) = if i % 2 == 0 {
                    let s = cpu_of(&mut sc);
                    (s, cpu_of(&mut tc))
                } else {
                    let t = cpu_of(&mut tc);
                    (cpu_of(&mut sc), t)
                };
                cpu.push(ms(s) - ms(t));
            }
            cpu.sort_by(f64::total_cmp);
            let cpu = cpu[cpu.len() / 2];
            let total = |v: &[Life]| v.iter().map(|l| l.phases.iter().sum()).collect::<Vec<_>>();
            // The median of `f` over the lifecycles.
            let median = |v: &[Life], f: &dyn Fn(&Life) -> Duration| {
                stats(&v.iter().map(f).collect::<Vec<_>>()).0
            };
            let phase = |v: &[Life], k: usize| median(v, &|l| l.phases[k]);
            let lcpu = |v: &[Life]| median(v, &|l| l.cpu.iter().sum());
            let pcpu = |v: &[Life], k: usize| median(v, &|l| l.cpu[k]);
            // Each call's CPU over the runtime alone's, the shim's and the floor's.
            let over = |v: &[Life]| [0, 1, 2].map(|k| pcpu(v, k) - pcpu(&base, k));
            let (om, op) = stats(&total(&ours));
            let (bm, bp) = stats(&total(&base));
            let (fm, _) = stats(&total(&floors));
            let (oc, bc, fc, ic) = (lcpu(&ours), lcpu(&base), lcpu(&floors), lcpu(&ideals));
            floor_table.push((
                runtime,
                case.name,
                fm,
                fm / bm,
                om / fm,
                [oc, bc, fc, ic],
                [over(&ours), over(&floors), over(&ideals)],
            ));
            table.push((
                runtime,
                case.name,
                om,
                op,
                bm,
                bp,
                [0, 1, 2].map(|k| phase(&ours, k) - phase(&base, k)),
                calls,
                cpu,
            ));
            eprintln!("  done: {runtime} {}", case.name);
        }
    }
    println!();
    println!(
        "| runtime | case | shim median | shim p90 | runtime alone median | runtime alone p90 | ratio median | ratio p90 | + ms (create / start / delete) | shim's create: system calls | shim's create: CPU |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (rt, name, om, op, bm, bp, ph, calls, cpu) in &table {
        println!(
            "| {rt} | {name} | {om:.2} ms | {op:.2} ms | {bm:.2} ms | {bp:.2} ms | {:.3} | {:.3} | {:+.2} ({:+.2} / {:+.2} / {:+.2}) | {} | {cpu:.2} ms |",
            om / bm,
            op / bp,
            om - bm,
            ph[0],
            ph[1],
            ph[2],
            calls.map_or("n/a".to_string(), |c| c.to_string())
        );
    }
    println!();
    println!("the exec floor (a static program without libc that execs the runtime) and the ideal shim (the floor that also writes the finished config.json on create; see the header), and the lifecycle's CPU time (medians):");
    println!("| runtime | case | floor median | floor / runtime alone | shim / floor | CPU: shim | CPU: runtime alone | CPU: floor | CPU ratio: shim / runtime alone | CPU ratio: floor / runtime alone | CPU ratio: ideal shim / runtime alone | CPU + ms, shim (create / start / delete) | CPU + ms, floor (create / start / delete) | CPU + ms, ideal shim (create / start / delete) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (rt, name, fm, fb, sf, [oc, bc, fc, ic], [so, fo, io]) in &floor_table {
        println!(
            "| {rt} | {name} | {fm:.2} ms | {fb:.3} | {sf:.3} | {oc:.2} ms | {bc:.2} ms | {fc:.2} ms | {:.3} | {:.3} | {:.3} | {:+.2} / {:+.2} / {:+.2} | {:+.2} / {:+.2} / {:+.2} | {:+.2} / {:+.2} / {:+.2} |",
            oc / bc,
            fc / bc,
            ic / bc,
            so[0],
            so[1],
            so[2],
            fo[0],
            fo[1],
            fo[2],
            io[0],
            io[1],
            io[2]
        );
    }
    for (rt, name, _, _, _, _, _, calls, _) in &table {
        if name.starts_with("8 GPUs, just in time") {
            if let Some(c) = calls {
                println!(
                    "target <= 150 system calls in the shim's create of 8 GPUs just in time ({rt}): {c} ({})",
                    if *c <= 150 { "met" } else { "missed" }
                );
            }
        }
    }
    for (rt, name, _, _, _, _, _, _, cpu) in &table {
        if name.starts_with("8 GPUs, just in time") {
            println!(
                "target <= 1 ms of CPU in the shim's create of 8 GPUs just in time ({rt}): {cpu:.2} ms ({})",
                if *cpu <= 1.0 { "met" } else { "missed" }
            );
        }
    }
    for (rt, name, om, _, bm, _, _, _, _) in &table {
        if name.starts_with("8 GPUs, just in time") {
            let r = om / bm;
            println!(
                "target shim/limit <= 1.05 with 8 GPUs just in time on {rt}: {r:.3} ({})",
                if r <= 1.05 { "met" } else { "missed" }
            );
        }
    }
    for (rt, name, _, fb, sf, [oc, bc, fc, ic], _) in &floor_table {
        if name.starts_with("8 GPUs, just in time") {
            println!(
                "  the exec floor alone with 8 GPUs just in time on {rt}: {fb:.3} of the runtime alone; the shim {sf:.3} of the floor; in CPU time the shim {:.3}, the floor {:.3} and the ideal shim {:.3} of the runtime alone",
                oc / bc,
                fc / bc,
                ic / bc
            );
        }
    }

    // A pass-through call: the shim's fixed cost on every runtime call.
    println!();
    println!(
        "pass-through `state` of a created container, {} runs each, interleaved:",
        5 * iters / 2
    );
    println!("| runtime | shim median | shim p90 | runtime alone median | runtime alone p90 | difference median | difference p90 | exec floor: difference median |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut targets = Vec::new();
    for &(runtime, ref rt, ref floor) in &runtimes {
        let config = t.join(format!("config-{runtime}-0.toml"));
        let b = t.join(format!("passthrough-{runtime}"));
        bundle(&b, &["/bin/sleep", "60"], "");
        let id = format!("pt-{runtime}");
        run(cmd(rt, &config)
            .arg("--root")
            .arg(&state)
            .args(["create", "--bundle"])
            .arg(&b)
            .arg(&id));
        let time_state = |bin: &Path| {
            let t0 = Instant::now();
            run(cmd(bin, &config)
                .arg("--root")
                .arg(&state)
                .args(["state", id.as_str()]));
            t0.elapsed()
        };
        time_state(&shim);
        time_state(rt);
        time_state(floor);
        let (mut o, mut r, mut f) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..5 * iters / 2 {
            let mut arms = [(&shim, &mut o), (rt, &mut r), (floor, &mut f)];
            arms.rotate_left(i % 3);
            for (bin, v) in arms {
                v.push(time_state(bin));
            }
        }
        let ((om, op), (rm, rp), (fm, _)) = (stats(&o), stats(&r), stats(&f));
        println!(
            "| {runtime} | {om:.2} ms | {op:.2} ms | {rm:.2} ms | {rp:.2} ms | {:+.2} ms | {:+.2} ms | {:+.2} ms |",
            om - rm,
            op - rp,
            fm - rm
        );
        targets.push((runtime, om - rm));
        run(cmd(rt, &config)
            .arg("--root")
            .arg(&state)
            .args(["delete", "--force", id.as_str()]));
    }
    for (rt, d) in targets {
        println!(
            "target pass-through <= 0.3 ms over {rt} alone: {d:+.2} ms ({})",
            if d <= 0.3 { "met" } else { "missed" }
        );
    }
}
