//! Caps on spec files, checked before a parser sees them: a spec dir is shared with other
//! vendors and tools, and one huge or deeply nested file there must neither exhaust memory nor
//! stall every container start (issue 8: a 32 MB spec made `cdi list` use 558 MB; an 80 KB
//! deeply nested YAML took 4.2 s to parse).
//!
//! Both checks are one linear pass over the bytes.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::spec::{Error, Format, ParseError};

/// Largest spec file read. NVIDIA's spec for 64 GPUs with every MIG profile is well under 1 MiB.
pub const MAX_SPEC_SIZE: u64 = 4 << 20;
/// Deepest nesting of mappings and sequences accepted. A CDI spec nests about 6 deep.
pub const MAX_NESTING: usize = 64;

/// Reads a spec file of at most [`MAX_SPEC_SIZE`] bytes: the size is checked before reading,
/// and a FIFO or device is refused, not opened for a blocking read.
pub fn read_spec_file(path: &Path) -> Result<Vec<u8>, Error> {
    let read_err = |source| Error::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(read_err)?;
    let md = file.metadata().map_err(read_err)?;
    let too_large = |size| Error::Parse {
        path: path.to_path_buf(),
        source: ParseError::TooLarge {
            size,
            cap: MAX_SPEC_SIZE,
        },
    };
    if !md.is_file() {
        return Err(read_err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        )));
    }
    if md.len() > MAX_SPEC_SIZE {
        return Err(too_large(md.len()));
    }
    let mut bytes = Vec::with_capacity(md.len() as usize);
    file.take(MAX_SPEC_SIZE + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_SPEC_SIZE {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Checks size and nesting of spec bytes before parsing.
pub fn check(bytes: &[u8], format: Format) -> Result<(), ParseError> {
    if bytes.len() as u64 > MAX_SPEC_SIZE {
        return Err(ParseError::TooLarge {
            size: bytes.len() as u64,
            cap: MAX_SPEC_SIZE,
        });
    }
    let (depth, line) = match format {
        Format::Json => flow_depth(bytes, false),
        Format::Yaml => yaml_depth(bytes),
    };
    if depth > MAX_NESTING {
        return Err(ParseError::TooDeep {
            line,
            cap: MAX_NESTING,
        });
    }
    Ok(())
}

/// Greatest bracket depth (`[` `{`) outside quoted strings, and the 1-based line where it was
/// first exceeded past [`MAX_NESTING`] (else where it peaked). `yaml` also knows single quotes
/// and `#` comments.
fn flow_depth(bytes: &[u8], yaml: bool) -> (usize, usize) {
    let (mut depth, mut max, mut line, mut at) = (0usize, 0usize, 1usize, 1usize);
    let mut quote: Option<u8> = None;
    let mut escaped = false;
    let mut comment = false;
    let mut prev = b'\n';
    // The last significant byte outside quotes and comments; `\n` at a line start. In YAML a
    // bracket or quote opens something only where a value starts (after `: `, `- `, `[`, `{`,
    // `,` or at a line start); elsewhere it is a character of a plain scalar (`a[b`).
    let mut sig = b'\n';
    let value_start = |sig: u8| matches!(sig, b'\n' | b':' | b'-' | b'[' | b'{' | b',' | b'?');
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        i += 1;
        if b == b'\n' {
            line += 1;
            comment = false;
            if quote.is_none() {
                sig = b'\n';
            }
        }
        if comment {
            prev = b;
            continue;
        }
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if b == b'\\' && q == b'"' {
                    escaped = true;
                } else if b == q && q == b'\'' && bytes.get(i) == Some(&b'\'') {
                    i += 1; // `''` is a quote inside a single-quoted scalar
                } else if b == q {
                    quote = None;
                    sig = q;
                }
            }
            None => {
                match b {
                    b'"' if !yaml || value_start(sig) => quote = Some(b),
                    b'\'' if yaml && value_start(sig) => quote = Some(b),
                    b'#' if yaml && matches!(prev, b' ' | b'\t' | b'\n') => comment = true,
                    b'[' | b'{' if !yaml || value_start(sig) => {
                        depth += 1;
                        // Keep the line where the cap was first passed: that is where to look.
                        if depth > max && max <= MAX_NESTING {
                            at = line;
                        }
                        max = max.max(depth);
                    }
                    b']' | b'}' => depth = depth.saturating_sub(1),
                    _ => {}
                }
                if !b.is_ascii_whitespace() && quote.is_none() && !comment {
                    // A bracket that opened nothing is a plain character, not a value start.
                    let opened = matches!(b, b'[' | b'{') && (!yaml || value_start(sig));
                    // `-`, `:` and `?` are indicators only before white space (`- x`, `k: v`);
                    // `--link` or `a:b` are plain text.
                    let indicator = !matches!(b, b'-' | b':' | b'?')
                        || bytes.get(i).is_none_or(|n| n.is_ascii_whitespace());
                    sig = if (matches!(b, b'[' | b'{') && !opened) || !indicator {
                        b'a'
                    } else {
                        b
                    };
                }
            }
        }
        prev = b;
    }
    (max, at)
}

/// Whether a YAML line (without its indentation) ends with a block scalar indicator (`|`,
/// `>-`, `|2+` ...) after a key or a dash: the lines indented deeper that follow are text.
fn opens_block_scalar(content: &[u8]) -> bool {
    let text = String::from_utf8_lossy(content);
    let text = match text.find(" #") {
        Some(i) => &text[..i],
        None => &text,
    };
    let t = text.trim_end();
    let last = t.rsplit(' ').next().unwrap_or("");
    let is_indicator = last.starts_with(['|', '>'])
        && last[1..]
            .bytes()
            .all(|b| b == b'-' || b == b'+' || b.is_ascii_digit());
    is_indicator && (t.len() == last.len() || t[..t.len() - last.len()].ends_with(' '))
}

/// [`flow_depth`] for YAML, skipping the text of block scalars (`key: |` and the lines
/// indented below it), where brackets are characters, not nesting.
fn yaml_flow_depth(bytes: &[u8]) -> (usize, usize) {
    let mut kept = Vec::with_capacity(bytes.len());
    let mut lines_kept = Vec::new();
    let mut block: Option<usize> = None;
    for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let indent = raw.iter().take_while(|&&b| b == b' ').count();
        let content = &raw[indent..];
        let blank = content.iter().all(|b| b.is_ascii_whitespace());
        if let Some(bi) = block {
            if blank || indent > bi {
                continue;
            }
            block = None;
        }
        kept.extend_from_slice(raw);
        kept.push(b'\n');
        lines_kept.push(i + 1);
        if opens_block_scalar(content) {
            block = Some(indent);
        }
    }
    let (depth, at) = flow_depth(&kept, true);
    // `at` counts kept lines; map it back to the file's line.
    (
        depth,
        lines_kept.get(at.saturating_sub(1)).copied().unwrap_or(at),
    )
}

/// Block nesting (indentation levels, with each `- ` of a compact sequence counting as one)
/// plus flow nesting, for YAML.
fn yaml_depth(bytes: &[u8]) -> (usize, usize) {
    let mut stack: Vec<usize> = Vec::new();
    let (mut max, mut at) = (0usize, 1usize);
    for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let indent = raw.iter().take_while(|&&b| b == b' ').count();
        let rest = &raw[indent..];
        if rest.is_empty() || rest[0] == b'#' || rest.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        while stack.last().is_some_and(|&top| top >= indent) {
            stack.pop();
        }
        stack.push(indent);
        // `- - - x`: each dash opens one more level on the same line.
        let mut dashes = 0;
        let mut r = rest;
        while r.len() >= 2 && r[0] == b'-' && (r[1] == b' ' || r[1] == b'\t') {
            dashes += 1;
            r = &r[2..];
            while r.first() == Some(&b' ') {
                r = &r[1..];
            }
        }
        let depth = stack.len() + dashes;
        if depth > max && max <= MAX_NESTING {
            at = i + 1;
        }
        max = max.max(depth);
    }
    let (flow, flow_at) = yaml_flow_depth(bytes);
    if flow + max > MAX_NESTING && flow > max {
        at = flow_at;
    }
    (max + flow, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_specs_pass() {
        let yaml = b"---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n      permissions: rw # [[[[\ncontainerEdits:\n  env: ['A=[{']\n  hooks:\n  - args: [a, \"b]]}\"]\n";
        let (d, _) = yaml_depth(yaml);
        assert!(d < 10, "{d}");
        assert!(check(yaml, Format::Yaml).is_ok());
        let json = br#"{"a": [{"b": "[[[[{{{{"}], "c": {"d": ["\"["]}}"#;
        assert_eq!(flow_depth(json, false).0, 3);
    }

    #[test]
    fn deep_nesting_is_refused_with_its_line() {
        let deep = "[".repeat(200);
        let e = check(deep.as_bytes(), Format::Json).unwrap_err();
        assert!(e.to_string().contains("nested more than 64"), "{e}");
        let mut y = String::from("a:\n");
        for i in 1..100 {
            y.push_str(&" ".repeat(i));
            y.push_str("b:\n");
        }
        let e = check(y.as_bytes(), Format::Yaml).unwrap_err();
        assert!(e.to_string().starts_with("line 65"), "{e}");
        // Brackets in a block scalar are text (found by the cdi_yaml fuzzer).
        let text = format!(
            "env:\n- |-\n  X=a\n  {}\n  more\nkind: x\n",
            "[".repeat(100)
        );
        assert!(check(text.as_bytes(), Format::Yaml).is_ok());
        // Doubled quotes in a single-quoted scalar and brackets in plain scalars are text.
        let text = format!(
            "a: 'x''0''{}'\nb: c{}\nc:\n- --{}\n",
            "[".repeat(100),
            "[".repeat(100),
            "[".repeat(100)
        );
        assert!(check(text.as_bytes(), Format::Yaml).is_ok());
        let text = format!("a: >+2\n   {}\nb: {}\n", "{".repeat(100), "[".repeat(100));
        assert!(
            check(text.as_bytes(), Format::Yaml).is_err(),
            "the flow after the block counts"
        );
        let dashes = format!("x:\n{}y\n", "- ".repeat(100));
        assert!(check(dashes.as_bytes(), Format::Yaml).is_err());
        let flow = format!("x: {}\n", "[".repeat(100));
        assert!(check(flow.as_bytes(), Format::Yaml).is_err());
    }
}
