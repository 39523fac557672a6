//! How counts and numbers are written in every message and view, in one place: no screen says
//! "1 iterations", "0 group(s)" or "-0.000".

/// `n` and `noun`, the noun in the plural unless `n` is 1: `plural(1, "group")` is "1 group",
/// `plural(0, "group")` "0 groups", `plural(3, "trajectory")` "3 trajectories". The last word
/// of a noun of several takes the plural (`log file` → `log files`).
pub fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        return format!("1 {noun}");
    }
    let consonant_y =
        noun.ends_with('y') && !noun[..noun.len() - 1].ends_with(['a', 'e', 'i', 'o', 'u']);
    if consonant_y {
        format!("{n} {}ies", &noun[..noun.len() - 1])
    } else if noun.ends_with(['s', 'x']) || noun.ends_with("ch") || noun.ends_with("sh") {
        format!("{n} {noun}es")
    } else {
        format!("{n} {noun}s")
    }
}

/// The verb after a count: `has`/`have`, `carries`/`carry`, as [`plural`]'s noun takes it.
pub fn agree(n: usize, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// `x` with `digits` decimals, never `-0.000`: a value that rounds to zero is 0, whatever the sign
/// of its rounding error (per-group statistics sum to 0 by construction).
pub fn num(x: f64, digits: usize) -> String {
    let s = format!("{x:.digits$}");
    match s.strip_prefix('-') {
        Some(rest) if rest.bytes().all(|b| b == b'0' || b == b'.') => rest.to_string(),
        _ => s,
    }
}

/// [`num`] with its sign always shown: `+0.500`, `-0.250`, and `+0.000` for what rounds to zero.
pub fn signed(x: f64, digits: usize) -> String {
    let s = num(x, digits);
    if s.starts_with('-') {
        s
    } else {
        format!("+{s}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_take_the_plural_unless_one() {
        assert_eq!(plural(1, "iteration"), "1 iteration");
        assert_eq!(plural(0, "group"), "0 groups");
        assert_eq!(plural(2, "trajectory"), "2 trajectories");
        assert_eq!(plural(2, "day"), "2 days");
        assert_eq!(plural(3, "log file"), "3 log files");
        assert_eq!(plural(2, "match"), "2 matches");
        assert_eq!(agree(1, "has", "have"), "has");
    }

    #[test]
    fn no_negative_zero() {
        assert_eq!(num(-0.0001, 3), "0.000");
        assert_eq!(num(-0.0, 3), "0.000");
        assert_eq!(num(-0.0006, 3), "-0.001");
        assert_eq!(num(1.25, 2), "1.25");
        assert_eq!(signed(-0.0001, 3), "+0.000");
        assert_eq!(signed(0.5, 3), "+0.500");
        assert_eq!(signed(-0.25, 3), "-0.250");
    }
}
