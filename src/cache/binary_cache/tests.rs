use super::*;
use crate::cache::binary_reader::*;
use crate::cache::json::{self, CacheHeader};

use crate::fuzz::check_error;

const SHA: &str = "8f05f88c600019b5e52dadd65706c25050b8ce43dc59ab6b861d899afa7914af";
const PATH: &str = "c.bin";
/// Five starts of a 9-item table, item 5 twice: the index points at the first.
const STARTS: [u32; 5] = [5, 0, 7, 2, 5];
const LENGTH: usize = 3;

/// The sequence of start `s`: s, s+1, s+2 (mod 9); the second 5 goes the other way.
fn rows(starts: &[u32]) -> Vec<u32> {
    starts
        .iter()
        .enumerate()
        .flat_map(|(k, &s)| (0..LENGTH as u32).map(move |i| if k == 4 { (s + 9 - i) % 9 } else { (s + i) % 9 }))
        .collect()
}

fn part(starts: &[u32]) -> PartHeader {
    PartHeader { header: CacheHeader::new("fp32", 9, 3, LENGTH, SHA, starts), shard: None }
}

/// The whole binary cache of STARTS, as a run writes it.
fn file() -> Vec<u8> {
    let mut bytes = Vec::new();
    write_head(&mut bytes, PATH, &part(&STARTS), &STARTS).unwrap();
    write_u32s(&mut bytes, &rows(&STARTS)).unwrap();
    bytes
}

fn open(bytes: &[u8]) -> Result<BinaryCache<&[u8]>> {
    BinaryCache::from_source(PATH, bytes)
}

fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap())
}

fn put_u32(bytes: &mut [u8], offset: usize, v: u32) {
    bytes[offset..offset + 4].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn the_bytes_are_the_documented_layout() {
    let bytes = file();
    assert_eq!(&bytes[..8], b"DIVGPUB\0");
    assert_eq!(u32_at(&bytes, 8), 1, "layout");
    let h = u32_at(&bytes, 12) as usize;
    assert_eq!(h % 8, 0);
    let text = std::str::from_utf8(&bytes[16..16 + h]).unwrap();
    let json = text.trim_end_matches(' ');
    assert!(h - json.len() < 8, "padded to the next multiple of 8 only");
    assert!(!json.contains(' ') && !json.contains('\n'), "one line, no spaces: {json}");
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    // serde_json's map is sorted: the order is checked on the text instead.
    let order = [
        "format", "version", "contract", "num_items", "dim", "length", "embeddings_sha256", "starts_count", "starts_sha256",
        "divgpu_version", "form", "starts_offset", "index_offset", "rows_offset",
    ];
    assert_eq!(keys.len(), order.len());
    let at: Vec<usize> = order.iter().map(|k| json.find(&format!("\"{k}\":")).unwrap()).collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "fields in the documented order: {json}");
    assert_eq!((v["version"].as_u64(), v["form"].as_str(), v["starts_count"].as_u64()), (Some(2), Some("binary"), Some(5)));
    let (so, io, ro) = (16 + h, 16 + h + 4 * 5, 16 + h + 4 * 5 + 4 * 9);
    assert_eq!(
        [v["starts_offset"].as_u64(), v["index_offset"].as_u64(), v["rows_offset"].as_u64()],
        [Some(so as u64), Some(io as u64), Some(ro as u64)]
    );
    let starts: Vec<u32> = (0..5).map(|k| u32_at(&bytes, so + 4 * k)).collect();
    assert_eq!(starts, STARTS);
    let index: Vec<u32> = (0..9).map(|j| u32_at(&bytes, io + 4 * j)).collect();
    let none = NO_SEQUENCE;
    assert_eq!(index, [1, none, 3, none, none, 0, none, 2, none], "item 5's first sequence is position 0, not 4");
    assert_eq!(bytes.len(), ro + 4 * 5 * LENGTH);
    let row4: Vec<u32> = (0..3).map(|i| u32_at(&bytes, ro + 4 * (4 * LENGTH + i))).collect();
    assert_eq!(row4, [5, 4, 3], "the row at rows_offset + 4·L·k");
    // Twin: the header's JSON is the JSON cache's header line plus the form and offsets.
    let json_head = String::from_utf8(json::head(&part(&STARTS)).unwrap()).unwrap();
    let line = json_head.lines().next().unwrap().trim_end_matches(',');
    assert!(json.starts_with(line) && json[line.len()..].starts_with(",\"form\":\"binary\""), "{line} / {json}");
}

#[test]
fn what_was_written_reads_back_in_order_and_at_random() {
    let bytes = file();
    let mut c = open(&bytes).unwrap();
    assert_eq!((c.count(), c.header().length, c.header().num_items), (5, LENGTH, 9));
    let mut seq = Vec::new();
    let mut flat = Vec::new();
    while let Some(k) = c.next_row(&mut seq).unwrap() {
        assert_eq!(k, flat.len() / LENGTH);
        flat.extend_from_slice(&seq);
    }
    assert_eq!(flat, rows(&STARTS));
    assert_eq!(c.sequence_of(5, &mut seq).unwrap(), Some(0));
    assert_eq!(seq, [5, 6, 7]);
    assert_eq!(c.sequence_of(2, &mut seq).unwrap(), Some(3));
    assert_eq!(seq, [2, 3, 4]);
    assert_eq!(c.sequence_of(1, &mut seq).unwrap(), None, "no sequence starts at item 1");
    c.sequence_at(4, &mut seq).unwrap();
    assert_eq!(seq, [5, 4, 3]);
    assert_eq!(c.start_at(1).unwrap(), 0);
    // Twin: what is not there is an error naming the file.
    check_error(&c.sequence_at(5, &mut seq).unwrap_err(), &[PATH]);
    check_error(&c.position_of(9).unwrap_err(), &[PATH]);
}

#[test]
fn a_file_on_disk_reads_like_its_bytes() {
    let d = crate::test_support::tmp("binary", "disk");
    let path = d.join("c.bin").display().to_string();
    std::fs::write(&path, file()).unwrap();
    let mut c = BinaryCache::open(&path).unwrap();
    let mut seq = Vec::new();
    assert_eq!(c.next_row(&mut seq).unwrap(), Some(0));
    assert_eq!(seq, [5, 6, 7]);
    let e = BinaryCache::open(&format!("{path}.missing")).err().unwrap();
    check_error(&e, &[&format!("{path}.missing")]);
}

#[test]
fn the_header_takes_the_smallest_multiple_of_8_that_holds_it() {
    for extra in 0..40 {
        let mut p = part(&STARTS);
        p.header.divgpu_version = Some(format!("0.1.0{}", "x".repeat(extra)));
        let (bytes, layout) = preamble(&p).unwrap();
        let text = std::str::from_utf8(&bytes[16..]).unwrap().trim_end_matches(' ');
        let h = layout.header_len as usize;
        assert!(h % 8 == 0 && text.len() <= h && h < text.len() + 8, "{extra}: {h} for {}", text.len());
        assert!(text.contains(&format!("\"starts_offset\":{}", 16 + h)), "the header names its own length");
    }
    // Past a power of ten the offsets gain a digit: still a fixed point.
    let many: Vec<u32> = (0..3000).map(|k| k % 9).collect();
    let p = PartHeader { header: CacheHeader::new("fp32", 9, 3, LENGTH, SHA, &many), shard: None };
    let (bytes, layout) = preamble(&p).unwrap();
    assert_eq!(bytes.len() as u64, 16 + layout.header_len);
    assert_eq!(layout.index_offset, layout.starts_offset + 4 * 3000);
}

/// `bytes` with its header text replaced by `text`, padded to `h` bytes
/// (at least the next multiple of 8; the offsets are left to the caller).
fn with_header_len(bytes: &[u8], text: &str, h: usize) -> Vec<u8> {
    let old_h = u32_at(bytes, 12) as usize;
    let new_h = h.max(text.len().next_multiple_of(8));
    let mut out = bytes[..12].to_vec();
    out.extend_from_slice(&(new_h as u32).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    out.resize(16 + new_h, b' ');
    out.extend_from_slice(&bytes[16 + old_h..]);
    out
}

fn with_header(bytes: &[u8], text: &str) -> Vec<u8> {
    with_header_len(bytes, text, 0)
}

fn header_text(bytes: &[u8]) -> String {
    let h = u32_at(bytes, 12) as usize;
    std::str::from_utf8(&bytes[16..16 + h]).unwrap().trim_end_matches(' ').to_string()
}

fn refusal(bytes: &[u8]) -> String {
    match open(bytes) {
        Ok(_) => panic!("accepted"),
        Err(e) => {
            check_error(&e, &[PATH]);
            e.to_string()
        }
    }
}

#[test]
fn a_damaged_head_is_refused_in_one_line() {
    let good = file();
    let h = u32_at(&good, 12) as usize;
    let (so, io) = (16 + h, 16 + h + 20);
    let text = header_text(&good);
    type Damage = Box<dyn Fn(&mut Vec<u8>)>;
    let edit = |from: &'static str, to: &'static str| -> Damage {
        Box::new(move |b: &mut Vec<u8>| *b = with_header(b, &header_text(b).replacen(from, to, 1)))
    };
    let cases: Vec<(Damage, &str)> = vec![
        (Box::new(|b| b[3] = b'X'), "not a binary divgpu cache"),
        (Box::new(|b| put_u32(b, 8, 2)), "layout 2; this divgpu reads layout 1"),
        (Box::new(|b| put_u32(b, 12, 7)), "not a multiple of 8"),
        (Box::new(|b| put_u32(b, 12, 1 << 21)), "up to 1 MiB"),
        (Box::new(|b| b.truncate(40)), "runs past the end of the file"),
        (Box::new(|b| b.truncate(12)), "too short for a binary cache"),
        (edit("\"version\":2", "\"version\":1"), "a binary cache is version 2"),
        (edit("\"form\":\"binary\"", "\"form\":\"json\""), "form \"json\""),
        (edit("\"length\":3", "\"length\":4"), "truncated or extended"),
        (edit("\"num_items\":9", "\"num_items\":10"), "says rows_offset"),
        (edit("\"format\":\"divgpu-diversity-cache\"", "\"format\":\"other\""), "not a divgpu cache of version 1 or 2"),
        (edit("{\"format\"", "{ \"format\""), "not spelled as divgpu writes it"),
        (edit("\"contract\":\"fp32\",\"num_items\":9", "\"num_items\":9,\"contract\":\"fp32\""), "not spelled as divgpu writes it"),
        (edit("\"starts_count\":5", "\"starts_count\":4"), "says index_offset"),
        (Box::new(move |b| b.resize(b.len() + 4, 0)), "truncated or extended"),
        (Box::new(move |b| b.truncate(b.len() - 1)), "truncated or extended"),
        (Box::new(move |b| put_u32(b, so + 4, 9)), "start 1 is item 9, out of range"),
        (Box::new(move |b| put_u32(b, so + 4, 1)), "its starts do not hash to the header's starts_sha256"),
        (Box::new(move |b| put_u32(b, io + 4 * 5, NO_SEQUENCE)), "says no sequence starts at item 5, but sequence 0 does"),
        (Box::new(move |b| put_u32(b, io + 4 * 5, 4)), "points item 5 at sequence 4; the first sequence that starts there is 0"),
        (Box::new(move |b| put_u32(b, io + 4, 2)), "points item 1 at sequence 2, but no sequence starts at item 1"),
    ];
    for (i, (damage, want)) in cases.iter().enumerate() {
        let mut bytes = good.clone();
        damage(&mut bytes);
        let e = refusal(&bytes);
        assert!(e.contains(want), "case {i}: want {want:?}, got {e}");
    }
    // A header padded with 8 spaces more, its offsets moved to match: consistent, but not divgpu's.
    let ro = io + 4 * 9;
    let moved = [("starts_offset", so), ("index_offset", io), ("rows_offset", ro)]
        .iter()
        .fold(text.clone(), |t, (k, v)| t.replace(&format!("\"{k}\":{v}"), &format!("\"{k}\":{}", v + 8)));
    assert!(refusal(&with_header_len(&good, &moved, h + 8)).contains("not spelled as divgpu writes it"));
    // Twin: the untouched file, and its header rewritten as it was, read.
    open(&good).unwrap();
    open(&with_header(&good, &text)).unwrap();
    assert_eq!(with_header(&good, &text), good);
}

#[test]
fn a_damaged_row_is_refused_when_it_is_read() {
    let good = file();
    let ro = good.len() - 4 * 5 * LENGTH;
    for (offset, value, want) in
        [(ro + 4 * (2 * LENGTH + 1), 9, "sequence 2, step 1: item 9 is out of range"), (ro + 4 * 3 * LENGTH, 4, "sequence 3 starts at 4, but its start is 2")]
    {
        let mut bytes = good.clone();
        put_u32(&mut bytes, offset, value);
        let mut c = open(&bytes).unwrap();
        let mut seq = Vec::new();
        let e = loop {
            match c.next_row(&mut seq) {
                Ok(Some(_)) => {}
                Ok(None) => panic!("read every row of a damaged file"),
                Err(e) => break e,
            }
        };
        check_error(&e, &[PATH]);
        assert!(e.to_string().contains(want), "{e}");
        let k = want.split(' ').nth(1).unwrap().trim_end_matches(',').parse().unwrap();
        assert!(c.sequence_at(k, &mut seq).unwrap_err().to_string().contains(want), "at random too");
    }
    // Twin: an undamaged row at the same place is another valid sequence.
    let mut bytes = good.clone();
    put_u32(&mut bytes, ro + 4 * (2 * LENGTH + 1), 1);
    let c = open(&bytes).unwrap();
    let mut seq = Vec::new();
    c.sequence_at(2, &mut seq).unwrap();
    assert_eq!(seq, [7, 1, 0]);
}

#[test]
fn the_index_of_a_large_table_is_built_and_checked_block_by_block() {
    let n = 3 * INDEX_BLOCK + 5;
    let starts: Vec<u32> = vec![n as u32 - 1, 0, INDEX_BLOCK as u32, INDEX_BLOCK as u32 - 1, 2 * INDEX_BLOCK as u32, 0];
    let header = CacheHeader::new("fp32", n, 3, 1, SHA, &starts);
    let p = PartHeader { header, shard: None };
    let mut bytes = Vec::new();
    let layout = write_head(&mut bytes, PATH, &p, &starts).unwrap();
    write_u32s(&mut bytes, &starts).unwrap(); // rows of length 1: the starts
    let entry = |b: &[u8], j: usize| u32_at(b, layout.index_offset as usize + 4 * j);
    let expect = [(n - 1, 0), (0, 1), (INDEX_BLOCK, 2), (INDEX_BLOCK - 1, 3), (2 * INDEX_BLOCK, 4), (5, NO_SEQUENCE)];
    for (j, want) in expect {
        assert_eq!(entry(&bytes, j), want as u32, "item {j}");
    }
    assert_eq!((0..n).filter(|&j| entry(&bytes, j) != NO_SEQUENCE).count(), 5);
    let c = open(&bytes).unwrap();
    let mut seq = Vec::new();
    assert_eq!(c.sequence_of(INDEX_BLOCK as u32, &mut seq).unwrap(), Some(2));
    // Twin: an entry wrong in the third block is found there.
    put_u32(&mut bytes, layout.index_offset as usize + 4 * (2 * INDEX_BLOCK + 7), 1);
    let e = refusal(&bytes);
    assert!(e.contains(&format!("points item {} at sequence 1", 2 * INDEX_BLOCK + 7)), "{e}");
}

#[test]
fn a_writer_refuses_starts_the_header_does_not_promise() {
    let mut sink = Vec::new();
    let e = write_head(&mut sink, PATH, &part(&STARTS), &STARTS[..4]).unwrap_err().to_string();
    assert!(e.contains("not those the header promises"), "{e}");
    let bad = [5, 0, 9];
    let e = write_head(&mut sink, PATH, &part(&bad), &bad).unwrap_err().to_string();
    assert!(e.contains("start 2 is item 9, out of range"), "{e}");
    let mut v1 = part(&STARTS);
    v1.header.starts_count = None;
    assert!(preamble(&v1).unwrap_err().to_string().contains("version 2 header is needed"));
    // Twin: the promised starts are written.
    write_head(&mut sink, PATH, &part(&STARTS), &STARTS).unwrap();
}

#[test]
fn rows_of_a_batch_are_read_and_checked() {
    let flat = rows(&STARTS);
    let mut bytes = Vec::new();
    write_u32s(&mut bytes, &flat).unwrap();
    let mut seen = Vec::new();
    read_rows(&mut &bytes[..], 10, 5, LENGTH, 9, |k, row| {
        seen.push((k, row.to_vec()));
        Ok(())
    })
    .unwrap();
    assert_eq!(seen.len(), 5);
    assert_eq!(seen[4], (14, vec![5, 4, 3]));
    let e = read_rows(&mut &bytes[..bytes.len() - 2], 0, 5, LENGTH, 9, |_, _| Ok(())).unwrap_err();
    assert!(e.contains("sequence 4 cannot be read") && e.contains("cut short"), "{e}");
    let e = read_rows(&mut &bytes[..], 0, 5, LENGTH, 7, |_, _| Ok(())).unwrap_err();
    assert!(e.contains("sequence 0, step 2: item 7 is out of range"), "{e}");
}

#[test]
fn the_acceptance_shape_a_million_items_and_1024_sequences_of_101_opens_at_once() {
    // The H200 job: 1,048,576 items, 1,024 starts, length 101 (4.6 MB, mostly index).
    let n = 1 << 20;
    let starts: Vec<u32> = (0..1024u32).map(|k| k.wrapping_mul(2_654_435_761) % n as u32).collect();
    let p = PartHeader { header: CacheHeader::new("fp32", n, 384, 101, SHA, &starts), shard: None };
    let mut bytes = Vec::new();
    let layout = write_head(&mut bytes, PATH, &p, &starts).unwrap();
    let rows: Vec<u32> = starts.iter().flat_map(|&s| (0..101u32).map(move |i| (s + i * 7919) % n as u32)).collect();
    write_u32s(&mut bytes, &rows).unwrap();
    assert_eq!(bytes.len() as u64, layout.size);
    let t = std::time::Instant::now();
    let c = open(&bytes).unwrap();
    let opened = t.elapsed();
    let mut seq = Vec::new();
    let k = 777;
    assert_eq!(c.sequence_of(starts[k], &mut seq).unwrap(), starts.iter().position(|&s| s == starts[k]));
    assert_eq!(seq[..], rows[k * 101..(k + 1) * 101]);
    assert!(opened.as_secs_f64() < 2.0, "opening took {opened:?}");
}
