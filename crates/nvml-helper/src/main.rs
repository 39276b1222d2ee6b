//! `gpuctk-nvml LIBRARY`: the dynamically linked helper the static `gpuctk` runs for NVML's
//! answers, since a static glibc program cannot `dlopen` (docs/architecture.md, "One static
//! binary, and where NVML goes"). It opens the `libnvidia-ml.so.1` it is given (the one gpuctk's
//! discovery resolved in the driver root), asks once, and prints `NvmlInfo` as one line of JSON;
//! on failure one line on stderr and exit status 1. It reads nothing else and keeps no state.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let [library] = args.as_slice() else {
        eprintln!(
            "gpuctk-nvml: usage: gpuctk-nvml /ABSOLUTE/PATH/libnvidia-ml.so.1 (gpuctk runs it; it prints NVML's answers as JSON)"
        );
        return ExitCode::from(2);
    };
    let library = Path::new(library);
    if !library.is_absolute() {
        eprintln!(
            "gpuctk-nvml: {}: not an absolute path (give the driver root's libnvidia-ml.so.1)",
            library.display()
        );
        return ExitCode::from(2);
    }
    let answer = gpuctk_host::nvml::query(library)
        .map_err(|e| e.to_string())
        .and_then(|info| serde_json::to_string(&info).map_err(|e| e.to_string()));
    match answer {
        Ok(mut json) => {
            json.push('\n');
            let mut out = std::io::stdout().lock();
            if let Err(e) = out.write_all(json.as_bytes()).and_then(|()| out.flush()) {
                eprintln!("gpuctk-nvml: stdout: {e}");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpuctk-nvml: {e}");
            ExitCode::FAILURE
        }
    }
}
