use std::fs;
use std::path::{Path, PathBuf};

use super::*;
use crate::cache::cache_reader::*;
use crate::cache::convert::*;
use crate::cache::header::Shard;
use crate::cache::json::CacheHeader;
use crate::cache::sample::sample_positions;
use crate::cache::shard::{self, merge_as};
use crate::durable::checkpoint::Checkpoint;
use crate::fuzz::check_error;

const SHA: &str = "8f05f88c600019b5e52dadd65706c25050b8ce43dc59ab6b861d899afa7914af";
const STARTS: [u32; 7] = [5, 0, 7, 2, 8, 5, 4];
const LENGTH: usize = 3;

fn tmp(name: &str) -> PathBuf {
    crate::test_support::tmp("cache-io", name)
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// The sequence of start s is s, s+1, s+2 (mod 9).
fn sequences(starts: &[u32]) -> Vec<u32> {
    starts.iter().flat_map(|&s| (0..LENGTH as u32).map(move |k| (s + k) % 9)).collect()
}

fn header(starts: &[u32]) -> CacheHeader {
    CacheHeader::new("fp32", 9, 3, LENGTH, SHA, starts)
}

/// What `run --format FORM` writes (through its checkpoint, in two batches):
/// the whole run, or part 1 of 3 of it.
fn run(out: &Path, form: Form, part: bool) -> Vec<u8> {
    let (shard, starts) = if part {
        let sh = Shard::new(1, 3, &STARTS).unwrap();
        let b = sh.block().unwrap();
        (Some(sh), STARTS[b].to_vec())
    } else {
        (None, STARTS.to_vec())
    };
    let out = s(out);
    let mut cp = Checkpoint::open_form(&out, None, &header(&starts), shard, &starts, false, form).unwrap();
    let flat = sequences(&starts);
    cp.append(&flat[..LENGTH]).unwrap();
    cp.append(&flat[LENGTH..]).unwrap();
    cp.finish().unwrap();
    fs::read(&out).unwrap()
}

#[test]
fn convert_is_byte_identical_to_a_run_that_wrote_the_other_form() {
    let d = tmp("convert");
    for part in [false, true] {
        let json = run(&d.join(format!("run-{part}.json")), Form::Json, part);
        let binary = run(&d.join(format!("run-{part}.bin")), Form::Binary, part);
        assert_ne!(json, binary);
        let (j, b) = (s(&d.join(format!("run-{part}.json"))), s(&d.join(format!("run-{part}.bin"))));
        let (to_b, to_j) = (s(&d.join("to.bin")), s(&d.join("to.json")));
        let c = convert(&j, &to_b, Form::Binary).unwrap();
        assert_eq!(c, Converted { form: Form::Binary, sequences: if part { 2 } else { 7 }, length: LENGTH, upgraded: false });
        assert_eq!(fs::read(&to_b).unwrap(), binary, "json -> binary, part {part}");
        convert(&b, &to_j, Form::Json).unwrap();
        assert_eq!(fs::read(&to_j).unwrap(), json, "binary -> json, part {part}");
        // Into its own form: the same bytes again.
        convert(&to_j, &s(&d.join("again.json")), Form::Json).unwrap();
        assert_eq!(fs::read(d.join("again.json")).unwrap(), json);
    }
    // Twin: a changed row converts, to other bytes than the run's.
    let j = s(&d.join("run-false.json"));
    let text = fs::read_to_string(&j).unwrap().replacen("[7,8,0]", "[7,1,0]", 1);
    fs::write(d.join("changed.json"), text).unwrap();
    convert(&s(&d.join("changed.json")), &s(&d.join("changed.bin")), Form::Binary).unwrap();
    assert_ne!(fs::read(d.join("changed.bin")).unwrap(), fs::read(d.join("run-false.bin")).unwrap());
}

#[test]
fn a_truncated_cache_does_not_convert_and_leaves_no_output() {
    let d = tmp("truncated");
    for (form, name) in [(Form::Json, "run.json"), (Form::Binary, "run.bin")] {
        let bytes = run(&d.join(name), form, false);
        let cut = s(&d.join(format!("cut-{name}")));
        fs::write(&cut, &bytes[..bytes.len() - 5]).unwrap();
        let out = s(&d.join(format!("out-{name}")));
        let e = convert(&cut, &out, form.other()).unwrap_err();
        check_error(&e, &[&cut]);
        assert!(!Path::new(&out).exists(), "{e}");
        assert!(fs::read_dir(&d).unwrap().all(|f| !f.unwrap().file_name().to_string_lossy().starts_with(".divgpu-tmp")));
        // Twin: the whole file converts.
        convert(&s(&d.join(name)), &out, form.other()).unwrap();
    }
    let e = convert(&s(&d.join("run.json")), &s(&d.join("run.json")), Form::Binary).unwrap_err().to_string();
    assert!(e.contains("is the same file as the input"), "{e}");
    let e = convert(&s(&d.join("run.json")), "-", Form::Binary).unwrap_err().to_string();
    assert!(e.starts_with("--out -: ") && e.contains("name a file"), "{e}");
}

/// A version 1 cache of STARTS, as an older divgpu wrote it.
fn version_1(path: &Path) {
    let mut h = header(&STARTS);
    (h.version, h.starts_count, h.starts_sha256, h.divgpu_version) = (1, None, None, None);
    let mut bytes = json::head(&h).unwrap();
    json::write_sequences(&mut bytes, &sequences(&STARTS), LENGTH, 0).unwrap();
    bytes.extend_from_slice(json::TAIL);
    fs::write(path, bytes).unwrap();
}

#[test]
fn a_version_1_cache_converts_to_version_2() {
    let d = tmp("v1");
    version_1(&d.join("old.json"));
    let (old, bin, back) = (s(&d.join("old.json")), s(&d.join("new.bin")), s(&d.join("new.json")));
    assert_eq!(CacheReader::open(&old).unwrap().count(), None, "version 1 does not say");
    let c = convert(&old, &bin, Form::Binary).unwrap();
    assert!(c.upgraded && c.sequences == 7);
    convert(&bin, &back, Form::Json).unwrap();
    // The run of this divgpu writing JSON has the same bytes.
    assert_eq!(fs::read(&back).unwrap(), run(&d.join("run.json"), Form::Json, false));
    // Twin: version 1 stays readable and is not the upgraded bytes.
    assert_ne!(fs::read(&old).unwrap(), fs::read(&back).unwrap());
    assert_eq!(read_all(&old).unwrap().1, read_all(&back).unwrap().1);
}

fn all(reader: &mut CacheReader) -> Vec<(usize, Vec<u32>)> {
    let mut batch = Batch::default();
    let mut out = Vec::new();
    while reader.next_batch(2, &mut batch).unwrap() > 0 {
        assert!(batch.len() <= 2, "a batch holds at most what was asked");
        out.extend((0..batch.len()).map(|i| (batch.positions[i], batch.sequence(i).to_vec())));
    }
    out
}

#[test]
fn both_forms_read_as_the_same_sequences() {
    let d = tmp("read");
    run(&d.join("c.json"), Form::Json, false);
    run(&d.join("c.bin"), Form::Binary, false);
    let expected: Vec<(usize, Vec<u32>)> = sequences(&STARTS).chunks(LENGTH).map(<[u32]>::to_vec).enumerate().collect();
    for (name, form) in [("c.json", Form::Json), ("c.bin", Form::Binary)] {
        let path = s(&d.join(name));
        assert_eq!(Form::of_file(&path).unwrap(), form);
        let mut r = CacheReader::open(&path).unwrap();
        assert_eq!((r.form(), r.count(), r.header().version, r.shard()), (form, Some(7), 2, None));
        assert_eq!(all(&mut r), expected, "{name}");
        assert_eq!(r.next(&mut Vec::new()).unwrap(), None, "and stays at the end");
        let mut seen = Vec::new();
        let n = CacheReader::open(&path).unwrap().for_each(|p, start, seq| {
            assert_eq!(start, seq[0]);
            seen.push(p);
            Ok(())
        });
        assert_eq!((n.unwrap(), seen), (7, (0..7).collect::<Vec<_>>()));
        let mut starts = Vec::new();
        CacheReader::open(&path).unwrap().for_each_start(|_, s| Ok(starts.push(s))).unwrap();
        assert_eq!(starts, STARTS);
        assert_eq!(read_all(&path).unwrap().1, sequences(&STARTS));
    }
    // Random access is the binary form's: the sequence of a start.
    let r = CacheReader::open(&s(&d.join("c.bin"))).unwrap();
    let mut seq = Vec::new();
    assert_eq!(r.binary().unwrap().sequence_of(8, &mut seq).unwrap(), Some(4));
    assert_eq!(seq, [8, 0, 1]);
    assert!(CacheReader::open(&s(&d.join("c.json"))).unwrap().binary().is_none());
}

#[test]
fn a_sample_is_the_same_sequences_in_both_forms() {
    let d = tmp("sample");
    run(&d.join("c.json"), Form::Json, false);
    run(&d.join("c.bin"), Form::Binary, false);
    version_1(&d.join("old.json"));
    let positions = sample_positions(7, 3, 2026);
    let mut got = Vec::new();
    for name in ["c.json", "c.bin", "old.json"] {
        let mut r = CacheReader::open(&s(&d.join(name))).unwrap();
        r.select(positions.clone()).unwrap();
        let seen = all(&mut r);
        assert_eq!(seen.iter().map(|(p, _)| *p).collect::<Vec<_>>(), positions, "{name}");
        got.push(seen);
    }
    assert!(got.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(got[0][0].1, sequences(&STARTS[positions[0]..=positions[0]]));
    // Twin: selections that cannot be given are refused.
    let mut r = CacheReader::open(&s(&d.join("c.bin"))).unwrap();
    assert!(r.select(vec![3, 1]).unwrap_err().to_string().contains("must ascend"));
    assert!(r.select(vec![2, 7]).unwrap_err().to_string().contains("holds 7 sequences: there is no position 7"));
    let mut old = CacheReader::open(&s(&d.join("old.json"))).unwrap();
    old.select(vec![1, 9]).unwrap(); // version 1: the count is found at the end
    let mut seq = Vec::new();
    assert_eq!(old.next(&mut seq).unwrap(), Some(1));
    let e = old.next(&mut seq).unwrap_err();
    check_error(&e, &[&s(&d.join("old.json"))]);
    assert!(e.to_string().contains("holds 7 sequences: there is no position 9"), "{e}");
    // select_sample: the same positions, the count found by a pass for version 1.
    for name in ["c.json", "c.bin", "old.json"] {
        let mut r = CacheReader::open(&s(&d.join(name))).unwrap();
        assert_eq!(r.select_sample(3, 2026).unwrap(), 7);
        assert_eq!(all(&mut r), got[0], "{name}");
    }
    assert_eq!(count_sequences(&s(&d.join("old.json"))).unwrap(), 7);
    let mut late = CacheReader::open(&s(&d.join("c.json"))).unwrap();
    late.next(&mut seq).unwrap();
    assert!(late.select(vec![1]).is_err(), "select before reading");
}

#[test]
fn the_json_reader_checks_its_header_s_promises_at_the_end() {
    let d = tmp("promises");
    let bytes = run(&d.join("c.json"), Form::Json, false);
    let short = String::from_utf8(bytes).unwrap().replacen("\n[4,5,6]", "", 1).replacen("],\n]}", "]\n]}", 1);
    let mut r = CacheReader::from_bytes("c.json", short.as_bytes()).unwrap();
    let mut seq = Vec::new();
    for k in 0..6 {
        assert_eq!(r.next(&mut seq).unwrap(), Some(k));
    }
    let e = r.next(&mut seq).unwrap_err();
    check_error(&e, &["c.json"]);
    assert!(e.to_string().contains("has 6 sequences, but its header says starts_count 7"), "{e}");
    // Twin: the whole file ends with None.
    let mut whole = CacheReader::open(&s(&d.join("c.json"))).unwrap();
    assert_eq!(all(&mut whole).len(), 7);
}

#[test]
fn the_writer_refuses_a_cache_that_would_not_read_back() {
    let d = tmp("writer");
    let part = PartHeader { header: header(&STARTS), shard: None };
    let flat = sequences(&STARTS);
    for form in [Form::Json, Form::Binary] {
        let out = s(&d.join(format!("out.{}", form.name())));
        let w = CacheWriter::create(&out, &part, form, &STARTS).unwrap();
        assert!(w.finish().unwrap_err().to_string().contains("0 of 7 sequences were written"));
        let mut w = CacheWriter::create(&out, &part, form, &STARTS).unwrap();
        let mut swapped = flat.clone();
        swapped[..2 * LENGTH].rotate_left(LENGTH);
        w.append(&swapped).unwrap();
        assert!(w.finish().unwrap_err().to_string().contains("do not hash to its header's starts_sha256"));
        let mut w = CacheWriter::create(&out, &part, form, &STARTS).unwrap();
        assert!(w.append(&[5, 9, 1]).unwrap_err().to_string().contains("sequence 0, step 1: item 9 is out of range"));
        assert!(w.append(&flat[..4]).unwrap_err().to_string().contains("do not make whole sequences"));
        w.append(&flat).unwrap();
        assert!(w.append(&flat[..LENGTH]).unwrap_err().to_string().contains("more than its header's 7"));
        assert!(!Path::new(&out).exists(), "nothing is committed before finish");
        // Twin: the right sequences are committed, as a run writes them.
        w.finish().unwrap();
        assert_eq!(fs::read(&out).unwrap(), run(&d.join(format!("run.{}", form.name())), form, false));
    }
    let none = |_: &mut PushStart| Ok(());
    let e = CacheWriter::create_streamed("-", &part, Form::Binary, none).err().unwrap().to_string();
    assert!(e.contains("name a file"), "{e}");
    let few = |push: &mut PushStart| push(5);
    let e = CacheWriter::create_streamed(&s(&d.join("few.bin")), &part, Form::Binary, few).err().unwrap().to_string();
    assert!(e.contains("the 1 starts given are not those the header promises"), "{e}");
}

#[test]
fn a_binary_run_resumes_and_recomputes_a_damaged_batch() {
    let d = tmp("resume");
    let reference = run(&d.join("reference.bin"), Form::Binary, false);
    let out = s(&d.join("out.bin"));
    let flat = sequences(&STARTS);
    let open = |form| Checkpoint::open_form(&out, None, &header(&STARTS), None, &STARTS, false, form);
    let mut cp = open(Form::Binary).unwrap();
    cp.append(&flat[..2 * LENGTH]).unwrap();
    cp.append(&flat[2 * LENGTH..4 * LENGTH]).unwrap();
    drop(cp);
    let part = d.join("out.bin.checkpoint").join("sequences.part");
    // A kill mid-batch: bytes past the last record.
    let mut bytes = fs::read(&part).unwrap();
    bytes.extend_from_slice(&[1, 2, 3]);
    fs::write(&part, &bytes).unwrap();
    let e = open(Form::Json).err().unwrap().to_string();
    assert!(e.contains("it belongs to a run of --format binary (this run's: json)"), "{e}");
    let cp = open(Form::Binary).unwrap();
    assert_eq!((cp.done(), cp.notes().len()), (4, 0));
    drop(cp);
    // The second batch's rows damaged: recomputed from its first sequence.
    let mut bytes = fs::read(&part).unwrap();
    // The last item of the fourth sequence (the resume cut the stray bytes): 4 becomes 5, a valid item.
    let at = bytes.len() - 4;
    assert_eq!(bytes[at], 4);
    bytes[at] ^= 1;
    fs::write(&part, &bytes).unwrap();
    let mut cp = open(Form::Binary).unwrap();
    assert_eq!(cp.done(), 2);
    let notes = cp.notes();
    assert!(notes.len() == 1 && notes[0].contains("do not match their sha256") && notes[0].contains("from sequence 2"), "{notes:?}");
    cp.append(&flat[2 * LENGTH..]).unwrap();
    cp.finish().unwrap();
    assert_eq!(fs::read(&out).unwrap(), reference);
}

/// The parts of the run of STARTS split `count` ways, each in `forms[i % len]`.
fn parts(d: &Path, count: usize, forms: &[Form], tag: &str) -> Vec<String> {
    (0..count)
        .map(|i| {
            let shard = Shard::new(i, count, &STARTS).unwrap();
            let starts = &STARTS[shard.block().unwrap()];
            let form = forms[i % forms.len()];
            let path = s(&d.join(format!("{tag}-{i}.{}", form.name())));
            let mut w = CacheWriter::create(&path, &PartHeader { header: header(starts), shard: Some(shard) }, form, starts).unwrap();
            w.append(&sequences(starts)).unwrap();
            w.finish().unwrap();
            path
        })
        .collect()
}

#[test]
fn merge_reads_parts_of_either_form_and_writes_either() {
    let d = tmp("merge");
    for out_form in [Form::Json, Form::Binary] {
        let reference = run(&d.join(format!("whole.{}", out_form.name())), out_form, false);
        for (tag, forms) in [("j", &[Form::Json][..]), ("b", &[Form::Binary]), ("mixed", &[Form::Binary, Form::Json])] {
            let p = parts(&d, 3, forms, tag);
            let out = s(&d.join(format!("merged-{tag}.{}", out_form.name())));
            let m = merge_as(&out, &p, out_form).unwrap();
            assert_eq!((m.parts, m.sequences), (3, 7));
            assert_eq!(fs::read(&out).unwrap(), reference, "{tag} parts into {}", out_form.name());
        }
    }
    // Twin: a binary part cut short is refused and nothing is written.
    let p = parts(&d, 3, &[Form::Binary], "cut");
    let bytes = fs::read(&p[1]).unwrap();
    fs::write(&p[1], &bytes[..bytes.len() - 4]).unwrap();
    for out_form in [Form::Json, Form::Binary] {
        let out = s(&d.join(format!("cut.{}", out_form.name())));
        let e = merge_as(&out, &p, out_form).unwrap_err();
        check_error(&e, &[&p[1]]);
        assert!(e.to_string().contains("truncated or extended") && !Path::new(&out).exists(), "{e}");
    }
    assert!(shard::merge(&s(&d.join("x.json")), &p).is_err());
}

// Peak memory: a child process (this test binary, running `memory_child`
// alone) does one job on a cache and on one ten times larger, and reports
// its VmHWM; within 20% when the job streams. The caches: 2,000 items,
// sequences of 64, 16,384 or 163,840 of them (binary 4.2 or 42 MB, JSON 5.4
// or 54 MB), each also in four parts for `merge`. The smaller one is large
// enough to fill every bounded buffer (1 MiB of JSON read ahead, batches of
// 1 MiB, four parts of 4,096 sequences): a smaller base would show those
// buffers filling as growth. About 250 MB in the temporary folder, removed
// at the end, and 2 s; `-- --nocapture` prints the numbers.

const ITEMS: usize = 2000;
const MEMORY_LENGTH: usize = 64;

/// Writes the cache of `count` sequences in `form` (and its four parts); returns its path.
fn big_cache(d: &Path, count: usize, form: Form) -> String {
    let starts: Vec<u32> = (0..count).map(|k| (k * 7 % ITEMS) as u32).collect();
    let rows = |starts: &[u32]| -> Vec<u32> {
        starts.iter().flat_map(|&s| (0..MEMORY_LENGTH as u32).map(move |i| (s + i * 13) % ITEMS as u32)).collect()
    };
    let write = |path: &str, starts: &[u32], shard: Option<Shard>| {
        let h = CacheHeader::new("fp32", ITEMS, 8, MEMORY_LENGTH, SHA, starts);
        let mut w = CacheWriter::create(path, &PartHeader { header: h, shard }, form, starts).unwrap();
        for chunk in starts.chunks(4096) {
            w.append(&rows(chunk)).unwrap();
        }
        w.finish().unwrap();
    };
    let path = s(&d.join(format!("cache-{count}.{}", form.name())));
    write(&path, &starts, None);
    for i in 0..4 {
        let shard = Shard::new(i, 4, &starts).unwrap();
        let b = shard.block().unwrap();
        write(&format!("{path}.part{i}"), &starts[b], Some(shard));
    }
    path
}

/// The child's job: `JOB PATH OUT`.
fn memory_job(job: &str, path: &str, out: &str) -> Result<()> {
    let mut checked = 0usize;
    match job {
        "verify" => {
            let n = CacheReader::open(path)?.for_each(|_, start, seq| {
                checked += usize::from(seq[0] == start);
                Ok(())
            })?;
            assert_eq!(n, checked);
        }
        "sample" => {
            let mut r = CacheReader::open(path)?;
            let count = r.count().unwrap_or(0);
            r.select(sample_positions(count, 100, 1))?;
            r.for_each(|_, _, _| Ok(()))?;
        }
        "convert" => {
            convert(path, out, Form::of_file(path)?.other())?;
        }
        "merge" => {
            let p: Vec<String> = (0..4).map(|i| format!("{path}.part{i}")).collect();
            merge_as(out, &p, Form::of_file(path)?.other())?;
        }
        // Not streaming: the twin that must grow.
        "read_all" => {
            read_all(path)?;
        }
        other => panic!("unknown memory job {other}"),
    }
    Ok(())
}

fn peak_kb() -> u64 {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
#[ignore = "run by peak_memory_does_not_grow_with_the_cache in a process of its own"]
fn memory_child() {
    let spec = std::env::var("DIVGPU_MEMORY_JOB").expect("DIVGPU_MEMORY_JOB=JOB PATH OUT (set by the parent test)");
    let args: Vec<&str> = spec.split(' ').collect();
    memory_job(args[0], args[1], args[2]).unwrap();
    println!("peak_kb={}", peak_kb());
}

/// Runs `memory_child` alone in a new process; its VmHWM in kB.
fn child_peak(job: &str, path: &str, out: &str) -> u64 {
    let exe = std::env::current_exe().unwrap();
    let output = std::process::Command::new(exe)
        .args(["--exact", "cache::cache_io::tests::memory_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env("DIVGPU_MEMORY_JOB", format!("{job} {path} {out}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{job} {path}: {text}{}", String::from_utf8_lossy(&output.stderr));
    // (The harness prints the test's name on the same line.)
    let line = text.lines().find_map(|l| l.split("peak_kb=").nth(1)).unwrap_or_else(|| panic!("no peak in {text}"));
    line.trim().parse().unwrap()
}

#[test]
fn peak_memory_does_not_grow_with_the_cache() {
    let d = tmp("memory");
    let mut report = Vec::new();
    for form in [Form::Json, Form::Binary] {
        let (small, large) = (big_cache(&d, 16_384, form), big_cache(&d, 163_840, form));
        for job in ["verify", "sample", "convert", "merge"] {
            let out = s(&d.join(format!("out-{job}")));
            let (a, b) = (child_peak(job, &small, &out), child_peak(job, &large, &out));
            report.push(format!("{job} {}: {a} kB -> {b} kB", form.name()));
            assert!(b as f64 <= 1.2 * a as f64, "{job} on {}: {a} kB, ten times larger {b} kB", form.name());
        }
        // Twin: reading the whole cache into memory does grow.
        let (a, b) = (child_peak("read_all", &small, "-"), child_peak("read_all", &large, "-"));
        report.push(format!("read_all {}: {a} kB -> {b} kB", form.name()));
        assert!(b as f64 > 1.2 * a as f64, "the measure misses a whole cache in memory: {a} kB -> {b} kB");
    }
    println!("peak memory (VmHWM), 16,384 -> 163,840 sequences:\n{}", report.join("\n"));
    fs::remove_dir_all(&d).unwrap();
}
