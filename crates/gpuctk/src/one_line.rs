//! An error and its causes as the one line every personality prints: each cause appended once,
//! unless an outer message already says it.

/// `e` and its causes, joined by `: `, a cause already in the line left out.
pub fn one_line(e: &anyhow::Error) -> String {
    let mut line = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !line.contains(&c) {
            line.push_str(": ");
            line.push_str(&c);
        }
    }
    line
}
