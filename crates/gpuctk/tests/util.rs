//! Test helpers: a temp dir per test, a `gpuctk` command builder, mock hosts, schema checks.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub const GPUCTK: &str = env!("CARGO_BIN_EXE_gpuctk");

/// A temp dir that lives as long as the test.
pub struct TestDir {
    dir: tempfile::TempDir,
}

impl TestDir {
    pub fn new() -> TestDir {
        TestDir {
            dir: tempfile::Builder::new()
                .prefix("gpuctk-test-")
                .tempdir()
                .unwrap(),
        }
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    pub fn join(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }
}

/// `gpuctk ARGS` with an environment that holds none of the NVIDIA_* variables the flags read.
pub fn gpuctk(args: &[&str]) -> Command {
    let mut c = Command::new(GPUCTK);
    c.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("NVIDIA_") || k.starts_with("GPUCTK_") {
            c.env_remove(k);
        }
    }
    c
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

pub fn run(args: &[&str]) -> Run {
    gpuctk(args).output().expect("run gpuctk").into()
}

/// Run and require success.
pub fn ok(args: &[&str]) -> Run {
    ok_command(gpuctk(args), args)
}

/// Run `c` (a [`gpuctk`] command for `args`, adjusted) and require success.
pub fn ok_command(mut c: Command, args: &[&str]) -> Run {
    let r: Run = c.output().expect("run gpuctk").into();
    assert_eq!(
        r.code, 0,
        "gpuctk {args:?} failed:\nstdout: {}\nstderr: {}",
        r.stdout, r.stderr
    );
    r
}

/// Run and require failure with a one-line error containing each of `needles`.
pub fn fails(args: &[&str], needles: &[&str]) -> Run {
    let r = run(args);
    assert_ne!(
        r.code, 0,
        "gpuctk {args:?} should fail:\nstdout: {}\nstderr: {}",
        r.stdout, r.stderr
    );
    for n in needles {
        assert!(
            r.stderr.contains(n),
            "stderr of {args:?} lacks {n:?}:\n{}",
            r.stderr
        );
    }
    assert!(!r.stderr.contains("panicked"), "panic: {}", r.stderr);
    r
}

/// A mock host built through the CLI, with its manifest.
pub struct Host {
    pub manifest: serde_json::Value,
}

impl Host {
    /// The mock host `mock-host create` made in `dir`, from its manifest.
    pub fn at(dir: &Path) -> Host {
        let manifest =
            serde_json::from_slice(&std::fs::read(dir.join("mock-host.json")).unwrap()).unwrap();
        Host { manifest }
    }
    pub fn driver_root(&self) -> String {
        self.manifest["driver_root"].as_str().unwrap().to_string()
    }
    pub fn dev_root(&self) -> String {
        self.manifest["dev_root"].as_str().unwrap().to_string()
    }
    pub fn proc_root(&self) -> String {
        self.manifest["proc_root"].as_str().unwrap().to_string()
    }
    /// The root flags for this host.
    pub fn roots(&self) -> Vec<String> {
        vec![
            "--driver-root".into(),
            self.driver_root(),
            "--dev-root".into(),
            self.dev_root(),
            "--proc-root".into(),
            self.proc_root(),
        ]
    }
    /// A config.toml at `path` pointing `nvidia-container-cli` at this host's roots, with
    /// `gpuctk_extra` (whole lines) added under `[gpuctk]`.
    pub fn write_cli_config(&self, path: &Path, gpuctk_extra: &str) {
        std::fs::write(
            path,
            format!(
                "[nvidia-container-cli]\nroot = \"{}\"\n\n[gpuctk]\ndev-root = \"{}\"\nproc-root = \"{}\"\n{gpuctk_extra}",
                self.driver_root(),
                self.dev_root(),
                self.proc_root()
            ),
        )
        .unwrap();
    }
    /// `cdi generate` of this host's spec into `out`, its hooks our binary.
    pub fn write_spec(&self, out: &Path) {
        ok(&with(
            &[
                "cdi",
                "generate",
                "--output",
                out.to_str().unwrap(),
                "--nvidia-cdi-hook-path",
                GPUCTK,
            ],
            &self.roots(),
        ));
    }
    pub fn uuids(&self) -> Vec<String> {
        self.manifest["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["uuid"].as_str().unwrap().to_string())
            .collect()
    }
}

pub fn mock_host(t: &TestDir, name: &str, gpus: u32, version: &str, layout: &str) -> Host {
    mock_host_with(t, name, gpus, version, layout, &[])
}

/// [`mock_host`] with more `mock-host create` flags (`--gds`, `--imex-channels 3`, ...).
pub fn mock_host_with(
    t: &TestDir,
    name: &str,
    gpus: u32,
    version: &str,
    layout: &str,
    extra: &[&str],
) -> Host {
    let dir = t.join(name);
    let d = dir.to_str().unwrap().to_string();
    let g = gpus.to_string();
    let mut args = vec![
        "mock-host",
        "create",
        &d,
        "--gpus",
        &g,
        "--driver-version",
        version,
        "--layout",
        layout,
    ];
    args.extend_from_slice(extra);
    ok(&args);
    Host::at(&dir)
}

/// `args` followed by `extra`, as &str.
pub fn with<'a>(args: &'a [&'a str], extra: &'a [String]) -> Vec<&'a str> {
    let mut v: Vec<&str> = args.to_vec();
    v.extend(extra.iter().map(String::as_str));
    v
}

fn cdi_schema() -> &'static (boon::Schemas, boon::SchemaIndex) {
    static S: OnceLock<(boon::Schemas, boon::SchemaIndex)> = OnceLock::new();
    S.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cdi/tests/schema");
        let load = |f: &str| -> serde_json::Value {
            serde_json::from_slice(&std::fs::read(dir.join(f)).unwrap()).unwrap()
        };
        let mut schemas = boon::Schemas::new();
        let mut c = boon::Compiler::new();
        c.add_resource("file:///cdi/defs.json", load("defs.json"))
            .unwrap();
        c.add_resource("file:///cdi/schema.json", load("schema.json"))
            .unwrap();
        let idx = c.compile("file:///cdi/schema.json", &mut schemas).unwrap();
        (schemas, idx)
    })
}

/// Check a spec (as JSON value) against the published CDI schema.
pub fn assert_cdi_schema(spec: &serde_json::Value) {
    let (schemas, idx) = cdi_schema();
    if let Err(e) = schemas.validate(spec, *idx) {
        panic!("spec violates the CDI schema: {e:#}");
    }
}

/// Parse YAML into a JSON value.
pub fn yaml(text: &str) -> serde_json::Value {
    serde_norway::from_str(text).expect("valid yaml")
}

/// The names in `dir` (empty when it does not exist), sorted.
pub fn names_in(dir: &Path) -> std::collections::BTreeSet<String> {
    match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Default::default(),
    }
}

/// The lines of this process's `/proc/self/mountinfo` that mention `under`: the mounts a test
/// made (or leaked) below its own temp dir, unaffected by other tests mounting elsewhere.
pub fn mounts_under(under: &Path) -> Vec<String> {
    let needle = under.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(&needle))
        .map(str::to_string)
        .collect()
}

/// The container ids `runtime --root state_root list` knows (the header line dropped).
pub fn runtime_list(runtime: &str, state_root: &Path) -> Vec<String> {
    let out = Command::new(runtime)
        .arg("--root")
        .arg(state_root)
        .args(["list", "-q"])
        .output()
        .unwrap_or_else(|e| panic!("{runtime} list: {e} (install {runtime})"));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

impl TestDir {
    /// A temp dir in memory (/dev/shm) when that allows device nodes and executables, else in the
    /// default temp dir: for tests that copy and delete many small trees.
    pub fn in_memory() -> TestDir {
        let shm = Path::new("/dev/shm");
        let usable = std::ffi::CString::new("/dev/shm").ok().is_some_and(|c| {
            let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
            // SAFETY: a valid C string and a buffer of the right type for statvfs.
            unsafe {
                libc::statvfs(c.as_ptr(), st.as_mut_ptr()) == 0
                    && st.assume_init().f_flag & (libc::ST_NOEXEC | libc::ST_NODEV) == 0
            }
        });
        if !usable || !shm.is_dir() {
            return TestDir::new();
        }
        TestDir {
            dir: tempfile::Builder::new()
                .prefix("gpuctk-test-")
                .tempdir_in(shm)
                .unwrap(),
        }
    }
}

/// The sha256 of a file, in hex (`sha256sum`).
pub fn sha256_file(path: &Path) -> String {
    let o = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// An OCI image archive (for `ctr images import`; no registry here) at `work/image.oci.tar`:
/// one uncompressed layer `layer_tar`, the image config `config` (its `rootfs` filled in) and
/// the name `name` (`docker.io/library/x:tag`). `work` is a scratch dir.
pub fn oci_archive(
    work: &Path,
    layer_tar: &Path,
    name: &str,
    config: serde_json::Value,
) -> PathBuf {
    let dir = work.join("oci");
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let layer_digest = sha256_file(layer_tar);
    let layer_size = std::fs::metadata(layer_tar).unwrap().len();
    std::fs::copy(layer_tar, blobs.join(&layer_digest)).unwrap();
    let write_blob = |v: serde_json::Value| -> (String, u64) {
        let bytes = serde_json::to_vec(&v).unwrap();
        let tmp = dir.join("blob.tmp");
        std::fs::write(&tmp, &bytes).unwrap();
        let d = sha256_file(&tmp);
        std::fs::rename(&tmp, blobs.join(&d)).unwrap();
        (d, bytes.len() as u64)
    };
    let mut config = config;
    config["rootfs"] =
        serde_json::json!({"type": "layers", "diff_ids": [format!("sha256:{layer_digest}")]});
    let (cfg_d, cfg_s) = write_blob(config);
    let (man_d, man_s) = write_blob(serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": format!("sha256:{cfg_d}"), "size": cfg_s},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": format!("sha256:{layer_digest}"), "size": layer_size}]
    }));
    let tag = name.rsplit_once(':').map_or("latest", |(_, t)| t);
    std::fs::write(
        dir.join("index.json"),
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": format!("sha256:{man_d}"), "size": man_s,
                "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag}}]
        }))
        .unwrap(),
    )
    .unwrap();
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let tar = work.join("image.oci.tar");
    let st = Command::new("tar")
        .arg("-C")
        .arg(&dir)
        .arg("-cf")
        .arg(&tar)
        .args(["index.json", "oci-layout", "blobs"])
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::remove_dir_all(&dir).unwrap();
    tar
}
