//! Parsing what `gpuctk-probe` prints, so tests can judge a container by
//! facts rather than by grepping text. Pure.

/// How `dlopen` of a library went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LibraryLoad {
    /// Loaded: the link map's `l_name` and its realpath.
    Loaded {
        /// Path the loader used.
        path: String,
        /// Its realpath.
        realpath: String,
    },
    /// `dlopen` failed with this `dlerror()`.
    Failed(String),
}

/// Everything the probe reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeReport {
    /// `(path, result)` for each /dev/nvidia* entry; result is `ok` or an
    /// errno name such as `ENXIO`.
    pub devices: Vec<(String, String)>,
    /// libcuda.so.1.
    pub libcuda: Option<LibraryLoad>,
    /// cuInit's return code.
    pub cu_init: Option<i32>,
    /// cuDriverGetVersion's (rc, version).
    pub cu_driver_version: Option<(i32, i32)>,
    /// cuDeviceGetCount's (rc, count).
    pub cu_device_count: Option<(i32, i32)>,
    /// libnvidia-ml.so.1.
    pub libnvml: Option<LibraryLoad>,
    /// nvmlInit_v2's return code.
    pub nvml_init: Option<i32>,
    /// nvmlDeviceGetCount_v2's (rc, count).
    pub nvml_device_count: Option<(i32, u32)>,
    /// UUIDs NVML reported, in index order.
    pub nvml_uuids: Vec<String>,
}

impl ProbeReport {
    /// Parse probe output; unknown lines are ignored so newer probes stay readable.
    pub fn parse(text: &str) -> ProbeReport {
        let mut r = ProbeReport::default();
        for line in text.lines() {
            let mut words = line.split(' ');
            let key = words.next().unwrap_or("");
            let rest: Vec<&str> = words.collect();
            let int = |i: usize| rest.get(i).and_then(|w| w.parse::<i32>().ok());
            match key {
                "dev" if rest.len() == 2 => r.devices.push((rest[0].into(), rest[1].into())),
                "libcuda" | "libnvidia-ml" => {
                    let load = match rest.first() {
                        Some(&"ok") if rest.len() >= 3 => LibraryLoad::Loaded {
                            path: rest[1].into(),
                            realpath: rest[2].into(),
                        },
                        _ => LibraryLoad::Failed(
                            rest.iter().skip(1).copied().collect::<Vec<_>>().join(" "),
                        ),
                    };
                    if key == "libcuda" {
                        r.libcuda = Some(load);
                    } else {
                        r.libnvml = Some(load);
                    }
                }
                "cuInit" => r.cu_init = int(0),
                "cuDriverGetVersion" => r.cu_driver_version = int(0).zip(int(1)),
                "cuDeviceGetCount" => r.cu_device_count = int(0).zip(int(1)),
                "nvmlInit" => r.nvml_init = int(0),
                "nvmlDeviceGetCount" => {
                    r.nvml_device_count =
                        int(0).zip(rest.get(1).and_then(|w| w.parse::<u32>().ok()))
                }
                "nvmlDeviceGetUUID" if int(1) == Some(0) => {
                    if let Some(u) = rest.get(2) {
                        r.nvml_uuids.push((*u).into());
                    }
                }
                _ => {}
            }
        }
        r
    }

    /// The result of opening `path`, if the probe saw it.
    pub fn device(&self, path: &str) -> Option<&str> {
        self.devices
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, r)| r.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sample() {
        let text = "dev /dev/nvidia0 ENXIO\ndev /dev/nvidiactl EACCES\n\
                    libcuda ok /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib/x86_64-linux-gnu/libcuda.so.570.1\n\
                    cuInit 0\ncuDriverGetVersion 0 12080\ncuDeviceGetCount 0 1\n\
                    libnvidia-ml error libnvidia-ml.so.1: cannot open shared object file: No such file or directory\n\
                    garbage line\n";
        let r = ProbeReport::parse(text);
        assert_eq!(r.device("/dev/nvidia0"), Some("ENXIO"));
        assert_eq!(r.device("/dev/nvidiactl"), Some("EACCES"));
        assert_eq!(r.cu_init, Some(0));
        assert_eq!(r.cu_driver_version, Some((0, 12080)));
        assert_eq!(r.cu_device_count, Some((0, 1)));
        assert!(matches!(r.libcuda, Some(LibraryLoad::Loaded { .. })));
        assert_eq!(
            r.libnvml,
            Some(LibraryLoad::Failed(
                "libnvidia-ml.so.1: cannot open shared object file: No such file or directory"
                    .into()
            ))
        );
    }
}
