//! Temporary files (`.divgpu-tmp.HOST.PID.RANDOM`, made in an output's
//! folder through its descriptor, `flock`ed while they live) and the removal
//! of those killed commands left (liveness by `flock`: `durable::lock`'s
//! rule), with the host name and pid test they fall back on.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;

use crate::durable::folder::{stat_of, try_flock, Folder};

/// How every temporary file's name starts (then host, pid and random letters).
pub const TEMP_PREFIX: &str = ".divgpu-tmp.";
/// A temporary nobody `flock`s is a killed command's; one younger than this
/// whose process this host still sees is spared (it may be between its
/// creation and its `flock`).
const YOUNG_SECONDS: i64 = 2;

/// This machine's name, as temporaries and locks record it (characters other
/// than letters, digits, '-' and '_' become '_', so the name parses back).
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = if rc == 0 { String::from_utf8_lossy(&buf[..len]).into_owned() } else { String::new() };
    let clean: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    if clean.is_empty() { "unknown-host".into() } else { clean }
}

/// Whether process `pid` of this machine is alive (EPERM: it is, as another
/// user's). Seen from this pid namespace only: the fallback where `flock`
/// cannot tell.
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The prefix of this process's temporary names.
fn temp_prefix() -> String {
    format!("{TEMP_PREFIX}{}.{}.", host_name(), std::process::id())
}

/// Ten random letters and digits (the kernel's generator).
fn random_letters() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = [0u8; 10];
    // SAFETY: the buffer is writable for its whole length.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        // No getrandom: the clock and a counter still make a name O_EXCL can retry.
        static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let mix = t as u64 ^ COUNT.fetch_add(0x9E37_79B9_7F4A_7C15, std::sync::atomic::Ordering::Relaxed);
        bytes.iter_mut().enumerate().for_each(|(i, b)| *b = (mix >> (i * 6)) as u8);
    }
    bytes.iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect()
}

/// A temporary file in a folder: `.divgpu-tmp.HOST.PID.RANDOM`, made with
/// `O_EXCL` (a planted name is never followed), `flock`ed while it lives so
/// that no other command takes it for a killed one's; removed when dropped
/// unless renamed onto its target (`commit_onto`).
pub struct Temp {
    dir: Arc<Folder>,
    name: OsString,
    file: File,
    kept: bool,
}

impl Temp {
    /// A new temporary in `dir`, of mode `mode` less the umask.
    pub fn create(dir: Arc<Folder>, mode: u32) -> std::io::Result<Temp> {
        let prefix = temp_prefix();
        let mut last = None;
        for _ in 0..100 {
            let name = OsString::from(format!("{prefix}{}", random_letters()));
            match dir.create_new(&name, mode) {
                Ok(file) => {
                    let _ = try_flock(&file);
                    return Ok(Temp { dir, name, file, kept: false });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no free temporary name")))
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    pub fn file_mut(&mut self) -> &mut File {
        &mut self.file
    }

    pub fn name(&self) -> &OsStr {
        &self.name
    }

    /// Its path, for messages and `tail -f`.
    pub fn path(&self) -> PathBuf {
        self.dir.real_path().join(&self.name)
    }

    /// Links it to `to` in its folder without replacing anything (false:
    /// `to` exists), then drops its own name; the file stays open.
    pub fn link_as(mut self, to: &OsStr) -> std::io::Result<Option<File>> {
        match self.dir.link(&self.name, to) {
            Ok(()) => {
                let _ = self.dir.unlink(&self.name);
                self.kept = true;
                let file = self.file.try_clone()?;
                Ok(Some(file))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Renames it onto `to` in `dest` (the commit), after syncing it.
    pub(crate) fn commit_onto(mut self, dest: &Folder, to: &OsStr) -> std::io::Result<()> {
        fault::at(fault::Step::Sync).and_then(|()| self.file.sync_all())?;
        fault::at(fault::Step::Rename).and_then(|()| self.dir.rename_to(&self.name, dest, to))?;
        self.kept = true;
        Ok(())
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        // Only our file: a name replaced meanwhile is left alone.
        let ours = stat_of(self.file.as_raw_fd()).ok();
        if let (Some(a), Ok(Some(b))) = (ours, self.dir.stat_at(&self.name)) {
            if a.same_file(&b) {
                let _ = self.dir.unlink(&self.name);
            }
        }
    }
}

/// Whether the folder entry `name` is a temporary of a killed command of
/// this host: nobody holds its `flock` (and, younger than two seconds, its
/// process is not one this pid namespace sees alive: it may be between its
/// creation and its `flock`). Another host's is left (its `flock` may not
/// reach here). Where `flock` cannot hold, the host and pid of its name
/// decide: a dead process of this host.
pub(crate) fn is_stale_temporary(dir: &Folder, name: &OsStr, host: &str) -> bool {
    let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(TEMP_PREFIX)) else { return false };
    let mut fields = rest.rsplitn(3, '.');
    let (Some(_random), Some(pid), Some(owner)) = (fields.next(), fields.next(), fields.next()) else { return false };
    let pid = pid.parse::<u32>().ok();
    let dead_here = owner == host && pid.is_some_and(|p| !process_alive(p));
    let Ok(Some(st)) = dir.stat_at(name) else { return false };
    if !st.is_file() {
        return false;
    }
    let Ok(file) = dir.open_file(name, libc::O_RDONLY | libc::O_NONBLOCK, 0) else { return false };
    if !stat_of(file.as_raw_fd()).is_ok_and(|s| s.same_file(&st)) {
        return false;
    }
    match try_flock(&file) {
        Some(true) => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
            owner == host && (dead_here || now - st.ctime >= YOUNG_SECONDS)
        }
        Some(false) => false,
        None => dead_here,
    }
}

/// Removes the temporaries that killed divgpu commands left in `dir`
/// (regular files only; a name that is anything else is left). Returns how
/// many were removed.
pub fn remove_stale_temporaries(dir: &Folder) -> usize {
    let host = host_name();
    let Ok(names) = dir.names() else { return 0 };
    names.iter().filter(|n| is_stale_temporary(dir, n, &host) && dir.unlink(n).is_ok()).count()
}

/// Faults of the commit for the tests: with the cargo feature
/// `fault-injection` (build/fault/divgpu.so, never shipped),
/// `divgpu.inject_write_fault(kind)` makes the next commit's sync
/// ("write-sync": EIO) or rename ("write-rename": ENOSPC) fail, as a failing
/// disk would; without the feature `at` is always Ok and compiles away.
pub mod fault {
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub enum Step {
        Sync = 1,
        Rename = 2,
    }

    #[cfg(feature = "fault-injection")]
    static ARMED: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

    /// Arms one fault (replacing any armed one); it fires once.
    #[cfg(feature = "fault-injection")]
    pub fn arm(kind: &str) -> crate::error::Result<()> {
        let step = match kind {
            "write-sync" => Step::Sync as u8,
            "write-rename" => Step::Rename as u8,
            "none" => 0,
            other => {
                return Err(crate::error::Error::Usage(format!(
                    "inject_write_fault: unknown fault '{other}' (write-sync, write-rename or none)"
                )))
            }
        };
        ARMED.store(step, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Err (once) where the fault armed is `step`'s.
    #[inline]
    pub fn at(step: Step) -> std::io::Result<()> {
        #[cfg(feature = "fault-injection")]
        {
            use std::sync::atomic::Ordering::SeqCst;
            if ARMED.compare_exchange(step as u8, 0, SeqCst, SeqCst).is_ok() {
                let errno = if step == Step::Sync { libc::EIO } else { libc::ENOSPC };
                return Err(std::io::Error::from_raw_os_error(errno));
            }
        }
        let _ = step;
        Ok(())
    }
}
