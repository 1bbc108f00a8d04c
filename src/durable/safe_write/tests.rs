use super::*;
use std::os::unix::fs::symlink;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::fs::{self, Permissions};
use std::os::unix::fs::PermissionsExt;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use crate::durable::folder::{try_flock, Folder};
use crate::durable::temp::is_stale_temporary;
use crate::error::Result;

fn tmp(name: &str) -> PathBuf {
    crate::test_support::tmp("safe", name)
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn write(path: &str, text: &str) -> Result<()> {
    let text = text.to_string();
    write_atomically(path, move |w| Ok(w.write_all(text.as_bytes())?))
}

fn leftovers(d: &Path) -> Vec<String> {
    fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(TEMP_PREFIX))
        .collect()
}

#[test]
fn a_write_replaces_the_file_whole_and_leaves_no_temporary() {
    let d = tmp("whole");
    let out = s(&d.join("out.json"));
    fs::write(&out, "old").unwrap();
    fs::set_permissions(&out, Permissions::from_mode(0o640)).unwrap();
    write(&out, "new").unwrap();
    assert_eq!(fs::read_to_string(&out).unwrap(), "new");
    assert_eq!(fs::metadata(&out).unwrap().mode() & 0o777, 0o640, "the replaced file's mode is kept");
    assert!(leftovers(&d).is_empty());
    // A failing writer: the old file stays, the temporary is removed.
    let e = write_atomically(&out, |w| {
        w.write_all(b"half")?;
        Err("disk on fire".into())
    });
    assert!(e.unwrap_err().to_string().contains("write failed: disk on fire"));
    assert_eq!(fs::read_to_string(&out).unwrap(), "new");
    assert!(leftovers(&d).is_empty());
}

#[test]
fn a_symlinked_target_is_written_through_and_the_link_stays() {
    let d = tmp("link");
    fs::create_dir(d.join("real")).unwrap();
    let real = d.join("real").join("cache.json");
    fs::write(&real, "old").unwrap();
    let link = d.join("link.json");
    symlink("real/cache.json", &link).unwrap();
    write(&s(&link), "bytes").unwrap();
    assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link stays");
    assert_eq!(fs::read_to_string(&real).unwrap(), "bytes");
    // A dangling link creates its target; a chain of links is followed.
    let chain = d.join("chain.json");
    symlink(d.join("link.json"), &chain).unwrap();
    let dangling = d.join("dangling.json");
    symlink("real/new.json", &dangling).unwrap();
    write(&s(&dangling), "fresh").unwrap();
    write(&s(&chain), "chained").unwrap();
    assert_eq!(fs::read_to_string(d.join("real/new.json")).unwrap(), "fresh");
    assert_eq!(fs::read_to_string(&real).unwrap(), "chained");
    let t = resolve(&s(&link)).unwrap();
    assert!(t.through_link && t.sibling(".lock") == d.join("real").canonicalize().unwrap().join("cache.json.lock"));
    // Twin: a plain path's sibling is beside the path as given.
    assert_eq!(resolve(&s(&real)).unwrap().sibling(".lock"), PathBuf::from(format!("{}.lock", s(&real))));
    let looped = d.join("loop.json");
    symlink("loop.json", &looped).unwrap();
    assert!(resolve(&s(&looped)).unwrap_err().to_string().contains("too many levels"));
}

#[test]
fn what_is_not_a_regular_file_is_refused_and_kept() {
    let d = tmp("special");
    let fifo = d.join("fifo");
    let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid path string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let e = write(&s(&fifo), "x").unwrap_err().to_string();
    assert!(e.contains("a FIFO (named pipe), not a regular file"), "{e}");
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&fs::symlink_metadata(&fifo).unwrap().file_type()));
    let e = write(&s(&d), "x").unwrap_err().to_string();
    assert!(e.contains("a folder, not a regular file"), "{e}");
    let e = write(&format!("{}/", s(&d)), "x").unwrap_err().to_string();
    assert!(e.contains("names a folder"), "{e}");
    let e = write(&s(&d.join("missing").join("x.json")), "x").unwrap_err().to_string();
    assert!(e.contains("does not exist"), "{e}");
    // A link to a FIFO is refused too: the link's target is what is written.
    let link = d.join("to-fifo");
    symlink(&fifo, &link).unwrap();
    assert!(write(&s(&link), "x").unwrap_err().to_string().contains("(a link to"));
    assert!(leftovers(&d).is_empty());
}

#[test]
fn stale_temporaries_of_dead_processes_are_removed_and_live_ones_kept() {
    let d = tmp("stale");
    let host = host_name();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let stale = d.join(format!("{TEMP_PREFIX}{host}.{dead}.abcdefghij"));
    let live = d.join(format!("{TEMP_PREFIX}{host}.{}.abcdefghij", std::process::id()));
    let other_host = d.join(format!("{TEMP_PREFIX}elsewhere.{dead}.abcdefghij"));
    let not_ours = d.join(format!("notes.{dead}.tmp"));
    // A live writer of another pid namespace: its pid is dead here, but it holds the flock.
    let held = d.join(format!("{TEMP_PREFIX}{host}.{dead}.heldheldhe"));
    for p in [&stale, &live, &other_host, &not_ours, &held] {
        fs::write(p, "x").unwrap();
    }
    let holder = File::open(&held).unwrap();
    assert_eq!(try_flock(&holder), Some(true));
    write(&s(&d.join("out.json")), "y").unwrap();
    assert!(!stale.exists(), "a dead process's temporary is removed by the next write");
    assert!(live.exists() && other_host.exists() && not_ours.exists(), "a live one, another host's, a foreign file stay");
    assert!(held.exists(), "a temporary whose flock is held stays, whatever its pid");
    let dir = Folder::open(&d).unwrap();
    let name = |p: &PathBuf| p.file_name().unwrap().to_owned();
    assert!(!is_stale_temporary(&dir, &name(&held), &host));
    drop(holder);
    // Twin: nobody holds it now, and its pid is dead here: a killed command's.
    assert!(is_stale_temporary(&dir, &name(&held), &host));
}

#[test]
fn an_output_that_is_an_input_or_another_output_is_refused() {
    let d = tmp("same");
    let table = d.join("t.json");
    fs::write(&table, "table").unwrap();
    let hard = d.join("hard.json");
    fs::hard_link(&table, &hard).unwrap();
    fs::create_dir(d.join("sub")).unwrap();
    let dotted = format!("{}/sub/../t.json", s(&d));
    let named = |option, path: &'static str| Named { option, path };
    let leak = |p: String| -> &'static str { Box::leak(p.into_boxed_str()) };
    let (t, h, dot) = (leak(s(&table)), leak(s(&hard)), leak(dotted));
    let inputs = [named("--embeddings", t)];
    for out in [t, h, dot] {
        let e = check_files(&[named("--out", out)], &inputs, false).err().unwrap().to_string();
        assert!(e.starts_with(&format!("--out {out} is the same file as --embeddings {t}")), "{e}");
    }
    let c = leak(s(&d.join("c.json")));
    let e = check_files(&[named("--out", c), named("--stats", c)], &inputs, false).err().unwrap().to_string();
    assert!(e.contains("--stats") && e.contains("is the same file as --out"), "{e}");
    assert!(check_files(&[named("--out", STDOUT)], &inputs, false).is_err());
    // Twin: distinct files pass, standard output where the command streams.
    let st = leak(s(&d.join("s.jsonl")));
    assert!(check_files(&[named("--out", c), named("--stats", st)], &inputs, false).is_ok());
    assert!(check_files(&[named("--out", STDOUT)], &inputs, true).is_ok());
}
