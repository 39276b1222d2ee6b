//! A small line-based unified diff, in GNU `diff -u` format, for `--dry-run` and for showing
//! what `configure` changed.
//!
//! Lines are aligned by a longest-common-subsequence table over the part between the common
//! prefix and suffix (config edits are small, so that middle is tiny); runs of changes are then
//! slid the way GNU diff slides them, so the hunks read the same as `diff -u`'s.

/// One line of the alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// Line `a` of the old text equals line `b` of the new.
    Keep(usize, usize),
    /// Old line removed.
    Del(usize),
    /// New line added.
    Ins(usize),
}

/// Split into lines, each keeping its `\n` (the last may lack one).
fn lines(s: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, &b) in s.iter().enumerate() {
        if b == b'\n' {
            out.push(&s[start..=i]);
            start = i + 1;
        }
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

/// Align `a` and `b`.
fn align(a: &[&[u8]], b: &[&[u8]]) -> Vec<Op> {
    let mut pre = 0;
    while pre < a.len() && pre < b.len() && a[pre] == b[pre] {
        pre += 1;
    }
    let mut suf = 0;
    while suf < a.len() - pre && suf < b.len() - pre && a[a.len() - 1 - suf] == b[b.len() - 1 - suf]
    {
        suf += 1;
    }
    let (ma, mb) = (&a[pre..a.len() - suf], &b[pre..b.len() - suf]);
    let (n, m) = (ma.len(), mb.len());
    // lcs[i][j]: LCS length of ma[i..] and mb[j..].
    let mut lcs = vec![0u32; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[at(i, j)] = if ma[i] == mb[j] {
                lcs[at(i + 1, j + 1)] + 1
            } else {
                lcs[at(i + 1, j)].max(lcs[at(i, j + 1)])
            };
        }
    }
    let mut ops: Vec<Op> = (0..pre).map(|i| Op::Keep(i, i)).collect();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && ma[i] == mb[j] && lcs[at(i, j)] == lcs[at(i + 1, j + 1)] + 1 {
            ops.push(Op::Keep(pre + i, pre + j));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[at(i + 1, j)] >= lcs[at(i, j + 1)]) {
            // Deletions before insertions, as diff prints them.
            ops.push(Op::Del(pre + i));
            i += 1;
        } else {
            ops.push(Op::Ins(pre + j));
            j += 1;
        }
    }
    for k in 0..suf {
        ops.push(Op::Keep(a.len() - suf + k, b.len() - suf + k));
    }
    // Which lines of each side changed; then slide runs of changes as GNU diff does, and pair
    // the unchanged lines up again (sliding keeps their count and content, so they still pair).
    let mut ca = vec![false; a.len()];
    let mut cb = vec![false; b.len()];
    for op in &ops {
        match *op {
            Op::Del(i) => ca[i] = true,
            Op::Ins(j) => cb[j] = true,
            Op::Keep(..) => {}
        }
    }
    shift_boundaries(a, &mut ca);
    shift_boundaries(b, &mut cb);
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(ops.len());
    while i < a.len() || j < b.len() {
        if i < a.len() && ca[i] {
            out.push(Op::Del(i));
            i += 1;
        } else if j < b.len() && cb[j] {
            out.push(Op::Ins(j));
            j += 1;
        } else {
            out.push(Op::Keep(i, j));
            i += 1;
            j += 1;
        }
    }
    out
}

/// Slide each run of changed lines of one side back as far as it goes (merging it with the
/// runs before), then forward as far as it goes (merging with the runs after), repeating while
/// that merges something: GNU diff's `shift_boundaries`, less its final step that prefers
/// lining a run up with a change on the other side. A run can move by one line when the line
/// it would take in equals the line it would give up.
fn shift_boundaries(lines: &[&[u8]], changed: &mut [bool]) {
    let n = lines.len();
    let mut i = 0;
    loop {
        while i < n && !changed[i] {
            i += 1;
        }
        if i == n {
            break;
        }
        let mut start = i;
        while i < n && changed[i] {
            i += 1;
        }
        loop {
            let len = i - start;
            while start > 0 && lines[start - 1] == lines[i - 1] {
                start -= 1;
                i -= 1;
                changed[start] = true;
                changed[i] = false;
                while start > 0 && changed[start - 1] {
                    start -= 1;
                }
            }
            while i < n && lines[start] == lines[i] {
                changed[start] = false;
                changed[i] = true;
                start += 1;
                i += 1;
                while i < n && changed[i] {
                    i += 1;
                }
            }
            if i - start == len {
                break;
            }
        }
    }
}

/// `start,count` as GNU prints it: the count is omitted when 1, and an empty range names the
/// line before it.
fn range(start: usize, count: usize) -> String {
    match count {
        0 => format!("{},0", start),
        1 => format!("{}", start + 1),
        _ => format!("{},{}", start + 1, count),
    }
}

fn push_line(out: &mut String, tag: char, line: &[u8]) {
    out.push(tag);
    out.push_str(&String::from_utf8_lossy(line));
    if !line.ends_with(b"\n") {
        out.push_str("\n\\ No newline at end of file\n");
    }
}

/// The unified diff from `old` to `new` with `context` lines of context, headed by
/// `--- old_name` / `+++ new_name`; empty when they are equal.
pub fn unified(old: &[u8], new: &[u8], old_name: &str, new_name: &str, context: usize) -> String {
    if old == new {
        return String::new();
    }
    let (a, b) = (lines(old), lines(new));
    let ops = align(&a, &b);
    let mut out = format!("--- {old_name}\n+++ {new_name}\n");
    let changed: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, op)| !matches!(op, Op::Keep(..)))
        .map(|(i, _)| i)
        .collect();
    let mut k = 0;
    while k < changed.len() {
        // Grow the hunk while the next change is within 2*context unchanged lines.
        let first = changed[k];
        let mut last = first;
        while k + 1 < changed.len() && changed[k + 1] - last - 1 <= 2 * context {
            k += 1;
            last = changed[k];
        }
        k += 1;
        let lo = first.saturating_sub(context);
        let hi = (last + context + 1).min(ops.len());
        let hunk = &ops[lo..hi];
        // Where the hunk starts in each file: the first line of that side it covers, or the
        // position it would be inserted at.
        let mut a_start = None;
        let mut b_start = None;
        let (mut a_count, mut b_count) = (0, 0);
        for op in hunk {
            match *op {
                Op::Keep(x, y) => {
                    a_start.get_or_insert(x);
                    b_start.get_or_insert(y);
                    a_count += 1;
                    b_count += 1;
                }
                Op::Del(x) => {
                    a_start.get_or_insert(x);
                    a_count += 1;
                }
                Op::Ins(y) => {
                    b_start.get_or_insert(y);
                    b_count += 1;
                }
            }
        }
        // A side with no lines in the hunk starts where the other side's lines sit in it.
        let a_pos = |ops: &[Op], upto: usize| {
            ops[..upto]
                .iter()
                .filter(|o| matches!(o, Op::Keep(..) | Op::Del(_)))
                .count()
        };
        let b_pos = |ops: &[Op], upto: usize| {
            ops[..upto]
                .iter()
                .filter(|o| matches!(o, Op::Keep(..) | Op::Ins(_)))
                .count()
        };
        let a_start = a_start.unwrap_or_else(|| a_pos(&ops, lo));
        let b_start = b_start.unwrap_or_else(|| b_pos(&ops, lo));
        out.push_str(&format!(
            "@@ -{} +{} @@\n",
            range(a_start, a_count),
            range(b_start, b_count)
        ));
        for op in hunk {
            match *op {
                Op::Keep(x, _) => push_line(&mut out, ' ', a[x]),
                Op::Del(x) => push_line(&mut out, '-', a[x]),
                Op::Ins(y) => push_line(&mut out, '+', b[y]),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pure_insertion_at_start_of_empty() {
        assert_eq!(
            unified(b"", b"x\ny\n", "/dev/null", "b/f", 3),
            "--- /dev/null\n+++ b/f\n@@ -0,0 +1,2 @@\n+x\n+y\n"
        );
    }

    #[test]
    fn missing_newline_is_marked() {
        assert_eq!(
            unified(b"a\nb", b"a\nc\n", "a/f", "b/f", 3),
            "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n"
        );
    }

    #[test]
    fn equal_is_empty() {
        assert_eq!(unified(b"a\n", b"a\n", "x", "y", 3), "");
    }
}
