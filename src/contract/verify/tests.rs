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
