//! One writer per output: every command that writes OUT (`run` with its
//! checkpoint `OUT.checkpoint/`, `merge`, `convert`, `synth`,
//! `convert-fp16`, `plot`, `--stats`: `safe_write::Output` takes it) holds
//! `OUT.lock` while it writes.
//!
//! The lock file records who holds it (`{"host", "pid", "started"}`, unix
//! seconds). It comes into being whole: written to a temporary file,
//! `flock`ed, then linked to its name without replacing anything, so a
//! second writer finds either no lock or a complete one, held. Every file is
//! opened through the output's folder (`durable::folder`), never by a path.
//!
//! Liveness is the `flock`, which the kernel drops when the holder dies
//! (whatever its pid namespace):
//! - the `flock` is held: a live process owns it, refused at once (or, with
//!   `wait`, retried every half second);
//! - nobody holds the `flock` and the record names this host (or cannot be
//!   read): a stale lock of a killed command, whatever its pid, taken over
//!   (rewritten in place while holding the `flock`), with a note saying so;
//! - the record names another host: where `flock` does not reach across
//!   machines (some shared file systems) that process may live, so it is
//!   refused naming the holder; if that machine died, remove `OUT.lock` by
//!   hand;
//! - the file system cannot `flock` at all: the record decides, as the
//!   fallback: a process of this host that is gone (seen from this pid
//!   namespace) makes it stale.
//!
//! A lock file that is not the caller's (another user's) is never taken over
//! nor written: refused naming its owner.
//! Released (dropped), the holder removes the file if it is still its own.

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::durable::folder::{self, stat_of, try_flock, user_name, Folder};
use crate::durable::target::{sync_folder, Target};
use crate::durable::temp::{host_name, process_alive, Temp};
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
    dir: Arc<Folder>,
    name: OsString,
    path: PathBuf,
    file: File,
}

/// Whether the open `file` is still the one named `name` in `dir`.
fn still_at(file: &File, dir: &Folder, name: &OsString) -> bool {
    match (stat_of(file.as_raw_fd()), dir.stat_at(name)) {
        (Ok(a), Ok(Some(b))) => a.same_file(&b),
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

/// The note for a lock taken over, or waited for.
pub fn note(path: &Path, taken: &Taken) -> Option<String> {
    match taken {
        Taken::Free => None,
        Taken::Stale(h) => Some(format!(
            "took over the stale lock {} of pid {} on host {} (nobody holds it: that process is gone)",
            path.display(),
            h.pid,
            h.host
        )),
        Taken::Waited(h) => Some(format!("{} was released by pid {} on host {}", path.display(), h.pid, h.host)),
    }
}

/// What is found at an existing lock.
enum Found {
    Gone,
    Held(Option<Holder>),
    Stale(Lock, Holder),
}

impl Lock {
    /// Takes the lock of the output `target` (`OUT.lock` beside it, module
    /// comment). `wait`: wait for a live holder instead of refusing;
    /// `on_wait` is told once whom it waits for.
    pub fn acquire_for(target: &Target, wait: bool, on_wait: impl FnMut(&str)) -> Result<(Lock, Taken)> {
        Lock::acquire_in(target.dir.clone(), target.sibling_name(".lock"), target.sibling(".lock"), wait, on_wait)
    }

    /// Takes the lock at `path` (its folder opened once, the lock opened
    /// through it): the unit tests' way; commands take an output's lock
    /// through its resolved folder (`acquire_for`).
    #[cfg(test)]
    pub fn acquire(path: &Path, wait: bool, on_wait: impl FnMut(&str)) -> Result<(Lock, Taken)> {
        let shown = path.display().to_string();
        let name = path.file_name().ok_or_else(|| Error::input(&shown, "not a file path"))?.to_owned();
        let folder = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let dir = Folder::open(&folder).map_err(|e| Error::io(&shown, e))?;
        Lock::acquire_in(Arc::new(dir), name, path.to_path_buf(), wait, on_wait)
    }

    /// Takes the lock `name` in `dir` (`path`: how messages name it).
    pub fn acquire_in(
        dir: Arc<Folder>,
        name: OsString,
        path: PathBuf,
        wait: bool,
        mut on_wait: impl FnMut(&str),
    ) -> Result<(Lock, Taken)> {
        let me = Holder::me();
        let mut waited: Option<Holder> = None;
        let shown = path.display().to_string();
        loop {
            if let Some(lock) = Lock::create(&dir, &name, &path, &me)? {
                let taken = waited.map_or(Taken::Free, Taken::Waited);
                return Ok((lock, taken));
            }
            match Lock::inspect(&dir, &name, &path, &me)? {
                Found::Gone => continue,
                Found::Stale(lock, old) => return Ok((lock, Taken::Stale(old))),
                Found::Held(holder) => {
                    let who = holder.as_ref().map_or("a holder whose record cannot be read".into(), Holder::describe);
                    if !wait {
                        return Err(Error::input(
                            &shown,
                            format!(
                                "another divgpu run is writing this output ({who}); wait for it, or pass --wait \
                                 (if that process is gone from another host, remove {shown})"
                            ),
                        ));
                    }
                    if waited.is_none() {
                        on_wait(&format!("waiting for {shown}, held by {who}"));
                        waited = Some(holder.unwrap_or_else(|| Holder { host: "?".into(), pid: 0, started: 0 }));
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
    }

    /// A new lock, whole and held from the start; None when one exists already.
    fn create(dir: &Arc<Folder>, name: &OsString, path: &Path, me: &Holder) -> Result<Option<Lock>> {
        let shown = path.display().to_string();
        let mut temp = Temp::create(dir.clone(), 0o666).map_err(|e| Error::input(&shown, format!("cannot create the lock: {e}")))?;
        write_record(temp.file_mut(), me).map_err(|e| Error::io(&shown, e))?;
        match temp.link_as(name) {
            Ok(Some(file)) => {
                sync_folder(dir)?;
                Ok(Some(Lock { dir: dir.clone(), name: name.clone(), path: path.to_path_buf(), file }))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(Error::input(&shown, format!("cannot create the lock: {e}"))),
        }
    }

    /// An existing lock: gone meanwhile, held, or stale (then taken over).
    fn inspect(dir: &Arc<Folder>, name: &OsString, path: &Path, me: &Holder) -> Result<Found> {
        let shown = path.display().to_string();
        // Read-only where it cannot be written (another user's): enough to
        // flock it and name its owner.
        let opened = match dir.open_file(name, libc::O_RDWR | libc::O_NONBLOCK, 0) {
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => dir.open_file(name, libc::O_RDONLY | libc::O_NONBLOCK, 0),
            other => other,
        };
        let mut file = match opened {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Gone),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(Error::input(&shown, "is a symbolic link, not a lock divgpu made: remove it"));
            }
            Err(e) => return Err(Error::io(&shown, e)),
        };
        let st = stat_of(file.as_raw_fd()).map_err(|e| Error::io(&shown, e))?;
        if !st.is_file() {
            return Err(Error::input(&shown, format!("is {}, not a lock divgpu made: remove it", st.kind())));
        }
        let flocked = try_flock(&file);
        if !still_at(&file, dir, name) {
            return Ok(Found::Gone); // released (or taken over) meanwhile: look again
        }
        let holder = read_record(&mut file);
        if flocked == Some(false) {
            return Ok(Found::Held(holder));
        }
        if st.uid != folder::me() {
            return Err(Error::input(
                &shown,
                format!(
                    "belongs to {}, not to the caller: divgpu takes over only its caller's locks (nobody holds it now; \
                     if that user's run is over, remove {shown})",
                    user_name(st.uid)
                ),
            ));
        }
        let stale = match (&holder, flocked) {
            // Nobody holds the flock: stale on this host whatever the pid.
            (Some(h), Some(true)) => h.host == me.host,
            // Unreadable (a takeover cut by a crash) and nobody holds it.
            (None, Some(true)) => true,
            // No flock on this file system: the record decides.
            (Some(h), _) => h.host == me.host && h.pid != me.pid && !process_alive(h.pid),
            (None, _) => false,
        };
        if !stale {
            return Ok(Found::Held(holder));
        }
        let old = holder.unwrap_or_else(|| Holder { host: "unknown (an unreadable record)".into(), pid: 0, started: 0 });
        write_record(&mut file, me).map_err(|e| Error::io(&shown, e))?;
        Ok(Found::Stale(Lock { dir: dir.clone(), name: name.clone(), path: path.to_path_buf(), file }, old))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if still_at(&self.file, &self.dir, &self.name) {
            let _ = self.dir.unlink(&self.name);
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

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
