//! MIG partitions of a mock host: which GPUs are in MIG mode with which GPU instances, the
//! capability minors the driver gives them (`/proc/driver/nvidia-caps/mig-minors`), and the
//! layout string the fake NVML reads from its config block.

use serde::{Deserialize, Serialize};

use crate::{ids, Error};

/// GPUs the driver's `mig-minors` table covers (`gpu0` to `gpu31`).
pub const MIG_MINORS_GPUS: u32 = 32;
/// GPU instance ids per GPU in that table (`gi0` to `gi14`).
const GIS_PER_GPU: u32 = 15;
/// Compute instance ids per GPU instance (`ci0` to `ci7`).
const CIS_PER_GI: u32 = 8;
/// Most GPU instances a mock GPU has: seven slices.
pub const MAX_MIG_PER_GPU: usize = 7;

/// One MIG device of a mock GPU: a compute instance of a GPU instance. `nvidia-smi mig -cgi
/// <profile> -C` makes one spanning its GPU instance (`ci0`); a GPU instance split with `-cci`
/// has several, each its own MIG device with its own UUID and capability node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MockMig {
    /// Index among the GPU's MIG devices, as NVML's `GetMigDeviceHandleByIndex` numbers them.
    pub index: u32,
    /// GPU instance id.
    pub gi: u32,
    /// Compute instance id.
    pub ci: u32,
    /// Profile name as NVML names the device, e.g. `1g.10gb`, `1c.2g.20gb`, `1g.24gb+gfx`.
    pub profile: String,
    /// `MIG-...` UUID.
    pub uuid: String,
    /// Minor of `/dev/nvidia-caps/nvidia-cap<N>` granting the GPU instance.
    pub gi_minor: u32,
    /// Minor of the node granting the compute instance.
    pub ci_minor: u32,
    /// Its GPU instance profile has the graphics attribute (`+gfx`, Blackwell).
    #[serde(default)]
    pub gfx: bool,
}

/// The minor the driver gives `gpu<gpu>/gi<gi>/access`: the table starts at 3 after `config`
/// and `monitor`, each GPU instance taking one minor plus one per compute instance.
pub fn gi_minor(gpu_minor: u32, gi: u32) -> u32 {
    3 + gpu_minor * GIS_PER_GPU * (CIS_PER_GI + 1) + gi * (CIS_PER_GI + 1)
}

/// The minor of `gpu<gpu>/gi<gi>/ci<ci>/access`.
pub fn ci_minor(gpu_minor: u32, gi: u32, ci: u32) -> u32 {
    gi_minor(gpu_minor, gi) + 1 + ci
}

/// `/proc/driver/nvidia-caps/mig-minors` as the driver writes it: every possible capability,
/// whatever is configured.
pub(crate) fn mig_minors_file(config_minor: u32, monitor_minor: u32) -> String {
    let mut out = format!("config {config_minor}\nmonitor {monitor_minor}\n");
    for gpu in 0..MIG_MINORS_GPUS {
        for gi in 0..GIS_PER_GPU {
            out.push_str(&format!("gpu{gpu}/gi{gi}/access {}\n", gi_minor(gpu, gi)));
            for ci in 0..CIS_PER_GI {
                out.push_str(&format!(
                    "gpu{gpu}/gi{gi}/ci{ci}/access {}\n",
                    ci_minor(gpu, gi, ci)
                ));
            }
        }
    }
    out
}

/// One `--mig` entry: `<n>g.<m>gb[+gfx][*<k>]`, a GPU instance of `n` slices (1, 2, 3, 4 or
/// 7; 1, 2 or 4 with the graphics attribute) holding `k` compute instances of `n/k` slices each.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    slices: u32,
    memory: String,
    gfx: bool,
    cis: u32,
}

impl Entry {
    fn parse(entry: &str) -> Option<Entry> {
        let (profile, cis) = match entry.split_once('*') {
            Some((p, k))
                if !k.is_empty() && k.len() <= 1 && k.bytes().all(|b| b.is_ascii_digit()) =>
            {
                (p, k.parse().ok()?)
            }
            Some(_) => return None,
            None => (entry, 1),
        };
        let (profile, gfx) = match profile.strip_suffix("+gfx") {
            Some(p) => (p, true),
            None => (profile, false),
        };
        let (n, mem) = profile.split_once("g.")?;
        let memory = mem.strip_suffix("gb")?;
        if memory.is_empty() || memory.len() > 4 || !memory.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let slices: u32 = match (n, gfx) {
            ("1" | "2" | "4", _) | ("3" | "7", false) => n.parse().ok()?,
            _ => return None,
        };
        (cis >= 1 && slices % cis == 0).then(|| Entry {
            slices,
            memory: memory.to_string(),
            gfx,
            cis,
        })
    }

    /// What NVML names each of its compute instances: `1g.10gb`, `1c.2g.20gb`, `1g.24gb+gfx`.
    fn device_name(&self) -> String {
        let c = self.slices / self.cis;
        let base = format!("{}g.{}gb", self.slices, self.memory);
        let base = if c == self.slices {
            base
        } else {
            format!("{c}c.{base}")
        };
        if self.gfx {
            format!("{base}+gfx")
        } else {
            base
        }
    }
}

/// The GPU instance ids an A100/H100 places a profile of `n` slices at.
fn gi_candidates(n: u32) -> &'static [u32] {
    match n {
        7 => &[0],
        4 => &[1],
        3 => &[1, 2],
        2 => &[3, 4, 5],
        _ => &[7, 8, 9, 10, 11, 12, 13],
    }
}

/// Place `profiles` on one GPU: each gets the first free GPU instance id its size allows.
fn place_entries(profiles: &[String]) -> Result<Vec<(Entry, u32)>, String> {
    if profiles.is_empty() || profiles.len() > MAX_MIG_PER_GPU {
        return Err(format!(
            "a GPU in MIG mode has 1 to {MAX_MIG_PER_GPU} instances"
        ));
    }
    let mut used: Vec<u32> = Vec::new();
    let mut total = 0;
    let mut out = Vec::new();
    for p in profiles {
        let e = Entry::parse(p).ok_or_else(|| {
            format!(
                "{p:?} is not a MIG profile such as 1g.10gb (1, 2, 3, 4 or 7 slices), 1g.24gb+gfx (1, 2 or 4) or 2g.20gb*2 (compute instances dividing the slices)"
            )
        })?;
        total += e.slices;
        let gi = gi_candidates(e.slices)
            .iter()
            .copied()
            .find(|g| !used.contains(g))
            .filter(|_| total <= 7)
            .ok_or_else(|| format!("{} do not fit in the GPU's 7 slices", profiles.join(",")))?;
        used.push(gi);
        out.push((e, gi));
    }
    // NVML and procfs list a GPU's instances by id.
    out.sort_by_key(|(_, gi)| *gi);
    Ok(out)
}

/// Place `profiles` on one GPU: (entry as given, GPU instance id), by GPU instance id.
pub(crate) fn place(profiles: &[String]) -> Result<Vec<(String, u32)>, String> {
    let placed = place_entries(profiles)?;
    let mut given: Vec<&String> = profiles.iter().collect();
    Ok(placed
        .into_iter()
        .map(|(e, gi)| {
            let pos = given
                .iter()
                .position(|p| Entry::parse(p).as_ref() == Some(&e))
                .unwrap_or(0);
            (given.remove(pos).clone(), gi)
        })
        .collect())
}

/// `--mig INDEX=PROFILE[,PROFILE...]`, e.g. `0=1g.10gb,1g.10gb,2g.20gb*2,1g.24gb+gfx`.
pub fn parse_mig_arg(arg: &str) -> Result<(u32, Vec<String>), Error> {
    let invalid = |reason: String| Error::InvalidConfig {
        field: "MIG layout",
        value: arg.chars().take(200).collect(),
        reason,
    };
    let (gpu, profiles) = arg.split_once('=').ok_or_else(|| {
        invalid("expected INDEX=PROFILE[,PROFILE...], e.g. 0=1g.10gb,2g.20gb".into())
    })?;
    let gpu: u32 = gpu
        .parse()
        .map_err(|_| invalid(format!("{gpu:?} is not a GPU index")))?;
    let profiles: Vec<String> = profiles.split(',').map(str::to_string).collect();
    place(&profiles).map_err(invalid)?;
    Ok((gpu, profiles))
}

/// The MIG devices of GPU `minor` with `profiles`, as the host metadata records them: each
/// GPU instance's compute instances in id order, numbered across the GPU as NVML numbers them.
pub(crate) fn devices(seed: &str, minor: u32, profiles: &[String]) -> Vec<MockMig> {
    let mut out = Vec::new();
    for (e, gi) in place_entries(profiles).unwrap_or_default() {
        for ci in 0..e.cis {
            out.push(MockMig {
                index: out.len() as u32,
                gi,
                ci,
                profile: e.device_name(),
                uuid: ids::mig_uuid(seed, minor, gi, ci),
                gi_minor: gi_minor(minor, gi),
                ci_minor: ci_minor(minor, gi, ci),
                gfx: e.gfx,
            });
        }
    }
    out
}

/// The config block's `mig` value: `<minor>:<name>@<gi>.<ci>,...` per GPU, one item per MIG
/// device, `/` between GPUs.
pub(crate) fn config_value(layout: &[(u32, Vec<String>)]) -> String {
    layout
        .iter()
        .map(|(minor, profiles)| {
            let items: Vec<String> = devices("", *minor, profiles)
                .into_iter()
                .map(|m| format!("{}@{}.{}", m.profile, m.gi, m.ci))
                .collect();
            format!("{minor}:{}", items.join(","))
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minors_follow_the_drivers_table() {
        // Lines of the real file, as NVIDIA's toolkit quotes them.
        let text = mig_minors_file(1, 2);
        for line in [
            "config 1\n",
            "monitor 2\n",
            "gpu0/gi0/access 3\n",
            "gpu0/gi0/ci0/access 4\n",
            "gpu3/gi3/ci3/access 439\n",
            "gpu6/gi11/ci7/access 920\n",
            "gpu31/gi14/ci7/access 4322\n",
        ] {
            assert!(text.contains(line), "{line}");
        }
        assert!(text.ends_with("gpu31/gi14/ci7/access 4322\n"));
    }

    #[test]
    fn placement_and_arguments() {
        let p = |s: &[&str]| place(&s.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        assert_eq!(
            p(&["1g.10gb", "1g.10gb", "2g.20gb"]).unwrap(),
            vec![
                ("2g.20gb".to_string(), 3),
                ("1g.10gb".to_string(), 7),
                ("1g.10gb".to_string(), 8)
            ]
        );
        assert_eq!(p(&["7g.80gb"]).unwrap()[0].1, 0);
        assert!(p(&["7g.80gb", "1g.10gb"]).is_err());
        assert!(p(&["4g.40gb", "4g.40gb"]).is_err());
        assert!(p(&["5g.50gb"]).is_err());
        assert!(p(&["1g.10g"]).is_err());
        assert_eq!(
            parse_mig_arg("1=3g.40gb,3g.40gb").unwrap(),
            (1, vec!["3g.40gb".to_string(), "3g.40gb".to_string()])
        );
        for bad in [
            "1g.10gb",
            "x=1g.10gb",
            "0=",
            "0=1g.10gb,,",
            "0=3g.40gb+gfx",
            "0=3g.40gb*2",
            "0=2g.20gb*0",
            "0=2g.20gb*",
            "0=1g.10gb+me",
        ] {
            assert!(parse_mig_arg(bad).is_err(), "{bad}");
        }
        let layout = vec![(0, vec!["1g.10gb".to_string(), "3g.40gb".to_string()])];
        assert_eq!(config_value(&layout), "0:3g.40gb@1.0,1g.10gb@7.0");
        let split = vec![(1, vec!["2g.20gb*2".to_string(), "1g.24gb+gfx".to_string()])];
        assert_eq!(
            config_value(&split),
            "1:1c.2g.20gb@3.0,1c.2g.20gb@3.1,1g.24gb+gfx@7.0"
        );
        let d = devices("gpuctk", 1, &split[0].1);
        assert_eq!(
            d.iter()
                .map(|m| (m.index, m.gi, m.ci, m.ci_minor, m.gfx))
                .collect::<Vec<_>>(),
            vec![
                (0, 3, 0, 3 + 135 + 27 + 1, false),
                (1, 3, 1, 3 + 135 + 27 + 2, false),
                (2, 7, 0, 3 + 135 + 63 + 1, true)
            ]
        );
        assert_ne!(d[0].uuid, d[1].uuid);
        let d = devices("gpuctk", 1, &layout[0].1);
        assert_eq!((d[0].gi, d[0].gi_minor, d[0].ci_minor), (1, 147, 148));
        assert!(d[0].uuid.starts_with("MIG-") && d[0].uuid.len() == 40);
    }
}
