//! The whole `--starts` grammar (docs/cli.md#starts), in one place: every
//! item (no value), `A:B` (the half-open range A <= s < B), a list `i,j,k`
//! (in that order, repeats allowed), `@FILE` (a file of one item index a
//! line, `read_file`) and `sample:K:SEED` (K distinct starts chosen by a
//! seeded generator, the same on every machine: `sample`). A value's syntax
//! is checked without the table (`parse`: what `--shard` counts, the file to
//! check), then made into the starts once its size is known
//! (`Spec::starts`); every refusal is the command line's one line.

use std::collections::HashSet;
use std::path::Path;

use crate::error::{Error, Result};
use crate::table::synth::SplitMix64;

/// The largest integer a Lua number holds exactly (2^53 - 1): K and SEED's bound.
const MAX_INTEGER: f64 = 9_007_199_254_740_991.0;

/// A `--starts` value whose syntax is checked.
#[derive(Debug, Clone, PartialEq)]
pub enum Spec {
    /// No value: every item of the table.
    All,
    /// `A:B`, its text kept for the messages.
    Range { text: String, a: f64, b: f64 },
    /// `i,j,k`: each item's text (as given, for the messages) and value.
    List(Vec<(String, f64)>),
    /// `@FILE`: the file's path, as given (checked as a path by the caller).
    File(Vec<u8>),
    /// `sample:K:SEED`.
    Sample { text: String, k: u64, seed: u64 },
}

/// A value the grammar refuses: an expected failure (`nil, message` in
/// Lua), its message the command line's one line.
fn refused(msg: String) -> Error {
    Error::Refused(msg)
}

/// Lua's `%s`: the C locale's white space.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn trim(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_ascii() && is_space(c as u8))
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Decimal digits as the nearest f64 (the value Lua's `tonumber` gives).
fn digits_value(s: &str) -> f64 {
    s.parse::<f64>().unwrap_or(f64::INFINITY)
}

/// The syntax of a `--starts` value (`None`: no value), before the table,
/// and so its size, is known.
pub fn parse(spec: Option<&[u8]>) -> Result<Spec> {
    let Some(spec) = spec else { return Ok(Spec::All) };
    if let Some(path) = spec.strip_prefix(b"@") {
        if path.is_empty() {
            return Err(refused("--starts @FILE: name the file (one item index a line)".into()));
        }
        return Ok(Spec::File(path.to_vec()));
    }
    let text = String::from_utf8_lossy(spec).into_owned();
    if spec.starts_with(b"sample:") {
        parse_sample(text)
    } else if spec.contains(&b':') {
        parse_range(text)
    } else {
        parse_list(&text)
    }
}

/// `sample:K:SEED`: K in 1..2^53-1, SEED in 0..2^53-1, both decimal digits.
fn parse_sample(text: String) -> Result<Spec> {
    let parts: Vec<&str> = text.splitn(3, ':').collect();
    let (k, seed) = match parts[..] {
        [_, k, seed] if all_digits(k) && all_digits(seed) => (digits_value(k), digits_value(seed)),
        _ => {
            return Err(refused(format!(
                "--starts '{text}': expected sample:K:SEED (K distinct starts chosen by a generator seeded with SEED)"
            )))
        }
    };
    if !(1.0..=MAX_INTEGER).contains(&k) {
        return Err(refused(format!("--starts '{text}': K is out of range: 1..{MAX_INTEGER:.0}")));
    }
    if seed > MAX_INTEGER {
        return Err(refused(format!("--starts '{text}': SEED is out of range: 0..{MAX_INTEGER:.0}")));
    }
    Ok(Spec::Sample { text, k: k as u64, seed: seed as u64 })
}

/// `A:B`: two runs of decimal digits, blanks allowed around each.
fn parse_range(text: String) -> Result<Spec> {
    let bounds = text.split_once(':').map(|(a, b)| (trim(a), trim(b)));
    match bounds {
        Some((a, b)) if all_digits(a) && all_digits(b) => {
            let (a, b) = (digits_value(a), digits_value(b));
            Ok(Spec::Range { text, a, b })
        }
        _ => Err(refused(format!(
            "--starts '{text}': expected A:B (half-open range), a list i,j,k, @FILE or sample:K:SEED"
        ))),
    }
}

/// `i,j,k`: each item decimal digits, blanks allowed around it (as an `A:B`
/// bound and a line of `@FILE`); an empty item is refused.
fn parse_list(text: &str) -> Result<Spec> {
    let mut items = Vec::new();
    for item in text.split(',') {
        if !all_digits(trim(item)) {
            return Err(refused(format!("--starts: '{item}' is not an item index")));
        }
        items.push((item.to_string(), digits_value(trim(item))));
    }
    Ok(Spec::List(items))
}

impl Spec {
    /// How many starts the value gives without the table (a range's B - A,
    /// a list's items, a sample's K); `None` for every item and a file.
    pub fn count(&self) -> Option<f64> {
        match self {
            Spec::Range { a, b, .. } => Some(b - a),
            Spec::List(items) => Some(items.len() as f64),
            Spec::Sample { k, .. } => Some(*k as f64),
            Spec::All | Spec::File(_) => None,
        }
    }

    /// The starts among a table's `n` items, in the value's order.
    pub fn starts(&self, n: u64) -> Result<Vec<u32>> {
        let last = n.saturating_sub(1);
        match self {
            Spec::All => (0..n).map(index).collect(),
            Spec::File(path) => file_starts(path, n),
            Spec::Sample { text, k, seed } => {
                if *k > n {
                    return Err(refused(format!("--starts {text}: K = {k} is more than the table's {n} items")));
                }
                sample(n, *k, *seed)
            }
            Spec::Range { text, a, b } => {
                if a >= b {
                    return Err(refused(format!("--starts '{text}' is empty: A must be less than B")));
                }
                if *b > n as f64 {
                    return Err(refused(format!("--starts '{text}' is out of range: the table has {n} items (0..{last})")));
                }
                (*a as u64..*b as u64).map(index).collect()
            }
            Spec::List(items) => items
                .iter()
                .map(|(item, s)| match *s < n as f64 {
                    true => index(*s as u64),
                    false => Err(refused(format!("--starts: {item} is out of range: the table has {n} items (0..{last})"))),
                })
                .collect(),
        }
    }
}

/// A start below the table's size as the u32 the GPU reads.
fn index(s: u64) -> Result<u32> {
    u32::try_from(s).map_err(|_| Error::Usage(format!("start {s} does not fit in 32 bits")))
}

/// `@FILE`'s starts: the file read, its failure prefixed as the command line says it.
fn file_starts(path: &[u8], n: u64) -> Result<Vec<u32>> {
    let shown = String::from_utf8_lossy(path);
    let path = std::str::from_utf8(path)
        .map_err(|_| refused(format!("--starts '{shown}': the path is not valid UTF-8 (divgpu reads and writes UTF-8 paths only)")))?;
    read_file(path, n).map_err(|e| refused(format!("--starts: {e}")))
}


/// The starts of a file: one item index a line (surrounding blanks, blank
/// lines and a last line without a newline allowed), each below `n`. A bad
/// line is named by its number.
pub fn read_file(path: &str, n: u64) -> Result<Vec<u32>> {
    let bytes = std::fs::read(Path::new(path)).map_err(|e| Error::io(path, e))?;
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        let line = 1 + bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count();
        Error::input(path, format!("line {line} is not UTF-8 text"))
    })?;
    let mut starts = Vec::new();
    for (i, line) in text.split('\n').enumerate() {
        let item = line.trim();
        if item.is_empty() {
            continue;
        }
        starts.push(parse_index(item, n).map_err(|why| Error::input(path, format!("line {}: {why}", i + 1)))?);
    }
    if starts.is_empty() {
        return Err(Error::input(path, "holds no start (expected one item index a line)"));
    }
    Ok(starts)
}

/// One line's index: decimal digits only, below `n`.
fn parse_index(item: &str, n: u64) -> std::result::Result<u32, String> {
    let shown = || {
        let mut s: String = item.chars().take(40).collect::<String>().escape_debug().collect();
        if item.chars().count() > 40 {
            s.push_str("...");
        }
        s
    };
    if !item.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("'{}' is not an item index (a whole number 0..N-1)", shown()));
    }
    match item.parse::<u64>() {
        Ok(s) if s < n => u32::try_from(s).map_err(|_| format!("{s} is out of range")),
        _ => Err(format!("{} is out of range: the table has {n} items (0..{})", shown(), n.saturating_sub(1))),
    }
}

/// `k` distinct items of `0..n`, ascending (the order a cache read by start
/// needs), chosen by Floyd's algorithm with SplitMix64 seeded with `seed`:
/// for j in n-k..n, t = below(j+1); take j if t was taken, else t. below(m)
/// draws x until x >= 2^64 mod m and returns x mod m (no modulo bias).
pub fn sample(n: u64, k: u64, seed: u64) -> Result<Vec<u32>> {
    if k == 0 || k > n || n > u64::from(u32::MAX) + 1 {
        return Err(Error::Usage(format!("sample: k = {k} starts of n = {n} items: need 1 <= k <= n <= 2^32")));
    }
    let mut rng = SplitMix64(seed);
    let mut below = |m: u64| loop {
        let x = rng.next_u64();
        if x >= m.wrapping_neg() % m {
            return x % m;
        }
    };
    let mut chosen = HashSet::with_capacity(k as usize);
    for j in n - k..n {
        let t = below(j + 1);
        chosen.insert(if chosen.contains(&t) { j } else { t });
    }
    let mut starts: Vec<u32> = chosen.into_iter().map(|s| s as u32).collect();
    starts.sort_unstable();
    Ok(starts)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test's failure is an error returned, not a panic.
    type Checked<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

    fn file(text: &str) -> Checked<(tempfile::NamedTempFile, String)> {
        let f = tempfile::NamedTempFile::new()?;
        std::fs::write(f.path(), text)?;
        let p = f.path().display().to_string();
        Ok((f, p))
    }

    fn spec(s: &str) -> Checked<Spec> {
        Ok(parse(Some(s.as_bytes()))?)
    }

    fn refusal(s: &str, n: u64) -> String {
        match parse(Some(s.as_bytes())) {
            Ok(p) => p.starts(n).unwrap_err().to_string(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn every_form_of_the_grammar() -> Checked {
        assert_eq!(parse(None)?.starts(4)?, vec![0, 1, 2, 3]);
        assert_eq!(spec(" 2 : 5 ")?.starts(8)?, vec![2, 3, 4]);
        assert_eq!(spec("7,3,299")?.starts(300)?, vec![7, 3, 299]);
        // Repeats kept, in order (docs/cli.md#starts: "repeats allowed").
        assert_eq!(spec("7,3,7,3")?.starts(8)?, vec![7, 3, 7, 3]);
        // Blanks around an item, as around a range's bounds.
        assert_eq!(spec(" 1 ,10, 3")?.starts(20)?, vec![1, 10, 3]);
        assert_eq!(spec("sample:3:9")?.starts(10)?, sample(10, 3, 9)?);
        assert_eq!(spec("@some/file")?, Spec::File(b"some/file".to_vec()));
        let (_f, p) = file("5\n1\n5\n")?;
        assert_eq!(spec(&format!("@{p}"))?.starts(8)?, vec![5, 1, 5]);
        Ok(())
    }

    #[test]
    fn the_count_without_the_table() -> Checked {
        assert_eq!(spec("3:43")?.count(), Some(40.0));
        assert_eq!(spec("1,1,2")?.count(), Some(3.0));
        assert_eq!(spec("sample:4:1")?.count(), Some(4.0));
        assert_eq!(spec("@f")?.count(), None);
        assert_eq!(parse(None)?.count(), None);
        // Twin: an empty range counts nothing (its refusal waits for the table).
        assert_eq!(spec("5:5")?.count(), Some(0.0));
        Ok(())
    }

    #[test]
    fn twins_refused_with_the_command_lines_words() -> Checked {
        assert_eq!(refusal("5:5", 10), "--starts '5:5' is empty: A must be less than B");
        assert_eq!(refusal("6:2", 10), "--starts '6:2' is empty: A must be less than B");
        assert_eq!(refusal("0:301", 300), "--starts '0:301' is out of range: the table has 300 items (0..299)");
        assert_eq!(refusal("1,300", 300), "--starts: 300 is out of range: the table has 300 items (0..299)");
        assert_eq!(refusal("1:x", 300), "--starts '1:x': expected A:B (half-open range), a list i,j,k, @FILE or sample:K:SEED");
        assert_eq!(refusal("1:2:3", 300), "--starts '1:2:3': expected A:B (half-open range), a list i,j,k, @FILE or sample:K:SEED");
        // Decimal digits only: what Lua's tonumber also took (exponents, 3.0, hex, binary, signs) is refused.
        for bad in ["1.5", "-1", "x", "", " ", "inf", "nan", "1e", "0x", "1_0", "1e400", "1e1", "3.0", "0x10", "0b11", "+2", "-0"] {
            assert_eq!(refusal(&format!("2,{bad}"), 300), format!("--starts: '{bad}' is not an item index"), "{bad}");
        }
        assert_eq!(refusal("1,", 300), "--starts: '' is not an item index");
        assert_eq!(refusal("@", 300), "--starts @FILE: name the file (one item index a line)");
        for bad in ["sample:3", "sample:a:1", "sample:3:-1", "sample:3:1:2"] {
            assert!(refusal(bad, 300).ends_with("expected sample:K:SEED (K distinct starts chosen by a generator seeded with SEED)"), "{bad}");
        }
        assert_eq!(refusal("sample:0:1", 300), "--starts 'sample:0:1': K is out of range: 1..9007199254740991");
        assert_eq!(refusal("sample:3:9007199254740992", 300), "--starts 'sample:3:9007199254740992': SEED is out of range: 0..9007199254740991");
        assert!(parse(Some(b"sample:3:9007199254740991")).is_ok());
        assert_eq!(refusal("sample:1001:1", 1000), "--starts sample:1001:1: K = 1001 is more than the table's 1000 items");
        let (_f, p) = file("3\n\nx1\n")?;
        assert_eq!(refusal(&format!("@{p}"), 8), format!("--starts: {p}: line 3: 'x1' is not an item index (a whole number 0..N-1)"));
        // The refusals are expected failures (nil, message in Lua), not misuse.
        assert!(matches!(parse(Some(b"1:x")), Err(Error::Refused(_))));
        Ok(())
    }

    #[test]
    fn a_file_of_indices() -> Checked {
        let (_f, p) = file("3\n\n 0 \r\n7")?;
        assert_eq!(read_file(&p, 8)?, vec![3, 0, 7]);
        // Twins: a bad line and an index out of range, named by line number.
        let (_f, p) = file("3\n\nx1\n")?;
        assert!(read_file(&p, 8).unwrap_err().to_string().ends_with("line 3: 'x1' is not an item index (a whole number 0..N-1)"));
        let (_f, p) = file("3\n8\n")?;
        assert!(read_file(&p, 8).unwrap_err().to_string().ends_with("line 2: 8 is out of range: the table has 8 items (0..7)"));
        let (_f, p) = file("-1\n")?;
        assert!(read_file(&p, 8).unwrap_err().to_string().contains("line 1: '-1' is not an item index"));
        let (_f, p) = file("\n \n")?;
        assert!(read_file(&p, 8).unwrap_err().to_string().contains("holds no start"));
        let (_f, p) = file("99999999999999999999999\n")?;
        assert!(read_file(&p, 8).unwrap_err().to_string().contains("line 1: 99999999999999999999999 is out of range"));
        Ok(())
    }

    #[test]
    fn a_sample_is_distinct_ascending_and_seeded() -> Checked {
        let s = sample(1000, 50, 7)?;
        assert_eq!(s.len(), 50);
        assert!(s.windows(2).all(|w| w[0] < w[1]) && s[49] < 1000);
        assert_eq!(s, sample(1000, 50, 7)?);
        assert_ne!(s, sample(1000, 50, 8)?);
        assert_eq!(sample(5, 5, 1)?, vec![0, 1, 2, 3, 4]);
        // Known answers of the algorithm as docs/cli.md#starts writes it in Python.
        assert_eq!(sample(10, 3, 1)?, vec![0, 1, 7]);
        assert_eq!(sample(1000, 5, 7)?, vec![210, 405, 674, 834, 903]);
        assert_eq!(sample(1 << 32, 4, (1 << 53) - 1)?, vec![192833784, 415750028, 875825862, 1575109798]);
        assert!(sample(5, 6, 1).is_err() && sample(5, 0, 1).is_err());
        Ok(())
    }
}
