use super::*;
use super::state::*;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::cache::json::{self, CacheHeader};
use crate::error::Result;

use crate::test_support::header;

fn tmp(name: &str) -> PathBuf {
    crate::test_support::tmp("checkpoint", name)
}

const STARTS: [u32; 4] = [5, 0, 7, 2];
const SEQS: [u32; 12] = [5, 1, 2, 0, 3, 4, 7, 8, 6, 2, 1, 0];

fn reference(dir: &Path) -> Vec<u8> {
    let p = display(&dir.join("reference.json"));
    json::write(&p, &CacheHeader::new("fp32", 9, 3, 3, "aa", &STARTS), &SEQS).unwrap();
    fs::read(&p).unwrap()
}

fn open(out: &str) -> Result<Checkpoint> {
    Checkpoint::open(out, &header(3, "aa"), &STARTS, false)
}

/// A checkpoint of `out` with the first two batches (1 + 2 sequences) committed.
fn two_batches(d: &Path) -> String {
    let out = display(&d.join("out.json"));
    let mut cp = open(&out).unwrap();
    cp.append(&SEQS[..3]).unwrap();
    cp.append(&SEQS[3..9]).unwrap();
    out
}

/// Resumes `out` and finishes it; returns the notes and whether the bytes are the reference's.
fn resume_and_finish(d: &Path, out: &str, expect_done: usize) -> Vec<String> {
    let mut cp = open(out).unwrap();
    assert_eq!(cp.done(), expect_done, "notes: {:?}", cp.notes());
    let notes = cp.notes();
    cp.append(&SEQS[expect_done * 3..]).unwrap();
    cp.finish().unwrap();
    assert_eq!(fs::read(out).unwrap(), reference(d));
    notes
}

fn edit(path: &Path, f: impl Fn(String) -> String) {
    fs::write(path, f(fs::read_to_string(path).unwrap())).unwrap();
}

#[test]
fn streamed_in_batches_equals_the_whole_write() {
    let d = tmp("stream");
    let out = display(&d.join("out.json"));
    let mut cp = open(&out).unwrap();
    assert_eq!(cp.done(), 0);
    assert!(!cp.dir.exists(), "nothing but the lock is written before the first batch");
    assert!(d.join("out.json.lock").exists(), "the lock is held");
    cp.append(&SEQS[..3]).unwrap();
    cp.append(&SEQS[3..]).unwrap();
    cp.finish().unwrap();
    assert_eq!(fs::read(&out).unwrap(), reference(&d));
    assert!(!PathBuf::from(format!("{out}.checkpoint")).exists());
    assert!(!d.join("out.json.lock").exists(), "the lock is released");
    // Twin: batches given out of order are refused, not written.
    let out2 = display(&d.join("out2.json"));
    let mut cp = open(&out2).unwrap();
    let e = cp.append(&SEQS[6..]).unwrap_err().to_string();
    assert!(e.contains("batches out of order"), "{e}");
}

#[test]
fn a_resume_after_a_kill_mid_batch_gives_the_same_bytes() {
    let d = tmp("resume");
    let out = display(&d.join("out.json"));
    let mut cp = open(&out).unwrap();
    cp.append(&SEQS[..6]).unwrap();
    drop(cp);
    // A batch cut by kill -9: appended but never recorded.
    let mut f = OpenOptions::new().append(true).open(d.join("out.json.checkpoint").join(PART)).unwrap();
    f.write_all(b",\n[7,8,").unwrap();
    drop(f);
    let mut cp = open(&out).unwrap();
    assert_eq!(cp.done(), 2);
    assert!(cp.notes().is_empty(), "an unrecorded tail is no failure: {:?}", cp.notes());
    cp.append(&SEQS[6..9]).unwrap();
    drop(cp);
    let cp = open(&out).unwrap();
    assert_eq!(cp.done(), 3);
    assert!(cp.finish().is_err(), "finish before every sequence is done");
    let mut cp = open(&out).unwrap();
    assert!(cp.append(&SEQS[6..]).is_err(), "more sequences than the job has");
    cp.append(&SEQS[9..]).unwrap();
    cp.finish().unwrap();
    assert_eq!(fs::read(&out).unwrap(), reference(&d));
}

#[test]
fn a_second_writer_is_refused_while_the_first_holds_the_lock() {
    let d = tmp("second");
    let out = two_batches(&d);
    let first = open(&out).unwrap();
    let e = open(&out).err().unwrap().to_string();
    assert!(e.contains("out.json.lock: another divgpu run is writing this output (host"), "{e}");
    drop(first);
    // Twin: released, the same job resumes.
    assert_eq!(open(&out).unwrap().done(), 3);
}

#[test]
fn an_edited_done_is_noted_and_the_records_are_the_truth() {
    for claimed in [1usize, 4, 40] {
        let d = tmp(&format!("done{claimed}"));
        let out = two_batches(&d);
        edit(&d.join("out.json.checkpoint").join(STATE), |t| t.replace("\"done\": 3", &format!("\"done\": {claimed}")));
        let notes = resume_and_finish(&d, &out, 3);
        let noted = notes.iter().any(|n| n.contains(&format!("says {claimed} sequences are done, but its batch records prove 3")));
        assert_eq!(noted, claimed > 3, "{claimed}: {notes:?}");
    }
}

#[test]
fn damaged_batches_are_recomputed_from_the_first_bad_one() {
    // (what is damaged, sequences kept, the note expected)
    type Damage = fn(&Path);
    let cases: [(Damage, usize, &str); 6] = [
        (|c| edit(&c.join(PART), |t| t.replacen("[7,8,6]", "[7,6,8]", 1)), 1, "its bytes do not match their sha256"),
        (|c| edit(&c.join(PART), |t| t.replacen("[5,1,2]", "[5,2,1]", 1)), 0, "its bytes do not match"),
        (|c| edit(&c.join(PART), |t| t.replacen("[0,3,4]", "[1,3,4]", 1)), 1, "starts at 1, not at this run's start 0"),
        (|c| edit(&c.join(BATCHES), |t| t.replacen("\"sha256\":\"", "\"sha256\":\"0", 1)), 0, "do not match their sha256"),
        (|c| edit(&c.join(BATCHES), |t| t[..t.len() - 5].to_string()), 1, "its record was cut short"),
        (|c| { let f = OpenOptions::new().write(true).open(c.join(PART)).unwrap(); let n = f.metadata().unwrap().len(); f.set_len(n - 4).unwrap(); }, 1, "truncated"),
    ];
    for (i, (damage, kept, want)) in cases.into_iter().enumerate() {
        let d = tmp(&format!("damage{i}"));
        let out = two_batches(&d);
        damage(&d.join("out.json.checkpoint"));
        let notes = resume_and_finish(&d, &out, kept);
        assert!(notes.len() == 1 && notes[0].contains(want) && notes[0].contains(&format!("recomputing from sequence {kept}")), "case {i}: {notes:?}");
    }
    // Twin: an untouched checkpoint resumes everything, with no note.
    let d = tmp("untouched");
    let out = two_batches(&d);
    assert!(resume_and_finish(&d, &out, 3).is_empty());
}

#[test]
fn a_kill_before_the_first_summary_resumes_from_the_records() {
    let d = tmp("nostate");
    let out = two_batches(&d);
    fs::remove_file(d.join("out.json.checkpoint").join(STATE)).unwrap();
    assert!(resume_and_finish(&d, &out, 3).is_empty());
    // Twin: the header still tells the job: another table is refused.
    let out = two_batches(&tmp("nostate-other"));
    fs::remove_file(PathBuf::from(format!("{out}.checkpoint")).join(STATE)).unwrap();
    let e = Checkpoint::open(&out, &header(3, "bb"), &STARTS, false).err().unwrap().to_string();
    assert!(e.contains("does not start with this run's cache header"), "{e}");
}

#[test]
fn another_job_is_refused_and_restart_discards_it() {
    let d = tmp("refuse");
    let out = display(&d.join("out.json"));
    let mut cp = open(&out).unwrap();
    cp.append(&SEQS[..3]).unwrap();
    drop(cp);
    let err = |h: &CacheHeader, s: &[u32]| Checkpoint::open(&out, h, s, false).err().map(|e| e.to_string());
    assert!(err(&header(3, "bb"), &STARTS).unwrap().contains("another table (sha256 aa"));
    assert!(err(&header(4, "aa"), &STARTS).unwrap().contains("--length 3 (this run's: 4)"));
    assert!(err(&header(3, "aa"), &[5, 0, 2, 7]).unwrap().contains("other --starts"));
    let mut h16 = header(3, "aa");
    h16.contract = "fp16".into();
    assert!(err(&h16, &STARTS).unwrap().contains("contract fp32"));
    assert!(err(&header(3, "bb"), &STARTS).unwrap().ends_with("pass --restart to discard it (or --out to write elsewhere)"));
    // Twin: the same job resumes.
    assert_eq!(open(&out).unwrap().done(), 1);
    let cp = Checkpoint::open(&out, &header(3, "bb"), &STARTS, true).unwrap();
    assert_eq!(cp.done(), 0);
    assert!(!cp.dir.exists());
}

#[test]
fn an_unreadable_or_old_checkpoint_is_refused() {
    let d = tmp("damaged");
    let out = two_batches(&d);
    let state = d.join("out.json.checkpoint").join(STATE);
    edit(&state, |t| t.replace("\"version\": 2", "\"version\": 1"));
    let e = open(&out).err().unwrap().to_string();
    assert!(e.contains("a checkpoint of version 1") && e.contains("--restart"), "{e}");
    fs::write(&state, "{").unwrap();
    let e = open(&out).err().unwrap().to_string();
    assert!(e.contains("state.json is damaged"), "{e}");
    // A foreign file in the folder: --restart refuses to delete the folder.
    fs::write(d.join("out.json.checkpoint").join("notes.txt"), "mine").unwrap();
    assert!(Checkpoint::open(&out, &header(3, "aa"), &STARTS, true).is_err());
    assert!(d.join("out.json.checkpoint").join("notes.txt").exists());
}

#[test]
fn a_linked_checkpoint_folder_is_refused_even_with_restart() {
    let d = tmp("linkdir");
    fs::create_dir(d.join("elsewhere")).unwrap();
    fs::write(d.join("elsewhere").join(STATE), "precious").unwrap();
    std::os::unix::fs::symlink(d.join("elsewhere"), d.join("out.json.checkpoint")).unwrap();
    let out = display(&d.join("out.json"));
    let e = Checkpoint::open(&out, &header(3, "aa"), &STARTS, true).err().unwrap().to_string();
    assert!(e.contains("is not a checkpoint folder divgpu made"), "{e}");
    assert_eq!(fs::read_to_string(d.join("elsewhere").join(STATE)).unwrap(), "precious");
}

#[test]
fn a_linked_output_gets_the_cache_and_keeps_its_link() {
    let d = tmp("linkout");
    fs::create_dir(d.join("real")).unwrap();
    std::os::unix::fs::symlink("real/cache.json", d.join("out.json")).unwrap();
    let out = display(&d.join("out.json"));
    let mut cp = open(&out).unwrap();
    assert!(cp.path().ends_with("real/cache.json.checkpoint"), "{}", cp.path());
    cp.append(&SEQS).unwrap();
    cp.finish().unwrap();
    assert!(fs::symlink_metadata(&out).unwrap().file_type().is_symlink());
    assert_eq!(fs::read(d.join("real/cache.json")).unwrap(), reference(&d));
}

#[test]
fn a_missing_folder_is_an_error_before_any_work() {
    let e = open("/nonexistent-divgpu/out.json").err().unwrap();
    assert!(e.to_string().contains("does not exist"));
}
