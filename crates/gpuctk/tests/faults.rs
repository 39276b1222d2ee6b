//! Faults, without losing data: every writer (`cdi generate --output`, `runtime configure` for
//! docker, containerd and the CRI-O drop-in with their backups, and the shim's `config.json`
//! edit) is killed before each syscall of its write path (and before a sample of the others),
//! gets an error injected into each syscall of its write path (ENOSPC, EIO, EXDEV, ...), both
//! through `strace --inject`, and runs on a tiny tmpfs in a private mount namespace. After each
//! run every file holds its old bytes or its whole new ones, no temp file is left (a kill between
//! the link and the rename may leave one, whole and under a name no loader reads, which the next
//! run removes; never one inside CRI-O's `crio.conf.d`), and a failure exits non-zero with one
//! line that says what state the file is in. Under real runc a failing shim or hook leaves no
//! container and no mount behind. Each test prints how many crash points and errors it tried.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::runtime::Bed;
use crate::util::*;

/// One file a writer may change, and the two states it may be left in.
struct Watched {
    /// Relative to the writer's root.
    rel: &'static str,
    /// What the fault checks read as "the file": the main target, as opposed to its backup.
    primary: bool,
    old: Option<Vec<u8>>,
    /// Filled in by a clean run.
    new: Option<Vec<u8>>,
}

/// A writer under test: a command that writes files below `root`, whose starting state is a
/// copy of `seed`.
struct Writer {
    label: String,
    root: PathBuf,
    seed: PathBuf,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    watched: Vec<Watched>,
    /// Directories (relative to `root`) where no temp file may be left after an error.
    dirs: Vec<&'static str>,
    /// Directories an engine loads whole, where nothing may be left even after a kill.
    strict: Vec<&'static str>,
    /// Names allowed in each of `dirs`: those of the starting and of the finished state.
    allowed: Vec<BTreeSet<String>>,
}

/// What one sweep tried.
#[derive(Default, Debug)]
struct Counts {
    kills: usize,
    errors: usize,
    tmpfs: usize,
    temp_left_by_kill: usize,
}

fn read_optional(p: &Path) -> Option<Vec<u8>> {
    match fs::read(p) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => panic!("{}: {e}", p.display()),
    }
}

fn sh(script: &str) {
    let out = Command::new("sh").arg("-c").arg(script).output().unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Writer {
    fn new(label: &str, root: PathBuf, program: PathBuf, args: Vec<String>) -> Writer {
        let seed = root.with_extension("seed");
        Writer {
            label: label.to_string(),
            root,
            seed,
            program,
            args,
            env: Vec::new(),
            watched: Vec::new(),
            dirs: vec!["."],
            strict: Vec::new(),
            allowed: Vec::new(),
        }
    }

    fn watch(&mut self, rel: &'static str, primary: bool) {
        let old = read_optional(&self.root.join(rel));
        self.watched.push(Watched {
            rel,
            primary,
            old,
            new: None,
        });
    }

    /// Save the current content of `root` as the starting state, run once cleanly to learn the
    /// finished state, and start again.
    fn prepare(&mut self) {
        sh(&format!(
            "rm -rf '{s}' && cp -a '{r}' '{s}'",
            s = self.seed.display(),
            r = self.root.display()
        ));
        let start: Vec<BTreeSet<String>> = self
            .dirs
            .iter()
            .map(|d| names_in(&self.root.join(d)))
            .collect();
        let (rc, stderr) = self.run(None);
        assert_eq!(rc, 0, "{}: the clean run failed: {stderr}", self.label);
        for w in &mut self.watched {
            w.new = read_optional(&self.root.join(w.rel));
        }
        assert!(
            self.watched
                .iter()
                .any(|w| w.primary && w.new.is_some() && w.new != w.old),
            "{}: the clean run changed nothing",
            self.label
        );
        self.allowed = self
            .dirs
            .iter()
            .zip(start)
            .map(|(d, mut s)| {
                s.extend(names_in(&self.root.join(d)));
                s
            })
            .collect();
        self.reset();
    }

    /// For the shim, whose creates keep what they found in place in a root that persists once
    /// it is 2 s old (`image-libraries`): waits that long and runs once more cleanly, so that
    /// every traced or injected run after it makes the same calls.
    fn settle(&self) {
        std::thread::sleep(std::time::Duration::from_millis(2100));
        let (rc, stderr) = self.run(None);
        assert_eq!(rc, 0, "{}: the settling run failed: {stderr}", self.label);
        self.reset();
    }

    fn reset(&self) {
        sh(&format!(
            "rm -rf '{r}' && cp -a '{s}' '{r}'",
            r = self.root.display(),
            s = self.seed.display()
        ));
    }

    /// The writer's command line, under `strace` with `strace_args` when given.
    fn command(&self, strace_args: Option<&[String]>) -> Command {
        let mut c = match strace_args {
            Some(a) => {
                let mut c = Command::new("strace");
                c.args(a).arg("--").arg(&self.program);
                c
            }
            None => Command::new(&self.program),
        };
        c.args(&self.args);
        for (k, _) in std::env::vars() {
            if k.starts_with("NVIDIA_") || k.starts_with("GPUCTK_") {
                c.env_remove(k);
            }
        }
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c.stdin(Stdio::null());
        c
    }

    /// Run (under `strace` with `strace_args` when given): the exit code (-1 for a signal) and
    /// stderr. Output goes to files, not pipes: a container `runc create` leaves behind holds its
    /// stdio open until it is started, and a pipe would never reach end of file.
    fn run(&self, strace_args: Option<&[String]>) -> (i32, String) {
        let err = self.root.with_extension("stderr");
        let f = fs::File::create(&err).unwrap();
        let st = self
            .command(strace_args)
            .stdout(Stdio::null())
            .stderr(f)
            .status()
            .unwrap_or_else(|e| panic!("{}: {e} (install strace: scripts/setup.sh)", self.label));
        (
            st.code().unwrap_or(-1),
            fs::read_to_string(&err).unwrap_or_default(),
        )
    }

    /// Run with one fault injected (`strace -e inject=SPEC`).
    fn run_injected(&self, spec: &str) -> (i32, String) {
        let name = spec.split(':').next().unwrap();
        self.run(Some(&[
            "-o".into(),
            "/dev/null".into(),
            "-e".into(),
            format!("trace={name}"),
            "-e".into(),
            format!("inject={spec}"),
        ]))
    }

    /// Every syscall of a clean run up to an exec of another program (the shim's of runc), as
    /// (name, its occurrence number, the trace line).
    fn trace(&self) -> Vec<(String, usize, String)> {
        self.reset();
        let log = self.root.with_extension("trace");
        let (rc, stderr) = self.run(Some(&["-o".into(), log.display().to_string()]));
        assert_eq!(rc, 0, "{}: traced run failed: {stderr}", self.label);
        let text = fs::read_to_string(&log).unwrap();
        let mut seen = std::collections::HashMap::new();
        let mut out = Vec::new();
        for line in text.lines() {
            if line.starts_with("+++") || line.starts_with("---") {
                continue;
            }
            let Some(name) = line.split('(').next().filter(|n| {
                !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            }) else {
                continue;
            };
            if name == "execve" && !out.is_empty() {
                // The shim handed over to the low-level runtime: what follows is not ours.
                break;
            }
            let n = seen.entry(name.to_string()).or_insert(0usize);
            *n += 1;
            out.push((name.to_string(), *n, line.to_string()));
        }
        self.reset();
        out
    }

    /// Check the state under `root` (or under `at`, a copy of it) after a run.
    fn check(&self, at: &Path, what: &str, killed: bool, rc: i32, stderr: &str) -> usize {
        let ctx = format!("{}: {what}", self.label);
        let mut primary_new = false;
        let mut primary_old = false;
        for w in &self.watched {
            let now = read_optional(&at.join(w.rel));
            assert!(
                now == w.old || now == w.new,
                "{ctx}: {} is neither its old nor its whole new content ({} bytes)\nstderr: {stderr}",
                w.rel,
                now.as_ref().map_or(0, Vec::len)
            );
            if w.primary {
                primary_new |= now == w.new && w.new != w.old;
                primary_old |= now == w.old;
            }
        }
        let news: Vec<&Vec<u8>> = self.watched.iter().filter_map(|w| w.new.as_ref()).collect();
        let mut left = 0;
        for (d, allowed) in self.dirs.iter().zip(&self.allowed) {
            for name in names_in(&at.join(d)).difference(allowed) {
                let p = at.join(d).join(name);
                assert!(
                    gpuctk_atomicfile::is_temp_name(std::ffi::OsStr::new(name)),
                    "{ctx}: unexpected file {}",
                    p.display()
                );
                assert!(
                    killed,
                    "{ctx}: temp file {} left after an error (rc {rc}): {stderr}",
                    p.display()
                );
                assert!(
                    !self.strict.contains(d),
                    "{ctx}: temp file {} left in a directory the engine loads",
                    p.display()
                );
                let content = fs::read(&p).unwrap();
                assert!(
                    news.contains(&&content),
                    "{ctx}: temp file {} left with partial content",
                    p.display()
                );
                left += 1;
            }
        }
        for d in &self.strict {
            let extra: Vec<_> = names_in(&at.join(d))
                .into_iter()
                .filter(|n| gpuctk_atomicfile::is_temp_name(std::ffi::OsStr::new(n)))
                .collect();
            assert!(extra.is_empty(), "{ctx}: {extra:?} in {d}");
        }
        if killed {
            return left;
        }
        if rc == 0 {
            assert!(
                primary_new,
                "{ctx}: exit 0 but the file was not written: {stderr}"
            );
            return left;
        }
        let msg = stderr.trim();
        assert!(!msg.is_empty(), "{ctx}: failed (rc {rc}) without a message");
        assert!(!msg.contains("panicked"), "{ctx}: {msg}");
        assert_eq!(msg.lines().count(), 1, "{ctx}: not one line:\n{msg}");
        if primary_new {
            assert!(
                msg.contains("in place"),
                "{ctx}: the file was written but the message does not say so: {msg}"
            );
        } else {
            assert!(primary_old);
            // "in place" may only be said of another file written before the main one (the
            // ledger of settings configure changed), if it is new.
            let about_other_new = self.watched.iter().any(|w| {
                !w.primary
                    && w.new != w.old
                    && read_optional(&at.join(w.rel)) == w.new
                    && msg.contains(&format!("/{}: ", w.rel))
            });
            assert!(
                !msg.contains("in place") || about_other_new,
                "{ctx}: the message says written but the file is old: {msg}"
            );
        }
        left
    }

    /// Kill at many points and inject errors into the write path; see the module docs.
    fn sweep(&self) -> Counts {
        let trace = self.trace();
        assert!(!trace.is_empty(), "{}: empty trace", self.label);
        // The write path: from a little before the first unnamed temp file (or lock) to the end.
        let root = self.root.display().to_string();
        let first = trace
            .iter()
            .position(|(n, _, l)| {
                n == "flock"
                    || (l.contains(&root) && (l.contains("O_TMPFILE") || l.contains("O_CREAT")))
            })
            .unwrap_or_else(|| panic!("{}: it creates no file in {root}", self.label));
        let dense_from = first.saturating_sub(12);
        let mut counts = Counts::default();
        for (i, (name, nth, _)) in trace.iter().enumerate() {
            if i < dense_from && i % 9 != 0 {
                continue;
            }
            if name == "exit_group" {
                continue;
            }
            self.reset();
            let spec = format!("{name}:signal=KILL:when={nth}");
            let (rc, stderr) = self.run_injected(&spec);
            let left = self.check(&self.root, &format!("kill at {spec}"), true, rc, &stderr);
            if left > 0 {
                counts.temp_left_by_kill += left;
                // The next run removes what a killed one left.
                let (rc, stderr) = self.run(None);
                assert_eq!(rc, 0, "{stderr}");
                self.check(
                    &self.root,
                    &format!("run after kill at {spec}"),
                    false,
                    0,
                    "",
                );
            }
            counts.kills += 1;
        }
        for (name, nth, line) in &trace[dense_from..] {
            for errno in errnos(name, line) {
                self.reset();
                let spec = format!("{name}:error={errno}:when={nth}");
                let (rc, stderr) = self.run_injected(&spec);
                self.check(&self.root, &format!("inject {spec}"), false, rc, &stderr);
                counts.errors += 1;
            }
        }
        self.reset();
        counts
    }

    /// Run on a tmpfs of `pages` pages mounted over `root` in a private mount namespace, filled
    /// so that `free` pages are left; the result is copied out to check it.
    fn on_tiny_tmpfs(&self, pages: u32, free: u32) -> i32 {
        let out_dir = self.root.with_extension(format!("tmpfs-{pages}-{free}"));
        let _ = fs::remove_dir_all(&out_dir);
        fs::create_dir_all(&out_dir).unwrap();
        let mut cmd = String::new();
        for a in std::iter::once(self.program.display().to_string()).chain(self.args.clone()) {
            cmd.push_str(&format!(" '{a}'"));
        }
        let script = format!(
            r#"set -e
mount -t tmpfs -o size={size} tmpfs '{root}'
cp -a '{seed}/.' '{root}/'
avail=$(stat -f -c %a '{root}')
if [ "$avail" -gt {free} ]; then dd if=/dev/zero of='{root}/.fill' bs=4096 count=$((avail - {free})) status=none; fi
set +e
{cmd} >'{out}.stdout' 2>'{out}.stderr' </dev/null
echo $? >'{out}.rc'
rm -f '{root}/.fill'
cp -a '{root}/.' '{out}/'
"#,
            size = pages * 4096,
            root = self.root.display(),
            seed = self.seed.display(),
            out = out_dir.display(),
        );
        let mut c = Command::new("unshare");
        c.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
        for (k, _) in std::env::vars() {
            if k.starts_with("NVIDIA_") || k.starts_with("GPUCTK_") {
                c.env_remove(k);
            }
        }
        for (k, v) in &self.env {
            c.env(k, v);
        }
        let st = c.output().expect("unshare");
        assert!(
            st.status.success(),
            "{}: tmpfs script: {}",
            self.label,
            String::from_utf8_lossy(&st.stderr)
        );
        let rc: i32 = fs::read_to_string(format!("{}.rc", out_dir.display()))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let stderr = fs::read_to_string(format!("{}.stderr", out_dir.display())).unwrap();
        if rc != 0 {
            assert!(
                stderr.contains("No space left on device"),
                "{}: on a full tmpfs: {stderr}",
                self.label
            );
        }
        self.check(
            &out_dir,
            &format!("tmpfs of {pages} pages, {free} free"),
            false,
            rc,
            &stderr,
        );
        rc
    }

    /// Runs with 0 to 6 free pages (a configure writes up to three files: the config, its
    /// backup and the ledger): at least one must run out of space and one succeed.
    fn tiny_tmpfs(&self) -> usize {
        let rcs: Vec<i32> = (0..=6).map(|free| self.on_tiny_tmpfs(64, free)).collect();
        assert!(
            rcs.iter().any(|&rc| rc != 0) && rcs.contains(&0),
            "{}: exit codes on 0..=6 free pages: {rcs:?}",
            self.label
        );
        rcs.len()
    }
}

/// The errors worth injecting into one syscall of the write path.
fn errnos(name: &str, line: &str) -> &'static [&'static str] {
    match name {
        // Writes to stdout and stderr are the report, not the file.
        "write" if line.starts_with("write(1,") || line.starts_with("write(2,") => &[],
        "write" | "pwrite64" | "writev" => &["ENOSPC", "EIO", "EDQUOT"],
        "fsync" | "fdatasync" => &["EIO", "ENOSPC"],
        "openat" | "open" => &["ENOSPC", "EACCES", "EMFILE", "EROFS"],
        "linkat" | "link" => &["ENOSPC", "EXDEV", "EEXIST", "EROFS"],
        "rename" | "renameat" | "renameat2" => &["EXDEV", "EIO", "ENOSPC", "EROFS"],
        "fchmod" => &["EPERM", "EROFS"],
        "flock" => &["ENOLCK", "EIO"],
        "mkdir" | "mkdirat" => &["ENOSPC", "EROFS"],
        "unlink" | "unlinkat" => &["EIO", "EROFS"],
        "getdents64" | "read" | "close" => &["EIO"],
        _ => &[],
    }
}

fn report(label: &str, c: &Counts) {
    eprintln!(
        "faults: {label}: {} crash points, {} injected errors, {} tiny-tmpfs runs; {} temp names left by a kill between link and rename, all removed by the next run",
        c.kills, c.errors, c.tmpfs, c.temp_left_by_kill
    );
}

#[test]
fn cdi_generate_survives_kills_and_errors() {
    let t = TestDir::new();
    let host = mock_host(&t, "host", 2, "570.124.06", "debian");
    let root = t.join("cdi");
    fs::create_dir_all(&root).unwrap();
    let spec = root.join("nvidia.yaml");
    let mut args = vec![
        "cdi".to_string(),
        "generate".into(),
        "--output".into(),
        spec.display().to_string(),
    ];
    args.extend(host.roots());
    ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    // The old spec: valid, and different from what the run writes.
    let old = fs::read_to_string(&spec).unwrap() + "# the previous spec\n";
    fs::write(&spec, old).unwrap();
    let mut w = Writer::new("cdi generate", root, GPUCTK.into(), args);
    w.watch("nvidia.yaml", true);
    w.prepare();
    let mut c = w.sweep();
    c.tmpfs = w.tiny_tmpfs();
    for v in [&w.watched[0].old, &w.watched[0].new] {
        let _: Value = serde_norway::from_slice(v.as_ref().unwrap()).unwrap();
    }
    report("cdi generate --output", &c);
}

fn configure_writer(engine: &str, t: &TestDir) -> Writer {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engines/tests/data");
    let root = t.join(engine);
    fs::create_dir_all(&root).unwrap();
    let (config, primary, backup) = match engine {
        "docker" => {
            fs::copy(data.join("daemon.json"), root.join("daemon.json")).unwrap();
            ("daemon.json", "daemon.json", "daemon.json.bak")
        }
        "containerd" => {
            fs::copy(data.join("containerd-v2.toml"), root.join("config.toml")).unwrap();
            ("config.toml", "config.toml", "config.toml.bak")
        }
        _ => {
            fs::copy(data.join("crio.conf"), root.join("crio.conf")).unwrap();
            fs::create_dir_all(root.join("crio.conf.d")).unwrap();
            // A drop-in an admin wrote (no header of ours): backed up, then edited.
            fs::write(
                root.join("crio.conf.d/99-nvidia.toml"),
                "[crio.runtime.runtimes.other]\nruntime_path = \"/usr/bin/other\"\n",
            )
            .unwrap();
            (
                "crio.conf",
                "crio.conf.d/99-nvidia.toml",
                "crio.conf.d.99-nvidia.toml.bak",
            )
        }
    };
    let args = vec![
        "runtime".to_string(),
        "configure".into(),
        format!("--runtime={engine}"),
        "--config".into(),
        root.join(config).display().to_string(),
        "--nvidia-runtime-path".into(),
        "/usr/bin/nvidia-container-runtime".into(),
        "--set-as-default".into(),
    ];
    let mut w = Writer::new(
        &format!("runtime configure --runtime={engine}"),
        root,
        GPUCTK.into(),
        args,
    );
    w.watch(primary, true);
    w.watch(backup, false);
    if engine != "crio" {
        // --set-as-default is recorded in the ledger, written before the config.
        let ledger: &'static str =
            Box::leak(format!("{config}.gpuctk-added.json").into_boxed_str());
        w.watch(ledger, false);
    }
    if engine == "crio" {
        w.dirs.push("crio.conf.d");
        w.strict.push("crio.conf.d");
    }
    w.prepare();
    // The backup is the user's original.
    assert_eq!(w.watched[1].new, w.watched[0].old);
    w
}

fn configure_faults(engine: &str) {
    let t = TestDir::new();
    let w = configure_writer(engine, &t);
    let mut c = w.sweep();
    c.tmpfs = w.tiny_tmpfs();
    report(&w.label, &c);
}

#[test]
fn docker_configure_survives_kills_and_errors() {
    configure_faults("docker");
}

#[test]
fn containerd_configure_survives_kills_and_errors() {
    configure_faults("containerd");
}

#[test]
fn crio_configure_survives_kills_and_errors() {
    configure_faults("crio");
}

/// A bundle whose directory holds only `config.json` (its rootfs is elsewhere, by absolute
/// path), and a shim whose low-level runtime is `runtime`.
fn shim_writer(bed: &Bed, runtime: &str) -> Writer {
    let root = bed.t.join("b");
    fs::create_dir_all(&root).unwrap();
    let mut spec = bed.spec();
    spec["root"]["path"] = json!(bed.bundle.join("rootfs"));
    fs::write(
        root.join("config.json"),
        serde_json::to_vec_pretty(&spec).unwrap(),
    )
    .unwrap();
    let cfg = fs::read_to_string(&bed.config).unwrap().replace(
        "runtimes = [\"runc\"]",
        &format!("runtimes = [\"{runtime}\"]"),
    );
    fs::write(&bed.config, cfg).unwrap();
    let id = format!(
        "{}-fault",
        bed.t.path().file_name().unwrap().to_string_lossy()
    );
    let args = vec![
        "--root".to_string(),
        bed.state_root.display().to_string(),
        "create".into(),
        "--bundle".into(),
        root.display().to_string(),
        id,
    ];
    let mut w = Writer::new("shim config.json", root, bed.shim.clone(), args);
    w.env
        .push(("GPUCTK_CONFIG".into(), bed.config.display().to_string()));
    w.watch("config.json", true);
    w
}

#[test]
fn shim_config_json_survives_kills_and_errors() {
    let bed = Bed::new("runc", "debian", 2);
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=all"]);
    // `true` as the low-level runtime: what is tested is our write, not runc's.
    let mut w = shim_writer(&bed, "/bin/true");
    w.prepare();
    w.settle();
    let new: Value = serde_json::from_slice(w.watched[0].new.as_ref().unwrap()).unwrap();
    assert!(new["linux"]["devices"]
        .as_array()
        .is_some_and(|d| !d.is_empty()));
    let mut c = w.sweep();
    c.tmpfs = w.tiny_tmpfs();
    report("shim config.json", &c);
}

#[test]
fn shim_and_hook_failures_leave_no_container_and_no_mount() {
    let bed = Bed::new("runc", "debian", 2);
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=all"]);
    let mounts = mounts_under(bed.t.path());
    let mut w = shim_writer(&bed, "runc");
    w.prepare();
    // The clean run created a container; remove it.
    let id = w.args.last().unwrap().clone();
    let delete = |id: &str| {
        let _ = Command::new("runc")
            .arg("--root")
            .arg(&bed.state_root)
            .args(["delete", "--force", id])
            .status();
    };
    delete(&id);
    w.settle();
    delete(&id);
    assert!(runtime_list("runc", &bed.state_root).is_empty());

    // Kill the shim, and fail each step of its write, before it hands over to runc.
    let trace = w.trace();
    delete(&id);
    let exec = trace.len();
    let first = trace
        .iter()
        .position(|(_, _, l)| l.contains("O_TMPFILE"))
        .expect("an unnamed temp file");
    let mut counts = Counts::default();
    let mut points: Vec<(String, bool)> = Vec::new();
    for (i, (name, nth, line)) in trace[..exec].iter().enumerate() {
        if i >= first.saturating_sub(4) || i % 6 == 0 {
            points.push((format!("{name}:signal=KILL:when={nth}"), true));
        }
        if i >= first {
            for errno in errnos(name, line) {
                points.push((format!("{name}:error={errno}:when={nth}"), false));
            }
        }
    }
    for (spec, killed) in &points {
        w.reset();
        let (rc, stderr) = w.run_injected(spec);
        let listed = runtime_list("runc", &bed.state_root);
        if rc == 0 {
            // The fault changed nothing that mattered: runc created the container.
            delete(&id);
        } else {
            assert!(
                listed.is_empty(),
                "{spec}: the shim failed (rc {rc}) but runc has {listed:?}: {stderr}"
            );
        }
        w.check(
            &w.root,
            &format!("under runc, {spec}"),
            *killed,
            rc,
            &stderr,
        );
        if *killed {
            counts.kills += 1;
        } else {
            counts.errors += 1;
        }
        assert_eq!(mounts_under(bed.t.path()), mounts, "{spec}: a mount leaked");
    }
    // Remove what a kill between link and rename may have left.
    w.reset();

    // A createContainer hook that fails after the shim edited the spec (ours may run in the
    // shim itself, so the failing one is the engine's): runc gives up and removes the container
    // with everything the edit added.
    let failing = bed.t.join("failing-hook");
    fs::write(
        &failing,
        "#!/bin/sh\necho 'hook failed on purpose' >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&failing, fs::Permissions::from_mode(0o755)).unwrap();
    bed.write_config("");
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=all"]);
    bed.edit(|s| {
        s["hooks"] = json!({"createContainer": [{"path": failing, "args": ["failing-hook"]}]});
    });
    let r = bed.run("hookfail");
    assert_ne!(r.code, 0, "the failing hook must fail the container");
    assert!(r.stderr.contains("hook"), "{}", r.stderr);
    assert!(
        gpus_in(&bed.spec()) == vec![0, 1],
        "the shim had edited the spec before runc ran: {}",
        bed.spec()
    );
    assert!(
        runtime_list("runc", &bed.state_root).is_empty(),
        "no half-created container after a failing hook: {}",
        r.stderr
    );
    assert_eq!(mounts_under(bed.t.path()), mounts, "a mount leaked");

    // The legacy prestart hook failing (a GPU the host does not have), under plain runc.
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=9"]);
    let hook = bed.t.join("bin/nvidia-container-runtime-hook");
    std::os::unix::fs::symlink(GPUCTK, &hook).unwrap();
    bed.edit(|s| {
        s["hooks"] = json!({"prestart": [{
            "path": hook,
            "args": ["nvidia-container-runtime-hook", "-config", bed.config, "prestart"],
        }]});
    });
    let id = format!(
        "{}-legacyfail",
        bed.t.path().file_name().unwrap().to_string_lossy()
    );
    let out = Command::new("runc")
        .arg("--root")
        .arg(&bed.state_root)
        .args(["run", "--bundle"])
        .arg(&bed.bundle)
        .arg(&id)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no GPU with index 9"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(runtime_list("runc", &bed.state_root).is_empty());
    assert_eq!(mounts_under(bed.t.path()), mounts, "a mount leaked");
    report("shim under runc (before exec)", &counts);
}

/// The GPU indices a spec gives the container (`/dev/nvidiaN` in `linux.devices`).
fn gpus_in(spec: &Value) -> Vec<usize> {
    let mut v: Vec<usize> = spec["linux"]["devices"]
        .as_array()
        .map(|d| {
            d.iter()
                .filter_map(|d| {
                    d["path"]
                        .as_str()?
                        .strip_prefix("/dev/nvidia")?
                        .parse()
                        .ok()
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}
