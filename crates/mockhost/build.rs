//! Compiles the fake driver (csrc/) with the system C compiler into OUT_DIR,
//! where `src/artifacts.rs` embeds the results with `include_bytes!`.
//!
//! No `cc` crate: the build is a handful of plain compiler invocations and
//! the compiler is taken from `$CC` (may carry arguments) or `cc`.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Placeholder soname for libraries whose real soname is the versioned file
/// name; `src/artifacts.rs` overwrites it in place. Keep the two in sync.
const SONAME_PLACEHOLDER: &str =
    "GPUCTK_SONAME_PLACEHOLDER_0123456789abcdef0123456789abcdef0123456789abcdef";

/// Generic stub libraries: (output file, soname, name reported by the stub).
const STUB_LIBS: &[(&str, &str, &str)] = &[
    (
        "libnvidia-ptxjitcompiler.so",
        "libnvidia-ptxjitcompiler.so.1",
        "libnvidia-ptxjitcompiler",
    ),
    ("libnvidia-nvvm.so", "libnvidia-nvvm.so.4", "libnvidia-nvvm"),
    (
        "libcudadebugger.so",
        "libcudadebugger.so.1",
        "libcudadebugger",
    ),
    (
        "libnvidia-allocator.so",
        "libnvidia-allocator.so.1",
        "libnvidia-allocator",
    ),
    ("libnvidia-cfg.so", "libnvidia-cfg.so.1", "libnvidia-cfg"),
    (
        "libnvidia-opencl.so",
        "libnvidia-opencl.so.1",
        "libnvidia-opencl",
    ),
    (
        "libnvidia-encode.so",
        "libnvidia-encode.so.1",
        "libnvidia-encode",
    ),
    ("libnvcuvid.so", "libnvcuvid.so.1", "libnvcuvid"),
    ("libnvidia-glcore.so", "", "libnvidia-glcore"),
    ("libEGL_nvidia.so", "libEGL_nvidia.so.0", "libEGL_nvidia"),
    ("libGLX_nvidia.so", "libGLX_nvidia.so.0", "libGLX_nvidia"),
    // WSL2: dxcore (in /usr/lib/wsl/lib) and driver-store libraries.
    ("libdxcore.so", "libdxcore.so", "libdxcore"),
    ("libcuda_loader.so", "libcuda_loader.so", "libcuda_loader"),
    (
        "libnvidia-ml_loader.so",
        "libnvidia-ml_loader.so",
        "libnvidia-ml_loader",
    ),
    ("libnvdxgdmal.so", "libnvdxgdmal.so.1", "libnvdxgdmal"),
    ("libnvwgf2umx.so", "libnvwgf2umx.so", "libnvwgf2umx"),
];

/// Generic stub executables.
const STUB_BINS: &[&str] = &[
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
];

const SOURCES: &[&str] = &[
    "mock_common.h",
    "nvml_mini.h",
    "libcuda.c",
    "libnvml.c",
    "stub_lib.c",
    "stub_bin.c",
    "nvidia_smi.c",
    "probe.c",
];

struct Compiler {
    program: String,
    args: Vec<String>,
}

impl Compiler {
    /// The other architecture's cross compiler (`aarch64-linux-gnu-gcc` on x86_64 and the
    /// reverse), from `$CC_FOREIGN` or the Debian name; None when it is not installed.
    fn foreign(triple: &str) -> Option<Compiler> {
        println!("cargo:rerun-if-env-changed=CC_FOREIGN");
        let spec = env::var("CC_FOREIGN")
            .ok()
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| format!("{triple}-gcc"));
        let mut words = spec.split_whitespace().map(str::to_string);
        let program = words.next()?;
        let found = Command::new(&program)
            .arg("--version")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        found.then(|| Compiler {
            program,
            args: words.collect(),
        })
    }

    fn from_env() -> Compiler {
        // Same precedence as the cc crate: CC_<target>, TARGET_CC, CC, then `cc`.
        let target = env::var("TARGET").unwrap_or_default();
        let names = [
            format!("CC_{target}"),
            format!("CC_{}", target.replace('-', "_")),
            "TARGET_CC".to_string(),
            "CC".to_string(),
        ];
        for n in &names {
            println!("cargo:rerun-if-env-changed={n}");
        }
        let spec = names
            .iter()
            .find_map(|n| env::var(n).ok().filter(|v| !v.trim().is_empty()))
            .unwrap_or_else(|| "cc".to_string());
        let mut words = spec.split_whitespace().map(str::to_string);
        let program = words.next().unwrap_or_else(|| "cc".to_string());
        Compiler {
            program,
            args: words.collect(),
        }
    }

    fn run(&self, what: &str, extra: &[String]) {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args).args(extra);
        let status = match cmd.status() {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => fail(&format!(
                "C compiler `{}` not found (set $CC or run `apt-get install gcc libc6-dev`)",
                self.program
            )),
            Err(e) => fail(&format!("cannot run C compiler `{}`: {e}", self.program)),
        };
        if !status.success() {
            fail(&format!(
                "compiling {what} with `{}` failed ({status}); is libc6-dev installed? \
                 (`apt-get install gcc libc6-dev`)",
                self.program
            ));
        }
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("gpuctk-mockhost build: {msg}");
    std::process::exit(1);
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let src = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it")).join("csrc");
    for f in SOURCES {
        println!("cargo:rerun-if-changed={}", src.join(f).display());
    }
    build(&Compiler::from_env(), &src, &out, true);
    // The other architecture's driver too (`mock-host create --arch`), when its cross compiler
    // is installed; otherwise empty files, and that --arch says it was not built.
    let target = env::var("TARGET").unwrap_or_default();
    let foreign = if target.starts_with("aarch64") {
        "x86_64-linux-gnu"
    } else {
        "aarch64-linux-gnu"
    };
    let dir = out.join("foreign");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| fail(&format!("{}: {e}", dir.display())));
    match Compiler::foreign(foreign) {
        Some(cc) => build(&cc, &src, &dir, false),
        None => {
            let names = ["libcuda.so", "libnvidia-ml.so", "nvidia-smi"]
                .into_iter()
                .chain(STUB_LIBS.iter().map(|l| l.0))
                .chain(STUB_BINS.iter().copied());
            for name in names {
                std::fs::write(dir.join(name), b"")
                    .unwrap_or_else(|e| fail(&format!("{name}: {e}")));
            }
        }
    }
}

/// The fake driver's libraries and executables into `out`; the container-side probe only for
/// this build's own architecture (`probe`).
fn build(cc: &Compiler, src: &Path, out: &Path, probe: bool) {
    let common: Vec<String> = [
        "-O2",
        "-g0",
        "-std=gnu11",
        "-Wall",
        "-Wextra",
        "-fvisibility=hidden",
        "-Wl,--build-id=none",
    ]
    .iter()
    .map(|x| x.to_string())
    .chain(["-I".to_string(), s(src)])
    .collect();

    let shared = |source: &str, output: &str, soname: &str, defs: &[String]| {
        let mut args = common.clone();
        args.extend(defs.iter().cloned());
        args.extend([
            "-fPIC".to_string(),
            "-shared".to_string(),
            format!("-Wl,-soname,{soname}"),
            "-o".to_string(),
            s(&out.join(output)),
            s(&src.join(source)),
        ]);
        cc.run(output, &args);
    };

    shared("libcuda.c", "libcuda.so", "libcuda.so.1", &[]);
    shared("libnvml.c", "libnvidia-ml.so", "libnvidia-ml.so.1", &[]);
    for (file, soname, name) in STUB_LIBS {
        let soname = if soname.is_empty() {
            format!("libnvidia-glcore.so.{SONAME_PLACEHOLDER}")
        } else {
            soname.to_string()
        };
        shared(
            "stub_lib.c",
            file,
            &soname,
            &[format!("-DGM_STUB_NAME=\"{name}\"")],
        );
    }

    let exe = |source: &str, output: &str, extra: &[String]| {
        let mut args = common.clone();
        args.extend(["-o".to_string(), s(&out.join(output)), s(&src.join(source))]);
        args.extend(extra.iter().cloned());
        cc.run(output, &args);
    };
    // Linked against the fake NVML built above: DT_NEEDED libnvidia-ml.so.1,
    // resolved by the loader at run time like the real nvidia-smi.
    exe(
        "nvidia_smi.c",
        "nvidia-smi",
        &[format!("-L{}", s(out)), "-lnvidia-ml".to_string()],
    );
    for name in STUB_BINS {
        exe("stub_bin.c", name, &[format!("-DGM_STUB_NAME=\"{name}\"")]);
    }
    if !probe {
        return;
    }
    // glibc < 2.34 keeps dlopen in libdl; --as-needed drops it where libc has it.
    exe(
        "probe.c",
        "gpuctk-probe",
        &["-Wl,--as-needed".to_string(), "-ldl".to_string()],
    );
}
