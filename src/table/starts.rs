//! Starts given other than as a range or a list on the command line
//! (docs/cli.md#starts): a file of one item index a line (`--starts @FILE`),
//! and K distinct starts chosen by a seeded generator (`--starts
//! sample:K:SEED`), the same on every machine.

use std::collections::HashSet;
use std::path::Path;

use crate::error::{Error, Result};
use crate::table::synth::SplitMix64;

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

    fn file(text: &str) -> (tempfile::NamedTempFile, String) {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        let p = f.path().display().to_string();
        (f, p)
    }

    #[test]
    fn a_file_of_indices() {
        let (_f, p) = file("3\n\n 0 \r\n7");
        assert_eq!(read_file(&p, 8).unwrap(), vec![3, 0, 7]);
        // Twins: a bad line and an index out of range, named by line number.
        let (_f, p) = file("3\n\nx1\n");
        assert!(read_file(&p, 8).unwrap_err().to_string().ends_with("line 3: 'x1' is not an item index (a whole number 0..N-1)"));
        let (_f, p) = file("3\n8\n");
        assert!(read_file(&p, 8).unwrap_err().to_string().ends_with("line 2: 8 is out of range: the table has 8 items (0..7)"));
        let (_f, p) = file("-1\n");
        assert!(read_file(&p, 8).unwrap_err().to_string().contains("line 1: '-1' is not an item index"));
        let (_f, p) = file("\n \n");
        assert!(read_file(&p, 8).unwrap_err().to_string().contains("holds no start"));
        let (_f, p) = file("99999999999999999999999\n");
        assert!(read_file(&p, 8).unwrap_err().to_string().contains("line 1: 99999999999999999999999 is out of range"));
    }

    #[test]
    fn a_sample_is_distinct_ascending_and_seeded() {
        let s = sample(1000, 50, 7).unwrap();
        assert_eq!(s.len(), 50);
        assert!(s.windows(2).all(|w| w[0] < w[1]) && s[49] < 1000);
        assert_eq!(s, sample(1000, 50, 7).unwrap());
        assert_ne!(s, sample(1000, 50, 8).unwrap());
        assert_eq!(sample(5, 5, 1).unwrap(), vec![0, 1, 2, 3, 4]);
        // Known answers of the algorithm as docs/cli.md#starts writes it in Python.
        assert_eq!(sample(10, 3, 1).unwrap(), vec![0, 1, 7]);
        assert_eq!(sample(1000, 5, 7).unwrap(), vec![210, 405, 674, 834, 903]);
        assert_eq!(sample(1 << 32, 4, (1 << 53) - 1).unwrap(), vec![192833784, 415750028, 875825862, 1575109798]);
        assert!(sample(5, 6, 1).is_err() && sample(5, 0, 1).is_err());
    }
}
