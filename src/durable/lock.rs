//! One writer per output: `run` holds `OUT.lock` while it writes
//! OUT and its checkpoint `OUT.checkpoint/`.
//!
//! The lock file records who holds it (`{"host", "pid", "started"}`, unix
//! seconds). It comes into being whole: written to a temporary file, then
//! linked to its name without replacing anything (`persist_noclobber`), so a
//! second writer finds either no lock or a complete one. The holder also
//! keeps an `flock` on it, which the kernel drops when the process dies.
//!
//! A second run finding the lock:
//! - the `flock` is held: a live process owns it, refused at once (or, with
//!   `wait`, retried every half second);
//! - the record names this host and a process that is gone: a stale lock of
//!   a killed run, taken over (rewritten in place while holding the `flock`),
//!   with a note saying so;
//! - the record names another host: whether that process lives cannot be told
//!   from here, so it is refused naming the holder. This is the shared-file-
//!   system rule: where `flock` does not reach across machines, a lock of a
//!   crashed machine stays until someone removes `OUT.lock` by hand.
//!
//! Released (dropped), the holder removes the file if it is still its own.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::durable::safe_write::{host_name, process_alive, sync_folder, TEMP_PREFIX};
use crate::error::{Error, Result};

/// Who holds a lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub host: String,
    pub pid: u32,
    /// Unix seconds.
    pub started: u64,
}

impl Holder {
    fn me() -> Holder {
        let started = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        Holder { host: host_name(), pid: std::process::id(), started }
    }

    fn describe(&self) -> String {
        let now = Holder::me().started;
        format!("host {}, pid {}, running for {} s", self.host, self.pid, now.saturating_sub(self.started))
    }
}

/// A held lock; dropped, it is released.
#[derive(Debug)]
pub struct Lock {
    path: PathBuf,
    file: File,
}

/// `flock(LOCK_EX | LOCK_NB)`: Some(true) taken, Some(false) held by another
/// open file, None where the file system does not support it.
fn try_flock(file: &File) -> Option<bool> {
    // SAFETY: a valid open descriptor.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Some(true);
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EWOULDBLOCK) => Some(false),
        _ => None,
    }
}

/// Whether the open `file` is still the one at `path` (not removed or replaced).
fn still_at(file: &File, path: &Path) -> bool {
    match (file.metadata(), fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

fn write_record(file: &mut File, holder: &Holder) -> std::io::Result<()> {
    let text = serde_json::to_string(holder).map_err(std::io::Error::other)? + "\n";
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

fn read_record(file: &mut File) -> Option<Holder> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.take(4096).read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

/// What happened when the lock was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    Free,
    /// Taken over from a process of this host that is gone.
    Stale(Holder),
    /// Waited for this holder to finish.
    Waited(Holder),
}

/// What is found at an existing lock.
enum Found {
    Gone,
    Held(Option<Holder>),
    Stale(Lock, Holder),
}

impl Lock {
    /// Takes the lock at `path` (module comment). `wait`: wait for a live
    /// holder instead of refusing; `on_wait` is told once whom it waits for.
    pub fn acquire(path: &Path, wait: bool, mut on_wait: impl FnMut(&str)) -> Result<(Lock, Taken)> {
        let name = path.display().to_string();
        let folder = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let me = Holder::me();
        let mut waited: Option<Holder> = None;
        loop {
            if let Some(lock) = Lock::create(path, &folder, &me)? {
                let taken = waited.map_or(Taken::Free, Taken::Waited);
                return Ok((lock, taken));
            }
            match Lock::inspect(path, &me)? {
                Found::Gone => continue,
                Found::Stale(lock, old) => return Ok((lock, Taken::Stale(old))),
                Found::Held(holder) => {
                    let who = holder.as_ref().map_or("a holder whose record cannot be read".into(), Holder::describe);
                    if !wait {
                        return Err(Error::input(
                            &name,
                            format!(
                                "another divgpu run is writing this output ({who}); wait for it, or pass --wait \
                                 (if that process is gone from another host, remove {name})"
                            ),
                        ));
                    }
                    if waited.is_none() {
                        on_wait(&format!("waiting for {name}, held by {who}"));
                        waited = Some(holder.unwrap_or_else(|| Holder { host: "?".into(), pid: 0, started: 0 }));
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
    }

    /// A new lock, whole from the start; None when one exists already.
    fn create(path: &Path, folder: &Path, me: &Holder) -> Result<Option<Lock>> {
        let name = path.display().to_string();
        let mut temp = tempfile::Builder::new()
            .prefix(&format!("{TEMP_PREFIX}{}.{}.", me.host, me.pid))
            .rand_bytes(10)
            .tempfile_in(folder)
            .map_err(|e| Error::input(&name, format!("cannot create the lock: {e}")))?;
        write_record(temp.as_file_mut(), me).map_err(|e| Error::io(&name, e))?;
        let _ = try_flock(temp.as_file());
        match temp.persist_noclobber(path) {
            Ok(file) => {
                sync_folder(folder)?;
                Ok(Some(Lock { path: path.to_path_buf(), file }))
            }
            Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(Error::input(&name, format!("cannot create the lock: {}", e.error))),
        }
    }

    /// An existing lock: gone meanwhile, held, or stale (then taken over).
    fn inspect(path: &Path, me: &Holder) -> Result<Found> {
        let name = path.display().to_string();
        let mut file = match OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOFOLLOW).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Gone),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(Error::input(&name, "is a symbolic link, not a lock divgpu made: remove it"));
            }
            Err(e) => return Err(Error::io(&name, e)),
        };
        let flocked = try_flock(&file);
        if !still_at(&file, path) {
            return Ok(Found::Gone); // released (or taken over) meanwhile: look again
        }
        let holder = read_record(&mut file);
        let stale = match &holder {
            Some(h) => flocked != Some(false) && h.host == me.host && h.pid != me.pid && !process_alive(h.pid),
            // Unreadable (a takeover cut by a crash): stale only where our flock proves no holder.
            None => flocked == Some(true),
        };
        if !stale {
            return Ok(Found::Held(holder));
        }
        let old = holder.unwrap_or_else(|| Holder { host: "unknown (an unreadable record)".into(), pid: 0, started: 0 });
        write_record(&mut file, me).map_err(|e| Error::io(&name, e))?;
        Ok(Found::Stale(Lock { path: path.to_path_buf(), file }, old))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if still_at(&self.file, &self.path) {
            let _ = fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        crate::test_support::tmp("lock", name)
    }

    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn a_second_holder_is_refused_naming_the_first_and_a_release_frees_it() {
        let d = tmp("second");
        let path = d.join("out.json.lock");
        let (lock, taken) = Lock::acquire(&path, false, |_| {}).unwrap();
        assert_eq!(taken, Taken::Free);
        let record: Holder = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!((record.host.clone(), record.pid), (host_name(), std::process::id()));
        let e = Lock::acquire(&path, false, |_| {}).unwrap_err().to_string();
        assert!(e.contains(&format!("another divgpu run is writing this output (host {}, pid {}", host_name(), std::process::id())), "{e}");
        drop(lock);
        assert!(!path.exists(), "released: removed");
        // Twin: free again, taken at once.
        assert_eq!(Lock::acquire(&path, false, |_| {}).unwrap().1, Taken::Free);
    }

    #[test]
    fn a_stale_lock_of_a_dead_process_is_taken_over_and_another_hosts_is_not() {
        let d = tmp("stale");
        let path = d.join("out.json.lock");
        let dead = Holder { host: host_name(), pid: dead_pid(), started: 1 };
        fs::write(&path, serde_json::to_string(&dead).unwrap()).unwrap();
        let (lock, taken) = Lock::acquire(&path, false, |_| {}).unwrap();
        assert_eq!(taken, Taken::Stale(dead));
        drop(lock);
        let elsewhere = Holder { host: "another-machine".into(), pid: dead_pid(), started: 1 };
        fs::write(&path, serde_json::to_string(&elsewhere).unwrap()).unwrap();
        let e = Lock::acquire(&path, false, |_| {}).unwrap_err().to_string();
        assert!(e.contains("host another-machine") && e.contains(&format!("remove {}", path.display())), "{e}");
        // A record cut by a crash, with no flock on it: nobody holds it.
        fs::write(&path, "{\"host\":").unwrap();
        let (lock, taken) = Lock::acquire(&path, false, |_| {}).unwrap();
        assert!(matches!(&taken, Taken::Stale(h) if h.pid == 0), "{taken:?}");
        drop(lock);
        // A planted link is refused, and its target left alone.
        assert!(!path.exists(), "released");
        fs::write(d.join("victim"), "mine").unwrap();
        std::os::unix::fs::symlink(d.join("victim"), &path).unwrap();
        assert!(Lock::acquire(&path, false, |_| {}).unwrap_err().to_string().contains("symbolic link"));
        assert_eq!(fs::read_to_string(d.join("victim")).unwrap(), "mine");
    }

    #[test]
    fn wait_waits_for_the_holder() {
        let d = tmp("wait");
        let path = d.join("out.json.lock");
        let (lock, _) = Lock::acquire(&path, false, |_| {}).unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(700));
            drop(lock);
        });
        let mut told = Vec::new();
        let (_lock, taken) = Lock::acquire(&path, true, |m| told.push(m.to_string())).unwrap();
        release.join().unwrap();
        assert!(matches!(taken, Taken::Waited(_)), "{taken:?}");
        assert_eq!(told.len(), 1, "told once: {told:?}");
        assert!(told[0].starts_with(&format!("waiting for {}, held by host", path.display())));
    }
}
