use std::fs;
use std::path::PathBuf;

use super::*;
use crate::cache::cache_io::{CacheWriter, Form};
use crate::cache::header::PartHeader;
use crate::cache::json::CacheHeader;
use crate::table::synth;

const LENGTH: usize = 5;

/// A new empty folder for `test`.
fn tmp(test: &str) -> PathBuf {
    crate::test_support::tmp("verify", test)
}

fn table() -> Arc<Table> {
    Arc::new(synth::clustered(24, 4, 3, 11, 0.1).unwrap())
}

/// The cache of `starts` on `t` in `form`, its rows the mirror's, `edit`ed first.
fn cache(path: PathBuf, t: &Table, starts: &[u32], form: Form, edit: impl Fn(&mut Vec<u32>)) -> String {
    let mut rows = mirror::run(t, starts, LENGTH).unwrap();
    edit(&mut rows);
    let path = path.display().to_string();
    let header = CacheHeader::new("fp32", t.n, t.dim, LENGTH, &t.sha256, starts);
    let mut w = CacheWriter::create(&path, &PartHeader { header, shard: None }, form, starts).unwrap();
    w.append(&rows).unwrap();
    w.finish().unwrap();
    path
}

fn check(path: &str, t: &Arc<Table>, selection: Selection) -> Result<Verifier> {
    let mut v = Verifier::open(path, Arc::clone(t), selection)?;
    while v.step()? {}
    Ok(v)
}

#[test]
fn both_forms_agree_and_a_changed_item_is_named() {
    let (t, d) = (table(), tmp("agree"));
    let starts: Vec<u32> = (0..24).rev().collect();
    for form in [Form::Json, Form::Binary] {
        let good = cache(d.join(&format!("good.{}", form.name())), &t, &starts, form, |_| {});
        let v = check(&good, &t, Selection::All).unwrap();
        assert_eq!((v.done, v.count, v.difference.clone(), v.other_table.clone()), (24, 24, None, None));
        // Twin: position 9's third item changed (to another item: rows stay valid).
        let bad = cache(d.join(&format!("bad.{}", form.name())), &t, &starts, form, |rows| {
            let i = 9 * LENGTH + 2;
            rows[i] = rows[i + 1];
        });
        let v = check(&bad, &t, Selection::All).unwrap();
        let d = v.difference.expect("the changed item is found");
        assert_eq!((d.position, d.start, d.step), (9, starts[9], 2));
        // The first 9 do not reach it.
        assert_eq!(check(&bad, &t, Selection::First(9)).unwrap().difference, None);
    }
}

#[test]
fn a_sample_checks_the_seeded_positions_in_both_forms() {
    let (t, d) = (table(), tmp("sample"));
    let starts: Vec<u32> = (0..24).collect();
    for form in [Form::Json, Form::Binary] {
        let path = cache(d.join(&format!("sample.{}", form.name())), &t, &starts, form, |_| {});
        let v = check(&path, &t, Selection::Sample { k: 5, seed: 7 }).unwrap();
        assert_eq!(v.positions.as_deref(), Some(&sample_positions(24, 5, 7)[..]));
        assert_eq!((v.done, v.total, v.difference), (5, 5, None));
        // Twin: a change at a sampled position is found, one elsewhere is not.
        let picked = sample_positions(24, 5, 7);
        let unpicked = (0..24).find(|p| !picked.contains(p)).unwrap();
        for (p, found) in [(picked[2], true), (unpicked, false)] {
            let bad = cache(d.join(&format!("sample-bad-{p}.{}", form.name())), &t, &starts, form, |rows| {
                rows[p * LENGTH + 1] = rows[p * LENGTH + 2];
            });
            let v = check(&bad, &t, Selection::Sample { k: 5, seed: 7 }).unwrap();
            assert_eq!(v.difference.is_some(), found, "position {p} in {}", form.name());
        }
    }
}

#[test]
fn another_table_is_a_mismatch_and_a_truncated_cache_an_error() {
    let (t, d) = (table(), tmp("other"));
    let starts: Vec<u32> = (0..8).collect();
    let path = cache(d.join("other.bin"), &t, &starts, Form::Binary, |_| {});
    let other = Arc::new(synth::clustered(24, 4, 3, 12, 0.1).unwrap());
    let v = check(&path, &other, Selection::All).unwrap();
    assert!(v.other_table.as_deref().is_some_and(|m| m.contains("made from another table")), "{:?}", v.other_table);
    assert_eq!(v.done, 0);
    // Twin: its own table is no mismatch.
    assert_eq!(check(&path, &t, Selection::All).unwrap().other_table, None);
    let bytes = fs::read(&path).unwrap();
    fs::write(&path, &bytes[..bytes.len() - 4]).unwrap();
    let err = check(&path, &t, Selection::All).err().expect("a truncated binary cache is refused");
    assert!(matches!(err, Error::Input { .. }), "{err}");
}

/// The JSON cache at `path` with its sequence lines (between the header's two
/// lines and `]}`) replaced by `edit`'s, and its header's line by `header`'s.
fn edit_json(path: &str, to: &str, header: impl Fn(&str) -> String, edit: impl Fn(&mut Vec<String>)) -> String {
    let text = fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut seqs: Vec<String> = lines[2..lines.len() - 1].iter().map(|l| l.trim_end_matches(',').to_string()).collect();
    edit(&mut seqs);
    let body = seqs.join(",\n");
    fs::write(to, format!("{}\n{}\n{body}\n]}}\n", header(lines[0]), lines[1])).unwrap();
    to.to_string()
}

// Every mode proves the whole file. The first K (and
// every sequence) used to stop at starts_count, so a cache cut before its
// end, a start missing (a sequence replaced by a duplicate), two swapped or
// one extra passed.
#[test]
fn every_mode_reads_a_json_cache_to_its_end() {
    let (t, d) = (table(), tmp("whole"));
    let starts: Vec<u32> = (0..8).collect();
    let good = cache(d.join("good.json"), &t, &starts, Form::Json, |_| {});
    let extra_row = mirror::run(&t, &[9], LENGTH).unwrap();
    let extra_line = format!("[{}]", extra_row.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(","));
    let same = |h: &str| h.to_string();
    let text = fs::read_to_string(&good).unwrap();
    let cut = d.join("cut.json").display().to_string();
    fs::write(&cut, &text[..text.trim_end().rfind('\n').unwrap() + 1]).unwrap();
    let bad = [
        cut,
        edit_json(&good, &d.join("dup.json").display().to_string(), same, |s| s[1] = s[0].clone()),
        edit_json(&good, &d.join("swap.json").display().to_string(), same, |s| s.swap(0, 1)),
        edit_json(&good, &d.join("extra.json").display().to_string(), same, |s| s.push(extra_line.clone())),
    ];
    let modes = [Selection::All, Selection::First(8), Selection::First(2), Selection::Sample { k: 3, seed: 2 }];
    for mode in modes {
        // Twin: the good cache passes in every mode.
        assert_eq!(check(&good, &t, mode).unwrap().difference, None, "{mode:?}");
        for path in &bad {
            let err = check(path, &t, mode).err().unwrap_or_else(|| panic!("{path} passed {mode:?}"));
            assert!(matches!(err, Error::Input { .. }), "{path} {mode:?}: {err}");
        }
    }
}

// Item 9: a header's length (or count) beyond what the file can hold is
// refused before it sizes anything (it aborted on a 4 TiB allocation).
#[test]
fn a_header_beyond_the_file_is_refused_before_any_allocation() {
    let (t, d) = (table(), tmp("huge"));
    let starts: Vec<u32> = (0..4).collect();
    let good = cache(d.join("good.json"), &t, &starts, Form::Json, |_| {});
    for (field, name) in [("\"length\":5", "length"), ("\"starts_count\":4", "count")] {
        let huge = field.replace(|c: char| c.is_ascii_digit(), "") + "1099511627776";
        let to = d.join(format!("{name}.json")).display().to_string();
        let path = edit_json(&good, &to, |h| h.replace(field, &huge), |_| {});
        for mode in [Selection::All, Selection::First(1), Selection::Sample { k: 2, seed: 1 }] {
            let err = check(&path, &t, mode).err().expect("refused");
            assert!(err.to_string().contains("damaged"), "{name} {mode:?}: {err}");
        }
    }
}

// Item 21: hashes are compared case-insensitively: an upper-case sha256 in a
// header is the same table and the same starts.
#[test]
fn an_upper_case_sha256_is_the_same_hash() {
    let (t, d) = (table(), tmp("upper"));
    let starts: Vec<u32> = (0..4).collect();
    let good = cache(d.join("good.json"), &t, &starts, Form::Json, |_| {});
    let upper = |h: &str| {
        let mut out = h.to_string();
        for key in ["\"embeddings_sha256\":\"", "\"starts_sha256\":\""] {
            let at = out.find(key).unwrap() + key.len();
            let hash = out[at..at + 64].to_ascii_uppercase();
            out.replace_range(at..at + 64, &hash);
        }
        out
    };
    let path = edit_json(&good, &d.join("upper.json").display().to_string(), upper, |_| {});
    assert_ne!(fs::read(&path).unwrap(), fs::read(&good).unwrap());
    for mode in [Selection::All, Selection::First(2), Selection::Sample { k: 2, seed: 1 }] {
        let v = check(&path, &t, mode).unwrap();
        assert_eq!((v.other_table.clone(), v.difference.clone()), (None, None), "{mode:?}");
    }
}
