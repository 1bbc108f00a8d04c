//! A run split over several jobs (`run --shard I/N`) and the merge of their
//! parts (`divgpu merge`).
//!
//! The split: of a run's M starts (after `--starts`, in their order), part I
//! of N holds the contiguous block of positions [floor(I·M/N),
//! floor((I+1)·M/N)); the blocks are in order, cover every position once and
//! differ in size by at most one. N must not exceed M (no empty part).
//! Concatenated in index order the parts are the run's sequences in the run's
//! order, so the merged file is byte-identical to an unsharded run's.
//!
//! A part is a cache (docs/formats.md#shard-parts) with one more header field, `"shard":
//! {"index": I, "count": N, "starts": M, "starts_sha256": "..."}` (the sha256
//! of the whole run's starts as little-endian u32s, as the checkpoint keys
//! them), written just before `"sequences"`. Readers that ignore unknown
//! fields read a part as a cache; the merged file carries no `shard` field.
//!
//! `merge` reads each part's header first (either form: `cache_io`) and
//! refuses, with one line naming the file, a part of another table,
//! contract, length, format version or run (shard count, starts), a shard
//! given twice, a shard missing, or a file that is not a part. It then
//! streams the parts' sequences into the output in index order through
//! `cache_io::CacheWriter` (a batch of about 1 MiB in memory at a time),
//! checking each sequence's length and items, each part's sequence count
//! against its block, and that the first items of all sequences hash to the
//! run's `starts_sha256` (before the rows, for a binary output, whose starts
//! come first). The output is written atomically: on any error the temporary
//! file is removed and an existing output is left as it was.
//!
//! The part's header is `header::PartHeader`; the JSON form's streaming
//! reader is `json_reader`.

use std::ops::Range;

use sha2::{Digest, Sha256};

use crate::cache::cache_io::{CacheWriter, Form};
use crate::cache::cache_reader::{batch_sequences, stop_if_interrupted, Batch, CacheReader};
use crate::cache::header::{PartHeader, Shard};
use crate::cache::json::CacheHeader;
use crate::durable::safe_write::{check_files, Named};
use crate::error::{Error, Result};
use crate::util::hex;

struct Part {
    path: String,
    header: CacheHeader,
    shard: Shard,
    block: Range<usize>,
}

impl Part {
    /// The error of a part whose sequences are not its block's.
    fn wrong_count(&self, count: usize) -> Error {
        let (s, b) = (&self.shard, &self.block);
        Error::input(
            &self.path,
            format!(
                "shard {}/{} has {count} sequences; its block of the run's {} starts holds {} (positions {}..{})",
                s.index,
                s.count,
                s.starts,
                b.len(),
                b.start,
                b.end
            ),
        )
    }
}

/// What `merge` wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    pub parts: usize,
    pub sequences: usize,
    pub length: usize,
}

/// Checks that `paths` are all the parts of one sharded run and writes their
/// merge to `out` (atomically), byte-identical to the unsharded run's cache.
pub fn merge(out: &str, paths: &[String]) -> Result<Merged> {
    merge_as(out, paths, Form::Json)
}

/// `merge` into `form`, from parts of either form (mixed, too): the bytes of
/// the unsharded run writing that form. A binary output first takes the
/// parts' starts (the binary parts' starts alone; the JSON parts are read
/// through), then their rows.
pub fn merge_as(out: &str, paths: &[String], form: Form) -> Result<Merged> {
    if paths.is_empty() {
        return Err(Error::Usage("merge: no parts given".into()));
    }
    // Before anything is read: the output is writable and none of the parts.
    let inputs: Vec<Named> = paths.iter().map(|p| Named { option: "part", path: p }).collect();
    check_files(&[Named { option: "--out", path: out }], &inputs, true)?;
    let mut parts = read_parts(paths)?;
    check_same_run(&parts)?;
    check_complete(&mut parts)?;
    let expected = parts[0].shard.starts_sha256.clone();
    // The merge is the unsharded run's cache: the whole run's starts.
    let header = parts[0].header.with_starts(parts[0].shard.starts, &expected);
    let length = header.length;
    let whole = PartHeader { header, shard: None };
    let mut writer = CacheWriter::create_streamed(out, &whole, form, |push| {
        let mut starts = Sha256::new();
        for part in &parts {
            let count = CacheReader::open(&part.path)?.for_each_start(|_, s| {
                starts.update(s.to_le_bytes());
                push(s)
            })?;
            if count != part.block.len() {
                return Err(part.wrong_count(count));
            }
        }
        check_run_starts(starts, &expected)
    })?;
    let mut starts = Sha256::new();
    let mut batch = Batch::default();
    for part in &parts {
        let mut reader = CacheReader::open(&part.path)?;
        let mut count = 0;
        while reader.next_batch(batch_sequences(length), &mut batch)? > 0 {
            stop_if_interrupted()?;
            count += batch.len();
            if count > part.block.len() {
                return Err(part.wrong_count(count));
            }
            (0..batch.len()).for_each(|i| starts.update(batch.sequence(i)[0].to_le_bytes()));
            writer.append(&batch.sequences)?;
        }
        if count != part.block.len() {
            return Err(part.wrong_count(count));
        }
    }
    check_run_starts(starts, &expected)?;
    let sequences = writer.done();
    writer.finish()?;
    Ok(Merged { parts: parts.len(), sequences, length })
}

/// The parts' first items, in shard order, hash to the run's starts_sha256.
fn check_run_starts(starts: Sha256, expected: &str) -> Result<()> {
    if hex(&starts.finalize()) != expected {
        return Err(Error::Refused(
            "merge: the parts' starts (each sequence's first item, in shard order) do not hash to the run's \
             starts_sha256 in their headers: a part was altered"
                .into(),
        ));
    }
    Ok(())
}

/// The parts' headers, each checked to be a part of a sharded run.
fn read_parts(paths: &[String]) -> Result<Vec<Part>> {
    let mut parts = Vec::with_capacity(paths.len());
    for path in paths {
        let h = CacheReader::open(path)?.part().clone();
        let shard = h.shard.ok_or_else(|| {
            Error::input(path, "not a part of a sharded run: its header has no \"shard\" field (written without --shard)")
        })?;
        if shard.starts_sha256.len() != 64 || !shard.starts_sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::input(path, "shard.starts_sha256 is not a sha256 (64 hex digits)"));
        }
        let block = shard.block().map_err(|e| Error::input(path, format!("its header says {e}")))?;
        if let Some(count) = h.header.starts_count.filter(|&c| c != block.len()) {
            return Err(Error::input(
                path,
                format!(
                    "its header says starts_count {count}, but shard {}/{}'s block of the run's {} starts holds {}",
                    shard.index,
                    shard.count,
                    shard.starts,
                    block.len()
                ),
            ));
        }
        parts.push(Part { path: path.clone(), header: h.header, shard, block });
    }
    Ok(parts)
}

/// Sorts the parts by shard; each shard once, none missing.
fn check_complete(parts: &mut [Part]) -> Result<()> {
    parts.sort_by_key(|p| p.shard.index); // stable: of two equal indices, the first given stays first
    for w in parts.windows(2) {
        if w[0].shard.index == w[1].shard.index {
            return Err(Error::input(
                &w[1].path,
                format!("shard {}/{} is given twice (also {})", w[1].shard.index, w[1].shard.count, w[0].path),
            ));
        }
    }
    let count = parts[0].shard.count;
    if let Some(missing) = (0..count).find(|&i| parts.get(i).map(|p| p.shard.index) != Some(i)) {
        return Err(Error::Refused(format!(
            "merge: shard {missing}/{count} is missing ({} of the {count} parts were given)",
            parts.len()
        )));
    }
    Ok(())
}

/// Every part of the same run as the first: table, contract, length, split.
fn check_same_run(parts: &[Part]) -> Result<()> {
    let first = &parts[0];
    for p in &parts[1..] {
        let (a, b) = (&first.header, &p.header);
        if a.embeddings_sha256 != b.embeddings_sha256 || a.num_items != b.num_items || a.dim != b.dim {
            return Err(Error::input(
                &p.path,
                format!(
                    "made from another table (sha256 {}, {}x{}) than {} (sha256 {}, {}x{})",
                    b.embeddings_sha256, b.num_items, b.dim, first.path, a.embeddings_sha256, a.num_items, a.dim
                ),
            ));
        }
        if a.contract != b.contract {
            return Err(Error::input(&p.path, format!("contract {} differs from {}'s {}", b.contract, first.path, a.contract)));
        }
        if a.length != b.length {
            return Err(Error::input(&p.path, format!("length {} differs from {}'s {}", b.length, first.path, a.length)));
        }
        let (s, t) = (&first.shard, &p.shard);
        if s.count != t.count || s.starts != t.starts || s.starts_sha256 != t.starts_sha256 {
            return Err(Error::input(
                &p.path,
                format!(
                    "part of another run (shard {}/{} of {} starts, starts sha256 {}) than {} (shard {}/{} of {} starts, \
                     starts sha256 {})",
                    t.index, t.count, t.starts, t.starts_sha256, first.path, s.index, s.count, s.starts, s.starts_sha256
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::header::block;
    use crate::cache::json::{self, starts_sha256};
    use crate::cache::json_reader::{head, Sequences};
    use std::fs;
    use std::path::{Path, PathBuf};

    use crate::durable::checkpoint::Checkpoint;

    const SHA: &str = "8f05f88c600019b5e52dadd65706c25050b8ce43dc59ab6b861d899afa7914af";
    const OTHER: &str = "0000000000000000000000000000000000000000000000000000000000000000";

    use crate::test_support::header;

    fn tmp(name: &str) -> PathBuf {
        crate::test_support::tmp("shard", name)
    }

    fn s(p: &Path) -> String {
        p.display().to_string()
    }

    // Seven starts; the sequence of start s is [s, s+1, s+2, ...] mod 9.
    const STARTS: [u32; 7] = [5, 0, 7, 2, 8, 1, 4];

    fn sequences(starts: &[u32], length: usize) -> Vec<u32> {
        starts.iter().flat_map(|&s| (0..length as u32).map(move |k| (s + k) % 9)).collect()
    }

    /// The unsharded run's cache, as `run` writes it (through the checkpoint).
    fn whole(dir: &Path) -> Vec<u8> {
        let out = s(&dir.join("whole.json"));
        let mut cp = Checkpoint::open(&out, &header(3, SHA), &STARTS, false).unwrap();
        cp.append(&sequences(&STARTS, 3)).unwrap();
        cp.finish().unwrap();
        fs::read(&out).unwrap()
    }

    /// Writes the parts of a run of `all` split `count` ways, as `run --shard` does.
    fn parts(dir: &Path, h: &CacheHeader, all: &[u32], count: usize, tag: &str) -> Vec<String> {
        (0..count)
            .map(|i| {
                let shard = Shard::new(i, count, all).unwrap();
                let b = shard.block().unwrap();
                let out = s(&dir.join(format!("{tag}-{i}-of-{count}.json")));
                let mut cp = Checkpoint::open_shard(&out, h, Some(shard), &all[b.clone()], false).unwrap();
                cp.append(&sequences(&all[b], h.length)).unwrap();
                cp.finish().unwrap();
                out
            })
            .collect()
    }

    fn merge_err(out: &str, paths: &[String]) -> String {
        match merge(out, paths) {
            Ok(m) => panic!("merged {m:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn blocks_are_contiguous_cover_every_start_once_and_differ_by_at_most_one() {
        for total in 1..40 {
            for count in 1..=total {
                let blocks: Vec<_> = (0..count).map(|i| block(total, i, count).unwrap()).collect();
                assert_eq!(blocks[0].start, 0);
                assert_eq!(blocks[count - 1].end, total);
                for w in blocks.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                }
                let (lo, hi) = (blocks.iter().map(|b| b.len()).min().unwrap(), blocks.iter().map(|b| b.len()).max().unwrap());
                assert!(lo >= 1 && hi - lo <= 1, "{total} / {count}");
            }
        }
        assert_eq!(block(10, 1, 4).unwrap(), 2..5);
        assert_eq!(block(usize::MAX, 3, 4).unwrap().end, usize::MAX, "no wrap");
        assert!(block(3, 0, 4).unwrap_err().to_string().contains("4 parts of 3 starts would leave a part empty"));
        assert!(block(9, 4, 4).unwrap_err().to_string().contains("0-based and must be below the count"));
        assert!(block(9, 0, 0).is_err());
    }

    #[test]
    fn a_part_is_a_cache_and_an_unsharded_head_has_no_shard() {
        let h = header(3, SHA);
        assert_eq!(head(&h, None).unwrap(), json::head(&h).unwrap());
        let d = tmp("part");
        let p = parts(&d, &h, &STARTS, 3, "p");
        let (read, flat) = json::read(&p[1]).unwrap();
        assert_eq!((read.length, flat.len()), (3, 6), "the cache reader reads a part");
        let text = fs::read_to_string(&p[1]).unwrap();
        assert!(text.contains(&format!(
            "\"shard\":{{\"index\":1,\"count\":3,\"starts\":7,\"starts_sha256\":\"{}\"}},\n\"sequences\": [",
            starts_sha256(&STARTS)
        )));
    }

    #[test]
    fn merged_parts_equal_the_unsharded_run_in_any_order() {
        let d = tmp("merge");
        let reference = whole(&d);
        for count in [1, 2, 3, 7] {
            let mut p = parts(&d, &header(3, SHA), &STARTS, count, "m");
            p.reverse();
            let out = s(&d.join(format!("merged-{count}.json")));
            let m = merge(&out, &p).unwrap();
            assert_eq!(m, Merged { parts: count, sequences: 7, length: 3 });
            assert_eq!(fs::read(&out).unwrap(), reference, "{count} parts");
        }
        // Twin: parts of another order of the same starts merge to other bytes.
        let mut swapped = STARTS;
        swapped.swap(0, 1);
        let p = parts(&d, &header(3, SHA), &swapped, 2, "swapped");
        let out = s(&d.join("swapped.json"));
        merge(&out, &p).unwrap();
        assert_ne!(fs::read(&out).unwrap(), reference);
    }

    #[test]
    fn foreign_duplicated_and_missing_parts_are_refused_in_one_line() {
        let d = tmp("refuse");
        let p = parts(&d, &header(3, SHA), &STARTS, 3, "a");
        let out = s(&d.join("out.json"));
        fs::write(&out, "precious").unwrap();
        let other = parts(&d, &header(3, OTHER), &STARTS, 3, "other");
        let e = merge_err(&out, &[p[0].clone(), other[1].clone(), p[2].clone()]);
        assert!(e.starts_with(&format!("{}: made from another table (sha256 {OTHER}, 9x3) than {}", other[1], p[0])), "{e}");
        let long = parts(&d, &header(4, SHA), &[5, 0, 7, 2, 8, 1, 4], 3, "long");
        assert!(merge_err(&out, &[p[0].clone(), long[1].clone(), p[2].clone()]).contains("length 4 differs"));
        let mut h16 = header(3, SHA);
        h16.contract = "fp16".into();
        let c16 = parts(&d, &h16, &STARTS, 3, "fp16");
        assert!(merge_err(&out, &[p[0].clone(), c16[1].clone(), p[2].clone()]).contains("contract fp16 differs"));
        let four = parts(&d, &header(3, SHA), &STARTS, 4, "four");
        assert!(merge_err(&out, &[p[0].clone(), four[1].clone(), p[2].clone()]).contains("part of another run (shard 1/4"));
        let fewer = parts(&d, &header(3, SHA), &STARTS[..6], 3, "fewer");
        assert!(merge_err(&out, &[p[0].clone(), fewer[1].clone(), p[2].clone()]).contains("part of another run"));
        let e = merge_err(&out, &[p[0].clone(), p[1].clone(), p[1].clone(), p[2].clone()]);
        assert_eq!(e, format!("{}: shard 1/3 is given twice (also {})", p[1], p[1]));
        let e = merge_err(&out, &[p[0].clone(), p[2].clone()]);
        assert_eq!(e, "merge: shard 1/3 is missing (2 of the 3 parts were given)");
        assert!(merge_err(&out, &[p[0].clone(), p[1].clone()]).contains("shard 2/3 is missing"));
        let plain = s(&d.join("whole.json"));
        whole(&d);
        assert!(merge_err(&out, &[plain]).contains("not a part of a sharded run"));
        assert!(merge_err(&p[0], &p).contains("is the same file as part"));
        assert_eq!(fs::read_to_string(&out).unwrap(), "precious", "refusals leave the output alone");
        // Twin: the three right parts merge.
        merge(&out, &p).unwrap();
    }

    /// Rewrites the file `p` with `edit` applied to its text.
    fn tamper(p: &str, edit: impl Fn(String) -> String) {
        let text = fs::read_to_string(p).unwrap();
        fs::write(p, edit(text)).unwrap();
    }

    #[test]
    fn damaged_parts_are_refused_and_leave_no_output() {
        let d = tmp("damaged");
        let out = s(&d.join("out.json"));
        let fresh = || parts(&d, &header(3, SHA), &STARTS, 3, "d");
        // (text replaced in part 1, by, the error expected)
        let cases = [
            ("[7,8,0]", "[8,7,0]", "first items do not hash to the header's starts_sha256"),
            ("[7,8,0]", "[7,8]", "sequence 0 has 2 items, the header says length 3"),
            ("[7,8,0]", "[7,8,0,1]", "sequence 0 has more than 3 items"),
            ("[7,8,0]", "[7,9,0]", "sequence 0, step 1: item 9 is out of range"),
            ("[7,8,0]", "[7,08,0]", "leading zero"),
            ("[7,8,0]", "[7,-8,0]", "expected an item index"),
            ("[7,8,0]", "[7,4294967296,0]", "past 2^32"),
            ("\n[7,8,0],", "", "has 1 sequences, but its header says starts_count 2"),
            ("\n]}\n", "\n]", "truncated"),
            ("\n]}\n", "\n]}x", "expected the end of the file"),
            ("\"version\":2", "\"version\":3", "not a divgpu cache of version 1 or 2"),
            ("\"starts_count\":2", "\"starts_count\":3", "its header says starts_count 3, but shard 1/3's block of the run's 7 starts holds 2"),
            ("\"sequences\"", "\"seq\"", "no \"sequences\""),
            ("\"index\":1", "\"index\":3", "the index is 0-based"),
        ];
        for (from, to, want) in cases {
            let p = fresh();
            assert!(fs::read_to_string(&p[1]).unwrap().contains(from));
            tamper(&p[1], |t| t.replacen(from, to, 1));
            let e = merge_err(&out, &p);
            assert!(e.contains(want) && !e.contains('\n'), "want {want:?}, got {e}");
            assert!(!Path::new(&out).exists(), "no output after {want:?}");
            assert!(fs::read_dir(&d).unwrap().all(|f| !f.unwrap().file_name().to_string_lossy().ends_with(".tmp")));
        }
        // A version 1 part (no starts_count to break) lacking a sequence: its block says so.
        let p = fresh();
        tamper(&p[1], |t| {
            let from = t.find(",\"starts_count\"").unwrap();
            let to = t.find(",\"shard\"").unwrap();
            format!("{}{}", &t[..from], &t[to..]).replacen("\"version\":2", "\"version\":1", 1).replacen("\n[7,8,0],", "", 1)
        });
        let e = merge_err(&out, &p);
        assert!(e.contains("shard 1/3 has 1 sequences; its block of the run's 7 starts holds 2 (positions 2..4)"), "{e}");
        // Twin: untouched parts merge.
        merge(&out, &fresh()).unwrap();
    }

    #[test]
    fn a_checkpoint_resumes_only_the_same_shard_of_the_same_run() {
        let d = tmp("checkpoint");
        let out = s(&d.join("part.json"));
        let h = header(3, SHA);
        let shard = |i, all: &[u32]| Some(Shard::new(i, 3, all).unwrap());
        let b = block(7, 1, 3).unwrap();
        let mut cp = Checkpoint::open_shard(&out, &h, shard(1, &STARTS), &STARTS[b.clone()], false).unwrap();
        cp.append(&sequences(&STARTS[b.start..b.start + 1], 3)).unwrap();
        drop(cp);
        let err = |sh: Option<Shard>, part: &[u32]| {
            Checkpoint::open_shard(&out, &h, sh, part, false).err().map(|e| e.to_string()).unwrap_or_default()
        };
        assert!(err(shard(0, &STARTS), &STARTS[block(7, 0, 3).unwrap()]).contains("--shard 1/3 (this run's: --shard 0/3)"));
        assert!(err(None, &STARTS[b.clone()]).contains("--shard 1/3 (this run's: no --shard)"));
        // Shard 1/3 of the first six starts is the same block, [7, 2], of another run.
        let six = &STARTS[..6];
        assert_eq!(&six[block(6, 1, 3).unwrap()], &STARTS[b.clone()]);
        assert!(err(shard(1, six), &STARTS[b.clone()]).contains("other --starts (7 starts in all; this run has 6)"));
        // Twin: the same shard of the same run resumes and finishes as its part.
        let mut cp = Checkpoint::open_shard(&out, &h, shard(1, &STARTS), &STARTS[b.clone()], false).unwrap();
        assert_eq!(cp.done(), 1);
        cp.append(&sequences(&STARTS[b.start + 1..b.end], 3)).unwrap();
        cp.finish().unwrap();
        let fresh = parts(&d, &h, &STARTS, 3, "fresh");
        assert_eq!(fs::read(&out).unwrap(), fs::read(&fresh[1]).unwrap());
    }

    #[test]
    fn the_sequence_reader_takes_any_json_whitespace() {
        let text = b" \n[ 3 ,\t1 ]\r\n, [2,0]\n ] \n } \n";
        let mut r = Sequences::new(&text[..], 0);
        let mut seq = Vec::new();
        assert!(r.next(&mut seq, 2, 4).unwrap());
        assert_eq!(seq, [3, 1]);
        assert!(r.next(&mut seq, 2, 4).unwrap());
        assert_eq!(seq, [2, 0]);
        assert!(!r.next(&mut seq, 2, 4).unwrap());
        let mut empty = Sequences::new(&b"]}"[..], 0);
        assert!(!empty.next(&mut seq, 2, 4).unwrap());
    }
}
